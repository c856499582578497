// GossipOptions: how a worker gossips with its peers (see gossip_backend.h and gossip_mixer.h).
#ifndef SYNCLINE_GOSSIP_GOSSIP_OPTIONS_H_
#define SYNCLINE_GOSSIP_GOSSIP_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "compression/codec.h"
#include "core/table_config.h"
#include "gossip/topology.h"

namespace syncline {

struct GossipOptions {
  // Which peers exchange parameters at each step (topology.h).
  GossipTopology topology = GossipTopology::kRing;
  // false: synchronous D-PSGD (each step waits for its neighbours' parameters of that step);
  // true: push-sum (never waits; mass is added whenever it arrives).
  bool asynchronous = false;
  // This worker's rank in [0, num_peers) and the number of workers.
  int rank = 0;
  int num_peers = 1;
  // Data endpoint ids of all workers by rank ("w0", "w1", ...); the endpoint given to the
  // backend is already connected to each. peer_ids[rank] is this worker's own id.
  std::vector<std::string> peer_ids;
  // Ranks below this take part from step 0; the others, up to num_peers (the job's
  // --max-workers), are joiners: each takes part only from the first step of its arrival
  // (GossipMixer::Admit). 0: every rank takes part from the start.
  int initial_peers = 0;
  // Seeds the random topology: every node computes the same graph without talking.
  uint64_t seed = 1;
  // A peer that sends nothing for this long while it is awaited is declared dead (also one
  // whose endpoint refuses messages); it is dropped from the graph and training goes on.
  absl::Duration peer_timeout = absl::Seconds(10);
  // The local update rule (GossipBackend only).
  OptimizerConfig optimizer;
  // What peers exchange. none / fp16: the parameters themselves, raw or as fp16 (half the
  // bytes, a relative rounding error of 2^-11 per exchange, so the average is kept only to that
  // precision). topk:R / sign1 (synchronous only; push-sum refuses them): CHOCO-SGD
  // (Koloskova et al. 2019), compressed differences between a node's model and the public copy
  // of it that a neighbour holds, with error feedback, so the average is kept exactly (to
  // float rounding) and nothing is lost, only sent later (gossip_mixer.h;
  // docs/GOSSIP_COMPRESSION.md).
  CodecSpec codec;
  // CHOCO's consensus step size gamma in (0, 1] (topk and sign1 only): each round moves the
  // model by gamma * sum_j w_ij (copy of j - copy of this node). Too large a step diverges for
  // strong compression. 0 (the default) picks the codec's: topk:R min(1, 2 R) (0.2 for
  // topk:0.1; topk:1 is then plain D-PSGD), sign1 0.1 (see ConsensusStep in gossip_mixer.h).
  double consensus_step = 0;
  // Messages for steps ahead of the current one that are kept (synchronous); later ones are
  // dropped with a warning. At most this many steps ahead, one message per peer and step.
  int max_steps_ahead = 64;
  // A synchronous wait for neighbours also ends, with this status, once it returns an error
  // (the job rolls back: a neighbour may be dead); polled every 100 ms while waiting. Unset:
  // never.
  std::function<absl::Status()> interrupted;
};

}  // namespace syncline

#endif  // SYNCLINE_GOSSIP_GOSSIP_OPTIONS_H_
