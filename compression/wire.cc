#include "compression/wire.h"

#include "absl/strings/str_format.h"

namespace syncline::compression_internal {
namespace {

size_t CeilDiv(size_t a, size_t b) { return a / b + (a % b != 0); }

}  // namespace

size_t EncodedSizeFor(const CodecSpec& spec, size_t n) {
  switch (spec.kind) {
    case CodecKind::kNone:
      return 4 * n;
    case CodecKind::kFp16:
      return 2 * n;
    case CodecKind::kTopK:
      return 4 + TopKCount(spec.ratio, n) * (TopKIndexBytes(n) + 4);
    case CodecKind::kSign1: {
      const size_t chunk = Sign1Chunk(spec.chunk, n);
      return 8 + 4 * CeilDiv(n, chunk) + CeilDiv(n, 8);
    }
  }
  return 0;
}

absl::StatusOr<TopKView> ParseTopK(std::span<const std::byte> block, size_t n) {
  if (block.size() < 4) {
    return absl::InvalidArgumentError(
        absl::StrFormat("topk block of %d bytes is shorter than its 4-byte header", block.size()));
  }
  TopKView view;
  view.k = LoadU32(block.data());
  view.index_bytes = TopKIndexBytes(n);
  if (view.k > n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("topk block lists K = %d entries of n = %d", view.k, n));
  }
  const uint64_t expected = 4 + uint64_t{view.k} * (view.index_bytes + 4);
  if (block.size() != expected) {
    return absl::InvalidArgumentError(
        absl::StrFormat("topk block of %d bytes, expected %d for K = %d and n = %d", block.size(),
                        expected, view.k, n));
  }
  view.indices = block.data() + 4;
  view.values = view.indices + view.k * view.index_bytes;
  uint64_t previous = 0;
  for (size_t i = 0; i < view.k; ++i) {
    const uint64_t index = view.index(i);
    if (index >= n) {
      return absl::InvalidArgumentError(
          absl::StrFormat("topk index %d at position %d is out of range for n = %d", index, i, n));
    }
    if (i > 0 && index <= previous) {
      return absl::InvalidArgumentError(
          absl::StrFormat("topk indices are not strictly ascending at position %d (%d after %d)", i,
                          index, previous));
    }
    previous = index;
  }
  return view;
}

absl::StatusOr<Sign1View> ParseSign1(std::span<const std::byte> block, size_t n) {
  if (block.size() < 8) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sign1 block of %d bytes is shorter than its 8-byte header", block.size()));
  }
  Sign1View view;
  view.chunk = LoadU32(block.data());
  view.chunks = LoadU32(block.data() + 4);
  if (view.chunk == 0) return absl::InvalidArgumentError("sign1 chunk size is 0");
  if (view.chunk > (n == 0 ? 1 : n)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sign1 chunk size %d exceeds n = %d", view.chunk, n));
  }
  const size_t expected_chunks = CeilDiv(n, view.chunk);
  if (view.chunks != expected_chunks) {
    return absl::InvalidArgumentError(
        absl::StrFormat("sign1 block has %d chunks, expected %d for n = %d and chunk size %d",
                        view.chunks, expected_chunks, n, view.chunk));
  }
  const uint64_t expected = 8 + 4 * uint64_t{view.chunks} + CeilDiv(n, 8);
  if (block.size() != expected) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "sign1 block of %d bytes, expected %d for n = %d", block.size(), expected, n));
  }
  view.scales = block.data() + 8;
  view.bits = view.scales + 4 * view.chunks;
  for (size_t c = 0; c < view.chunks; ++c) {
    const uint32_t bits = LoadU32(view.scales + 4 * c);
    const bool non_finite = (bits & 0x7f800000u) == 0x7f800000u;
    const bool negative = (bits >> 31) != 0 && bits != 0x80000000u;  // -0.0 is allowed
    if (non_finite || negative) {
      return absl::InvalidArgumentError(
          absl::StrFormat("sign1 scale %g of chunk %d is not a finite value >= 0",
                          LoadF32(view.scales + 4 * c), c));
    }
  }
  if (n % 8 != 0) {
    const auto last = static_cast<uint8_t>(view.bits[n / 8]);
    if ((last >> (n % 8)) != 0) {
      return absl::InvalidArgumentError("sign1 block has padding bits set after entry n - 1");
    }
  }
  return view;
}

absl::Status ValidateBlock(CodecKind kind, std::span<const std::byte> block, size_t n) {
  switch (kind) {
    case CodecKind::kNone:
    case CodecKind::kFp16: {
      const size_t width = kind == CodecKind::kNone ? 4 : 2;
      if (block.size() / width != n || block.size() % width != 0) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "%s block of %d bytes, expected %d for n = %d",
            kind == CodecKind::kNone ? "none" : "fp16", block.size(), width * n, n));
      }
      return absl::OkStatus();
    }
    case CodecKind::kTopK:
      return ParseTopK(block, n).status();
    case CodecKind::kSign1:
      return ParseSign1(block, n).status();
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown codec kind %d", static_cast<int>(kind)));
}

}  // namespace syncline::compression_internal
