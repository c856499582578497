#include "worker/attack.h"

#include <utility>

namespace syncline {

void Corrupt(const AttackSpec& attack, float examples, std::span<float> values, Random& random) {
  switch (attack.kind) {
    case AttackKind::kSignFlip:
      for (float& v : values) v = -v;
      return;
    case AttackKind::kScale: {
      const float factor = static_cast<float>(attack.factor);
      for (float& v : values) v *= factor;
      return;
    }
    case AttackKind::kGaussian: {
      const double scale = attack.sigma * examples;
      for (float& v : values) v = static_cast<float>(random.Normal() * scale);
      return;
    }
    case AttackKind::kNone:
    case AttackKind::kLabelFlip:
      return;
  }
}

void FlipLabels(Dataset& data, int classes) {
  const float top = static_cast<float>(classes - 1);
  for (float& y : data.labels) y = top - y;
}

AttackingBackend::AttackingBackend(std::unique_ptr<SyncBackend> honest, AttackSpec attack,
                                   uint64_t seed, int rank)
    : honest_(std::move(honest)),
      attack_(attack),
      random_(seed, 0x617474u + static_cast<uint32_t>(rank)) {}

absl::Status AttackingBackend::Update(int64_t clock, std::span<const uint64_t> keys,
                                      std::span<const float> row_grads,
                                      std::span<const float> bias_grad, float examples) {
  std::vector<float>& rows = rows_[next_];
  std::vector<float>& bias = bias_[next_];
  next_ ^= 1;
  rows.assign(row_grads.begin(), row_grads.end());
  bias.assign(bias_grad.begin(), bias_grad.end());
  Corrupt(attack_, examples, rows, random_);
  Corrupt(attack_, examples, bias, random_);
  return honest_->Update(clock, keys, rows, bias, examples);
}

}  // namespace syncline
