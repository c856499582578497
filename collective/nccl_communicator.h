// NcclCommunicator: the NCCL implementation of DenseCollective (collective/dense_collective.h),
// for ranks that each compute on a GPU of their own. The models hand their gradients over on
// the host today, so AllReduce stages a host buffer through device memory: a copy up on the
// communicator's own stream, ncclAllReduce (sum, float32) in place, a copy down, and a wait
// for the stream. The device buffer is kept across calls and grows to the largest seen.
//
// Nothing here waits forever: initialisation is NCCL's nonblocking one (ncclConfig_t.blocking
// = 0), polled with ncclCommGetAsyncError until it finishes or NcclOptions::timeout passes;
// each all-reduce polls its stream and the communicator the same way. On a timeout or an
// asynchronous error the communicator is aborted (ncclCommAbort) and every later call fails;
// the error names NCCL's or CUDA's own message.
//
// Built only when the build has NCCL (SYNCLINE_HAVE_NCCL); this header includes no CUDA or
// NCCL header. Only one rank has ever run (and on this task's machine, none: no GPU).
//
// Thread-safety: thread-compatible; every rank calls the same collectives in the same order.
#ifndef SYNCLINE_COLLECTIVE_NCCL_COMMUNICATOR_H_
#define SYNCLINE_COLLECTIVE_NCCL_COMMUNICATOR_H_

#include <array>
#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/dense_collective.h"

namespace syncline {

// NCCL's unique id (ncclUniqueId: 128 bytes), made by rank 0 and handed to every rank.
inline constexpr size_t kNcclIdBytes = 128;
using NcclId = std::array<std::byte, kNcclIdBytes>;

struct NcclOptions {
  // The longest wait for initialisation or for one all-reduce before it fails with
  // DeadlineExceeded and the communicator is aborted.
  absl::Duration timeout = absl::Seconds(30);
};

// How many CUDA devices this process sees; 0 on any error (no driver, no device).
int VisibleCudaDevices();

// The identity of CUDA device `ordinal` (PCI bus id and UUID) on host `host`.
absl::StatusOr<RankDevice> ProbeCudaDevice(int ordinal, std::string host);

// A fresh NCCL unique id (ncclGetUniqueId), on rank 0.
absl::StatusOr<NcclId> NewNcclId();

class NcclCommunicator : public DenseCollective {
 public:
  // Joins the NCCL communicator of `size` ranks identified by `id` as `rank`, on CUDA device
  // `ordinal`. Every rank calls it at about the same time: each waits up to options.timeout
  // for the others.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(int rank, int size, int ordinal,
                                                                  const NcclId& id,
                                                                  NcclOptions options = {});
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // `algorithm` is ignored (NCCL chooses); kFloat16 rounds to half on the host before and
  // after a float32 sum.
  absl::Status AllReduce(std::span<float> data, Algorithm algorithm, WireType wire) override;
  // Estimated as a ring's: each rank sends and receives 2 (N - 1) / N of the buffer (NCCL
  // does not count its bytes).
  const CollectiveCounters& counters() const override { return counters_; }
  const char* name() const override { return "nccl"; }

 private:
  struct Impl;  // the CUDA and NCCL handles
  NcclCommunicator(int rank, int size, NcclOptions options, std::unique_ptr<Impl> impl);

  const int rank_;
  const int size_;
  const NcclOptions options_;
  std::unique_ptr<Impl> impl_;
  CollectiveCounters counters_;
};

}  // namespace syncline

#endif  // SYNCLINE_COLLECTIVE_NCCL_COMMUNICATOR_H_
