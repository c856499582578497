// The flags every node binary (syncline-ps, syncline-worker) takes: where the coordinator is,
// which rank this node has, and where it listens. Everything else about the job comes from the
// coordinator's JobSpec. Each flag's default comes from the environment variable named in its
// help (so `srun syncline-worker --coordinator tcp://host:port` with SYNCLINE_RANK set, or the
// rank a cluster launcher exports, is enough).
#ifndef SYNCLINE_JOB_NODE_FLAGS_H_
#define SYNCLINE_JOB_NODE_FLAGS_H_

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>
#include <optional>

#include "job/job_spec.h"
#include "job/node_join.h"

namespace syncline {

// Registers the node flags on `app`, bound to `*options`, after reading the environment into
// it. Returns an exit code (2) when the environment holds a bad value.
inline std::optional<int> AddNodeFlags(CLI::App& app, NodeOptions* options, const char* program,
                                       const char* rank_help) {
  if (absl::Status s = NodeOptionsFromEnvironment(options); !s.ok()) {
    std::cerr << program << ": " << s.message() << "\n";
    return 2;
  }
  app.add_option("--coordinator", options->coordinator,
                 "address of the job's coordinator, e.g. tcp://10.0.0.1:7000 "
                 "[SYNCLINE_COORDINATOR]")
      ->required(options->coordinator.empty());
  app.add_option("--rank", options->rank, rank_help)
      ->check(CLI::Range(0, kMostNodes - 1))
      ->capture_default_str();
  app.add_option("--bind", options->bind,
                 "ZeroMQ address this node's data endpoint listens on, e.g. tcp://10.0.0.2:0 "
                 "(port 0 picks a free one); default: the address of --interface, else the one "
                 "whose route reaches the coordinator (loopback for a local job) [SYNCLINE_BIND]");
  app.add_option("--interface", options->interface,
                 "listen on this network interface's IPv4 address, e.g. eth0 or ib0 "
                 "[SYNCLINE_INTERFACE]");
  app.add_option_function<std::string>(
      "--port-range",
      [options](const std::string& text) {
        auto ports = ParsePortRange(text);
        if (!ports.ok())
          throw CLI::ValidationError("--port-range", std::string(ports.status().message()));
        options->ports = *ports;
      },
      "listen on the first free port in FIRST-LAST (for firewalls that open only those) "
      "[SYNCLINE_PORT_RANGE]");
  app.add_option_function<std::string>(
         "--metrics-port",
         [options](const std::string& text) { options->metrics_port = *ParseMetricsPort(text); },
         "serve Prometheus metrics at http://HOST:PORT/metrics on the data address's host; 0: "
         "any free port (in --port-range); off: none (default) [SYNCLINE_METRICS_PORT]")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            return ParseMetricsPort(text) ? "" : "must be a port in [0, 65535] or off";
          },
          "PORT"));
  app.add_option("--key-file", options->key_file,
                 "the key (mode 0600) that authenticates and encrypts this node's "
                 "connections: its own (syncline-launch writes OUT/keys/<id>.key per node), "
                 "the folder of them (OUT/keys), or the job's (OUT/job.key) [SYNCLINE_KEY_FILE]");
  app.add_flag("--insecure", options->insecure,
               "talk plaintext to a coordinator off loopback (trusted networks only) "
               "[SYNCLINE_INSECURE=1]");
  app.add_option_function<double>(
         "--startup-timeout",
         [options](double seconds) { options->startup_timeout = absl::Seconds(seconds); },
         "seconds to wait for every node of the job to register (default 120) "
         "[SYNCLINE_STARTUP_TIMEOUT]")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            return ParseStartupTimeout(text) ? "" : "must be a number of seconds in (0, 1000000]";
          },
          "SECONDS"));
  return std::nullopt;
}

// Whether the node was told its rank (--rank, or SYNCLINE_RANK): left to its default, a node
// would take rank 0's place in a running job.
inline bool RankGiven(const CLI::App& app) {
  const char* env_rank = std::getenv("SYNCLINE_RANK");
  return app.count("--rank") > 0 || (env_rank != nullptr && *env_rank != '\0');
}

}  // namespace syncline

#endif  // SYNCLINE_JOB_NODE_FLAGS_H_
