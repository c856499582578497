// The CUDA executor of device/device_step.h (see there for what an executor provides).
//
// Uploads go on a copy stream of their own, kernels and downloads on the compute stream, and
// Fence() makes the compute stream wait for the uploads issued so far: a step uploads its batch,
// fences, and indexes the batch while the pulled rows and the dense table are still on their way
// up. Events on the copy stream time the uploads, on the compute stream the downloads (the
// per-step time split). Kernels are grid-stride loops over the device_step functors;
// matrix products go to cuBLAS in plain FP32 (TF32 would break the 1e-4 agreement with the CPU
// models), sorts and unique passes to CUB. Every entry point of a model calls Activate() first,
// so that a model made on one thread may be called from another (the current device is the
// thread's).
//
// A CUDA error in the middle of a step (a lost device, memory exhausted) leaves nothing to
// train with: the process stops at once with the error named, and the job's recovery
// (restarts, checkpoints) takes over as for any worker that dies.
//
// Only for .cu files (device/cuda_model.cu, bench/gpu_kernels_bench.cu).
//
// Thread-safety: thread-compatible; copies of an executor share its stream.
#ifndef SYNCLINE_DEVICE_CUDA_EXECUTOR_CUH_
#define SYNCLINE_DEVICE_CUDA_EXECUTOR_CUH_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "compression/codec_cuda.h"
#include "device/device_step.h"
#include "models/gemm.h"

namespace syncline::cuda_executor {

[[noreturn]] inline void Die(const char* what, const char* why) {
  std::fprintf(stderr, "syncline GPU model: %s failed: %s\n", what, why);
  std::fflush(stderr);
  std::abort();
}

inline void Check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) Die(what, cudaGetErrorString(error));
}

inline void Check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) Die(what, cublasGetStatusString(status));
}

template <class F>
__global__ void ForEachKernel(F f, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    f(i);
  }
}

// out[i] = i.
struct Iota {
  uint32_t* out;
  __device__ void operator()(size_t i) const { out[i] = static_cast<uint32_t>(i); }
};

// p = residual + gradient into both the codec's input (to encode) and its output (the residual
// once the block is subtracted); the gradient starts again from zero.
struct AddResidual {
  float* gradient;
  float* input;
  float* residual;
  __device__ void operator()(size_t i) const {
    const float p = residual[i] + gradient[i];
    input[i] = p;
    residual[i] = p;
    gradient[i] = 0.0f;
  }
};

inline constexpr int kThreads = 256;
// Enough blocks to fill an H200 (132 SMs) several times over; the loops stride past it.
inline constexpr size_t kMaxBlocks = 132 * 32;

inline size_t Blocks(size_t n) { return std::min(kMaxBlocks, (n + kThreads - 1) / kThreads); }

// What the executor's copies share: a device, the compute and copy streams, cuBLAS, CUB's
// scratch, the fence and phase events.
struct CudaState {
  explicit CudaState(int device_ordinal) : device(device_ordinal) {
    Check(cudaSetDevice(device), "cudaSetDevice");
    Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    Check(cudaStreamCreateWithFlags(&copy, cudaStreamNonBlocking), "cudaStreamCreate");
    Check(cudaEventCreateWithFlags(&uploaded, cudaEventDisableTiming), "cudaEventCreate");
    Check(cublasCreate(&blas), "cublasCreate");
    Check(cublasSetStream(blas, stream), "cublasSetStream");
    // Plain FP32 (the default keeps SGEMM off TF32, which would break the 1e-4 agreement with
    // the CPU models; pedantic mode would also rule out faster FP32 algorithms).
    Check(cublasSetMathMode(blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    for (cudaEvent_t& e : marks) Check(cudaEventCreate(&e), "cudaEventCreate");
    Check(cudaMalloc(&selected, sizeof(int64_t)), "cudaMalloc");
  }
  ~CudaState() {
    // Errors at teardown have no one left to tell.
    cudaStreamSynchronize(copy);
    cudaStreamSynchronize(stream);
    cudaFree(scratch);
    cudaFree(selected);
    cudaFree(iota);
    for (cudaEvent_t e : marks) cudaEventDestroy(e);
    cudaEventDestroy(uploaded);
    cublasDestroy(blas);
    cudaStreamDestroy(copy);
    cudaStreamDestroy(stream);
  }
  CudaState(const CudaState&) = delete;
  CudaState& operator=(const CudaState&) = delete;

  void* Scratch(size_t bytes) {
    if (bytes > scratch_bytes) {
      Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      cudaFree(scratch);
      scratch = nullptr;
      Check(cudaMalloc(&scratch, bytes), "cudaMalloc (CUB scratch)");
      scratch_bytes = bytes;
    }
    return scratch;
  }

  const int device;
  cudaStream_t stream = nullptr;  // kernels, downloads
  cudaStream_t copy = nullptr;    // uploads
  cublasHandle_t blas = nullptr;
  cudaEvent_t uploaded = nullptr;  // Fence()'s
  // Uploads begin, uploads end (copy stream); downloads begin, downloads end (compute stream).
  cudaEvent_t marks[4] = {};
  void* scratch = nullptr;
  size_t scratch_bytes = 0;
  int64_t* selected = nullptr;  // DeviceSelect's count
  uint32_t* iota = nullptr;     // 0, 1, 2, ...: the values SortBySlot sorts
  size_t iota_size = 0;
};

class CudaExecutor {
 public:
  explicit CudaExecutor(int device) : s_(std::make_shared<CudaState>(device)) {}

  // Grow-only storage, on the device (Array) or in pinned host memory (PinnedArray). Growing
  // drops the contents; work still queued may use the old memory, so the device finishes it
  // first (growing is rare: buffers are kept across steps).
  template <class T, bool kPinned>
  class Buffer {
   public:
    Buffer() = default;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;
    Buffer(Buffer&& other) noexcept
        : p_(std::exchange(other.p_, nullptr)), size_(std::exchange(other.size_, 0)) {}
    Buffer& operator=(Buffer&& other) noexcept {
      std::swap(p_, other.p_);
      std::swap(size_, other.size_);
      return *this;
    }
    ~Buffer() { Free(); }
    T* data() { return p_; }
    const T* data() const { return p_; }
    void Reserve(size_t n) {
      if (n <= size_) return;
      if (p_ != nullptr) {
        Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        Free();
      }
      p_ = nullptr;
      size_ = 0;
      if constexpr (kPinned) {
        Check(cudaMallocHost(&p_, n * sizeof(T)), "cudaMallocHost");
      } else {
        Check(cudaMalloc(&p_, n * sizeof(T)), "cudaMalloc");
      }
      size_ = n;
    }

   private:
    void Free() {
      if constexpr (kPinned) {
        cudaFreeHost(p_);
      } else {
        cudaFree(p_);
      }
    }
    T* p_ = nullptr;
    size_t size_ = 0;
  };
  template <class T>
  using Array = Buffer<T, false>;
  template <class T>
  using PinnedArray = Buffer<T, true>;

  // Error feedback over n floats of a gradient on the device (DeviceModel's row encoder), with
  // the CUDA codecs (compression/codec_cuda.h, the CPU codecs' bytes): the residual lives in
  // the codec's output buffer, p = residual + gradient goes to its input, and only the block
  // comes down. Made with the executor's device current; `e` must outlive it.
  class FeedbackEncoder {
   public:
    static absl::StatusOr<std::unique_ptr<FeedbackEncoder>> Create(CudaExecutor& e,
                                                                   const CodecSpec& spec,
                                                                   size_t n) {
      absl::StatusOr<std::unique_ptr<CudaCodec>> codec = CudaCodec::Create(spec, n);
      if (!codec.ok()) return codec.status();
      std::unique_ptr<FeedbackEncoder> encoder(new FeedbackEncoder(&e, std::move(*codec), n));
      if (auto s = encoder->SetResidual({}); !s.ok()) return s;
      return encoder;
    }
    size_t size() const { return n_; }
    // Encodes gradient[0, n) (device) + the residual into *block, and zeroes the gradient.
    absl::Status Compress(float* gradient, std::vector<std::byte>* block) {
      e_->ForEach(n_, AddResidual{gradient, codec_->device_input(), codec_->device_output()});
      e_->Finish();
      held_ = true;
      if (auto s = codec_->EncodeOnDevice(n_); !s.ok()) return s;
      if (auto s = codec_->DownloadBlock(block); !s.ok()) return s;
      // A block that does not decode (sign1 of a non-finite gradient) leaves all of p in the
      // residual, as ErrorFeedback does: the host checks the block it now has, and the device
      // decodes the copy it kept.
      if (!ValidateBlock(codec_->spec().kind, *block, n_).ok()) return absl::OkStatus();
      return codec_->DecodeAddOnDevice(n_, -1.0f);
    }
    // *values = gradient[0, n) + the residual; zeroes both.
    absl::Status Drain(float* gradient, std::vector<float>* values) {
      e_->ForEach(n_, AddResidual{gradient, codec_->device_input(), codec_->device_output()});
      e_->Finish();
      values->resize(n_);
      if (auto s = codec_->DownloadOutput(*values); !s.ok()) return s;
      return SetResidual({});
    }
    // Empty until the first Compress or SetResidual, as ErrorFeedback's.
    absl::StatusOr<std::vector<float>> Residual() const {
      if (!held_) return std::vector<float>();
      std::vector<float> residual(n_);
      if (auto s = codec_->DownloadOutput(residual); !s.ok()) return s;
      return residual;
    }
    // Empty: none (zeros).
    absl::Status SetResidual(std::span<const float> residual) {
      held_ = !residual.empty();
      if (residual.empty()) return codec_->UploadOutput(std::vector<float>(n_, 0.0f));
      return codec_->UploadOutput(residual);
    }

   private:
    FeedbackEncoder(CudaExecutor* e, std::unique_ptr<CudaCodec> codec, size_t n)
        : e_(e), codec_(std::move(codec)), n_(n) {}
    CudaExecutor* e_;
    std::unique_ptr<CudaCodec> codec_;
    const size_t n_;
    bool held_ = false;
  };

  // A codec over floats on the device (DeviceRowFeedback's), with the CUDA codecs: its input
  // and decoded output are the CudaCodec's buffers, grown (a new codec) when a push is larger.
  // The codec works on a stream of its own: the executor's work is finished before it starts,
  // and its calls return when done.
  class BlockCodec {
   public:
    static absl::StatusOr<std::unique_ptr<BlockCodec>> Create(CudaExecutor& e,
                                                              const CodecSpec& spec) {
      std::unique_ptr<BlockCodec> codec(new BlockCodec(&e, spec));
      if (auto s = codec->Grow(kInitialCapacity); !s.ok()) return s;
      return codec;
    }
    absl::StatusOr<float*> Input(size_t n) {
      if (n > codec_->capacity()) {
        if (auto s = Grow(std::max(n, 2 * codec_->capacity())); !s.ok()) return s;
      }
      return codec_->device_input();
    }
    absl::Status Encode(size_t n, std::vector<std::byte>* block) {
      e_->Finish();
      if (auto s = codec_->EncodeOnDevice(n); !s.ok()) return s;
      return codec_->DownloadBlock(block);
    }
    absl::StatusOr<const float*> Decode(size_t n) {
      e_->Zero(codec_->device_output(), n);
      e_->Finish();
      if (auto s = codec_->DecodeAddOnDevice(n, 1.0f); !s.ok()) return s;
      return codec_->device_output();
    }

    absl::StatusOr<const float*> DecodeBlock(std::span<const std::byte> block, size_t n) {
      if (n > codec_->capacity()) {
        if (auto s = Grow(std::max(n, 2 * codec_->capacity())); !s.ok()) return s;
      }
      e_->Zero(codec_->device_output(), n);
      e_->Finish();
      if (auto s = codec_->UploadBlock(block, n); !s.ok()) return s;
      if (auto s = codec_->DecodeAddOnDevice(n, 1.0f); !s.ok()) return s;
      return codec_->device_output();
    }

   private:
    static constexpr size_t kInitialCapacity = size_t{1} << 16;
    BlockCodec(CudaExecutor* e, const CodecSpec& spec) : e_(e), spec_(spec) {}
    // The old codec stays until the new one is made: a failed growth leaves it usable.
    absl::Status Grow(size_t capacity) {
      absl::StatusOr<std::unique_ptr<CudaCodec>> codec = CudaCodec::Create(spec_, capacity);
      if (!codec.ok()) return codec.status();
      e_->Finish();
      codec_ = std::move(*codec);
      return absl::OkStatus();
    }
    CudaExecutor* e_;
    const CodecSpec spec_;
    std::unique_ptr<CudaCodec> codec_;
  };

  template <class F>
  void ForEach(size_t n, const F& f) {
    if (n == 0) return;
    ForEachKernel<<<Blocks(n), kThreads, 0, s_->stream>>>(f, n);
    Check(cudaGetLastError(), "kernel launch");
  }

  // On the copy stream: kernels see it after the next Fence() (or Finish()).
  template <class T>
  void Upload(T* dst, const T* src, size_t n) {
    if (n == 0) return;
    Check(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyHostToDevice, s_->copy),
          "cudaMemcpyAsync (upload)");
  }
  // Work issued after this waits for the uploads issued before it.
  void Fence() {
    Check(cudaEventRecord(s_->uploaded, s_->copy), "cudaEventRecord");
    Check(cudaStreamWaitEvent(s_->stream, s_->uploaded, 0), "cudaStreamWaitEvent");
  }
  template <class T>
  void Download(T* dst, const T* src, size_t n) {
    if (n == 0) return;
    Check(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToHost, s_->stream),
          "cudaMemcpyAsync (download)");
  }
  template <class T>
  void Copy(T* dst, const T* src, size_t n) {
    if (n == 0) return;
    Check(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToDevice, s_->stream),
          "cudaMemcpyAsync (device to device)");
  }
  template <class T>
  void Zero(T* p, size_t n) {
    if (n == 0) return;
    Check(cudaMemsetAsync(p, 0, n * sizeof(T), s_->stream), "cudaMemsetAsync");
  }

  // Row-major C = alpha op(A) op(B) + beta C is column-major C^T = alpha op(B)^T op(A)^T +
  // beta C^T: cuBLAS gets the operands swapped, each with its own transpose flag.
  void Gemm(Transpose ta, Transpose tb, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) {
    if (m == 0 || n == 0) return;
    if (k == 0 && beta == 0 && ldc == n) {
      Zero(c, static_cast<size_t>(m) * n);
      return;
    }
    const cublasOperation_t op_a = ta == Transpose::kYes ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = tb == Transpose::kYes ? CUBLAS_OP_T : CUBLAS_OP_N;
    Check(cublasSgemm(s_->blas, op_b, op_a, n, m, k, &alpha, b, ldb, a, lda, &beta, c, ldc),
          "cublasSgemm");
  }

  void SortBySlot(const uint32_t* slots, uint32_t* sorted, uint32_t* order, size_t n, int bits) {
    if (n == 0) return;
    CheckCount(n);
    EnsureIota(n);
    size_t bytes = 0;
    const int count = static_cast<int>(n);
    Check(cub::DeviceRadixSort::SortPairs(nullptr, bytes, slots, sorted, s_->iota, order, count, 0,
                                          bits, s_->stream),
          "cub::DeviceRadixSort::SortPairs (size)");
    Check(cub::DeviceRadixSort::SortPairs(s_->Scratch(bytes), bytes, slots, sorted, s_->iota, order,
                                          count, 0, bits, s_->stream),
          "cub::DeviceRadixSort::SortPairs");
  }

  // A stable radix sort of the indices by 64-bit key, every key below 2^bits (the sorted keys go
  // to scratch).
  void SortByKey64(const uint64_t* keys, uint32_t* order, size_t n, int bits = 64) {
    if (n == 0) return;
    CheckCount(n);
    EnsureIota(n);
    size_t bytes = 0;
    const int count = static_cast<int>(n);
    Check(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys, static_cast<uint64_t*>(nullptr),
                                          s_->iota, order, count, 0, bits, s_->stream),
          "cub::DeviceRadixSort::SortPairs (size, 64-bit keys)");
    const size_t sorted_bytes = (n * sizeof(uint64_t) + 255) / 256 * 256;
    char* scratch = static_cast<char*>(s_->Scratch(sorted_bytes + bytes));
    Check(cub::DeviceRadixSort::SortPairs(scratch + sorted_bytes, bytes, keys,
                                          reinterpret_cast<uint64_t*>(scratch), s_->iota, order,
                                          count, 0, bits, s_->stream),
          "cub::DeviceRadixSort::SortPairs (64-bit keys)");
  }

  void ExclusiveSum(const uint32_t* in, uint32_t* out, size_t n) {
    if (n == 0) return;
    CheckCount(n);
    size_t bytes = 0;
    const int count = static_cast<int>(n);
    Check(cub::DeviceScan::ExclusiveSum(nullptr, bytes, in, out, count, s_->stream),
          "cub::DeviceScan::ExclusiveSum (size)");
    Check(cub::DeviceScan::ExclusiveSum(s_->Scratch(bytes), bytes, in, out, count, s_->stream),
          "cub::DeviceScan::ExclusiveSum");
  }

  // Sorts ids into out, then moves the unique ones to the front of `out`... CUB's unique pass
  // cannot run in place, so the sorted ids go to scratch first.
  size_t SortUnique(const uint64_t* ids, size_t n, uint64_t* out) {
    if (n == 0) return 0;
    CheckCount(n);
    const int count = static_cast<int>(n);
    size_t sort_bytes = 0, unique_bytes = 0;
    Check(cub::DeviceRadixSort::SortKeys(nullptr, sort_bytes, ids, out, count, 0, 64, s_->stream),
          "cub::DeviceRadixSort::SortKeys (size)");
    Check(
        cub::DeviceSelect::Unique(nullptr, unique_bytes, out, out, s_->selected, count, s_->stream),
        "cub::DeviceSelect::Unique (size)");
    // Scratch: the sorted ids, then CUB's temporary storage (aligned).
    const size_t sorted_bytes = (n * sizeof(uint64_t) + 255) / 256 * 256;
    char* scratch =
        static_cast<char*>(s_->Scratch(sorted_bytes + std::max(sort_bytes, unique_bytes)));
    uint64_t* sorted = reinterpret_cast<uint64_t*>(scratch);
    void* temp = scratch + sorted_bytes;
    Check(cub::DeviceRadixSort::SortKeys(temp, sort_bytes, ids, sorted, count, 0, 64, s_->stream),
          "cub::DeviceRadixSort::SortKeys");
    Check(
        cub::DeviceSelect::Unique(temp, unique_bytes, sorted, out, s_->selected, count, s_->stream),
        "cub::DeviceSelect::Unique");
    int64_t selected = 0;
    Download(&selected, s_->selected, 1);
    Finish();
    return static_cast<size_t>(selected);
  }

  void Finish() {
    Check(cudaStreamSynchronize(s_->copy), "cudaStreamSynchronize (copies)");
    Check(cudaStreamSynchronize(s_->stream), "cudaStreamSynchronize");
  }
  // Makes the executor's device the calling thread's current one.
  void Activate() { Check(cudaSetDevice(s_->device), "cudaSetDevice"); }

  // The stream the executor's work goes to (benchmarks time it with events).
  cudaStream_t stream() const { return s_->stream; }
  cublasHandle_t blas() const { return s_->blas; }

  // The device's free memory now (0 when it cannot be read).
  size_t FreeBytes() const {
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) return 0;
    return free;
  }
  void MarkUploadsBegin() { Record(0, s_->copy); }
  void MarkUploadsEnd() { Record(1, s_->copy); }
  void MarkDownloadsBegin() { Record(2, s_->stream); }
  void MarkDownloadsEnd() { Record(3, s_->stream); }
  // The marked phases of the last step (after its Finish).
  absl::Duration UploadTime() const { return Elapsed(0, 1); }
  absl::Duration DownloadTime() const { return Elapsed(2, 3); }

 private:
  void Record(int mark, cudaStream_t on) {
    Check(cudaEventRecord(s_->marks[mark], on), "cudaEventRecord");
  }
  absl::Duration Elapsed(int from, int to) const {
    float ms = 0;
    Check(cudaEventElapsedTime(&ms, s_->marks[from], s_->marks[to]), "cudaEventElapsedTime");
    return absl::Microseconds(static_cast<int64_t>(ms * 1000.0f));
  }
  // s_->iota holds 0, 1, ..., n - 1 at least.
  void EnsureIota(size_t n) {
    if (s_->iota_size >= n) return;
    Check(cudaStreamSynchronize(s_->stream), "cudaStreamSynchronize");
    cudaFree(s_->iota);
    s_->iota = nullptr;
    Check(cudaMalloc(&s_->iota, n * sizeof(uint32_t)), "cudaMalloc");
    s_->iota_size = n;
    ForEach(n, Iota{s_->iota});
  }
  static void CheckCount(size_t n) {
    if (n > static_cast<size_t>(std::numeric_limits<int>::max())) {
      Die("a sort or scan", "more than 2^31 items (features of a batch, or test examples)");
    }
  }

  std::shared_ptr<CudaState> s_;
};

}  // namespace syncline::cuda_executor

#endif  // SYNCLINE_DEVICE_CUDA_EXECUTOR_CUH_
