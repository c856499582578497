#include "embeddings/admission_sketch.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include "absl/strings/str_format.h"
#include "core/sharding.h"

namespace syncline {

AdmissionSketch::AdmissionSketch(uint32_t width, uint32_t depth, uint64_t seed)
    : width_(std::bit_ceil(std::max<uint32_t>(width, 64))),
      depth_(std::max<uint32_t>(depth, 1)),
      seed_(seed) {
  for (uint32_t r = 0; r < depth_; ++r) {
    seeds_.push_back(MixKey(seed + 0x9e3779b97f4a7c15ULL * (r + 1)));
  }
  counters_.assign(static_cast<size_t>(width_) * depth_, 0);
}

uint32_t AdmissionSketch::Slot(uint32_t row, uint64_t id) const {
  return row * width_ + static_cast<uint32_t>(MixKey(id ^ seeds_[row]) & (width_ - 1));
}

uint32_t AdmissionSketch::Estimate(uint64_t id) const {
  uint32_t best = std::numeric_limits<uint32_t>::max();
  for (uint32_t r = 0; r < depth_; ++r) best = std::min(best, counters_[Slot(r, id)]);
  return best;
}

uint32_t AdmissionSketch::Add(uint64_t id) {
  const uint32_t current = Estimate(id);
  if (current == std::numeric_limits<uint32_t>::max()) return current;
  const uint32_t next = current + 1;
  for (uint32_t r = 0; r < depth_; ++r) {
    uint32_t& c = counters_[Slot(r, id)];
    c = std::max(c, next);
  }
  return next;
}

void AdmissionSketch::Halve() {
  for (uint32_t& c : counters_) c >>= 1;
}

namespace {
constexpr size_t kHeaderBytes = 16;  // width, depth, seed
}  // namespace

std::string AdmissionSketch::Serialize() const {
  std::string out(kHeaderBytes + bytes(), '\0');
  std::memcpy(out.data(), &width_, 4);
  std::memcpy(out.data() + 4, &depth_, 4);
  std::memcpy(out.data() + 8, &seed_, 8);
  std::memcpy(out.data() + kHeaderBytes, counters_.data(), bytes());
  return out;
}

absl::Status AdmissionSketch::Load(std::string_view bytes) {
  uint32_t width = 0, depth = 0;
  uint64_t seed = 0;
  if (bytes.size() >= kHeaderBytes) {
    std::memcpy(&width, bytes.data(), 4);
    std::memcpy(&depth, bytes.data() + 4, 4);
    std::memcpy(&seed, bytes.data() + 8, 8);
  }
  if (bytes.size() != kHeaderBytes + this->bytes() || width != width_ || depth != depth_ ||
      seed != seed_) {
    return absl::DataLossError(absl::StrFormat(
        "admission sketch of %d bytes (width %d, depth %d, seed %d) does not fit this one's %d "
        "bytes (width %d, depth %d, seed %d)",
        bytes.size(), width, depth, seed, kHeaderBytes + this->bytes(), width_, depth_, seed_));
  }
  std::memcpy(counters_.data(), bytes.data() + kHeaderBytes, this->bytes());
  return absl::OkStatus();
}

}  // namespace syncline
