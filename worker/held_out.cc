#include "worker/held_out.h"

#include <vector>

#include "core/log.h"

namespace syncline {

HeldOutEvaluation::HeldOutEvaluation(const JobSpec& spec, int rank, ControlClient& control,
                                     WorkerMetrics* metrics)
    : spec_(spec),
      control_(control),
      metrics_(metrics),
      active_(rank == 0 && spec.observe.evaluates() && !spec.data.test.empty()) {}

bool HeldOutEvaluation::Due(int64_t clock, absl::Time now) const {
  if (spec_.observe.eval_every_steps > 0) return clock % spec_.observe.eval_every_steps == 0;
  return now - last_ >= absl::Seconds(spec_.observe.eval_every_seconds);
}

absl::Status HeldOutEvaluation::AfterStep(int64_t clock, const Model& model,
                                          const ParameterLayout& layout, SyncBackend& backend,
                                          WorkerData& data) {
  const absl::Time begin = absl::Now();
  if (!active_ || !Due(clock, begin)) return absl::OkStatus();
  last_ = begin;
  if (spec_.sync.kind == SyncKind::kBsp) {
    // A read of iteration `clock` is answered once every worker has finished `clock`
    // iterations: the servers then hold exactly their updates.
    std::vector<float> bias(model.bias_dim());
    if (auto s = backend.Read(clock, {}, {}, bias); !s.ok()) return s;
  }
  absl::StatusOr<EvaluationReport> report =
      EvaluateModel(spec_, model, layout, backend, data, /*write_params=*/false);
  if (!report.ok()) return report.status();
  const absl::Time end = absl::Now();
  report->seconds = absl::ToDoubleSeconds(end - begin);
  control_.ReportHeldOut(clock, *report);
  if (metrics_ != nullptr) metrics_->OnEvaluation(clock, *report, begin, end);
  SYNCLINE_LOG(INFO) << "held-out evaluation after " << clock << " steps: loss " << report->loss
                     << (report->auc >= 0 ? ", AUC " + std::to_string(report->auc) : "")
                     << (report->accuracy >= 0 ? ", accuracy " + std::to_string(report->accuracy)
                                               : "")
                     << " (" << report->seconds << " s, left out of the step times)";
  return absl::OkStatus();
}

}  // namespace syncline
