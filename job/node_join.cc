#include "job/node_join.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/node_table.h"
#include "job/job_wire.h"

namespace syncline {

absl::StatusOr<JoinedJob> JoinJob(Transport& transport, wire::Role role,
                                  const NodeOptions& options) {
  JoinedJob job;
  auto endpoint = transport.CreateEndpoint(DataEndpointId(role, options.rank));
  if (!endpoint.ok()) return endpoint.status();
  // Listen before registering: the address goes into the node table, and peers may connect
  // as soon as they have it.
  auto address = (*endpoint)->Bind(options.bind);
  if (!address.ok()) return address.status();
  job.data = std::move(*endpoint);
  job.data_address = *address;

  ControlOptions control;
  control.coordinator_address = options.coordinator;
  control.role = role;
  control.rank = options.rank;
  control.data_address = job.data_address;
  control.startup_timeout = options.startup_timeout;
  control.version = options.version;
  auto client = ControlClient::Connect(transport, control);
  if (!client.ok()) {
    return absl::Status(client.status().code(),
                        absl::StrCat("cannot join the job: ", client.status().message()));
  }
  job.control = std::move(*client);
  const NodeTable& table = job.control->table();
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
  return job;
}

CoordinatorOptions CoordinatorOptionsFor(const JobSpec& spec) {
  CoordinatorOptions o;
  o.num_servers = spec.servers;
  o.num_workers = spec.workers;
  o.staleness = spec.sync.server_staleness();
  o.heartbeat_interval = absl::Seconds(spec.timeouts.heartbeat_interval_s);
  o.heartbeat_timeout = absl::Seconds(spec.timeouts.heartbeat_timeout_s);
  o.evaluate = !spec.data.test.empty();
  // Named before the waiting workers' own requests time out.
  o.stuck_timeout = absl::Seconds(0.9 * spec.timeouts.request_s);
  o.job_spec = JobSpecToBytes(spec);
  return o;
}

absl::Status NodeOptionsFromEnvironment(NodeOptions* options) {
  auto env = [](const char* name) -> const char* {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? v : nullptr;
  };
  if (const char* c = env("SYNCLINE_COORDINATOR")) options->coordinator = c;
  if (const char* b = env("SYNCLINE_BIND")) options->bind = b;
  if (const char* r = env("SYNCLINE_RANK")) {
    int rank = 0;
    if (!absl::SimpleAtoi(r, &rank) || rank < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("SYNCLINE_RANK='", r, "' is not a rank (an integer >= 0)"));
    }
    options->rank = rank;
  }
  return absl::OkStatus();
}

}  // namespace syncline
