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
// Compressed (codec topk or sign1; synchronous only): CHOCO-Gossip (Koloskova, Stich, Jaggi 2019,
// "Decentralized Stochastic Optimization and Gossip Algorithms with Compressed Communication")
// with one pair of public copies per edge. For each peer j it has mixed with, node i keeps
// own_ij (its own model as j reconstructs it) and theirs_ij (j's model as i reconstructs it);
// j holds the same two vectors the other way round. At step t node i sends each neighbour j the
// codec block q_ij = Q(x_i - own_ij), then, for each j it received q_ji from, adds the decoded
// q_ij to own_ij and q_ji to theirs_ij, and moves x_i += gamma sum_j w_ij (theirs_ij - own_ij)
// (gamma = ConsensusStep). x_i - own_ij is the error feedback: what Q left out is sent later.
// With symmetric weights the terms of i and j cancel, so the mean of x is kept exactly up to
// float rounding. Copies per edge rather than the paper's one public copy per node make
// time-varying graphs (exponential, random matchings) and graphs rewired around a dead peer
// sound at the byte cost of D-PSGD (one block per neighbour and step): a copy changes only when
// both of its holders exchange, so it never goes stale at one of them. On a static graph all
// own_ij are equal and this is the paper's algorithm. Memory: 2 x size floats per peer ever
// mixed with (ring: 4; exponential: 2 ceil(log2 n); random: up to 2 (n - 1)). The header's
// requestId carries the number of exchanges the edge has had at the sender; ends that disagree
// (a one-sided exchange around a death, a restore from another checkpoint) both see it, skip
// the edge that step and restart its copies from zero, with a warning. A dead or leaving peer's
// copies are dropped after the step it leaves. The header's codec byte says the block's kind;
// a block of a parameter codec (none, fp16) where differences are exchanged, or the reverse, or
// a malformed one is dropped with a warning naming the sender, as any bad message is.
//
// Push-sum (Kempe et al. 2003; SGP, Assran et al. 2019): each node keeps (z, w), the model z being
// x / w. A round first adds every (z_j, w_j) that has arrived (z <- (w z + w_j z_j) / (w + w_j),
// w <- w + w_j), then keeps 1/(d+1) of its weight and sends 1/(d+1) with z to each of its d
// out-peers. Nothing waits. The weights of all nodes and of messages in flight sum to
// num_peers (initial_peers: a joiner brings none; shares are rounded to float32 before they leave,
// so the sum is exact to double rounding).
//
// Failures: a node that waits longer than peer_timeout / 4 sends every live peer a heartbeat, so
// that a neighbour waiting for it does not take it for dead. An awaited peer (synchronous: a
// neighbour of the current step; push-sum: a ring or exponential in-peer) that sends nothing for
// peer_timeout, or whose endpoint refuses a message, is declared dead: logged with its rank,
// dropped from the graph from the next step on (from the current step for this node's wait), and
// announced to every live peer (nodeDown, with the first step without it), so that every node
// rebuilds the same graph. A leaving node (Leave) announces the first step it takes no part in.
// Push-sum weight held by a dead peer (and shares on their way to it) is lost; so that the
// survivors' weights still sum to their number, each death starts an era: a node that learns
// of the k-th death (or receives a share of era k first) resets its weight to 1, keeping its
// model, and drops the shares of earlier eras that arrive later (their senders' weights were
// reset too). Every message carries its era (header generation) and the ranks its sender knows
// dead (header keysOf, a mask of ranks below 64), which a receiver marks dead before it enters
// the era, so that it pushes no weight to them; shares and reports from a peer declared dead
// are ignored. With more than 64 peers only the count is carried. The survivors then reach the
// plain average of their models at the death, as far as it can be kept: what the dead peer
// held is gone. A finishing node's weight, handed to its heir (Leave), counts until the next
// death, which resets the heir's weight to 1 as every other's.
//
// Joins (a worker started with --join; docs/FAULT_TOLERANCE.md): ranks from initial_peers on
// take no part until every node has admitted them (Admit, from the arrival that every worker
// hears in the order of departures, before it prepares the joiner's first step): from that step
// on every node's graph holds the joiner, so all switch graphs at the same step. The joiner
// connects to the others; a node sends a joiner nothing until it has heard from it (before, its
// endpoint may not know the joiner's address). Before its first step the joiner says hello to
// every member (Enter) and asks its neighbours of that step (push-sum: its in-peers) for their
// models. Synchronous: its vector becomes their mean, with no weight of its own; its first
// round then mixes as any other. Push-sum: each asked node answers with a share of half its
// weight, so the joiner, which starts with weight 0 and brings no mass, holds their estimate and
// weight taken from theirs; the weights of all nodes and messages still sum to the number of
// peers that held weight when the era began (3 peers and a joiner: 3). A death resets every
// node that holds weight to 1, the joiner included once it has received a share; a joiner that
// holds none yet enters the era with weight 0. A rank is never reused, so a dead rank is never
// admitted again, and a rank not admitted is never counted dead. CHOCO refuses joins (a joiner
// has no public copies to start from).
//
// The implementation is spread by concept: gossip_mixer.cc (options, messages, a round's
// dispatch), gossip_membership.cc (joins, leaves, deaths), gossip_synchronous.cc (D-PSGD),
// gossip_choco.cc (CHOCO) and gossip_push_sum.cc.
//
// Thread-safety: thread-compatible; the endpoint must be used by nobody else meanwhile.
#ifndef SYNCLINE_GOSSIP_GOSSIP_MIXER_H_
#define SYNCLINE_GOSSIP_GOSSIP_MIXER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "compression/codec.h"
#include "core/transport.h"
#include "gossip/gossip_options.h"

namespace syncline {

// The CHOCO step size for `options`: consensus_step when set, else the codec's default
// (topk:R: min(1, 2 R); sign1: 0.1); 0 for none and fp16, which do not use one.
double ConsensusStep(const GossipOptions& options);

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

  // This node takes no part in steps >= next_step: tells every live peer. Push-sum with the
  // node's `values` (Init's size) first hands its weight and mass to the next live peer.
  void Leave(int64_t next_step, std::span<const float> values = {});

  // Rank `rank` (a joiner, from initial_peers on) takes part in steps >= first_step. `members`
  // are the ranks still training when it joined (the arrival's donors): for this node itself
  // they are its view of the graph at first_step, every other rank being taken as gone.
  // Idempotent; a rank declared dead stays dead. InvalidArgument for an initial rank, a rank
  // out of range, a negative step or a compressed (CHOCO) mixer.
  absl::Status Admit(int rank, int64_t first_step, std::span<const int> members);
  // `take` returns ranks the job's coordinator declared down since its last call: each is
  // declared dead here at once (from the next step), as if it had been silent for
  // peer_timeout, and a synchronous step waiting for it stops waiting (polled every 100 ms).
  void WatchDownPeers(std::function<std::vector<int>()> take) { take_down_ = std::move(take); }
  // A joiner (Admit of its own rank), before its first step: says hello to every member and
  // asks its neighbours of that step (push-sum: its in-peers) for their models, waiting at most
  // peer_timeout / 2. Synchronous: `values` become the mean of those that came (none: kept,
  // with a warning); push-sum: they come as shares of the senders' weight. Once only;
  // FailedPrecondition for a node that is not a joiner or has entered.
  absl::Status Enter(std::span<float> values);
  // Whether this node is a joiner that has not entered yet.
  bool must_enter() const { return entry_step_ >= 0; }

  // Push-sum weight of this node (1 at the start, and after each peer's death; a joiner's starts
  // at 0).
  double weight() const { return weight_; }
  // Push-sum: shares of an era this node had left when they arrived, dropped; and shares that
  // arrived after this node left, when no peer was left mixing to pass them on to.
  uint64_t shares_dropped() const { return shares_dropped_; }
  // Mean, over the rounds since the last call that received anything, of the L2 distance
  // between this node's vector and the mean of the vectors it received in that round (CHOCO:
  // of the public copies of the neighbours it mixed with): a local proxy of the consensus
  // distance. 0 when nothing was received.
  double TakeConsensusProxy();
  // Mean bytes of one message to one peer since the last call (0 when none was sent).
  double TakeBytesPerPeerStep();
  // Time spent encoding and decoding compressed values since the last call.
  absl::Duration TakeCodecTime() { return std::exchange(codec_time_, absl::ZeroDuration()); }
  // Ranks declared dead (by this node or reported by others), ascending.
  std::vector<int> dead_peers() const;
  // Live ranks (sorted, including this node) that take part in step `step` in this node's view.
  std::vector<int> Members(int64_t step) const;
  uint64_t bytes_sent() const { return bytes_sent_; }
  uint64_t bytes_received() const { return bytes_received_; }

  // CHOCO (topk, sign1): whether this mixer exchanges compressed differences.
  bool compressed() const { return choco_; }
  // CHOCO state for checkpoints (after Init). Per rank, the exchanges the copies held for it
  // have had, -1 where none are held (always for this node).
  std::vector<int64_t> CopyExchanges() const;
  // Appends the copies held, in rank order: own, then theirs, size floats each.
  void AppendCopies(std::string* out) const;
  // The bytes AppendCopies writes for a CopyExchanges table, or InvalidArgument when the table
  // is not one this node could have written (wrong length, a copy of itself, a count < -1).
  absl::StatusOr<size_t> CopyBytes(std::span<const int64_t> exchanges) const;
  // Replaces the copies with those of a table and bytes as above (validated the same way).
  absl::Status RestoreCopies(std::span<const int64_t> exchanges, std::string_view bytes);
  // Drops every copy: every edge restarts from zero at its next exchange.
  void DropCopies() { edges_.clear(); }

 private:
  struct Incoming {
    int rank = 0;
    int64_t step = 0;
    int degree = 0;
    double weight = 0;
    uint64_t exchanges = 0;     // CHOCO: the edge's exchanges at the sender
    uint32_t era = 0;           // push-sum: the deaths the sender's weight accounted for
    uint64_t dead_mask = 0;     // push-sum: the ranks (below 64) the sender knew dead
    std::vector<float> values;  // parameters, or CHOCO: the decoded difference
  };
  // CHOCO: the public copies of one edge (see the header comment).
  struct Edge {
    int64_t exchanges = 0;
    std::vector<float> own;
    std::vector<float> theirs;
  };

  // Synchronous (gossip_synchronous.cc): a round, phase by phase.
  struct SyncRound;
  absl::Status MixSynchronous(int64_t step, std::span<float> values);
  // Adds to round.expected the peers this step waits for, and drops the lost.
  void ExpectPeers(SyncRound& round);
  // Sends this step's values to the expected peers not sent to yet; false when a send failed
  // (that peer is declared dead, and the expected peers change).
  bool SendRound(SyncRound& round, std::span<const float> values, const Frame& payload);
  // Receives one message, or at its deadline sends heartbeats and declares dead the expected
  // peers silent for peer_timeout.
  absl::Status AwaitRound(SyncRound& round);
  // Files what Handle() has collected: this step's values, skips, later steps' values.
  void FileArrivals(SyncRound& round, std::span<const float> values);
  // D-PSGD: `values` move to the Metropolis-Hastings average with the values received.
  void MixAverage(std::span<float> values, const std::map<int, Incoming>& got);
  absl::Status MixPushSum(int64_t step, std::span<float> values);
  // CHOCO: the block for edge `peer` at this step; its decoded value goes to *sent.
  Frame EncodeDifference(int peer, std::span<const float> values, std::vector<float>* sent);
  // CHOCO: updates the copies of the edges exchanged and moves `values`.
  void MixCompressed(int64_t step, std::span<float> values, const std::map<int, Incoming>& got,
                     const std::map<int, std::vector<float>>& sent);
  // Receives and handles one message until `deadline`; gossip payloads go to arrived_, skips to
  // skipped_. DeadlineExceeded when none came.
  absl::Status ReceiveOne(absl::Time deadline);
  void Handle(Message message);
  absl::Status Decode(Message& message, Incoming* out);
  Frame Encode(std::span<const float> values);
  // `era`: push-sum, the era the share belongs to (default: this node's).
  absl::Status SendValues(int peer, int64_t step, int degree, double weight, const Frame& payload,
                          uint64_t exchanges = 0, std::optional<uint32_t> era = std::nullopt);
  // Push-sum: starts era `era` (weight 1, model kept; 0 for a joiner that never held weight).
  void EnterEra(uint32_t era);
  // Push-sum: adds the shares in arrived_ to (values, weight_), dropping those of past eras.
  void MergeArrived(std::span<float> values);
  // Sends the models that joiners asked for (welcome_requests_): push-sum, as shares of half
  // this node's weight.
  void AnswerWelcomes(std::span<const float> values);
  // Whether this node sends to `rank` now: alive, admitted, not gone and heard from.
  bool Reachable(int rank) const;
  // The first reachable rank after this one (cyclically), or -1: a leaving push-sum node's heir.
  int NextHeir() const;
  // A joiner's hello to every member of `step`, asking those in `asked` for their models;
  // returns those asked that the hello reached.
  std::set<int> Greet(int64_t step, const std::vector<int>& members, const std::vector<int>& asked);
  // Waits (up to peer_timeout / 2) for the models of `waiting`, which loses those that came;
  // synchronous: their vectors (push-sum: none, the shares stay in arrived_).
  absl::StatusOr<std::vector<std::vector<float>>> AwaitWelcomes(int64_t step,
                                                                std::set<int>& waiting);
  // Bit r set: rank r (< 64) is known dead here.
  uint64_t DeadMask() const;
  void SendSkip(int peer, int64_t step);
  // Tells every live peer this node is alive (while it waits for a slow or dead neighbour).
  void SendHeartbeats();
  // Records that `rank` takes no part in steps >= from_step; `dead` when it failed.
  void MarkGone(int rank, int64_t from_step, bool dead, const std::string& why);
  // Declares `rank` dead from step from_step on and tells every live peer.
  void DeclareDead(int rank, int64_t from_step, const std::string& why);
  // Declares dead, from step from_step, the ranks take_down_ returns (WatchDownPeers).
  void TakeDownPeers(int64_t from_step);
  void RecordProxy(std::span<const float> values,
                   const std::vector<std::span<const float>>& received);
  std::string Name(int rank) const;

  Endpoint* const endpoint_;
  const GossipOptions options_;
  size_t size_ = 0;
  bool initialized_ = false;
  std::unique_ptr<Codec> codec_;  // null: raw float32
  std::vector<std::byte> block_;
  bool choco_ = false;  // topk or sign1: compressed differences
  double gamma_ = 0;
  std::map<int, Edge> edges_;  // CHOCO, by peer rank; at most num_peers - 1
  std::vector<float> difference_;

  static constexpr int64_t kAlive = INT64_MAX;
  std::vector<int64_t> gone_from_;    // per rank: first step without it
  std::vector<int64_t> joined_from_;  // per rank: first step with it (kAlive: not admitted)
  std::vector<bool> heard_;           // per rank: its connection is known to be up
  int64_t entry_step_ = -1;           // a joiner that has not entered: its first step
  std::vector<std::pair<int, int64_t>> welcome_requests_;  // (joiner, its first step)
  std::vector<bool> dead_;
  std::function<std::vector<int>()> take_down_;  // WatchDownPeers
  std::vector<absl::Time> last_heard_;
  absl::Time start_time_;
  int64_t current_step_ = -1;

  std::vector<Incoming> arrived_;                   // handed over by Handle()
  std::vector<std::pair<int, int64_t>> skipped_;    // (rank, step) skips received
  std::map<int64_t, std::vector<Incoming>> early_;  // synchronous: messages for later steps

  double weight_ = 1.0;          // push-sum
  uint32_t era_ = 0;             // push-sum: the era this node's weight belongs to
  uint32_t deaths_ = 0;          // peers this node knows dead
  bool holds_mass_ = true;       // push-sum: false for a joiner until its first share
  bool left_ = false;            // Leave was called
  uint64_t shares_dropped_ = 0;  // push-sum: shares of a past era
  double proxy_sum_ = 0;
  int64_t proxy_rounds_ = 0;
  uint64_t bytes_sent_ = 0;
  uint64_t bytes_received_ = 0;
  uint64_t window_bytes_ = 0;
  uint64_t window_messages_ = 0;
  absl::Duration codec_time_;
};

}  // namespace syncline

#endif  // SYNCLINE_GOSSIP_GOSSIP_MIXER_H_
