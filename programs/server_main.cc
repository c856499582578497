// syncline-ps: one parameter-server shard. Started by syncline-launch (or mpirun/srun) with
// the coordinator's address and its rank; the coordinator hands it the rest of the job (see
// ps/server_node.h).
#include <CLI/CLI.hpp>

#include "core/command_line.h"
#include "core/log.h"
#include "core/zmq_transport.h"
#include "job/node_flags.h"
#include "ps/server_node.h"

namespace syncline {
namespace {

int Main(int argc, char** argv) {
  PrepareProcess();
  CLI::App app(
      "syncline-ps: one shard of the Syncline parameter server.\n"
      "Usually started by syncline-launch. It needs only the coordinator's address and its\n"
      "rank; the coordinator hands it the job's settings. Each flag may also come from the\n"
      "environment variable named in brackets.");
  NodeOptions options;
  if (auto code = AddNodeFlags(app, &options, "syncline-ps",
                               "this shard's index, 0..servers-1 [SYNCLINE_RANK]")) {
    return *code;
  }
  if (auto exit_code = ParseCommandLine(app, argc, argv, "syncline-ps")) return *exit_code;
  if (!RankGiven(app)) {
    std::cerr << "syncline-ps: give --rank R (or SYNCLINE_RANK)\n";
    return kExitBadInput;
  }
  SetLogTag("ps" + std::to_string(options.rank));
  absl::StatusOr<ZmqOptions> transport_options = NodeTransportOptions(options, wire::Role::SERVER);
  if (!transport_options.ok()) {
    SYNCLINE_LOG(ERROR) << transport_options.status();
    return kExitBadInput;
  }
  ZmqTransport transport(*transport_options);
  const NodeExit exit = ServerNode(transport, options).Run();
  if (!exit.status.ok()) SYNCLINE_LOG(ERROR) << exit.status;
  return exit.exit_code();
}

}  // namespace
}  // namespace syncline

int main(int argc, char** argv) { return syncline::Main(argc, argv); }
