#include "job/node_join.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/descriptor_limit.h"
#include "core/heap_reuse.h"
#include "core/log.h"
#include "core/node_table.h"
#include "job/job_spec.h"
#include "job/job_wire.h"

namespace syncline {
namespace {

// Preflight: a worker opens a TCP connection to every server (and, in a gossip job, to every
// other worker) before it reports ready, so that a firewall or a wrong address is named now,
// with both ends, rather than found later as a request that never returns.
absl::Status CheckPeersReachable(wire::Role role, int rank, const JoinedJob& job) {
  if (role != wire::Role::WORKER) return absl::OkStatus();
  // An all-reduce joiner meets the others on endpoints of the meeting, never at the addresses
  // the table holds (one may be a worker lost meanwhile).
  const bool meets_workers =
      (job.spec.sync.serverless() || job.spec.sync.hybrid()) &&
      !(job.spec.sync.allreduce() && rank >= job.control->table().num_workers);
  std::vector<std::string> problems;
  for (const NodeInfo& peer : job.control->table().nodes) {
    const bool needed =
        peer.role == wire::Role::SERVER || (meets_workers && peer.role == wire::Role::WORKER);
    if (!needed || peer.address.empty() || (peer.role == role && peer.rank == rank)) continue;
    if (peer.address.rfind("tcp://", 0) != 0) continue;  // in-process endpoints
    if (auto s = ProbeTcp(peer.address, absl::Seconds(5)); !s.ok()) {
      problems.push_back(absl::StrCat(peer.id, ": ", s.message()));
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(DataEndpointId(role, rank), " at ", job.data_address,
                                             " cannot reach ", absl::StrJoin(problems, "; ")));
}

}  // namespace

void PrepareProcess() {
  KeepFreedHeapForReuse();
  RaiseDescriptorLimit();
  umask(077);
}

absl::StatusOr<JoinedJob> JoinJob(Transport& transport, wire::Role role,
                                  const NodeOptions& options) {
  JoinedJob job;
  auto endpoint = transport.CreateEndpoint(DataEndpointId(role, options.rank));
  if (!endpoint.ok()) return endpoint.status();
  // Listen before registering: the address goes into the node table, and peers may connect
  // as soon as they have it.
  absl::StatusOr<std::string> address = BindNodeEndpoint(**endpoint, options);
  if (!address.ok()) return address.status();
  job.data = std::move(*endpoint);
  job.data_address = *address;
  // The page is up before the node registers: the coordinator lists its port at once.
  if (options.metrics_port >= 0) {
    auto hp = ParseTcpAddress(*address);
    if (!hp.ok()) return hp.status();
    auto metrics = NodeMetrics::Start(NodeMetricsOptions{.ip = hp->host,
                                                         .port = options.metrics_port,
                                                         .ports = options.ports,
                                                         .role = RoleName(role)});
    if (!metrics.ok()) {
      return absl::Status(metrics.status().code(),
                          absl::StrCat(DataEndpointId(role, options.rank),
                                       ": --metrics-port: ", metrics.status().message()));
    }
    job.metrics = std::move(*metrics);
  }
  {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    SYNCLINE_LOG(INFO) << job.data->id() << " on " << host << " listening at " << *address;
  }

  ControlOptions control;
  control.coordinator_address = options.coordinator;
  control.role = role;
  control.rank = options.rank;
  control.data_address = job.data_address;
  control.startup_timeout = options.startup_timeout;
  control.version = options.version;
  control.world_size = options.world_size;
  control.metrics_port = job.metrics ? job.metrics->port() : 0;
  auto client = ControlClient::Connect(transport, control);
  if (!client.ok()) {
    return absl::Status(client.status().code(),
                        absl::StrCat("cannot join the job: ", client.status().message()));
  }
  job.control = std::move(*client);
  const NodeTable& table = job.control->table();
  // Peers connect as soon as they have the table: an authenticating transport now knows whom
  // to accept.
  transport.AllowPeers(JobEndpointIds(table.num_servers, table.MaxWorkers()));
  // A replacement of a failed node: its peers know the node at the failed one's address, so
  // it listens there instead (that process is gone, and its port with it).
  for (const NodeInfo& n : table.nodes) {
    if (table.generation == 0 || n.role != role || n.rank != options.rank || n.address.empty() ||
        n.address == job.data_address) {
      continue;
    }
    job.data.reset();
    auto again = transport.CreateEndpoint(DataEndpointId(role, options.rank));
    if (!again.ok()) return again.status();
    absl::StatusOr<std::string> bound = absl::UnavailableError("");
    // The failed process's socket may take a moment to be released.
    for (int attempt = 0; attempt < 50; ++attempt) {
      bound = (*again)->Bind(n.address);
      if (bound.ok()) break;
      absl::SleepFor(absl::Milliseconds(100));
    }
    if (!bound.ok()) {
      absl::Status s(bound.status().code(),
                     absl::StrCat("cannot listen at ", n.address,
                                  ", where the failed node listened: ", bound.status().message()));
      job.control->ReportAbort(s);
      return s;
    }
    job.data = std::move(*again);
    job.data_address = *bound;
    SYNCLINE_LOG(INFO) << job.data->id() << " replaces a failed node: listening at " << *bound
                       << " as it did";
  }
  absl::StatusOr<JobSpec> spec = table.job_spec.empty()
                                     ? absl::InvalidArgumentError(
                                           "the coordinator sent no job spec (is it a launcher "
                                           "of another version?)")
                                     : JobSpecFromBytes(table.job_spec);
  if (spec.ok() && (spec->servers != table.num_servers || spec->workers != table.num_workers)) {
    spec = absl::InvalidArgumentError(absl::StrCat(
        "job spec: ", spec->servers, " servers and ", spec->workers,
        " workers, but the node table has ", table.num_servers, " and ", table.num_workers));
  }
  if (!spec.ok()) {
    job.control->ReportAbort(spec.status());
    return spec.status();
  }
  job.spec = std::move(*spec);
  if (job.metrics) {
    job.metrics->CountTraffic(&job.data->counters());
    job.metrics->CountTraffic(&job.control->traffic());
  }
  // A replacement restores the checkpoint every other node rolls back to.
  if (!table.restore.empty()) job.spec.checkpoint.restore = table.restore;
  // A replacement's peers were reachable at the start, and one of them may be a replacement
  // itself, not listening yet: it is the coordinator's recovery deadline that names it.
  if (auto s =
          table.generation > 0 ? absl::OkStatus() : CheckPeersReachable(role, options.rank, job);
      !s.ok()) {
    job.control->ReportAbort(s);
    return s;
  }
  return job;
}

CoordinatorOptions CoordinatorOptionsFor(const JobSpec& spec) {
  CoordinatorOptions o;
  o.num_servers = spec.servers;
  o.num_workers = spec.workers;
  // Every step of an all-reduce or hybrid job needs every worker: a lost one stops the job, as
  // under BSP, whatever bound the servers enforce on the embeddings.
  o.staleness = spec.sync.collective() ? 0 : spec.sync.server_staleness();
  o.min_workers = MinWorkers(spec);
  o.hand_over = HandsOverBatches(spec.sync);
  o.max_restarts = spec.max_restarts;
  o.max_workers = MaxWorkers(spec);
  o.enter_at_latest_cut = spec.sync.gossip() || spec.sync.allreduce();
  o.heartbeat_interval = absl::Seconds(spec.timeouts.heartbeat_interval_s);
  o.heartbeat_timeout = absl::Seconds(spec.timeouts.heartbeat_timeout_s);
  // A user's worker program evaluates with its own test data (its Finish's callback).
  o.evaluate = !spec.data.test.empty() || !spec.worker_command.empty();
  // Named before the waiting workers' own requests time out.
  o.stuck_timeout = absl::Seconds(0.9 * spec.timeouts.request_s);
  o.job_spec = JobSpecToBytes(spec);
  return o;
}

std::optional<absl::Duration> ParseStartupTimeout(std::string_view text) {
  double seconds = 0;
  if (!absl::SimpleAtod(absl::string_view(text.data(), text.size()), &seconds) || !(seconds > 0) ||
      seconds > 1e6) {
    return std::nullopt;
  }
  return absl::Seconds(seconds);
}

std::optional<int> ParseMetricsPort(std::string_view text) {
  if (text == "off") return -1;
  int port = 0;
  if (!absl::SimpleAtoi(absl::string_view(text.data(), text.size()), &port) || port < 0 ||
      port > 65535) {
    return std::nullopt;
  }
  return port;
}

absl::Status NodeOptionsFromEnvironment(NodeOptions* options) {
  auto env = [](const char* name) -> const char* {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? v : nullptr;
  };
  if (const char* c = env("SYNCLINE_COORDINATOR")) options->coordinator = c;
  if (const char* b = env("SYNCLINE_BIND")) options->bind = b;
  if (const char* i = env("SYNCLINE_INTERFACE")) options->interface = i;
  if (const char* k = env("SYNCLINE_KEY_FILE")) options->key_file = k;
  if (const char* i = env("SYNCLINE_INSECURE")) options->insecure = std::string_view(i) == "1";
  if (const char* r = env("SYNCLINE_RANK")) {
    int rank = 0;
    if (!absl::SimpleAtoi(r, &rank) || rank < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("SYNCLINE_RANK='", r, "' is not a rank (an integer >= 0)"));
    }
    options->rank = rank;
  }
  if (const char* w = env("SYNCLINE_WORLD_SIZE")) {
    int size = 0;
    if (!absl::SimpleAtoi(w, &size) || size < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("SYNCLINE_WORLD_SIZE='", w, "' is not a world size (an integer >= 1)"));
    }
    options->world_size = size;
  }
  if (const char* t = env("SYNCLINE_STARTUP_TIMEOUT")) {
    const std::optional<absl::Duration> timeout = ParseStartupTimeout(t);
    if (!timeout) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SYNCLINE_STARTUP_TIMEOUT='", t, "' is not a number of seconds in (0, 1000000]"));
    }
    options->startup_timeout = *timeout;
  }
  if (const char* m = env("SYNCLINE_METRICS_PORT")) {
    const std::optional<int> port = ParseMetricsPort(m);
    if (!port) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SYNCLINE_METRICS_PORT='", m, "' is not a port in [0, 65535] (0: any free) or off"));
    }
    options->metrics_port = *port;
  }
  if (const char* p = env("SYNCLINE_PORT_RANGE")) {
    auto ports = ParsePortRange(p);
    if (!ports.ok())
      return absl::InvalidArgumentError(
          absl::StrCat("SYNCLINE_PORT_RANGE: ", ports.status().message()));
    options->ports = *ports;
  }
  return absl::OkStatus();
}

absl::StatusOr<ZmqOptions> NodeTransportOptions(const NodeOptions& options, wire::Role role) {
  // The addresses first, so that a mistyped one is named as such (and is bad input).
  if (!options.coordinator.empty()) {
    if (auto hp = ParseTcpAddress(options.coordinator); !hp.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--coordinator: ", hp.status().message()));
    }
  }
  if (!options.bind.empty()) {
    if (auto hp = ParseTcpAddress(options.bind); !hp.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--bind: ", hp.status().message()));
    }
  }
  if (!options.interface.empty()) {
    if (auto ip = InterfaceAddress(options.interface); !ip.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--interface: ", ip.status().message()));
    }
  }
  ZmqOptions zmq;
  if (!options.key_file.empty()) {
    // The job's key, this node's own key, or the folder of node keys that holds it.
    auto key = JobKey::Load(options.key_file, DataEndpointId(role, options.rank));
    if (!key.ok()) return key.status();
    zmq.key = std::make_shared<const JobKey>(*std::move(key));
    return zmq;
  }
  if (options.insecure) return zmq;
  // Plaintext only where nothing of this node's traffic leaves the machine: the coordinator's
  // address and the one it listens on.
  std::string off;
  if (!options.coordinator.empty() && !IsLoopbackAddress(options.coordinator)) {
    off = absl::StrCat("the coordinator ", options.coordinator, " is off loopback");
  } else if (!options.bind.empty() && !IsLoopbackAddress(options.bind)) {
    off = absl::StrCat("--bind ", options.bind, " listens off loopback");
  } else if (!options.interface.empty()) {
    if (auto ip = InterfaceAddress(options.interface); ip.ok() && !IsLoopbackHost(*ip)) {
      off = absl::StrCat("--interface ", options.interface, " (", *ip, ") is off loopback");
    }
  }
  if (!off.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        off,
        ": give the node's key (--key-file or SYNCLINE_KEY_FILE: the launcher's OUT/keys, or "
        "its OUT/job.key with --node-keys off or --max-workers) or, on a trusted network, "
        "--insecure"));
  }
  return zmq;
}

absl::StatusOr<std::string> ChooseBindAddress(const NodeOptions& options) {
  if (!options.bind.empty()) return options.bind;
  if (!options.interface.empty()) {
    auto ip = InterfaceAddress(options.interface);
    if (!ip.ok()) return ip.status();
    return absl::StrCat("tcp://", *ip, ":0");
  }
  if (options.coordinator.empty() || IsLoopbackAddress(options.coordinator)) {
    return std::string("tcp://127.0.0.1:0");
  }
  auto coordinator = ParseTcpAddress(options.coordinator);
  if (!coordinator.ok()) return coordinator.status();
  auto ip = LocalAddressToward(coordinator->host);
  if (!ip.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot choose an address to listen on: ", ip.status().message(),
                     " (give --interface or --bind)"));
  }
  return absl::StrCat("tcp://", *ip, ":0");
}

absl::StatusOr<std::string> BindNodeEndpoint(Endpoint& endpoint, const NodeOptions& options) {
  absl::StatusOr<std::string> address = ChooseBindAddress(options);
  if (!address.ok()) return address.status();
  auto hp = ParseTcpAddress(*address);
  return hp.ok() && hp->port == 0 ? BindInRange(endpoint, hp->host, options.ports)
                                  : endpoint.Bind(*address);
}

}  // namespace syncline
