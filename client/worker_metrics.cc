#include "client/worker_metrics.h"

#include <algorithm>
#include <string_view>
#include <utility>

#include "absl/strings/str_format.h"

namespace syncline {

WorkerMetrics::WorkerMetrics(MetricsRegistry* registry, TraceRecorder* trace, int64_t trace_first,
                             int64_t trace_end, std::string collective)
    : trace_(trace),
      trace_first_(trace_first),
      trace_end_(trace_end),
      collective_(std::move(collective)) {
  if (trace_ != nullptr) {
    steps_track_ = trace_->Track("steps");
    evaluation_track_ = trace_->Track("held-out evaluation");
    if (!collective_.empty()) collectives_track_ = trace_->Track("collectives");
  }
  if (registry == nullptr) return;
  MetricsRegistry& r = *registry;
  series_ = std::make_unique<Series>();
  Series& s = *series_;
  s.steps = r.AddCounter("syncline_worker_steps_total", "Training iterations this worker ran.");
  s.examples = r.AddCounter("syncline_worker_examples_total", "Examples this worker trained on.");
  s.step_seconds = r.AddHistogram("syncline_worker_step_duration_seconds",
                                  "Time of one training iteration, in seconds.", DurationBuckets());
  for (size_t i = 0; i < kPhases.size(); ++i) {
    s.phase_seconds[i] = r.AddCounter(
        "syncline_worker_step_phase_seconds_total",
        "Time of the training iterations by phase, in seconds: the next batch (batch), copies "
        "to and from the model's device (upload, download), the model (compute), the codecs "
        "(compress), the step's read of its parameters, where consistency holds it back for "
        "slower workers (wait), and the rest of the wire (network).",
        {{"phase", kPhases[i]}});
  }
  s.clock = r.AddGauge("syncline_worker_clock", "Training iterations this worker has finished.");
  s.loss = r.AddGauge("syncline_worker_loss", "Mean loss per example of the last batch.");
  s.test_loss = r.AddGauge("syncline_worker_test_loss",
                           "Mean loss per example of the last held-out evaluation (--eval-every).");
  s.test_auc = r.AddGauge("syncline_worker_test_auc",
                          "AUC of the last held-out evaluation (binary models; else -1).");
  s.test_accuracy = r.AddGauge("syncline_worker_test_accuracy",
                               "Accuracy of the last held-out evaluation (multiclass; else -1).");
  s.evaluations = r.AddCounter("syncline_worker_evaluations_total",
                               "Held-out evaluations this worker ran while training.");
  s.evaluation_seconds =
      r.AddCounter("syncline_worker_evaluation_seconds_total",
                   "Time of the held-out evaluations, in seconds (not in any step's time).");
}

void WorkerMetrics::OnStep(const StepRecord& step) {
  if (series_) Count(step);
  if (trace_ != nullptr && step.step >= trace_first_ && step.step < trace_end_) Trace(step);
}

void WorkerMetrics::Count(const StepRecord& step) {
  Series& s = *series_;
  s.steps->Increment();
  s.examples->Add(static_cast<double>(step.examples));
  s.step_seconds->Observe(absl::ToDoubleSeconds(step.end - step.begin));
  s.clock->Set(static_cast<double>(step.step + 1));
  if (step.examples > 0) s.loss->Set(step.loss / static_cast<double>(step.examples));
  // The step's read of its parameters is its wait (a session's: its waits for tickets), as
  // far as the split's network time goes.
  absl::Duration read;
  for (const StepPhase& p : step.phases) {
    if (std::string_view(p.name) == "read" || std::string_view(p.name) == "wait") {
      read += p.end - p.begin;
    }
  }
  const absl::Duration wait = std::clamp(read, absl::ZeroDuration(), step.network);
  const absl::Duration parts[] = {step.batch,    step.upload,         step.compute, step.compress,
                                  step.download, step.network - wait, wait};
  for (size_t i = 0; i < kPhases.size(); ++i) {
    s.phase_seconds[i]->Add(absl::ToDoubleSeconds(parts[i]));
  }
}

void WorkerMetrics::Trace(const StepRecord& step) {
  const double mean = step.examples > 0 ? step.loss / static_cast<double>(step.examples) : 0;
  trace_->Slice(
      steps_track_, absl::StrFormat("step %d", step.step), "step", step.begin, step.end,
      absl::StrFormat("\"step\":%d,\"examples\":%d,\"loss\":%.6g", step.step, step.examples, mean));
  for (const StepPhase& p : step.phases) {
    if (std::string_view(p.name) != kEndIterationPhase) {
      trace_->Slice(steps_track_, p.name, "phase", p.begin, p.end);
    } else if (!collective_.empty()) {
      trace_->Slice(collectives_track_, collective_, "collective", p.begin, p.end,
                    absl::StrFormat("\"step\":%d", step.step));
    }
  }
}

void WorkerMetrics::OnEvaluation(int64_t clock, const EvaluationReport& report, absl::Time begin,
                                 absl::Time end) {
  if (series_) {
    Series& s = *series_;
    s.test_loss->Set(report.loss);
    s.test_auc->Set(report.auc);
    s.test_accuracy->Set(report.accuracy);
    s.evaluations->Increment();
    s.evaluation_seconds->Add(absl::ToDoubleSeconds(end - begin));
  }
  if (trace_ != nullptr) {
    trace_->Slice(evaluation_track_, "held-out evaluation", "evaluation", begin, end,
                  absl::StrFormat("\"clock\":%d,\"loss\":%.6g", clock, report.loss));
  }
}

std::string CollectiveName(const SyncMode& sync) {
  if (sync.allreduce() || sync.hybrid()) return "all-reduce";
  if (sync.gossip()) return "gossip exchange";
  return "";
}

}  // namespace syncline
