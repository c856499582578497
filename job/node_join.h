// JoinJob: how a node (server or worker) enters a running job. It binds the node's data
// endpoint, registers with the coordinator, and receives the node table and the job spec,
// which it validates. This is all a node needs to be told: the coordinator's address and its
// own role and rank (from flags, or from a cluster launcher's environment).
//
// Thread-safety: JoinJob is thread-safe; JoinedJob is thread-compatible (its ControlClient is
// thread-safe).
#ifndef SYNCLINE_JOB_NODE_JOIN_H_
#define SYNCLINE_JOB_NODE_JOIN_H_

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/control_client.h"
#include "core/coordinator.h"
#include "core/net.h"
#include "core/node_metrics.h"
#include "core/transport.h"
#include "core/version.h"
#include "core/zmq_transport.h"
#include "syncline/job_spec.h"

namespace syncline {

// What a node is told on its command line (or by its environment): never a job setting.
struct NodeOptions {
  // The coordinator's address, e.g. "tcp://10.0.0.1:7000".
  std::string coordinator;
  int rank = 0;
  // Where the node's data endpoint listens, as a ZeroMQ address; port 0 picks a free one.
  // Peers reach it at the address it reports, so it must be reachable from them. Empty: on
  // `interface`'s address, or else on the address whose route reaches the coordinator
  // (loopback when the coordinator is on loopback), at a port in `ports`.
  std::string bind;
  std::string interface;
  PortRange ports;
  // How many ranks the cluster launcher started (SLURM_NTASKS, OMPI_COMM_WORLD_SIZE, ...), sent
  // at registration so that the coordinator refuses a wrong world at once; 0: not started as
  // one world.
  int world_size = 0;
  // The job key (core/job_key.h) that authenticates and encrypts the node's connections;
  // empty: plaintext, which is refused off loopback unless `insecure`.
  std::string key_file;
  bool insecure = false;
  // How long to wait for every node of the job to register.
  absl::Duration startup_timeout = absl::Seconds(120);
  // The build this node claims; the coordinator refuses one other than its own (tests).
  std::string version = kBuildVersion;
  // A worker's own --device: where this process computes, in place of the job's (a machine's
  // GPU for one worker, the CPU for another). Unset: the job's.
  std::optional<DeviceSpec> device;
  // Where the node serves its Prometheus /metrics page (core/node_metrics.h), on its data
  // address's host: a port, or 0 for the first free one in `ports` (any free one without).
  // -1: no page (the default; a node then pays nothing for metrics).
  int metrics_port = -1;
};

struct JoinedJob {
  std::unique_ptr<Endpoint> data;  // the node's data endpoint, bound at `data_address`
  std::string data_address;
  std::unique_ptr<ControlClient> control;
  JobSpec spec;
  // The node's /metrics page (NodeOptions::metrics_port), counting both endpoints' traffic;
  // null without one. Last, so that it stops before the endpoints it reads go.
  std::unique_ptr<NodeMetrics> metrics;
};

// A node process's exit codes beyond 0 and 1: bad input (a data file, the job spec), and a
// model that diverged (worker/trainer.h). The launcher exits with the same codes, and with
// kExitCheckpointsFailed when the job trained but every checkpoint it asked for failed
// (summary.json's status "checkpoints_failed"): there is nothing to resume from.
inline constexpr int kExitBadInput = 2;
inline constexpr int kExitDiverged = 3;
inline constexpr int kExitCheckpointsFailed = 4;

// How a node's Run() ended: OK, failed, failed on bad input, or diverged.
struct NodeExit {
  absl::Status status;
  bool bad_input = false;
  bool diverged = false;
  int exit_code() const {
    return status.ok() ? 0 : bad_input ? kExitBadInput : diverged ? kExitDiverged : 1;
  }
};

// What every Syncline program does first: keeps the heap it frees for reuse
// (core/heap_reuse.h), raises RLIMIT_NOFILE's soft limit to its hard limit
// (core/descriptor_limit.h), and makes the files and folders it creates private to its user
// (umask 077): checkpoints, embedding stores, logs and generated data hold the model and the
// data. docs/SECURITY.md says how to share a run folder on purpose.
void PrepareProcess();

// Binds, registers and waits for the table (up to the startup timeout). A job spec that is
// missing or invalid is reported to the coordinator (the job fails with that reason) and
// returned as InvalidArgument.
absl::StatusOr<JoinedJob> JoinJob(Transport& transport, wire::Role role,
                                  const NodeOptions& options);

// The coordinator's options for `spec`'s job: its nodes, staleness bound, heartbeats, whether
// it evaluates, and the spec it hands to every node.
CoordinatorOptions CoordinatorOptionsFor(const JobSpec& spec);

// NodeOptions from the environment: SYNCLINE_COORDINATOR, SYNCLINE_RANK, SYNCLINE_BIND,
// SYNCLINE_INTERFACE, SYNCLINE_PORT_RANGE, SYNCLINE_WORLD_SIZE, SYNCLINE_KEY_FILE,
// SYNCLINE_INSECURE (1: true), SYNCLINE_STARTUP_TIMEOUT, SYNCLINE_METRICS_PORT (each left as it
// is when unset or empty). A value that does not parse is InvalidArgument naming the variable.
absl::Status NodeOptionsFromEnvironment(NodeOptions* options);

// --startup-timeout's value (also SYNCLINE_STARTUP_TIMEOUT): a number of seconds in
// (0, 1000000]; nullopt otherwise.
std::optional<absl::Duration> ParseStartupTimeout(std::string_view text);

// --metrics-port's value (also SYNCLINE_METRICS_PORT): a port in [0, 65535], or "off" (-1);
// nullopt otherwise.
std::optional<int> ParseMetricsPort(std::string_view text);

// The transport settings `options` ask for: the keys of options.key_file (the job's key, the
// node's own key, or the launcher's folder of node keys, from which the key of the node of
// `role` and options.rank is read; core/job_key.h), or plaintext. FailedPrecondition when the
// coordinator is off loopback and there is neither a key nor `insecure`; the key file's own
// problems (missing, readable by others) as Load says.
absl::StatusOr<ZmqOptions> NodeTransportOptions(const NodeOptions& options,
                                                wire::Role role = wire::Role::WORKER);

// The ZeroMQ address a node's data endpoint binds for `options` (see NodeOptions::bind), with
// port 0 standing for "a port in options.ports".
absl::StatusOr<std::string> ChooseBindAddress(const NodeOptions& options);

// Binds `endpoint` where `options` ask a node to listen (ChooseBindAddress) and returns the
// address it listens at.
absl::StatusOr<std::string> BindNodeEndpoint(Endpoint& endpoint, const NodeOptions& options);

}  // namespace syncline

#endif  // SYNCLINE_JOB_NODE_JOIN_H_
