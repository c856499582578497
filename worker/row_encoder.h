// RowGradientEncoder: error feedback over a model's row gradients where the model computes
// them. A GPU model (worker/device_model.h) keeps a step's row gradients on the device and
// encodes them there with the CUDA codecs, so that only the encoded block crosses PCIe; a sync
// backend that compresses the whole row gradient in one block (SyncBackend::
// RowCompressionWanted) takes its block from here instead of encoding the gradient itself.
//
// Thread-safety: thread-compatible; the model that made it must outlive it.
#ifndef SYNCLINE_WORKER_ROW_ENCODER_H_
#define SYNCLINE_WORKER_ROW_ENCODER_H_

#include <cstddef>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "syncline/options.h"

namespace syncline {

// What a backend asks of a model that can keep its row gradients (SyncBackend::
// RowCompressionWanted): the codec, the floats of the dense gradient (key k's row at
// k * row_dim), and its parts, each encoded into a block of its own with a residual of its
// own (a parameter server's shard of the rows each; an all-reduce's one part).
struct RowCompression {
  struct Part {
    size_t begin = 0, end = 0;  // floats [begin, end) of the dense gradient
    size_t size() const { return end - begin; }
  };
  CodecSpec codec;
  size_t floats = 0;
  std::vector<Part> parts;  // in order, within [0, floats)
};

class RowGradientEncoder {
 public:
  virtual ~RowGradientEncoder() = default;
  // Encodes p = (part `part` of the row gradients kept since its last Compress) + its residual
  // into *block, as ErrorFeedback::Compress does with the same codec (the same bytes), and
  // keeps p - decode(block) as the part's residual (all of p when the block does not decode:
  // sign1 of a non-finite gradient). The part's kept gradients start again from zero.
  virtual absl::Status Compress(size_t part, std::vector<std::byte>* block) = 0;
  // A part's residual, as ErrorFeedback::residual (empty until the part's first Compress or a
  // restore), for checkpoints; and its restore (the part's size, or empty for none).
  virtual absl::StatusOr<std::vector<float>> Residual(size_t part) const = 0;
  virtual absl::Status SetResidual(size_t part, std::span<const float> residual) = 0;
};

}  // namespace syncline

#endif  // SYNCLINE_WORKER_ROW_ENCODER_H_
