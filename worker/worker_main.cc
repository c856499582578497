// syncline-worker: one worker (or, under --sync gossip, one gossip peer). Started by
// syncline-launch (or mpirun/srun) with the coordinator's address and its rank; the
// coordinator hands it the rest of the job (see worker/worker_node.h).
#include <CLI/CLI.hpp>

#include "collective/allreduce_backend.h"
#include "collective/hybrid_backend.h"
#include "core/command_line.h"
#include "core/log.h"
#include "core/zmq_transport.h"
#include "job/node_flags.h"
#include "worker/worker_node.h"

namespace syncline {
namespace {

int Main(int argc, char** argv) {
  CLI::App app(
      "syncline-worker: trains a model on one partition of the data, in sync with the others\n"
      "through the parameter servers (or, in a gossip job, its peers). Usually started by\n"
      "syncline-launch. It needs only the coordinator's address and its rank; the coordinator\n"
      "hands it the job's settings. Each flag may also come from the environment variable\n"
      "named in brackets.");
  NodeOptions options;
  if (auto code = AddNodeFlags(app, &options, "syncline-worker",
                               "this worker's index, 0..workers-1 [SYNCLINE_RANK]")) {
    return *code;
  }
  if (auto exit_code = ParseCommandLine(app, argc, argv, "syncline-worker")) return *exit_code;
  SetLogTag("w" + std::to_string(options.rank));
  absl::StatusOr<ZmqOptions> transport_options = NodeTransportOptions(options);
  if (!transport_options.ok()) {
    SYNCLINE_LOG(ERROR) << transport_options.status();
    return kExitBadInput;
  }
  ZmqTransport transport(*transport_options);
  const NodeExit exit =
      WorkerNode(transport, options, MakeServerlessBackendFactory(), MakeHybridBackendFactory())
          .Run();
  if (!exit.status.ok()) SYNCLINE_LOG(ERROR) << exit.status;
  return exit.exit_code();
}

}  // namespace
}  // namespace syncline

int main(int argc, char** argv) { return syncline::Main(argc, argv); }
