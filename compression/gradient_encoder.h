// GradientEncoder: error feedback over a model's gradients where the model computes them. A GPU
// model (device/device_model.h) keeps a step's gradients on the device and encodes them there
// with the CUDA codecs, so that only the encoded blocks cross PCIe; a sync backend that encodes
// a dense gradient with error feedback (SyncBackend::CompressionWanted) takes its blocks from
// here instead of encoding the gradient it is handed.
//
// RowGradientEncoder: the same for sparse rows (a parameter server's embedding table under
// top-K or sign1), whose error feedback keeps a residual per row (compression/sparse_rows.h):
// the model keeps each step's row gradients and the residual rows on its device, and a push
// brings down only what SparseErrorFeedback would send.
//
// PulledRowDecoder: the mirror for compressed pulls (--compress-pull): the model keeps the
// worker's copy of the pulled rows where it computes, so that only a reply's bytes go up, and
// the batch's rows are decoded there.
//
// Thread-safety: thread-compatible; the model that made it must outlive it.
#ifndef SYNCLINE_COMPRESSION_GRADIENT_ENCODER_H_
#define SYNCLINE_COMPRESSION_GRADIENT_ENCODER_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compression/sparse_rows.h"
#include "syncline/options.h"

namespace syncline {

// A model's two gradients: its rows' (row_dim floats per key) and its dense table's (the
// "bias": bias_dim floats).
enum class GradientTable { kRows, kDense };

// What a backend asks of a model that can keep a gradient (SyncBackend::CompressionWanted): the
// table, the codec, the floats of the dense gradient (rows: key k's row at k * row_dim; the
// dense table: bias_dim), and its parts, each encoded into a block of its own with a residual
// of its own (a parameter server's shard each; an all-reduce's one part).
struct GradientCompression {
  struct Part {
    size_t begin = 0, end = 0;  // floats [begin, end) of the gradient
    size_t size() const { return end - begin; }
  };
  GradientTable table = GradientTable::kRows;
  CodecSpec codec;
  size_t floats = 0;
  std::vector<Part> parts;  // in order, within [0, floats)
};

class GradientEncoder {
 public:
  virtual ~GradientEncoder() = default;
  // Encodes p = (part `part` of the gradients kept since its last Compress or Drain) + its
  // residual into *block, as ErrorFeedback::Compress does with the same codec (the same bytes),
  // and keeps p - decode(block) as the part's residual (all of p when the block does not
  // decode: sign1 of a non-finite gradient). The part's kept gradients start again from zero.
  virtual absl::Status Compress(size_t part, std::vector<std::byte>* block) = 0;
  // Replaces *values with p (the part's kept gradients + its residual), to be sent whole (the
  // last clock's), and starts both again from zero.
  virtual absl::Status Drain(size_t part, std::vector<float>* values) = 0;
  // A part's residual, as ErrorFeedback::residual (empty until the part's first Compress or a
  // restore), for checkpoints; and its restore (the part's size, or empty for none). An empty
  // part (a shard without rows) holds nothing, drains nothing, and refuses to Compress.
  virtual absl::StatusOr<std::vector<float>> Residual(size_t part) const = 0;
  virtual absl::Status SetResidual(size_t part, std::span<const float> residual) = 0;
};

// What a backend asks of a model for sparse rows compressed with per-row error feedback: the
// codec (topk or sign1), the rows' width, the shards (one residual table each) and the rows
// each table keeps at most (0: unbounded).
struct RowCompression {
  CodecSpec codec;
  uint32_t dim = 0;
  size_t shards = 0;
  size_t residual_rows = 0;
};

class RowGradientEncoder {
 public:
  virtual ~RowGradientEncoder() = default;
  // SparseErrorFeedback::Compress, in shard `shard`'s residual table, of the rows `keys`
  // (ascending) of the last training step's row gradients: keys[i] is the step's
  // keys[positions[i]]. The same SparsePush, to the byte, as the CPU class would make.
  virtual absl::Status Compress(size_t shard, std::span<const uint64_t> keys,
                                std::span<const uint32_t> positions, float examples,
                                SparsePush* out) = 0;
  // SparseErrorFeedback::Drain of the shard's table into out's flushed rows.
  virtual absl::Status Drain(size_t shard, float examples, SparsePush* out) = 0;
  // The shard's residual rows (recency, stamps and metadata as the CPU class's table holds
  // them) and its push count, for checkpoints; and their restore.
  virtual absl::Status CopyResiduals(size_t shard, RowTable* table, uint64_t* pushes) const = 0;
  virtual absl::Status SetResiduals(size_t shard, const RowTable& table, uint64_t pushes) = 0;
  // Over every shard: rows held now, flushed to stay within the capacity, and drained.
  struct Counts {
    uint64_t held = 0, flushed = 0, drained = 0;
  };
  virtual Counts counts() const = 0;
};

// What a backend asks of a model for compressed pulls of sparse rows: their codec (fp16, topk
// or sign1) and the rows' width.
struct PullDecoding {
  CodecKind codec = CodecKind::kNone;
  uint32_t dim = 0;
};

class PulledRowDecoder {
 public:
  virtual ~PulledRowDecoder() = default;
  // A read of a batch's rows into `rows` (the caller's buffer, the keys' rows of dim floats)
  // begins: its replies come through Decode, which writes the rows where the model computes and
  // leaves `rows` as it is; the model's next LossAndGradient on `rows` reads them there. At
  // most two reads are open at once (a read and a read-ahead); beginning one again drops what
  // it had.
  virtual void BeginRead(std::span<float> rows) = 0;
  // One reply of the read of `rows` (DecodePull's fresh, block and evicted): DecodePull's checks
  // and update of the copy, the rows of keys[i] going to row places[i] of that read (places
  // empty: row i). An error names what does not fit, and leaves the copy as it was.
  virtual absl::Status Decode(std::span<const uint64_t> keys, std::span<const uint32_t> places,
                              std::span<const std::byte> fresh, std::span<const std::byte> block,
                              std::span<const uint64_t> evicted, const float* rows) = 0;
  // Rows the copy holds.
  virtual size_t size() const = 0;
};

}  // namespace syncline

#endif  // SYNCLINE_COMPRESSION_GRADIENT_ENCODER_H_
