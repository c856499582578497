// The host executor of device/device_step.h: the device steps run serially on the CPU, with the
// same kernels, so that their index arithmetic and order are tested where there is no GPU. It
// sorts as the device's radix sort does (stable, on the low bits only), and, as the device's
// copy stream may, holds uploads back until the next Fence() or Finish(): a step that reads
// what it uploaded without a fence reads stale (poisoned) memory and fails. For tests.
//
// Thread-safety: thread-compatible.
#ifndef SYNCLINE_DEVICE_HOST_EXECUTOR_H_
#define SYNCLINE_DEVICE_HOST_EXECUTOR_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <span>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "compression/codec.h"
#include "device/device_step.h"
#include "models/gemm.h"

namespace syncline::device_step {

class HostExecutor {
 public:
  template <class T>
  class Array {
   public:
    T* data() { return v_.data(); }
    const T* data() const { return v_.data(); }
    // Grows to at least n; what it held is not kept (a device array's is not either), so the
    // new elements are poisoned to catch a step that reads what it never wrote.
    void Reserve(size_t n) {
      if (v_.size() < n) v_.assign(n, Poison());
    }

   private:
    static T Poison() {
      if constexpr (std::is_floating_point_v<T>) {
        return static_cast<T>(NAN);
      } else if constexpr (std::is_integral_v<T>) {
        return static_cast<T>(0xA5A5A5A5u);
      } else {
        // A struct of plain fields (a PieceSpan): every byte 0xA5.
        static_assert(std::is_trivially_copyable_v<T>);
        T t;
        std::memset(&t, 0xA5, sizeof(t));
        return t;
      }
    }
    std::vector<T> v_;
  };
  template <class T>
  using PinnedArray = Array<T>;

  // Error feedback over n floats of a gradient the steps wrote (DeviceModel's row encoder):
  // here the CPU codec and ErrorFeedback themselves, so a device model on this executor sends
  // the bytes a CPU worker sends.
  class FeedbackEncoder {
   public:
    static absl::StatusOr<std::unique_ptr<FeedbackEncoder>> Create(HostExecutor& /*e*/,
                                                                   const CodecSpec& spec,
                                                                   size_t n) {
      std::unique_ptr<Codec> codec = Codec::Create(spec);
      if (codec == nullptr) return absl::InvalidArgumentError("invalid codec for error feedback");
      return std::unique_ptr<FeedbackEncoder>(new FeedbackEncoder(std::move(codec), n));
    }
    size_t size() const { return n_; }
    // Encodes gradient[0, n) + the residual into *block, and zeroes the gradient.
    absl::Status Compress(float* gradient, std::vector<std::byte>* block) {
      feedback_.Compress(*codec_, std::span<const float>(gradient, n_), block);
      std::fill(gradient, gradient + n_, 0.0f);
      return absl::OkStatus();
    }
    // *values = gradient[0, n) + the residual; zeroes both.
    absl::Status Drain(float* gradient, std::vector<float>* values) {
      values->assign(gradient, gradient + n_);
      const std::span<const float> residual = feedback_.residual();
      for (size_t i = 0; i < residual.size() && i < n_; ++i) (*values)[i] += residual[i];
      std::fill(gradient, gradient + n_, 0.0f);
      feedback_.Reset();
      return absl::OkStatus();
    }
    // Empty until the first Compress or SetResidual.
    absl::StatusOr<std::vector<float>> Residual() const {
      return std::vector<float>(feedback_.residual().begin(), feedback_.residual().end());
    }
    absl::Status SetResidual(std::span<const float> residual) {
      feedback_.SetResidual(residual);
      return absl::OkStatus();
    }

   private:
    FeedbackEncoder(std::unique_ptr<Codec> codec, size_t n) : codec_(std::move(codec)), n_(n) {}
    std::unique_ptr<Codec> codec_;
    const size_t n_;
    ErrorFeedback feedback_;
  };

  // A codec over floats where the kernels run (DeviceRowFeedback's): here the CPU codec.
  class BlockCodec {
   public:
    static absl::StatusOr<std::unique_ptr<BlockCodec>> Create(HostExecutor& /*e*/,
                                                              const CodecSpec& spec) {
      std::unique_ptr<Codec> codec = Codec::Create(spec);
      if (codec == nullptr) return absl::InvalidArgumentError("invalid codec for sparse rows");
      return std::unique_ptr<BlockCodec>(new BlockCodec(std::move(codec)));
    }
    // Where Encode reads its n floats (what it held before is lost when it grows).
    absl::StatusOr<float*> Input(size_t n) {
      input_.Reserve(n);
      return input_.data();
    }
    // The block of Input()[0, n), on the host.
    absl::Status Encode(size_t n, std::vector<std::byte>* block) {
      codec_->Encode(std::span<const float>(input_.data(), n), block);
      block_ = *block;
      return absl::OkStatus();
    }
    // The last block decoded (added to zeros), where the kernels run.
    absl::StatusOr<const float*> Decode(size_t n) {
      decoded_.assign(n, 0.0f);
      if (auto s = codec_->DecodeAdd(block_, std::span<float>(decoded_)); !s.ok()) return s;
      return decoded_.data();
    }

    // `block` (from the host: a compressed pull's deltas) decoded as n floats added to zeros,
    // where the kernels run. InvalidArgument for a block that does not encode n floats.
    absl::StatusOr<const float*> DecodeBlock(std::span<const std::byte> block, size_t n) {
      if (auto s = ValidateBlock(codec_->spec().kind, block, n); !s.ok()) return s;
      decoded_.assign(n, 0.0f);
      if (auto s = codec_->DecodeAdd(block, std::span<float>(decoded_)); !s.ok()) return s;
      return decoded_.data();
    }

   private:
    explicit BlockCodec(std::unique_ptr<Codec> codec) : codec_(std::move(codec)) {}
    std::unique_ptr<Codec> codec_;
    Array<float> input_;
    std::vector<std::byte> block_;
    std::vector<float> decoded_;
  };

  template <class F>
  void ForEach(size_t n, const F& f) {
    ++launches_;
    for (size_t i = 0; i < n; ++i) f(i);
  }
  template <class T>
  void Upload(T* dst, const T* src, size_t n) {
    if (n == 0) return;
    const auto* bytes = reinterpret_cast<const char*>(src);
    uploads_.push_back(
        Pending{reinterpret_cast<char*>(dst), std::vector<char>(bytes, bytes + n * sizeof(T))});
  }
  void Fence() {
    for (const Pending& p : uploads_) std::memcpy(p.dst, p.bytes.data(), p.bytes.size());
    uploads_.clear();
  }
  template <class T>
  void Download(T* dst, const T* src, size_t n) {
    if (n > 0) std::memcpy(dst, src, n * sizeof(T));
  }
  template <class T>
  void Copy(T* dst, const T* src, size_t n) {
    if (n > 0) std::memcpy(dst, src, n * sizeof(T));
  }
  template <class T>
  void Zero(T* p, size_t n) {
    std::fill(p, p + n, T{0});
  }
  void Gemm(Transpose ta, Transpose tb, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) {
    syncline::Gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
  void SortBySlot(const uint32_t* slots, uint32_t* sorted, uint32_t* order, size_t n, int bits) {
    const uint32_t mask = bits >= 32 ? 0xFFFFFFFFu : (1u << bits) - 1;
    std::iota(order, order + n, 0u);
    std::stable_sort(order, order + n,
                     [&](uint32_t x, uint32_t y) { return (slots[x] & mask) < (slots[y] & mask); });
    for (size_t i = 0; i < n; ++i) sorted[i] = slots[order[i]];
  }
  void ExclusiveSum(const uint32_t* in, uint32_t* out, size_t n) {
    std::exclusive_scan(in, in + n, out, 0u);
  }
  // Every key must be below 2^bits (the device's radix sort looks at those bits only).
  void SortByKey64(const uint64_t* keys, uint32_t* order, size_t n, int /*bits*/ = 64) {
    std::iota(order, order + n, 0u);
    std::stable_sort(order, order + n, [&](uint32_t x, uint32_t y) { return keys[x] < keys[y]; });
  }
  size_t SortUnique(const uint64_t* ids, size_t n, uint64_t* out) {
    std::copy(ids, ids + n, out);
    std::sort(out, out + n);
    return static_cast<size_t>(std::unique(out, out + n) - out);
  }
  void Finish() { Fence(); }
  void Activate() {}
  // Device memory free for a model's arrays: the host's is not counted.
  size_t FreeBytes() const { return std::numeric_limits<size_t>::max(); }
  // Phase marks, for the device's copy times: the host copies nothing.
  void MarkUploadsBegin() {}
  void MarkUploadsEnd() {}
  void MarkDownloadsBegin() {}
  void MarkDownloadsEnd() {}
  absl::Duration UploadTime() const { return absl::ZeroDuration(); }
  absl::Duration DownloadTime() const { return absl::ZeroDuration(); }

  int launches() const { return launches_; }

 private:
  struct Pending {
    char* dst;
    std::vector<char> bytes;
  };
  int launches_ = 0;
  std::vector<Pending> uploads_;  // until the next Fence()
};

}  // namespace syncline::device_step

#endif  // SYNCLINE_DEVICE_HOST_EXECUTOR_H_
