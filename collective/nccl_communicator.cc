#include "collective/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compression/half.h"

namespace syncline {
namespace {

static_assert(sizeof(ncclUniqueId) == kNcclIdBytes, "NcclId must hold an ncclUniqueId");

absl::Status CudaError(cudaError_t e, absl::string_view what) {
  return absl::InternalError(
      absl::StrCat("CUDA ", what, ": ", cudaGetErrorName(e), ": ", cudaGetErrorString(e)));
}

absl::Status NcclError(ncclResult_t r, absl::string_view what, ncclComm_t comm = nullptr) {
  const char* last = ncclGetLastError(comm);
  return absl::InternalError(absl::StrCat(
      "NCCL ", what, ": ", ncclGetErrorString(r), last != nullptr && *last != '\0' ? " (" : "",
      last != nullptr ? last : "", last != nullptr && *last != '\0' ? ")" : ""));
}

// Polls `comm` until its last operation is no longer in progress, or until `deadline`.
absl::Status WaitForComm(ncclComm_t comm, absl::Time deadline, absl::string_view what) {
  absl::Duration pause = absl::Microseconds(1);
  while (true) {
    ncclResult_t state = ncclSuccess;
    if (ncclResult_t r = ncclCommGetAsyncError(comm, &state); r != ncclSuccess) {
      return NcclError(r, what, comm);
    }
    if (state == ncclSuccess) return absl::OkStatus();
    if (state != ncclInProgress) return NcclError(state, what, comm);
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("NCCL ", what, ": not done after the timeout (a rank missing?)"));
    }
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Milliseconds(1));
  }
}

}  // namespace

struct NcclCommunicator::Impl {
  int ordinal = 0;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  float* device = nullptr;  // the staging buffer
  size_t capacity = 0;      // floats in `device`
  bool broken = false;      // aborted after an error: every later call fails
  absl::Status why_broken;

  ~Impl() {
    cudaSetDevice(ordinal);
    if (comm != nullptr) {
      if (broken) {
        ncclCommAbort(comm);
      } else {
        // Flushes what was issued; a communicator that cannot finish is aborted instead.
        ncclResult_t r = ncclCommFinalize(comm);
        if (r == ncclSuccess || r == ncclInProgress) {
          r = WaitForComm(comm, absl::Now() + absl::Seconds(10), "finalize").ok() ? ncclSuccess
                                                                                  : ncclSystemError;
        }
        if (r == ncclSuccess) {
          ncclCommDestroy(comm);
        } else {
          ncclCommAbort(comm);
        }
      }
    }
    if (device != nullptr) cudaFree(device);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

int VisibleCudaDevices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clears the sticky error of a failed probe
    return 0;
  }
  return n;
}

absl::StatusOr<RankDevice> ProbeCudaDevice(int ordinal, std::string host) {
  const int n = VisibleCudaDevices();
  if (ordinal < 0 || ordinal >= n) {
    return absl::FailedPreconditionError(
        absl::StrFormat("no CUDA device %d: this process sees %d", ordinal, n));
  }
  char bus[64] = {};
  if (cudaError_t e = cudaDeviceGetPCIBusId(bus, sizeof(bus), ordinal); e != cudaSuccess) {
    return CudaError(e, "cudaDeviceGetPCIBusId");
  }
  cudaDeviceProp props{};
  if (cudaError_t e = cudaGetDeviceProperties(&props, ordinal); e != cudaSuccess) {
    return CudaError(e, "cudaGetDeviceProperties");
  }
  // nvidia-smi's form, GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx; none when the driver reports
  // zeros (then the bus id and host alone tell GPUs apart).
  std::string uuid = "GPU-";
  bool zero = true;
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) uuid += '-';
    absl::StrAppendFormat(&uuid, "%02x", static_cast<unsigned char>(props.uuid.bytes[i]));
    zero = zero && props.uuid.bytes[i] == 0;
  }
  if (zero) uuid.clear();
  return RankDevice{.host = std::move(host), .pci_bus_id = bus, .uuid = uuid};
}

absl::StatusOr<NcclId> NewNcclId() {
  ncclUniqueId id;
  if (ncclResult_t r = ncclGetUniqueId(&id); r != ncclSuccess) {
    return NcclError(r, "ncclGetUniqueId");
  }
  NcclId out;
  std::memcpy(out.data(), &id, sizeof(id));
  return out;
}

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(int rank, int size,
                                                                           int ordinal,
                                                                           const NcclId& id,
                                                                           NcclOptions options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrFormat("NCCL rank %d of %d", rank, size));
  }
  const int n = VisibleCudaDevices();
  if (ordinal < 0 || ordinal >= n) {
    return absl::FailedPreconditionError(
        absl::StrFormat("no CUDA device %d for NCCL: this process sees %d", ordinal, n));
  }
  auto impl = std::make_unique<Impl>();
  impl->ordinal = ordinal;
  if (cudaError_t e = cudaSetDevice(ordinal); e != cudaSuccess) {
    return CudaError(e, "cudaSetDevice");
  }
  if (cudaError_t e = cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking);
      e != cudaSuccess) {
    return CudaError(e, "cudaStreamCreate");
  }
  ncclUniqueId unique;
  std::memcpy(&unique, id.data(), sizeof(unique));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a missing rank ends in a timeout, not a hang
  ncclResult_t r = ncclCommInitRankConfig(&impl->comm, size, unique, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    impl->broken = true;
    return NcclError(r, "ncclCommInitRankConfig", impl->comm);
  }
  if (impl->comm == nullptr) return absl::InternalError("NCCL init returned no communicator");
  if (auto s = WaitForComm(impl->comm, absl::Now() + options.timeout,
                           absl::StrFormat("init of rank %d of %d", rank, size));
      !s.ok()) {
    impl->broken = true;
    return s;
  }
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(rank, size, options, std::move(impl)));
}

NcclCommunicator::NcclCommunicator(int rank, int size, NcclOptions options,
                                   std::unique_ptr<Impl> impl)
    : rank_(rank), size_(size), options_(options), impl_(std::move(impl)) {}

NcclCommunicator::~NcclCommunicator() = default;

absl::Status NcclCommunicator::AllReduce(std::span<float> data, Algorithm /*algorithm*/,
                                         WireType wire) {
  Impl& m = *impl_;
  if (m.broken) return m.why_broken;
  if (data.empty()) return absl::OkStatus();
  auto fail = [&m](absl::Status s) {
    m.broken = true;
    m.why_broken = absl::Status(
        s.code(), absl::StrCat("the NCCL communicator was aborted after: ", s.message()));
    return s;
  };
  if (cudaError_t e = cudaSetDevice(m.ordinal); e != cudaSuccess) {
    return fail(CudaError(e, "cudaSetDevice"));
  }
  if (data.size() > m.capacity) {
    if (m.device != nullptr) cudaFree(m.device);
    m.device = nullptr;
    m.capacity = 0;
    if (cudaError_t e = cudaMalloc(&m.device, data.size_bytes()); e != cudaSuccess) {
      return fail(CudaError(e, absl::StrCat("cudaMalloc of ", data.size_bytes(), " bytes")));
    }
    m.capacity = data.size();
  }
  if (wire == WireType::kFloat16) {
    for (float& v : data) {
      v = compression_internal::HalfToFloat(compression_internal::FloatToHalf(v));
    }
  }
  const absl::Time deadline = absl::Now() + options_.timeout;
  if (cudaError_t e = cudaMemcpyAsync(m.device, data.data(), data.size_bytes(),
                                      cudaMemcpyHostToDevice, m.stream);
      e != cudaSuccess) {
    return fail(CudaError(e, "cudaMemcpyAsync to the device"));
  }
  ncclResult_t r =
      ncclAllReduce(m.device, m.device, data.size(), ncclFloat32, ncclSum, m.comm, m.stream);
  if (r != ncclSuccess && r != ncclInProgress) return fail(NcclError(r, "ncclAllReduce", m.comm));
  if (auto s = WaitForComm(m.comm, deadline, "all-reduce enqueue"); !s.ok()) return fail(s);
  if (cudaError_t e = cudaMemcpyAsync(data.data(), m.device, data.size_bytes(),
                                      cudaMemcpyDeviceToHost, m.stream);
      e != cudaSuccess) {
    return fail(CudaError(e, "cudaMemcpyAsync to the host"));
  }
  // The stream finishes when every rank has taken part: poll it, and the communicator for an
  // asynchronous error (a peer gone), until the deadline.
  absl::Duration pause = absl::Microseconds(1);
  while (true) {
    cudaError_t e = cudaStreamQuery(m.stream);
    if (e == cudaSuccess) break;
    if (e != cudaErrorNotReady) return fail(CudaError(e, "all-reduce stream"));
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(m.comm, &state) == ncclSuccess && state != ncclSuccess &&
        state != ncclInProgress) {
      return fail(NcclError(state, "all-reduce", m.comm));
    }
    if (absl::Now() > deadline) {
      return fail(absl::DeadlineExceededError(
          absl::StrFormat("NCCL all-reduce of %d floats not done after %s (a rank missing?)",
                          data.size(), absl::FormatDuration(options_.timeout))));
    }
    absl::SleepFor(pause);
    pause = std::min(pause * 2, absl::Microseconds(200));
  }
  if (wire == WireType::kFloat16) {
    for (float& v : data) {
      v = compression_internal::HalfToFloat(compression_internal::FloatToHalf(v));
    }
  }
  const uint64_t moved = size_ == 1 ? 0 : 2 * (size_ - 1) * data.size_bytes() / size_;
  counters_.bytes_sent += moved;
  counters_.bytes_received += moved;
  return absl::OkStatus();
}

}  // namespace syncline
