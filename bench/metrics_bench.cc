// syncline-bench-metrics: what a node's metrics cost it (docs/OBSERVABILITY.md). Per training
// iteration, a worker with --metrics-port makes one StepObserver call (client/worker_metrics.h);
// per request, a server one RequestObserver call (ps/server_metrics.h); and per scrape, either
// writes its page. Each figure is the best of --repeat turns of --calls calls (--scrapes pages),
// on this thread, with nothing else running in the process: the work a node adds, set against
// a step of about a millisecond (the demo job's) or a request of tens of microseconds.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <iostream>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/worker_metrics.h"
#include "core/metrics.h"
#include "core/node_metrics.h"
#include "ps/server_metrics.h"

namespace syncline::bench {
namespace {

using Clock = std::chrono::steady_clock;

// The best of `repeat` turns of fn(), in nanoseconds per unit (`units` a turn).
template <typename Fn>
double BestNanos(int repeat, int units, Fn fn) {
  double best = 1e300;
  for (int r = 0; r < repeat; ++r) {
    const auto start = Clock::now();
    fn();
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - start).count();
    best = std::min(best, ns / units);
  }
  return best;
}

int Main(int argc, char** argv) {
  CLI::App app("syncline-bench-metrics: the work a node's metrics add, per step, request, scrape");
  int calls = 1000000, scrapes = 2000, repeat = 5;
  bool quick = false;
  app.add_option("--calls", calls, "observer calls a turn")->capture_default_str();
  app.add_option("--scrapes", scrapes, "pages written a turn")->capture_default_str();
  app.add_option("--repeat", repeat, "turns; the best is printed")->capture_default_str();
  app.add_flag("--quick", quick, "a few calls: that it runs (the smoke test)");
  CLI11_PARSE(app, argc, argv);
  if (quick) calls = 1000, scrapes = 10, repeat = 1;

  MetricsRegistry worker_registry;
  AddProcessMetrics(worker_registry);
  WorkerMetrics worker(&worker_registry, nullptr, 0, 0);
  const absl::Time t0 = absl::Now();
  const StepPhase phases[] = {
      {"batch", t0, t0 + absl::Microseconds(50)},
      {"read", t0 + absl::Microseconds(50), t0 + absl::Microseconds(600)},
      {"compute", t0 + absl::Microseconds(600), t0 + absl::Microseconds(900)},
      {"push", t0 + absl::Microseconds(900), t0 + absl::Microseconds(1000)}};
  StepRecord step{.begin = t0,
                  .end = t0 + absl::Milliseconds(1),
                  .batch = absl::Microseconds(50),
                  .compute = absl::Microseconds(300),
                  .network = absl::Microseconds(650),
                  .loss = 40,
                  .examples = 256,
                  .phases = phases};
  const double per_step = BestNanos(repeat, calls, [&] {
    for (int i = 0; i < calls; ++i) {
      step.step = i;
      worker.OnStep(step);
    }
  });

  MetricsRegistry server_registry;
  AddProcessMetrics(server_registry);
  ServerMetrics server(&server_registry, nullptr, 0, 0);
  const double per_request = BestNanos(repeat, calls, [&] {
    for (int i = 0; i < calls; ++i) {
      server.OnRequest(i % 3 == 0 ? wire::MsgType::PULL : wire::MsgType::PUSH, i, t0,
                       t0 + absl::Microseconds(20), false);
    }
  });

  size_t worker_bytes = 0, server_bytes = 0;
  const double worker_page = BestNanos(repeat, scrapes, [&] {
    for (int i = 0; i < scrapes; ++i) worker_bytes = worker_registry.Exposition().size();
  });
  const double server_page = BestNanos(repeat, scrapes, [&] {
    for (int i = 0; i < scrapes; ++i) server_bytes = server_registry.Exposition().size();
  });
  std::cout << absl::StrFormat(
      "worker: %.0f ns a step (StepObserver); its page: %d bytes in %.1f us\n"
      "server: %.0f ns a request (RequestObserver); its page: %d bytes in %.1f us\n"
      "(a step of the demo job is about 1 ms: %.3f%% of it; a scrape every 5 s is %.4f%% of a "
      "core)\n",
      per_step, worker_bytes, worker_page / 1000, per_request, server_bytes, server_page / 1000,
      100 * per_step / 1e6, 100 * std::max(worker_page, server_page) / 5e9);
  return 0;
}

}  // namespace
}  // namespace syncline::bench

int main(int argc, char** argv) { return syncline::bench::Main(argc, argv); }
