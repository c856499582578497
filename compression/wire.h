// Block layouts of the codecs (documented in codec.h): sizes, little-endian loads and stores,
// and the validation every decoder runs before it touches its output. Shared by the CPU codecs
// and the CUDA host code so that both accept exactly the same blocks.
#ifndef SYNCLINE_COMPRESSION_WIRE_H_
#define SYNCLINE_COMPRESSION_WIRE_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compression/codec.h"

namespace syncline::compression_internal {

// Blocks are little-endian; on such hosts loads and stores are plain (unaligned) copies.
static_assert(std::endian::native == std::endian::little, "codecs assume a little-endian host");

inline uint32_t LoadU32(const std::byte* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline uint64_t LoadU64(const std::byte* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline float LoadF32(const std::byte* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void StoreU32(std::byte* p, uint32_t v) { std::memcpy(p, &v, sizeof v); }
inline void StoreU64(std::byte* p, uint64_t v) { std::memcpy(p, &v, sizeof v); }
inline void StoreF32(std::byte* p, float v) { std::memcpy(p, &v, sizeof v); }

// Width of a topk index for n entries.
inline size_t TopKIndexBytes(size_t n) { return uint64_t{n} < (uint64_t{1} << 32) ? 4 : 8; }
// The chunk sign1's encoder writes for n entries: min(spec chunk, n), at least 1.
inline size_t Sign1Chunk(uint32_t spec_chunk, size_t n) {
  const size_t chunk = spec_chunk == 0 ? 1 : spec_chunk;
  return n == 0 ? 1 : (chunk < n ? chunk : n);
}

size_t EncodedSizeFor(const CodecSpec& spec, size_t n);

// A validated topk block: K strictly ascending indices < n, then K values.
struct TopKView {
  size_t k = 0;
  size_t index_bytes = 4;
  const std::byte* indices = nullptr;
  const std::byte* values = nullptr;
  uint64_t index(size_t i) const {
    return index_bytes == 4 ? LoadU32(indices + 4 * i) : LoadU64(indices + 8 * i);
  }
  float value(size_t i) const { return LoadF32(values + 4 * i); }
};
absl::StatusOr<TopKView> ParseTopK(std::span<const std::byte> block, size_t n);

// A validated sign1 block.
struct Sign1View {
  size_t chunk = 1;
  size_t chunks = 0;
  const std::byte* scales = nullptr;  // float32[chunks]
  const std::byte* bits = nullptr;    // ceil(n / 8) bytes
};
absl::StatusOr<Sign1View> ParseSign1(std::span<const std::byte> block, size_t n);

// Validates a block of any kind as an encoding of n entries.
absl::Status ValidateBlock(CodecKind kind, std::span<const std::byte> block, size_t n);

}  // namespace syncline::compression_internal

#endif  // SYNCLINE_COMPRESSION_WIRE_H_
