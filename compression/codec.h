// Gradient compression: codecs that turn a dense float32 gradient into a compact block for the
// wire and add a decoded block into a dense array, and error feedback, which keeps what a
// lossy codec did not send and adds it to the next gradient (Seide et al. 2014, "1-bit SGD";
// Karimireddy et al. 2019, "Error Feedback Fixes SignSGD"), so that nothing is lost over time.
//
// Wire formats. All integers and floats are little-endian; a block carries no n (the message
// header does): DecodeAdd is told n and checks the block against it.
//
//   none   float32 value[n]                                        4n bytes
//   fp16   binary16 value[n]                                       2n bytes
//          Round to nearest even; overflow becomes infinity; NaN stays NaN (see half.h).
//   topk   u32 K, index[K], float32 value[K]                       4 + K (w + 4) bytes
//          index is u32 (w = 4) when n < 2^32, else u64 (w = 8); indices strictly ascending,
//          each < n. The encoder keeps the K entries of largest |value|, K = TopKCount(ratio,
//          n); among equal magnitudes the lower index wins; NaN ranks above infinity.
//   sign1  u32 chunk, u32 chunks, float32 scale[chunks], u8 bits[ceil(n / 8)]
//                                                        8 + 4 chunks + ceil(n / 8) bytes
//          Entry i belongs to chunk i / chunk; chunks = ceil(n / chunk); 1 <= chunk <=
//          max(n, 1) (the encoder writes min(spec.chunk, n)). Bit i is bit (i % 8) of byte
//          i / 8: the IEEE sign bit of entry i (1 = negative, including -0.0); the unused high
//          bits of the last byte are 0. scale = mean |value| of the chunk, finite and >= 0;
//          entry i decodes to -scale if its bit is set, else +scale. The mean is the sum
//          over the chunk in a fixed order (32 lanes: lane j sums |entries| j, j + 32, j + 64,
//          ... of the chunk one after another from 0; then for h = 16, 8, 4, 2, 1, lane j < h
//          adds lane j + h), divided by the chunk's length, so that the CUDA encoder
//          (codec_cuda.h) produces the same bits.
//
// Decoding needs only the kind: DecodeAdd accepts any valid block of its kind, whatever the
// spec's ratio or chunk (those matter only to Encode), so a receiver can build its codec from
// the header's codec byte alone (CodecKindFromWire, then Codec::Create({kind})).
#ifndef SYNCLINE_COMPRESSION_CODEC_H_
#define SYNCLINE_COMPRESSION_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "syncline/options.h"

namespace syncline {

// CodecKind, CodecSpec and kMaxSign1Chunk are option types (syncline/options.h); their text
// forms ("topk:0.01", ParseCodec and CodecName) are job/options.h's.

// OK when the spec's kind is known and its ratio or chunk is in range.
absl::Status ValidateCodecSpec(const CodecSpec& spec);
// The kind for a header's codec byte; InvalidArgument for an unknown value.
absl::StatusOr<CodecKind> CodecKindFromWire(uint8_t byte);
// OK when `block` is a valid block of `kind` encoding n entries (what DecodeAdd accepts);
// otherwise InvalidArgument naming the problem. For checking a block that was decoded elsewhere
// (on a GPU).
absl::Status ValidateBlock(CodecKind kind, std::span<const std::byte> block, size_t n);
// Entries topk keeps of n: max(1, ceil(ratio * n)), at most n (0 when n = 0) and at most
// 2^32 - 1. The ceiling allows a relative 1e-12 of slack, so that 0.07 * 100 gives 7.
size_t TopKCount(double ratio, size_t n);

// A codec turns a dense float gradient of n entries into a compact block and back.
// Thread-safety: const methods are thread-safe (a codec holds only its spec).
class Codec {
 public:
  virtual ~Codec() = default;
  // Null when ValidateCodecSpec(spec) fails (e.g. an unknown kind from the wire).
  static std::unique_ptr<Codec> Create(const CodecSpec& spec);

  virtual const CodecSpec& spec() const = 0;
  // Replaces *block with the encoding of `values` (EncodedSize(values.size()) bytes). Reusing
  // one block vector across calls avoids reallocating and zero-filling it.
  virtual void Encode(std::span<const float> values, std::vector<std::byte>* block) const = 0;
  // Validates `block` as an encoding of exactly n = out.size() entries, then adds
  // scale * decoded values into `out`. A malformed block (wrong length; for topk an index out
  // of range, unsorted or repeated; for sign1 a zero or oversized chunk, a wrong chunk count, a
  // negative or non-finite scale, set padding bits) is InvalidArgument naming the problem and
  // leaves `out` untouched. topk touches only the K listed entries.
  virtual absl::Status DecodeAdd(std::span<const std::byte> block, std::span<float> out,
                                 float scale = 1.0f) const = 0;
  // Bytes Encode produces for n entries.
  virtual size_t EncodedSize(size_t n) const = 0;
};

// Error feedback: what the codec did not send is kept and added to the next gradient.
// One instance per (table, contiguous value range) on the worker; it holds n floats.
// Thread-compatible.
class ErrorFeedback {
 public:
  // Encodes p = gradient + residual into *block and sets residual = p - decode(block).
  // The residual has the size of the last gradient; a gradient of another size starts from a
  // zero residual. If the codec's own output does not decode (sign1 of a gradient holding
  // inf or NaN gives a non-finite scale), the whole of p stays in the residual.
  void Compress(const Codec& codec, std::span<const float> gradient, std::vector<std::byte>* block);
  std::span<const float> residual() const { return residual_; }
  // Restore from a checkpoint.
  void SetResidual(std::span<const float> residual) {
    residual_.assign(residual.begin(), residual.end());
  }
  void Reset() { residual_.clear(); }

 private:
  std::vector<float> residual_;
};

}  // namespace syncline

#endif  // SYNCLINE_COMPRESSION_CODEC_H_
