#include "compression/codec.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compression/cpu_kernels.h"
#include "compression/topk_select.h"
#include "compression/wire.h"

namespace syncline {
namespace {

using compression_internal::BestKernels;
using compression_internal::EncodedSizeFor;
using compression_internal::LoadF32;
using compression_internal::StoreF32;
using compression_internal::StoreU32;
using compression_internal::StoreU64;

class CodecBase : public Codec {
 public:
  explicit CodecBase(const CodecSpec& spec) : spec_(spec) {}
  const CodecSpec& spec() const final { return spec_; }
  size_t EncodedSize(size_t n) const final { return EncodedSizeFor(spec_, n); }

 protected:
  CodecSpec spec_;
};

class NoneCodec final : public CodecBase {
 public:
  using CodecBase::CodecBase;
  void Encode(std::span<const float> values, std::vector<std::byte>* block) const override {
    block->resize(EncodedSize(values.size()));
    if (!values.empty()) std::memcpy(block->data(), values.data(), values.size_bytes());
  }
  absl::Status DecodeAdd(std::span<const std::byte> block, std::span<float> out,
                         float scale) const override {
    absl::Status status = compression_internal::ValidateBlock(CodecKind::kNone, block, out.size());
    if (!status.ok()) return status;
    BestKernels().float_add(block.data(), out.size(), scale, out.data());
    return absl::OkStatus();
  }
};

class Fp16Codec final : public CodecBase {
 public:
  using CodecBase::CodecBase;
  void Encode(std::span<const float> values, std::vector<std::byte>* block) const override {
    block->resize(EncodedSize(values.size()));
    BestKernels().float_to_half(values.data(), values.size(), block->data());
  }
  absl::Status DecodeAdd(std::span<const std::byte> block, std::span<float> out,
                         float scale) const override {
    absl::Status status = compression_internal::ValidateBlock(CodecKind::kFp16, block, out.size());
    if (!status.ok()) return status;
    BestKernels().half_add(block.data(), out.size(), scale, out.data());
    return absl::OkStatus();
  }
};

class TopKCodec final : public CodecBase {
 public:
  using CodecBase::CodecBase;
  void Encode(std::span<const float> values, std::vector<std::byte>* block) const override {
    const size_t n = values.size();
    std::vector<uint64_t> indices;
    compression_internal::SelectTopK(values, TopKCount(spec_.ratio, n),
                                     compression_internal::TopKMethod::kSampled, &indices);
    const size_t k = indices.size();
    const size_t width = compression_internal::TopKIndexBytes(n);
    block->resize(EncodedSize(n));
    std::byte* p = block->data();
    StoreU32(p, static_cast<uint32_t>(k));
    std::byte* index_out = p + 4;
    std::byte* value_out = index_out + width * k;
    for (size_t i = 0; i < k; ++i) {
      if (width == 4) {
        StoreU32(index_out + 4 * i, static_cast<uint32_t>(indices[i]));
      } else {
        StoreU64(index_out + 8 * i, indices[i]);
      }
      StoreF32(value_out + 4 * i, values[indices[i]]);
    }
  }
  absl::Status DecodeAdd(std::span<const std::byte> block, std::span<float> out,
                         float scale) const override {
    absl::StatusOr<compression_internal::TopKView> view =
        compression_internal::ParseTopK(block, out.size());
    if (!view.ok()) return view.status();
    for (size_t i = 0; i < view->k; ++i) out[view->index(i)] += scale * view->value(i);
    return absl::OkStatus();
  }
};

class Sign1Codec final : public CodecBase {
 public:
  using CodecBase::CodecBase;
  void Encode(std::span<const float> values, std::vector<std::byte>* block) const override {
    const size_t n = values.size();
    const size_t chunk = compression_internal::Sign1Chunk(spec_.chunk, n);
    const size_t chunks = n / chunk + (n % chunk != 0);
    block->resize(EncodedSize(n));
    std::byte* p = block->data();
    StoreU32(p, static_cast<uint32_t>(chunk));
    StoreU32(p + 4, static_cast<uint32_t>(chunks));
    if (n > 0) BestKernels().sign1_encode(values.data(), n, chunk, p + 8, p + 8 + 4 * chunks);
  }
  absl::Status DecodeAdd(std::span<const std::byte> block, std::span<float> out,
                         float scale) const override {
    absl::StatusOr<compression_internal::Sign1View> view =
        compression_internal::ParseSign1(block, out.size());
    if (!view.ok()) return view.status();
    BestKernels().sign1_decode_add(view->scales, view->chunk, view->bits, out.size(), scale,
                                   out.data());
    return absl::OkStatus();
  }
};

}  // namespace

absl::Status ValidateCodecSpec(const CodecSpec& spec) {
  switch (spec.kind) {
    case CodecKind::kNone:
    case CodecKind::kFp16:
      return absl::OkStatus();
    case CodecKind::kTopK:
      if (!std::isfinite(spec.ratio) || spec.ratio <= 0 || spec.ratio > 1) {
        return absl::InvalidArgumentError(
            absl::StrFormat("topk ratio %g is not in (0, 1]", spec.ratio));
      }
      return absl::OkStatus();
    case CodecKind::kSign1:
      if (spec.chunk == 0 || spec.chunk > kMaxSign1Chunk) {
        return absl::InvalidArgumentError(
            absl::StrFormat("sign1 chunk %d is not in [1, %d]", spec.chunk, kMaxSign1Chunk));
      }
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown codec kind %d", static_cast<int>(spec.kind)));
}

absl::Status ValidateBlock(CodecKind kind, std::span<const std::byte> block, size_t n) {
  return compression_internal::ValidateBlock(kind, block, n);
}

absl::StatusOr<CodecKind> CodecKindFromWire(uint8_t byte) {
  if (byte > static_cast<uint8_t>(CodecKind::kFp16)) {
    return absl::InvalidArgumentError(absl::StrFormat("unknown codec byte %d", byte));
  }
  return static_cast<CodecKind>(byte);
}

size_t TopKCount(double ratio, size_t n) {
  if (n == 0) return 0;
  const double x = ratio * static_cast<double>(n) * (1 - 1e-12);
  if (!(x > 1)) return 1;
  const double limit = static_cast<double>(std::min<uint64_t>(n, 0xffffffffull));
  return static_cast<size_t>(std::min(std::ceil(x), limit));
}

std::unique_ptr<Codec> Codec::Create(const CodecSpec& spec) {
  if (!ValidateCodecSpec(spec).ok()) return nullptr;
  switch (spec.kind) {
    case CodecKind::kNone:
      return std::make_unique<NoneCodec>(spec);
    case CodecKind::kFp16:
      return std::make_unique<Fp16Codec>(spec);
    case CodecKind::kTopK:
      return std::make_unique<TopKCodec>(spec);
    case CodecKind::kSign1:
      return std::make_unique<Sign1Codec>(spec);
  }
  return nullptr;
}

void ErrorFeedback::Compress(const Codec& codec, std::span<const float> gradient,
                             std::vector<std::byte>* block) {
  if (residual_.size() != gradient.size()) residual_.assign(gradient.size(), 0.0f);
  BestKernels().float_add(reinterpret_cast<const std::byte*>(gradient.data()), gradient.size(),
                          1.0f, residual_.data());
  codec.Encode(residual_, block);
  // Subtracting the decoded block leaves exactly what was not sent (topk: zero at the sent
  // entries). A block that does not decode leaves the residual at gradient + residual.
  codec.DecodeAdd(*block, std::span<float>(residual_), -1.0f).IgnoreError();
}

}  // namespace syncline
