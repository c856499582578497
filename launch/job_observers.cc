#include "launch/job_observers.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/log.h"
#include "launch/trace_merge.h"

namespace syncline {

namespace fs = std::filesystem;

absl::StatusOr<std::unique_ptr<JobObservers>> JobObservers::Start(
    const JobObserversOptions& options, RunReport& report, const CheckpointTracker* checkpoints) {
  std::unique_ptr<JobObservers> o(new JobObservers());
  o->out_ = options.out;
  if (options.metrics_port >= 0) {
    auto page = NodeMetrics::Start(NodeMetricsOptions{.ip = options.ip,
                                                      .port = options.metrics_port,
                                                      .ports = options.ports,
                                                      .role = "coordinator"});
    if (!page.ok()) {
      return absl::Status(page.status().code(),
                          absl::StrCat("--metrics-port: ", page.status().message()));
    }
    o->page_ = std::move(*page);
    auto targets = PrometheusTargets::Create(
        PrometheusTargetsOptions{.dir = (fs::path(options.out) / "prometheus").string(),
                                 .run = options.run,
                                 .scrape_interval = options.scrape_interval});
    if (!targets.ok()) return targets.status();
    o->targets_ = std::move(*targets);
    o->targets_->Add(kCoordinatorId, "coordinator", 0, options.ip, o->page_->port());
  }
  o->metrics_ = std::make_unique<CoordinatorMetrics>(o->page_ ? &o->page_->registry() : nullptr,
                                                     o->targets_.get(), checkpoints);
  auto writer = TensorBoardWriter::Create((fs::path(options.out) / "tensorboard").string());
  if (!writer.ok()) return writer.status();
  o->tensorboard_ = std::make_unique<TensorBoardReport>(std::move(*writer));
  o->fanout_ = std::make_unique<ObserverFanout>(
      std::vector<CoordinatorObserver*>{&report, o->metrics_.get(), o->tensorboard_.get()});
  return o;
}

void JobObservers::SetCoordinator(const Coordinator& coordinator) {
  metrics_->SetCoordinator(&coordinator);
  coordinator_traffic_ = &coordinator.traffic();
  if (page_) page_->CountTraffic(coordinator_traffic_);
}

void JobObservers::DetachCoordinator() {
  metrics_->SetCoordinator(nullptr);
  if (page_ && coordinator_traffic_ != nullptr) page_->Forget(coordinator_traffic_);
  coordinator_traffic_ = nullptr;
}

std::string JobObservers::Finish(const JobSpec& spec) {
  std::string said;
  if (targets_) targets_->Clear();
  DetachCoordinator();
  if (!spec.observe.tracing()) return said;
  const std::string path = (fs::path(out_) / "trace.json").string();
  absl::StatusOr<TraceMergeResult> merged = MergeTraces(spec.observe.trace_dir, path);
  if (!merged.ok()) {
    return absl::StrCat("trace: ", merged.status().message(), "\n");
  }
  said = absl::StrFormat(
      "trace: %s, %d events of %d nodes (steps %d to %d; clock offsets up to %.1f ms "
      "applied)%s\n",
      path, merged->events, merged->nodes, spec.observe.trace_first, spec.observe.trace_end - 1,
      merged->max_offset_us / 1000.0,
      merged->dropped + merged->malformed > 0
          ? absl::StrFormat("; %d events dropped past the nodes' bounds, %d lines unreadable",
                            merged->dropped, merged->malformed)
          : "");
  return said;
}

}  // namespace syncline
