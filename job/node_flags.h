// The flags every node binary (syncline-ps, syncline-worker) takes: where the coordinator is,
// which rank this node has, and where it listens. Everything else about the job comes from the
// coordinator's JobSpec. Each flag's default comes from the environment variable named in its
// help (so `srun syncline-worker --coordinator tcp://host:port` with SYNCLINE_RANK set, or the
// rank a cluster launcher exports, is enough).
#ifndef SYNCLINE_JOB_NODE_FLAGS_H_
#define SYNCLINE_JOB_NODE_FLAGS_H_

#include <CLI/CLI.hpp>
#include <iostream>
#include <optional>

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
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--bind", options->bind,
                 "ZeroMQ address this node's data endpoint listens on; port 0 picks a free one "
                 "[SYNCLINE_BIND]")
      ->capture_default_str();
  app.add_option_function<double>(
         "--startup-timeout",
         [options](double seconds) { options->startup_timeout = absl::Seconds(seconds); },
         "seconds to wait for every node of the job to register (default 120)")
      ->check(CLI::PositiveNumber);
  return std::nullopt;
}

}  // namespace syncline

#endif  // SYNCLINE_JOB_NODE_FLAGS_H_
