// DenseCollective: what the all-reduce and hybrid backends need for their dense buffers (an
// in-place sum of a float buffer over every rank), so that the same backend runs over the CPU
// Communicator (collective/communicator.h) or over NCCL (collective/nccl_communicator.h).
// Everything that is not a dense float sum (all-gathers of codec blocks and of sparse rows,
// the exchanges below) stays on the CPU Communicator.
//
// Which one a job's ranks use is decided alike on every rank from every rank's device
// (RankDevice, traded with ExchangeRankDevices): NCCL only when every rank computes on a GPU
// of its own (NCCL refuses two ranks on one GPU); otherwise the CPU collective with host
// staging, and the reason is logged (ChooseDenseCollective).
//
// Thread-safety: a DenseCollective is thread-compatible, and every rank calls the same
// collectives in the same order; the free functions are pure or use only their arguments.
#ifndef SYNCLINE_COLLECTIVE_DENSE_COLLECTIVE_H_
#define SYNCLINE_COLLECTIVE_DENSE_COLLECTIVE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace syncline {

class Communicator;

enum class Algorithm { kAuto, kRing, kRecursiveDoubling, kHierarchical, kHalvingDoubling };
const char* AlgorithmName(Algorithm a);

enum class WireType { kFloat32, kFloat16 };

// Bytes and messages this rank sent for collectives.
struct CollectiveCounters {
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t messages_dropped = 0;  // not part of a collective in progress
};

class DenseCollective {
 public:
  virtual ~DenseCollective() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Sums `data` over all ranks, in place; every rank ends with the same bits. `algorithm` is a
  // hint an implementation may ignore (NCCL picks its own). kFloat16: values are rounded to
  // IEEE half before they are summed (in float) and the sum is rounded to half again.
  virtual absl::Status AllReduce(std::span<float> data, Algorithm algorithm, WireType wire) = 0;
  virtual const CollectiveCounters& counters() const = 0;
  // "cpu" or "nccl", for logs and reports.
  virtual const char* name() const = 0;
};

// Where one rank computes, as the other ranks need to know it to choose a collective.
struct RankDevice {
  // The machine: any label that two processes on one machine share (the host name).
  std::string host;
  // The GPU: its PCI bus id (cudaDeviceGetPCIBusId, "0000:3b:00.0") and UUID ("GPU-..."), as
  // the CUDA runtime reports them; both empty for a rank that computes on the CPU. The ordinal
  // is not enough: CUDA_VISIBLE_DEVICES may number one GPU differently in two processes.
  std::string pci_bus_id;
  std::string uuid;
  // Why a rank that asked for a GPU cannot use NCCL (a build without NCCL, a failed probe);
  // empty otherwise. Such a rank counts as a CPU rank.
  std::string note;

  bool gpu() const { return !pci_bus_id.empty() || !uuid.empty(); }
  // "cpu" or "gpu <bus id> (<uuid>)".
  std::string Describe() const;
};

// Whether two GPU ranks are on one GPU: the same UUID (unique across machines), or the same
// PCI bus id on the same host.
bool SameGpu(const RankDevice& a, const RankDevice& b);

struct DenseChoice {
  bool nccl = false;
  // Why, in words for the log: which ranks are on the CPU or share which GPU.
  std::string reason;
};

// NCCL when every rank (in rank order in `ranks`) is a GPU rank and no two share a GPU;
// otherwise the CPU collective with host staging. Empty `ranks`: the CPU.
DenseChoice ChooseDenseCollective(std::span<const RankDevice> ranks);

// A RankDevice as a block of kRankDeviceBytes (for AllGatherBytes: the same size on every
// rank), and back. InvalidArgument for a block that is not one (untrusted bytes) or for
// fields too long to fit.
inline constexpr size_t kRankDeviceBytes = 512;
absl::StatusOr<std::vector<std::byte>> EncodeRankDevice(const RankDevice& device);
absl::StatusOr<RankDevice> DecodeRankDevice(std::span<const std::byte> block);

// Every rank's RankDevice, in rank order, traded over `cpu` (each rank calls it with its own).
absl::StatusOr<std::vector<RankDevice>> ExchangeRankDevices(Communicator& cpu,
                                                            const RankDevice& mine);

}  // namespace syncline

#endif  // SYNCLINE_COLLECTIVE_DENSE_COLLECTIVE_H_
