#include "compression/codec_cuda.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <utility>

#include "absl/strings/str_format.h"
#include "compression/cuda_kernels.h"
#include "compression/wire.h"

namespace syncline {
namespace {

namespace ci = compression_internal;
namespace cu = cuda_internal;

absl::Status CudaError(cudaError_t error, const char* what) {
  return absl::InternalError(absl::StrFormat("%s: %s", what, cudaGetErrorString(error)));
}

#define SYNCLINE_CUDA_RETURN_IF_ERROR(expr)         \
  do {                                              \
    const cudaError_t syncline_cuda_error = (expr); \
    if (syncline_cuda_error != cudaSuccess) {       \
      return CudaError(syncline_cuda_error, #expr); \
    }                                               \
  } while (false)

#define SYNCLINE_RETURN_IF_ERROR(expr)                 \
  do {                                                 \
    const absl::Status syncline_status = (expr);       \
    if (!syncline_status.ok()) return syncline_status; \
  } while (false)

// Device memory that frees itself.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  ~DeviceArray() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  // Makes room for at least `count` elements (the contents are lost when it grows).
  absl::Status Reserve(size_t count) {
    if (count <= size_ && data_ != nullptr) return absl::OkStatus();
    if (data_ != nullptr) cudaFree(data_);
    data_ = nullptr;
    size_ = 0;
    void* memory = nullptr;
    SYNCLINE_CUDA_RETURN_IF_ERROR(cudaMalloc(&memory, std::max<size_t>(count, 1) * sizeof(T)));
    data_ = static_cast<T*>(memory);
    size_ = count;
    return absl::OkStatus();
  }
  T* get() const { return data_; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

size_t Tiles(size_t n) { return (n + cu::kTopKTile - 1) / cu::kTopKTile; }

}  // namespace

bool CudaAvailable() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

struct CudaCodec::Impl {
  CodecSpec spec;
  size_t capacity = 0;
  int histogram_blocks = 0;
  cudaStream_t stream = nullptr;
  DeviceArray<float> input, output;
  DeviceArray<std::byte> block;
  DeviceArray<uint32_t> histogram, counts;
  DeviceArray<unsigned long long> offsets;
  DeviceArray<cu::TopKSelect> select;
  // top-K: the whole selection as one CUDA graph for inputs of topk_graph_n values (its
  // launches cost more than its kernels below tens of MiB), and where it leaves its result.
  cudaGraphExec_t topk_graph = nullptr;
  size_t topk_graph_n = 0;
  cu::TopKSelect* found = nullptr;  // pinned host memory
  size_t last_topk_n = 0;           // the input size of the last top-K encoding
  // What the device block holds.
  size_t block_bytes = 0;
  size_t block_n = std::numeric_limits<size_t>::max();
  size_t block_chunk = 1;  // sign1
  size_t block_k = 0;      // topk
  uint32_t header[2] = {0, 0};

  ~Impl() {
    if (topk_graph != nullptr) cudaGraphExecDestroy(topk_graph);
    if (found != nullptr) cudaFreeHost(found);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  absl::Status Sync() {
    SYNCLINE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    return absl::OkStatus();
  }

  // Copies host values into one of the device buffers and waits.
  absl::Status Upload(float* device, std::span<const float> values) {
    if (values.size() > capacity) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%d values exceed the CudaCodec's capacity %d", values.size(), capacity));
    }
    SYNCLINE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device, values.data(), values.size_bytes(),
                                                  cudaMemcpyHostToDevice, stream));
    return Sync();
  }

  absl::Status WriteHeader(size_t words) {
    SYNCLINE_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(block.get(), header, words * 4, cudaMemcpyHostToDevice, stream));
    return absl::OkStatus();
  }

  // Enqueues the selection of the k largest of input[0, n) and the top-k block's entries, then
  // the copy of `select` into *found. Every step runs on the device, reading what the previous
  // one found from `select`.
  absl::Status EnqueueTopK(size_t n, size_t k) {
    SYNCLINE_CUDA_RETURN_IF_ERROR(cu::LaunchTopKStart(select.get(), k, stream));
    for (int pass = 0; pass < cu::kRadixPasses; ++pass) {
      const int bits = cu::kRadixBits[pass];
      const int shift = cu::kRadixShift[pass];
      SYNCLINE_CUDA_RETURN_IF_ERROR(
          cudaMemsetAsync(histogram.get(), 0, (size_t{1} << bits) * sizeof(uint32_t), stream));
      SYNCLINE_CUDA_RETURN_IF_ERROR(cu::LaunchKeyHistogram(
          input.get(), n, select.get(), shift, bits, histogram.get(), histogram_blocks, stream));
      SYNCLINE_CUDA_RETURN_IF_ERROR(
          cu::LaunchSelectDigit(histogram.get(), shift, bits, select.get(), stream));
    }
    SYNCLINE_CUDA_RETURN_IF_ERROR(
        cu::LaunchCountAroundCut(input.get(), n, select.get(), counts.get(), stream));
    SYNCLINE_CUDA_RETURN_IF_ERROR(
        cu::LaunchTileOffsets(counts.get(), Tiles(n), k, select.get(), offsets.get(), stream));
    auto* indices = reinterpret_cast<uint32_t*>(block.get() + 4);
    auto* values = reinterpret_cast<float*>(block.get() + 4 + 4 * k);
    SYNCLINE_CUDA_RETURN_IF_ERROR(cu::LaunchCompactAroundCut(
        input.get(), n, select.get(), offsets.get(), k, indices, values, stream));
    SYNCLINE_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(found, select.get(), sizeof(*found), cudaMemcpyDeviceToHost, stream));
    return absl::OkStatus();
  }

  // Captures EnqueueTopK(n, k) into topk_graph, unless it holds that already.
  absl::Status PrepareTopKGraph(size_t n, size_t k) {
    if (topk_graph != nullptr && topk_graph_n == n) return absl::OkStatus();
    if (topk_graph != nullptr) cudaGraphExecDestroy(topk_graph);
    topk_graph = nullptr;
    SYNCLINE_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    const absl::Status enqueued = EnqueueTopK(n, k);
    cudaGraph_t graph = nullptr;
    const cudaError_t captured = cudaStreamEndCapture(stream, &graph);
    if (!enqueued.ok()) {
      if (graph != nullptr) cudaGraphDestroy(graph);
      return enqueued;
    }
    SYNCLINE_CUDA_RETURN_IF_ERROR(captured);
    const cudaError_t instantiated = cudaGraphInstantiate(&topk_graph, graph, 0);
    cudaGraphDestroy(graph);
    if (instantiated != cudaSuccess) {
      topk_graph = nullptr;
      return CudaError(instantiated, "cudaGraphInstantiate (topk)");
    }
    topk_graph_n = n;
    return absl::OkStatus();
  }

  // Finds the k-th largest key of input[0, n) and writes the top-k block: one graph launch,
  // and the host waits once, to read the outcome.
  absl::Status EncodeTopK(size_t n) {
    const size_t k = TopKCount(spec.ratio, n);
    header[0] = static_cast<uint32_t>(k);
    SYNCLINE_RETURN_IF_ERROR(WriteHeader(1));
    block_k = k;
    const size_t last_n = std::exchange(last_topk_n, n);
    if (k == 0) return absl::OkStatus();
    if (n == topk_graph_n || n == last_n) {
      // An input size seen twice in a row (a dense gradient's, every step): one graph for it.
      SYNCLINE_RETURN_IF_ERROR(PrepareTopKGraph(n, k));
      SYNCLINE_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(topk_graph, stream));
    } else {
      // A size of its own (sparse rows' pushes vary): capturing a graph would cost more than it
      // saves.
      SYNCLINE_RETURN_IF_ERROR(EnqueueTopK(n, k));
    }
    SYNCLINE_RETURN_IF_ERROR(Sync());
    if (found->error == cu::kTopKLostCount) {
      return absl::InternalError("topk radix select lost count of the keys");
    }
    if (found->error != 0) {
      return absl::InternalError(absl::StrFormat(
          "topk radix select is inconsistent: the tile counts around cut %#x do not make k = %d "
          "with %d ties",
          found->prefix, k, found->remaining));
    }
    return absl::OkStatus();
  }
};

CudaCodec::CudaCodec(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaCodec::~CudaCodec() = default;

absl::StatusOr<std::unique_ptr<CudaCodec>> CudaCodec::Create(const CodecSpec& spec,
                                                             size_t capacity) {
  SYNCLINE_RETURN_IF_ERROR(ValidateCodecSpec(spec));
  if (!CudaAvailable()) return absl::FailedPreconditionError("no CUDA device");
  auto impl = std::make_unique<Impl>();
  impl->spec = spec;
  impl->capacity = capacity;
  int device = 0, sms = 0;
  SYNCLINE_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  SYNCLINE_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  impl->histogram_blocks = std::max(1, sms) * 8;
  SYNCLINE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));
  SYNCLINE_RETURN_IF_ERROR(impl->input.Reserve(capacity));
  SYNCLINE_RETURN_IF_ERROR(impl->output.Reserve(capacity));
  SYNCLINE_RETURN_IF_ERROR(impl->block.Reserve(ci::EncodedSizeFor(spec, capacity)));
  if (spec.kind == CodecKind::kTopK) {
    SYNCLINE_RETURN_IF_ERROR(impl->histogram.Reserve(cu::kMaxRadixBins));
    SYNCLINE_RETURN_IF_ERROR(impl->counts.Reserve(2 * Tiles(capacity)));
    SYNCLINE_RETURN_IF_ERROR(impl->offsets.Reserve(2 * Tiles(capacity)));
    SYNCLINE_RETURN_IF_ERROR(impl->select.Reserve(1));
    void* pinned = nullptr;
    SYNCLINE_CUDA_RETURN_IF_ERROR(cudaMallocHost(&pinned, sizeof(cu::TopKSelect)));
    impl->found = static_cast<cu::TopKSelect*>(pinned);
  }
  return std::unique_ptr<CudaCodec>(new CudaCodec(std::move(impl)));
}

const CodecSpec& CudaCodec::spec() const { return impl_->spec; }
size_t CudaCodec::capacity() const { return impl_->capacity; }
float* CudaCodec::device_input() { return impl_->input.get(); }
float* CudaCodec::device_output() { return impl_->output.get(); }

absl::Status CudaCodec::UploadInput(std::span<const float> values) {
  return impl_->Upload(impl_->input.get(), values);
}

absl::Status CudaCodec::UploadOutput(std::span<const float> values) {
  return impl_->Upload(impl_->output.get(), values);
}

absl::Status CudaCodec::DownloadOutput(std::span<float> values) {
  if (values.size() > impl_->capacity) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%d values exceed the CudaCodec's capacity %d", values.size(), impl_->capacity));
  }
  SYNCLINE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(values.data(), impl_->output.get(),
                                                values.size_bytes(), cudaMemcpyDeviceToHost,
                                                impl_->stream));
  return impl_->Sync();
}

absl::Status CudaCodec::EncodeOnDevice(size_t n) {
  Impl& m = *impl_;
  if (n > m.capacity) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d values exceed the CudaCodec's capacity %d", n, m.capacity));
  }
  if (m.spec.kind == CodecKind::kTopK && ci::TopKIndexBytes(n) != 4) {
    return absl::UnimplementedError("CUDA topk needs n < 2^32");
  }
  m.block_n = std::numeric_limits<size_t>::max();  // invalid until the encoding succeeds
  switch (m.spec.kind) {
    case CodecKind::kNone:
      SYNCLINE_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(m.block.get(), m.input.get(), 4 * n, cudaMemcpyDeviceToDevice, m.stream));
      break;
    case CodecKind::kFp16:
      SYNCLINE_CUDA_RETURN_IF_ERROR(cu::LaunchFloatToHalf(
          m.input.get(), n, reinterpret_cast<uint16_t*>(m.block.get()), m.stream));
      break;
    case CodecKind::kSign1: {
      const size_t chunk = ci::Sign1Chunk(m.spec.chunk, n);
      const size_t chunks = n / chunk + (n % chunk != 0);
      m.header[0] = static_cast<uint32_t>(chunk);
      m.header[1] = static_cast<uint32_t>(chunks);
      SYNCLINE_RETURN_IF_ERROR(m.WriteHeader(2));
      SYNCLINE_CUDA_RETURN_IF_ERROR(cu::LaunchSign1Encode(
          m.input.get(), n, chunk, reinterpret_cast<float*>(m.block.get() + 8),
          reinterpret_cast<uint8_t*>(m.block.get() + 8 + 4 * chunks), m.stream));
      m.block_chunk = chunk;
      break;
    }
    case CodecKind::kTopK:
      SYNCLINE_RETURN_IF_ERROR(m.EncodeTopK(n));
      break;
  }
  SYNCLINE_RETURN_IF_ERROR(m.Sync());
  m.block_bytes = ci::EncodedSizeFor(m.spec, n);
  m.block_n = n;
  return absl::OkStatus();
}

absl::Status CudaCodec::UploadBlock(std::span<const std::byte> block, size_t n) {
  Impl& m = *impl_;
  if (n > m.capacity) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d values exceed the CudaCodec's capacity %d", n, m.capacity));
  }
  if (m.spec.kind == CodecKind::kTopK && ci::TopKIndexBytes(n) != 4) {
    return absl::UnimplementedError("CUDA topk needs n < 2^32");
  }
  SYNCLINE_RETURN_IF_ERROR(ci::ValidateBlock(m.spec.kind, block, n));
  m.block_n = std::numeric_limits<size_t>::max();
  SYNCLINE_RETURN_IF_ERROR(m.block.Reserve(block.size()));
  SYNCLINE_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(m.block.get(), block.data(), block.size(), cudaMemcpyHostToDevice, m.stream));
  SYNCLINE_RETURN_IF_ERROR(m.Sync());
  if (m.spec.kind == CodecKind::kSign1) m.block_chunk = ci::LoadU32(block.data());
  if (m.spec.kind == CodecKind::kTopK) m.block_k = ci::LoadU32(block.data());
  m.block_bytes = block.size();
  m.block_n = n;
  return absl::OkStatus();
}

absl::Status CudaCodec::DownloadBlock(std::vector<std::byte>* block) {
  Impl& m = *impl_;
  if (m.block_n == std::numeric_limits<size_t>::max()) {
    return absl::FailedPreconditionError("the CudaCodec holds no block");
  }
  block->resize(m.block_bytes);
  SYNCLINE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(block->data(), m.block.get(), m.block_bytes,
                                                cudaMemcpyDeviceToHost, m.stream));
  return m.Sync();
}

absl::Status CudaCodec::DecodeAddOnDevice(size_t n, float scale) {
  Impl& m = *impl_;
  if (m.block_n != n) {
    return absl::FailedPreconditionError(
        absl::StrFormat("the CudaCodec holds no block of %d entries", n));
  }
  switch (m.spec.kind) {
    case CodecKind::kNone:
      SYNCLINE_CUDA_RETURN_IF_ERROR(cu::LaunchFloatAdd(
          reinterpret_cast<const float*>(m.block.get()), n, scale, m.output.get(), m.stream));
      break;
    case CodecKind::kFp16:
      SYNCLINE_CUDA_RETURN_IF_ERROR(cu::LaunchHalfAdd(
          reinterpret_cast<const uint16_t*>(m.block.get()), n, scale, m.output.get(), m.stream));
      break;
    case CodecKind::kSign1: {
      const size_t chunks = n / m.block_chunk + (n % m.block_chunk != 0);
      SYNCLINE_CUDA_RETURN_IF_ERROR(
          cu::LaunchSign1DecodeAdd(reinterpret_cast<const float*>(m.block.get() + 8), m.block_chunk,
                                   reinterpret_cast<const uint8_t*>(m.block.get() + 8 + 4 * chunks),
                                   n, scale, m.output.get(), m.stream));
      break;
    }
    case CodecKind::kTopK:
      SYNCLINE_CUDA_RETURN_IF_ERROR(
          cu::LaunchScatterAdd(reinterpret_cast<const uint32_t*>(m.block.get() + 4),
                               reinterpret_cast<const float*>(m.block.get() + 4 + 4 * m.block_k),
                               m.block_k, scale, m.output.get(), m.stream));
      break;
  }
  return m.Sync();
}

absl::Status CudaCodec::Encode(std::span<const float> values, std::vector<std::byte>* block) {
  SYNCLINE_RETURN_IF_ERROR(UploadInput(values));
  SYNCLINE_RETURN_IF_ERROR(EncodeOnDevice(values.size()));
  return DownloadBlock(block);
}

absl::Status CudaCodec::DecodeAdd(std::span<const std::byte> block, std::span<float> out,
                                  float scale) {
  SYNCLINE_RETURN_IF_ERROR(UploadBlock(block, out.size()));
  SYNCLINE_RETURN_IF_ERROR(UploadOutput(out));
  SYNCLINE_RETURN_IF_ERROR(DecodeAddOnDevice(out.size(), scale));
  return DownloadOutput(out);
}

absl::StatusOr<double> CudaCodec::TimeDeviceCopy(size_t n, int repeats) {
  Impl& m = *impl_;
  if (n > m.capacity) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d values exceed the CudaCodec's capacity %d", n, m.capacity));
  }
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r < std::max(1, repeats); ++r) {
    const auto start = std::chrono::steady_clock::now();
    SYNCLINE_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(m.output.get(), m.input.get(), 4 * n, cudaMemcpyDeviceToDevice, m.stream));
    SYNCLINE_RETURN_IF_ERROR(m.Sync());
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

absl::Status CudaEncode(const CodecSpec& spec, std::span<const float> values,
                        std::vector<std::byte>* block) {
  absl::StatusOr<std::unique_ptr<CudaCodec>> codec = CudaCodec::Create(spec, values.size());
  if (!codec.ok()) return codec.status();
  return (*codec)->Encode(values, block);
}

absl::Status CudaDecodeAdd(const CodecSpec& spec, std::span<const std::byte> block,
                           std::span<float> out, float scale) {
  // Validate before touching the device, so that a bad block costs no allocation.
  SYNCLINE_RETURN_IF_ERROR(ci::ValidateBlock(spec.kind, block, out.size()));
  absl::StatusOr<std::unique_ptr<CudaCodec>> codec = CudaCodec::Create(spec, out.size());
  if (!codec.ok()) return codec.status();
  return (*codec)->DecodeAdd(block, out, scale);
}

}  // namespace syncline
