// Communicator: collectives among N ranks (all-reduce, reduce-scatter, all-gather, broadcast)
// over the Transport/Endpoint interface only, as Gloo's algorithms see only pairs: it runs over
// ZeroMQ between processes and over the in-process transport between test threads alike.
//
// Algorithms for all-reduce (sum):
// - ring: reduce-scatter then all-gather around the ring, chunked and pipelined (each segment
//   is forwarded as soon as it is reduced), so each rank sends 2(N-1)/N of the buffer: the
//   bandwidth-optimal choice for large buffers;
// - recursive doubling: log2 N exchanges of the whole buffer (ranks beyond the largest power of
//   two fold in first and get the result last): fewest rounds, for small buffers;
// - halving (Rabenseifner's): a reduce-scatter by recursive halving, then an all-gather by
//   recursive doubling: the ring's bytes in 2 log2 N steps instead of 2(N-1) (ranks beyond
//   the largest power of two fold in first and get the result last);
// - hierarchical: when ranks share hosts (CommunicatorOptions::host_of_rank), reduce inside each
//   host onto its lowest rank, ring among those leaders, then hand the result back inside each
//   host: only one rank per host uses the host's link;
// - auto: recursive doubling below CommunicatorOptions::small_bytes (64 KiB), else hierarchical
//   when ranks share hosts, else halving for 2, 4, 8, ... ranks (halving_min_ranks), else
//   ring (docs/COLLECTIVES.md has the measurements behind the choice).
//
// Every algorithm adds in an order fixed by the ranks alone, so a run is bitwise reproducible
// and every rank ends with bitwise the same result. With WireType::kFloat16 values travel as
// IEEE half (half the bytes) and are summed in float; the result is rounded to half on every
// rank alike.
//
// A peer that stops answering fails the collective with DeadlineExceeded naming it within
// CommunicatorOptions::timeout: nothing waits forever. Messages that do not belong to a
// collective of this communicator (another sender, a malformed header, a wrong size) are
// dropped and counted, never trusted.
//
// Thread-safety: thread-compatible; every rank calls the same collectives in the same order.
#ifndef SYNCLINE_COLLECTIVE_COMMUNICATOR_H_
#define SYNCLINE_COLLECTIVE_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "collective/dense_collective.h"
#include "core/message.h"
#include "core/transport.h"

namespace syncline {

struct CommunicatorOptions {
  // How long to wait for any one message from a peer before the collective fails naming it.
  absl::Duration timeout = absl::Seconds(30);
  // Ring pipelining: chunks travel in segments of at most this many bytes (of float32).
  size_t segment_bytes = 256 * 1024;
  // Auto: buffers below this many bytes use recursive doubling.
  size_t small_bytes = 64 * 1024;
  // Auto, larger buffers on hosts of their own: halving instead of the ring when the ranks
  // are a power of two, at least this many (docs/COLLECTIVES.md measures both: halving was
  // the faster at 13 of 15 points from 1 MiB at N = 2, 4, 8). Other counts keep the ring:
  // halving's fold would move the whole buffer twice more.
  int halving_min_ranks = 2;
  // The host of each rank (any labels); empty: every rank on a host of its own.
  std::vector<int> host_of_rank;
};

// The CPU implementation of DenseCollective (collective/dense_collective.h), and the only one
// of the other collectives.
class Communicator : public DenseCollective {
 public:
  // `endpoint` is rank `rank`'s own (peers[rank] is its id) and can reach every other rank by
  // the id in `peers` (connected already). It must outlive the communicator and carry no other
  // traffic while a collective runs.
  Communicator(Endpoint* endpoint, int rank, std::vector<std::string> peers,
               CommunicatorOptions options = {});

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(peers_.size()); }

  // Sums `data` over all ranks, in place.
  absl::Status AllReduce(std::span<float> data, Algorithm algorithm = Algorithm::kAuto,
                         WireType wire = WireType::kFloat32) override;
  // Sums `data` over all ranks; afterwards this rank's chunk, data[ChunkBegin(rank) ..
  // ChunkBegin(rank + 1)), holds the sum (the rest of `data` is scratch).
  absl::Status ReduceScatter(std::span<float> data, WireType wire = WireType::kFloat32);
  // Each rank's chunk of `data` (as above) is copied to every rank.
  absl::Status AllGather(std::span<float> data, WireType wire = WireType::kFloat32);
  // `data` of rank `root` is copied to every rank (a binomial tree).
  absl::Status Broadcast(std::span<float> data, int root);
  // Every rank's `mine` (the same number of bytes on every rank: a codec's block, say) in rank
  // order: *all holds size() * mine.size() bytes (a ring all-gather).
  absl::Status AllGatherBytes(std::span<const std::byte> mine, std::vector<std::byte>* all);

  // The first element of chunk `c` of a buffer of `n` floats split over `parts` ranks (chunk
  // sizes differ by at most one).
  static size_t ChunkBegin(size_t n, int parts, int c);
  // What kAuto picks for a buffer of `bytes`.
  Algorithm Choose(size_t bytes) const;

  const CollectiveCounters& counters() const override { return counters_; }
  const char* name() const override { return "cpu"; }

  // Keeps `resources` (the transport of an endpoint of its own, say) as long as this lives.
  void Own(std::shared_ptr<void> resources) { owned_ = std::move(resources); }
  // A wait for a peer also ends, with this status, once `interrupted` returns an error (the
  // job rolls back: the peer may be dead); polled every 100 ms while waiting.
  void StopWaitingWhen(std::function<absl::Status()> interrupted) {
    interrupted_ = std::move(interrupted);
  }

 private:
  // Identifies one message of a collective: operation sequence number, phase, step, segment.
  struct Tag {
    int64_t seq = 0;
    uint32_t phase = 0;
    int64_t step = 0;
    int64_t segment = 0;
    auto key() const { return std::make_tuple(seq, phase, step, segment); }
  };
  // A ring over `group` (global ranks), my position `me` in it.
  struct Ring {
    std::vector<int> group;
    int me = 0;
    int n() const { return static_cast<int>(group.size()); }
    int left() const { return group[(me + n() - 1) % n()]; }
    int right() const { return group[(me + 1) % n()]; }
  };

  absl::Status RingPass(std::span<float> data, const Ring& ring, int first, bool add,
                        uint32_t phase, WireType wire);
  absl::Status RingReduceScatter(std::span<float> data, const Ring& ring, int shift, uint32_t phase,
                                 WireType wire);
  absl::Status RingAllGather(std::span<float> data, const Ring& ring, int shift, uint32_t phase,
                             WireType wire);
  absl::Status RecursiveDoubling(std::span<float> data, WireType wire);
  absl::Status Hierarchical(std::span<float> data, WireType wire);
  absl::Status HalvingDoubling(std::span<float> data, WireType wire);
  // Sends `out` to `partner` and receives `in` from it (either may be empty; the partner calls
  // it with the two the other way round), in segments of at most segment_bytes, a few sent
  // ahead of each receive; received values are added into `in` (add) or copied there.
  absl::Status Exchange(int partner, uint32_t phase, int64_t step, std::span<const float> out,
                        std::span<float> in, WireType wire, bool add);

  absl::Status Send(int to, const Tag& tag, std::span<const float> values, WireType wire);
  // Waits for the message `tag` from rank `from` holding `count` values, then adds them into
  // `out` (add) or copies them there.
  absl::Status Receive(int from, const Tag& tag, std::span<float> out, WireType wire, bool add);
  // Takes the next message off the endpoint into the pending set; false on timeout.
  absl::Status Pump(int from, const Tag& tag, absl::Time deadline);
  std::string Describe(int from, const Tag& tag) const;

  std::shared_ptr<void> owned_;  // destroyed last
  std::function<absl::Status()> interrupted_;
  Endpoint* const endpoint_;
  const int rank_;
  const std::vector<std::string> peers_;
  const CommunicatorOptions options_;
  absl::flat_hash_map<std::string, int> rank_of_;
  // Per rank: a send to it went through or a message came from it, so its connection is up.
  std::vector<bool> reached_;
  int64_t seq_ = 0;      // collectives started
  const char* op_ = "";  // the collective in progress, for messages
  // Messages that arrived before they were wanted, by (sender, tag).
  std::map<std::tuple<int, int64_t, uint32_t, int64_t, int64_t>, Message> pending_;
  CollectiveCounters counters_;
};

}  // namespace syncline

#endif  // SYNCLINE_COLLECTIVE_COMMUNICATOR_H_
