#include "launch/tensorboard_report.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace syncline {
namespace {

double Now() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

}  // namespace

TensorBoardReport::TensorBoardReport(std::unique_ptr<TensorBoardWriter> writer)
    : writer_(std::move(writer)) {}

void TensorBoardReport::OnProgress(int worker, wire::Progress::Reader p) {
  const double now = Now();
  const int64_t clock = p.getClock();
  last_clock_ = std::max(last_clock_, clock);
  const std::string w = absl::StrCat("/w", worker);
  writer_->Scalar(absl::StrCat("train/loss", w), clock, p.getTrainLoss(), now);
  if (p.hasStepSeconds()) {
    auto s = p.getStepSeconds();
    const double seconds = s.getBatch() + s.getUpload() + s.getCompute() + s.getCompress() +
                           s.getDownload() + s.getNetwork();
    if (seconds > 0 && std::isfinite(seconds)) {
      writer_->Scalar(absl::StrCat("train/steps_per_second", w), clock,
                      static_cast<double>(s.getSteps()) / seconds, now);
    }
  }
  writer_->Scalar(absl::StrCat("traffic/bytes", w), clock, static_cast<double>(p.getBytes()), now);
  writer_->Scalar(absl::StrCat("train/staleness", w), clock, p.getStaleness(), now);
}

void TensorBoardReport::OnHeldOut(int worker, int64_t clock, wire::Evaluation::Reader e) {
  Test(clock, e);
  writer_->Scalar("test/evaluation_seconds", clock, e.getSeconds(), Now());
}

void TensorBoardReport::OnEvaluation(int worker, wire::Evaluation::Reader e) {
  if (e.getExamples() == 0) return;  // a program of one's own that evaluates nothing
  Test(last_clock_, e);
}

void TensorBoardReport::Test(int64_t clock, wire::Evaluation::Reader e) {
  const double now = Now();
  writer_->Scalar("test/loss", clock, e.getLoss(), now);
  if (e.getAuc() >= 0) writer_->Scalar("test/auc", clock, e.getAuc(), now);
  if (e.getAccuracy() >= 0) writer_->Scalar("test/accuracy", clock, e.getAccuracy(), now);
}

}  // namespace syncline
