// AdmissionSketch: a count-min sketch of how often each id was seen, in bounded memory, so that
// an embedding store can create a row only for ids seen at least N times (rare ids, most of a
// recommendation model's vocabulary, never take a row).
//
// Counts are over-estimates (never under): hash collisions can admit an id early, never late.
// Conservative update (only the smallest counters grow) keeps the over-estimate small. Halve()
// ages the counts so that the sketch does not saturate over a long run.
//
// Thread-safety: thread-compatible.
#ifndef SYNCLINE_EMBEDDINGS_ADMISSION_SKETCH_H_
#define SYNCLINE_EMBEDDINGS_ADMISSION_SKETCH_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace syncline {

class AdmissionSketch {
 public:
  // `width` counters per row (rounded up to a power of two, at least 64), `depth` rows (at
  // least 1); the hash of every row is derived from `seed`.
  AdmissionSketch(uint32_t width, uint32_t depth, uint64_t seed);

  // Counts one more sighting of `id` and returns its estimated count (including this one).
  uint32_t Add(uint64_t id);
  // The estimated count of `id`.
  uint32_t Estimate(uint64_t id) const;
  // Halves every counter.
  void Halve();

  size_t bytes() const { return counters_.size() * sizeof(uint32_t); }

  // The counters as bytes, for a checkpoint: width and depth (4 bytes each) and seed (8), then
  // the counters, all in this machine's byte order.
  std::string Serialize() const;
  // Replaces the counters with Serialize()'s output of a sketch of the same width, depth and
  // seed (the seed picks the counters an id maps to); DataLoss naming what differs otherwise
  // (the counters are then unchanged).
  absl::Status Load(std::string_view bytes);

 private:
  uint32_t Slot(uint32_t row, uint64_t id) const;

  uint32_t width_;
  uint32_t depth_;
  uint64_t seed_;
  std::vector<uint64_t> seeds_;
  std::vector<uint32_t> counters_;  // depth_ rows of width_
};

}  // namespace syncline

#endif  // SYNCLINE_EMBEDDINGS_ADMISSION_SKETCH_H_
