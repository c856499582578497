// GossipMixer: the exchange behind gossip training, apart from any model: it mixes a vector of
// floats with the vectors of peer workers over an Endpoint, one round per step.
//
// Synchronous (D-PSGD, Lian et al. 2017): at step t a node sends its vector, tagged with t, to
// its neighbours in the step's graph (topology.h), waits for theirs and replaces its vector with
// the Metropolis–Hastings weighted average. A message for a later step is kept until then
// (bounded by max_steps_ahead); one for a step this node has already finished is answered with
// "skip" so that the sender stops waiting. Views of the graph can briefly differ between nodes
// (a death learnt at different steps): a node then also mixes with an unexpected sender of the
// current step and answers it, so differing views cost a little exactness of the average for one
// step but never a deadlock.
//
// Push-sum (Kempe et al. 2003; SGP, Assran et al. 2019): each node keeps (z, w), the model z being
// x / w. A round first adds every (z_j, w_j) that has arrived (z <- (w z + w_j z_j) / (w + w_j),
// w <- w + w_j), then keeps 1/(d+1) of its weight and sends 1/(d+1) with z to each of its d
// out-peers. Nothing waits. The weights of all nodes and of messages in flight sum to
// num_peers (shares are rounded to float32 before they leave, so the sum is exact to double
// rounding).
//
// Failures: a node that waits longer than peer_timeout / 4 sends every live peer a heartbeat, so
// that a neighbour waiting for it does not take it for dead. An awaited peer (synchronous: a
// neighbour of the current step; push-sum: a ring or exponential in-peer) that sends nothing for
// peer_timeout, or whose endpoint refuses a message, is declared dead: logged with its rank,
// dropped from the graph from the next step on (from the current step for this node's wait), and
// announced to every live peer (nodeDown, with the first step without it), so that every node
// rebuilds the same graph. A leaving node (Leave) announces the first step it takes no part in.
// Push-sum mass held by a dead peer is lost: the survivors still reach consensus, on a weighted
// rather than the plain average.
//
// Thread-safety: thread-compatible; the endpoint must be used by nobody else meanwhile.
#ifndef SYNCLINE_GOSSIP_GOSSIP_MIXER_H_
#define SYNCLINE_GOSSIP_GOSSIP_MIXER_H_

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "compression/codec.h"
#include "core/transport.h"
#include "gossip/gossip_options.h"

namespace syncline {

class GossipMixer {
 public:
  // `endpoint` must outlive the mixer.
  GossipMixer(Endpoint* endpoint, GossipOptions options);

  // Validates the options for vectors of `size` floats. InvalidArgument names the problem.
  absl::Status Init(size_t size);

  // One gossip round of step `step` over `values` (Init's size). Steps must increase. Lost
  // peers are not errors; an error means bad arguments.
  absl::Status MixOnce(int64_t step, std::span<float> values);

  // Push-sum: adds every message that has already arrived (no waiting) and handles notices.
  absl::Status DrainIncoming(std::span<float> values);

  // This node takes no part in steps >= next_step: tells every live peer.
  void Leave(int64_t next_step);

  // Push-sum weight of this node (1 at the start).
  double weight() const { return weight_; }
  // Mean, over the rounds since the last call that received anything, of the L2 distance
  // between this node's vector and the mean of the vectors it received in that round: a local
  // proxy of the consensus distance. 0 when nothing was received.
  double TakeConsensusProxy();
  // Mean bytes of one message to one peer since the last call (0 when none was sent).
  double TakeBytesPerPeerStep();
  // Ranks declared dead (by this node or reported by others), ascending.
  std::vector<int> dead_peers() const;
  // Live ranks (sorted, including this node) that take part in step `step` in this node's view.
  std::vector<int> Members(int64_t step) const;
  uint64_t bytes_sent() const { return bytes_sent_; }
  uint64_t bytes_received() const { return bytes_received_; }

 private:
  struct Incoming {
    int rank = 0;
    int64_t step = 0;
    int degree = 0;
    double weight = 0;
    std::vector<float> values;
  };

  absl::Status MixSynchronous(int64_t step, std::span<float> values);
  absl::Status MixPushSum(int64_t step, std::span<float> values);
  // Receives and handles one message until `deadline`; gossip payloads go to arrived_, skips to
  // skipped_. DeadlineExceeded when none came.
  absl::Status ReceiveOne(absl::Time deadline);
  void Handle(Message message);
  absl::Status Decode(Message& message, Incoming* out);
  Frame Encode(std::span<const float> values);
  absl::Status SendValues(int peer, int64_t step, int degree, double weight, const Frame& payload);
  void SendSkip(int peer, int64_t step);
  // Tells every live peer this node is alive (while it waits for a slow or dead neighbour).
  void SendHeartbeats();
  // Records that `rank` takes no part in steps >= from_step; `dead` when it failed.
  void MarkGone(int rank, int64_t from_step, bool dead, const std::string& why);
  // Declares `rank` dead from step from_step on and tells every live peer.
  void DeclareDead(int rank, int64_t from_step, const std::string& why);
  void RecordProxy(std::span<const float> values, const std::vector<const Incoming*>& received);
  std::string Name(int rank) const;

  Endpoint* const endpoint_;
  const GossipOptions options_;
  size_t size_ = 0;
  bool initialized_ = false;
  std::unique_ptr<Codec> codec_;  // null: raw float32
  std::vector<std::byte> block_;

  static constexpr int64_t kAlive = INT64_MAX;
  std::vector<int64_t> gone_from_;  // per rank: first step without it
  std::vector<bool> dead_;
  std::vector<absl::Time> last_heard_;
  absl::Time start_time_;
  int64_t current_step_ = -1;

  std::vector<Incoming> arrived_;                   // handed over by Handle()
  std::vector<std::pair<int, int64_t>> skipped_;    // (rank, step) skips received
  std::map<int64_t, std::vector<Incoming>> early_;  // synchronous: messages for later steps

  double weight_ = 1.0;  // push-sum
  double proxy_sum_ = 0;
  int64_t proxy_rounds_ = 0;
  uint64_t bytes_sent_ = 0;
  uint64_t bytes_received_ = 0;
  uint64_t window_bytes_ = 0;
  uint64_t window_messages_ = 0;
};

}  // namespace syncline

#endif  // SYNCLINE_GOSSIP_GOSSIP_MIXER_H_
