// syncline-worker: one worker (or, under --sync gossip, one gossip peer). Started by
// syncline-launch (or mpirun/srun) with the coordinator's address and its rank; the
// coordinator hands it the rest of the job (see worker/worker_node.h).
#include <CLI/CLI.hpp>

#include "core/command_line.h"
#include "core/control_client.h"
#include "core/log.h"
#include "core/node_table.h"
#include "core/zmq_transport.h"
#include "job/node_flags.h"
#include "job/options.h"
#include "programs/worker_backends.h"
#include "worker/worker_node.h"

namespace syncline {
namespace {

int Main(int argc, char** argv) {
  PrepareProcess();
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
  bool join = false;
  app.add_flag(
      "--join", join,
      "join a job that is already training (started with --max-workers above "
      "--workers; --sync bsp, ssp, asp, gossip or allreduce): the coordinator gives this worker "
      "the next free rank, it enters at the others' clock with the current model (a gossip "
      "peer: its neighbours' models; all-reduce: a member's, broadcast as the ring re-forms), "
      "and the workers still training give it a share of their remaining batches. Not with "
      "--rank");
  std::string device;
  app.add_option("--device", device,
                 "where this worker computes, in place of the job's --device: auto (a GPU when "
                 "the build, the machine and the model allow it, else the CPU), cpu, cuda or "
                 "cuda:N (that GPU, or exit 2 saying why not)")
      ->envname("SYNCLINE_DEVICE");
  if (auto exit_code = ParseCommandLine(app, argc, argv, "syncline-worker")) return *exit_code;
  if (!device.empty()) {
    absl::StatusOr<DeviceSpec> spec = ParseDevice(device);
    if (!spec.ok()) {
      std::cerr << "syncline-worker: --device=" << device << ": " << spec.status().message()
                << "\n";
      return kExitBadInput;
    }
    options.device = *spec;
  }
  // A worker says which it is, or joins.
  if (!join && !RankGiven(app)) {
    std::cerr << "syncline-worker: give --rank R (or SYNCLINE_RANK) for a worker the job starts "
                 "with, or --join to join a running job\n";
    return kExitBadInput;
  }
  if (join && app.count("--rank") > 0) {
    std::cerr << "syncline-worker: --join takes the rank the coordinator gives: drop --rank\n";
    return kExitBadInput;
  }
  SetLogTag(join ? "join" : "w" + std::to_string(options.rank));
  absl::StatusOr<ZmqOptions> transport_options = NodeTransportOptions(options);
  if (!transport_options.ok()) {
    SYNCLINE_LOG(ERROR) << transport_options.status();
    return kExitBadInput;
  }
  ZmqTransport transport(*transport_options);
  if (join) {
    transport.AllowPeers({kCoordinatorId});
    // Silence while the coordinator does not answer (a job that ended) would look like a hang.
    SYNCLINE_LOG(INFO) << "asking the coordinator at " << options.coordinator
                       << " for a place in its running job; waiting up to "
                       << absl::ToDoubleSeconds(options.startup_timeout)
                       << " s for an answer (--startup-timeout)";
    absl::StatusOr<int> rank = RequestJoin(transport, options.coordinator, options.startup_timeout);
    if (!rank.ok()) {
      SYNCLINE_LOG(ERROR) << rank.status();
      // A job that takes no (more) joins is a wrong command line, not a failure of the job.
      return absl::IsFailedPrecondition(rank.status()) || absl::IsResourceExhausted(rank.status())
                 ? kExitBadInput
                 : 1;
    }
    options.rank = *rank;
    SetLogTag("w" + std::to_string(options.rank));
    SYNCLINE_LOG(INFO) << "joining the running job as w" << options.rank;
  }
  // All-reduce and hybrid collectives take a TCP plane of their own, sealed with the job's key
  // when it has one (CURVE's one ZeroMQ I/O thread was their bottleneck, docs/SECURITY.md).
  CollectivePlane plane;
  plane.tcp = true;
  plane.key = transport_options->key;
  plane.ports = options.ports;
  const NodeExit exit = WorkerNode(transport, options, MakeServerlessBackendFactory(plane),
                                   MakeHybridBackendFactory(plane))
                            .Run();
  if (!exit.status.ok()) SYNCLINE_LOG(ERROR) << exit.status;
  return exit.exit_code();
}

}  // namespace
}  // namespace syncline

int main(int argc, char** argv) { return syncline::Main(argc, argv); }
