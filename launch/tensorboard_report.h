// TensorBoardReport: a job's scalars in OUT/tensorboard (launch/tensorboard_writer.h), as the
// coordinator hears them: per worker, at its clock, its training loss (the metrics.csv row's),
// its steps per second of training time, its bytes pushed and pulled so far and the mean
// staleness of the reads served to it; the held-out evaluations (--eval-every) and the final
// one: test loss, AUC or accuracy.
//
// Tags: train/loss/wN, train/steps_per_second/wN, traffic/bytes/wN, train/staleness/wN,
// test/loss, test/auc, test/accuracy, test/evaluation_seconds.
//
// Thread-safety: the coordinator's thread calls it; the writer is thread-safe.
#ifndef SYNCLINE_LAUNCH_TENSORBOARD_REPORT_H_
#define SYNCLINE_LAUNCH_TENSORBOARD_REPORT_H_

#include <cstdint>
#include <map>
#include <memory>

#include "core/coordinator.h"
#include "launch/tensorboard_writer.h"

namespace syncline {

class TensorBoardReport : public CoordinatorObserver {
 public:
  explicit TensorBoardReport(std::unique_ptr<TensorBoardWriter> writer);

  void OnProgress(int worker, wire::Progress::Reader progress) override;
  void OnHeldOut(int worker, int64_t clock, wire::Evaluation::Reader evaluation) override;
  void OnEvaluation(int worker, wire::Evaluation::Reader evaluation) override;

  const std::string& path() const { return writer_->path(); }

 private:
  void Test(int64_t clock, wire::Evaluation::Reader evaluation);

  const std::unique_ptr<TensorBoardWriter> writer_;
  int64_t last_clock_ = 0;  // the furthest clock reported: the final evaluation's step
};

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_TENSORBOARD_REPORT_H_
