// Crafted updates for robustness experiments (--byzantine RANKS:ATTACK): what a Byzantine worker
// sends in place of its honest update. Seeded, so that a run with attackers repeats exactly.
//
// Thread-safety: AttackingBackend is thread-compatible; the functions are stateless.
#ifndef SYNCLINE_WORKER_ATTACK_H_
#define SYNCLINE_WORKER_ATTACK_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/random.h"
#include "data/dataset.h"
#include "syncline/options.h"
#include "worker/sync_backend.h"

namespace syncline {

// Rewrites `values`, an update over `examples` examples (a gradient sum, or a federated
// client's model delta with examples 1): signflip negates it, scale multiplies it by the
// factor, gaussian replaces each value by N(0, sigma^2) * examples (so that per example it is
// N(0, sigma^2)). labelflip and none leave it: labelflip acts on the data (FlipLabels).
void Corrupt(const AttackSpec& attack, float examples, std::span<float> values, Random& random);

// labelflip: label y of a K-class dataset becomes K - 1 - y (binary: 1 - y).
void FlipLabels(Dataset& data, int classes);

// A SyncBackend whose Update sends Corrupt()ed gradients; everything else is the wrapped
// backend's. The corrupted copies are kept until the next Update, as the wrapped backend may
// still be sending them.
class AttackingBackend : public SyncBackend {
 public:
  AttackingBackend(std::unique_ptr<SyncBackend> honest, AttackSpec attack, uint64_t seed, int rank);

  absl::Status Init(const ParameterLayout& layout) override { return honest_->Init(layout); }
  absl::Status Read(int64_t clock, std::span<const uint64_t> keys, std::span<float> rows,
                    std::span<float> bias) override {
    return honest_->Read(clock, keys, rows, bias);
  }
  absl::Status Update(int64_t clock, std::span<const uint64_t> keys,
                      std::span<const float> row_grads, std::span<const float> bias_grad,
                      float examples) override;
  void SetFinalClock(int64_t clock) override { honest_->SetFinalClock(clock); }
  absl::Status OnArrival(int worker, int64_t first_clock, std::span<const int> donors) override {
    return honest_->OnArrival(worker, first_clock, donors);
  }
  absl::Status EndIteration(int64_t clock, float examples) override {
    return honest_->EndIteration(clock, examples);
  }
  absl::Status Finish() override { return honest_->Finish(); }
  void Settle(absl::Duration max_wait) override { honest_->Settle(max_wait); }
  double TakeMeanStaleness() override { return honest_->TakeMeanStaleness(); }
  double TakeConsensusProxy() override { return honest_->TakeConsensusProxy(); }
  absl::Duration TakeCodecTime() override { return honest_->TakeCodecTime(); }
  absl::StatusOr<std::string> SaveState() const override { return honest_->SaveState(); }
  absl::Status RestoreState(std::string_view state) override {
    return honest_->RestoreState(state);
  }
  uint64_t bytes_pushed() const override { return honest_->bytes_pushed(); }
  uint64_t bytes_pulled() const override { return honest_->bytes_pulled(); }

 private:
  std::unique_ptr<SyncBackend> honest_;
  const AttackSpec attack_;
  Random random_;
  // Two sets, alternating by update: the previous one may still be on the wire.
  std::vector<float> rows_[2], bias_[2];
  int next_ = 0;
};

}  // namespace syncline

#endif  // SYNCLINE_WORKER_ATTACK_H_
