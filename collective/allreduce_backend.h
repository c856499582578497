// AllReduceBackend: the SyncBackend of --sync allreduce, data-parallel SGD without servers.
// Every worker holds the whole model (num_features x row_dim dense rows, then the bias). Each
// iteration it adds its gradient sums into one buffer, all-reduces it (collective/
// communicator.h, or NCCL when every worker has a GPU of its own: dense_collective.h), and applies
// the summed gradient with the servers' update rules (optim/optimizer.h) and their weighting: scale
// 1 / (examples of every worker), applied to the rows any worker touched. So it trains the model of
// --sync bsp (synchronous SGD on the union batch), which the tests check to 1e-5.
//
// With --compress topk:R or sign1 the row gradients are compressed with error feedback and
// all-gathered instead (AllReduceOptions::codec): each rank sends (N-1) blocks.
//
// Sparse batches (AllReduceOptions::rows): each step first all-reduces a small buffer (the
// bias gradient, the examples, the flag and every rank's count of touched rows), then, when
// it moves fewer bytes than all-reducing every row and its touched count, all-gathers each
// rank's touched rows as (key, gradient) pairs (Horovod's way with sparse tensors): every
// rank adds every rank's pairs in rank order, so all hold the same bits, and applies the rows
// some rank touched. Every rank decides from the same counts, so all take the same path.
//
// The buffer is [row gradients][bias gradient][examples][touched count per feature][workers
// still training]: the touched counts make the update the parameter server's (rows no worker
// saw in an iteration are left alone, so l2 and momentum leave them be), and the last element
// keeps a worker that has run out of data taking part in the collectives, with nothing to add,
// until every worker has.
//
// Elastic (--min-workers below --workers; allreduce_elastic.cc): a lost worker leaves the
// collective at the next step boundary instead of failing it (ElasticOptions).
//
// Thread-safety: thread-compatible.
#ifndef SYNCLINE_COLLECTIVE_ALLREDUCE_BACKEND_H_
#define SYNCLINE_COLLECTIVE_ALLREDUCE_BACKEND_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collective/communicator.h"
#include "collective/dense_collective.h"
#include "collective/planes.h"
#include "compression/codec.h"
#include "optim/optimizer.h"
#include "worker/replicated_model.h"
#include "worker/sync_backend.h"
#include "worker/worker_node.h"

namespace syncline {

struct AllReduceOptions {
  Algorithm algorithm = Algorithm::kAuto;
  WireType wire = WireType::kFloat32;
  OptimizerConfig optimizer;
  // top-K or sign1: the row gradients are compressed with error feedback and all-gathered as
  // codec blocks (every rank's block has the same size), each rank adding every block in rank
  // order; the bias and the counts are all-reduced as they are. Rows updated: those some block
  // lists (top-K), or all (sign1), as the parameter servers do with such blocks.
  CodecSpec codec;
  // Uncompressed rows: kAuto all-gathers (key, gradient) pairs when that moves fewer bytes,
  // else all-reduces every row; kDense always all-reduces (one collective a step, no count
  // exchange); kSparse always all-gathers.
  enum class Rows { kAuto, kDense, kSparse };
  Rows rows = Rows::kAuto;
};

// Elastic all-reduce, Horovod elastic's model without commit logic written by the user. When
// the coordinator announces a departure (or an arrival), the members meet again through it at
// the next step boundary, or at once when a collective fails on the lost peer: a communicator
// over the workers still in the job, ranks renumbered densely, on endpoints of the meeting (no
// message of the old membership reaches it). They agree on the rounds done: a round that any
// member completed holds every old member's contribution, the lost one's too, and a member
// that had not seen it complete takes the model (and optimizer state) of one that had, by
// broadcast; a round that no member completed is done again over the new members from the
// buffer saved before it. The lost worker's batches from the first round that no member
// completed are then handed over by the work plan (DepartureClock): every example is trained
// once. The step's sum is scaled by 1 / (examples of the members), so by the world as it is.
struct ElasticOptions {
  // The communicator of the workers in the job after `plan_events` departures and arrivals,
  // and their ranks in the job (collective/planes.h's MeetPeers).
  std::function<absl::StatusOr<PeerMeeting>(uint64_t plan_events)> meet;
  // The departures and arrivals the coordinator has announced so far.
  std::function<uint64_t()> plan_events;
  // Why the timeline ends (a rollback, the job's end); OK while it goes on.
  std::function<absl::Status()> interrupted;
  // How long a failed collective waits for the coordinator to announce a departure before it
  // fails the step (the coordinator hears of a dead worker's exit at once, of a hang after a
  // heartbeat timeout).
  absl::Duration notice_timeout = absl::Seconds(10);
};

class AllReduceBackend : public SyncBackend {
 public:
  // `communicator` reaches every worker (over this worker's data endpoint or the TCP plane);
  // `dense`, when given (NCCL: ConnectDenseCollective), takes the all-reduces of the whole
  // buffer, and `communicator` keeps the small sums and every all-gather.
  AllReduceBackend(std::unique_ptr<Communicator> communicator, AllReduceOptions options,
                   std::unique_ptr<DenseCollective> dense = nullptr);
  // Makes the collective elastic: `members` are the job's ranks of the communicator's ranks,
  // met after `plan_events` departures and arrivals. InvalidArgument with a dense collective
  // of its own (NCCL cannot lose a rank) or with top-K or sign1 (each rank's residual is its
  // own, so a taken-over model would not match it).
  absl::Status MakeElastic(ElasticOptions elastic, std::vector<int> members, uint64_t plan_events);
  // Elastic, on a worker that joined the running job (--max-workers): the members, this one
  // among them, met after `plan_events` departures and arrivals, its own arrival the last.
  // It holds no model yet: its arrival (OnArrival) takes one from a member.
  absl::Status MakeElasticJoiner(ElasticOptions elastic, std::vector<int> members,
                                 uint64_t plan_events);
  // Elastic: on this worker's own arrival, agrees on the rounds with the members it met,
  // takes the model (and optimizer state) of one that completed the most, and answers their
  // rounds, adding nothing, up to `first_clock`, where its own iterations count from.
  // Nothing for others' arrivals: the members meet the joiner when the coordinator counts it.
  absl::Status OnArrival(int worker, int64_t first_clock, std::span<const int> donors) override;
  // Elastic: the first round that no member completed with lost worker `worker` (its
  // iterations finished), once the members still in the job have met and agreed on it;
  // nullopt until then. `clock` (the coordinator's) otherwise.
  std::optional<int64_t> DepartureClock(int worker, int64_t clock) override;

  absl::Status Init(const ParameterLayout& layout) override;
  absl::Status Read(int64_t clock, std::span<const uint64_t> keys, std::span<float> rows,
                    std::span<float> bias) override;
  // Adds the gradient sums into this iteration's buffer.
  absl::Status Update(int64_t clock, std::span<const uint64_t> keys,
                      std::span<const float> row_grads, std::span<const float> bias_grad,
                      float examples) override;
  // All-reduces the buffer and applies the sum.
  absl::Status EndIteration(int64_t clock, float examples) override;
  // Takes part, adding nothing, until every worker has finished.
  absl::Status Finish() override;
  // Compressed (top-K, sign1): the rows, as one part (one block a rank).
  std::vector<GradientCompression> CompressionWanted() const override;
  // The rows' blocks come from `encoder` (a GPU model's, which keeps the row gradients and the
  // residual on its device); Update adds no row gradients. The bias is summed as it is.
  void SetEncoder(GradientTable table, GradientEncoder* encoder) override {
    if (table == GradientTable::kRows) encoder_ = encoder;
  }
  // Checkpoints: the whole model, its optimizer state and (compressed) the error-feedback
  // residual. Every worker saves after the same step, so restoring all of them continues
  // exactly.
  absl::StatusOr<std::string> SaveState() const override;
  absl::Status RestoreState(std::string_view state) override;
  // Compressed rounds: encoding with error feedback, and decoding the gathered blocks.
  absl::Duration TakeCodecTime() override {
    return std::exchange(codec_time_, absl::ZeroDuration());
  }
  uint64_t bytes_pushed() const override;
  uint64_t bytes_pulled() const override;

  std::span<const float> parameters() const { return model_.parameters(); }
  // The most floats one all-reduce of a backend over `layout` among `workers` sums: its
  // whole buffer, or its small sums when the counts of many ranks outgrow a small model.
  // Every all-gather goes around the ring, in segments. For CollectiveMessageBound.
  static uint64_t LargestAllReduce(const ParameterLayout& layout, int workers);
  // Uncompressed rounds that all-gathered (key, gradient) pairs, and that all-reduced every row.
  uint64_t sparse_rounds() const { return sparse_rounds_; }
  uint64_t dense_rounds() const { return dense_rounds_; }
  // The examples whose gradients the model holds (every round's sum, of every member).
  double examples_summed() const { return examples_summed_; }
  double ExamplesInModel() const override { return elastic_ ? examples_summed_ : -1; }
  // The job's ranks of the workers in the collective now.
  const std::vector<int>& members() const { return members_; }

 private:
  // Elastic (allreduce_elastic.cc): Round, met again and redone or taken over when a member
  // leaves; Round alone otherwise. `clock`: the round's.
  absl::Status ElasticRound(int64_t clock, bool training, float examples);
  // Meets the members still in the job and agrees with them on the rounds done; *taken_over:
  // this worker's round in progress was completed by another, whose model it now holds.
  absl::Status MeetAgain(bool* taken_over);
  // The members agree on the rounds done and hand the model to those behind (MeetAgain).
  // A joiner (fresh_) holds no model: it takes one, as a member behind does, and counts no
  // clock of its own among the members'.
  absl::Status AgreeOnRounds(const std::vector<int>& lost, bool* taken_over);
  // A joiner (fresh_): agrees with the members it met, takes the model and the agreed clocks of
  // earlier departures; meets again if a member left meanwhile. OK at once when not fresh.
  absl::Status TakeTheModel();
  // After a collective among the members failed: waits up to the notice timeout for the
  // coordinator to announce a departure or arrival; whether one came (and the timeline goes on).
  bool AwaitNotice();
  // Sends `*bytes` from communicator rank `root` to every member (in *bytes).
  absl::Status BroadcastBytes(std::string* bytes, int root);
  // A joiner before the iteration of `clock`: answers the members' rounds, adding nothing, up to
  // its first clock (OnArrival), so that it reads the model of that clock.
  absl::Status CatchUp(int64_t clock);
  // The communicator's waits end when the timeline does or the membership changes.
  void WatchMembership();
  // One all-reduce of the buffer; applies it. `training`: this worker still has data.
  absl::Status Round(bool training, float examples);
  // The uncompressed rows of a round after the count exchange (`counts`: per rank, its
  // touched rows and their compact keys' bytes): all-gathers the touched rows (`sparse`) or
  // all-reduces every row; leaves the summed rows in buffer_ and, sparse, the keys some rank
  // touched in union_ (ascending).
  absl::Status ExchangeRows(bool sparse, std::span<const float> counts);
  // Compressed (top-K, sign1): the row gradients as codec blocks, all-gathered; the rest
  // all-reduced as it is.
  absl::Status CompressedRound();
  // Whether this round all-gathers the touched rows as (key, gradient) pairs rather than
  // all-reducing every row: every rank decides alike from every rank's `counts`.
  bool GathersRows(std::span<const float> counts) const;
  // All-reduces every row of buffer_ (its small sums are summed already).
  absl::Status AllReduceRows();
  // A sparse round's block: where its values start (after the largest rank's keys), and
  // whether they travel as fp16.
  struct RowBlockLayout {
    size_t values_at = 0;
    bool half = false;
    size_t width() const { return half ? sizeof(uint16_t) : sizeof(float); }
  };
  // This rank's touched rows into block_, with room for `most_rows`.
  void PackRowBlock(const RowBlockLayout& layout, size_t most_rows);
  // Adds rank r's block in blocks_ into buffer_, and its keys to union_; InvalidArgument when
  // it does not hold what r announced in `counts`, or does not decode.
  absl::Status AddRowBlock(int r, const RowBlockLayout& layout, std::span<const float> counts);
  // The bias gradient, examples and flag of buffer_ into small_ (returns its size, where
  // callers may append), and small_'s first ones back after it was summed.
  size_t PackSmallSums();
  void UnpackSmallSums();
  // Applies buffer_'s rows of union_ (or of every touched key) and bias; clears the buffer.
  absl::Status Apply(bool by_union);

  std::unique_ptr<Communicator> communicator_;
  std::unique_ptr<DenseCollective> owned_dense_collective_;
  DenseCollective* dense_collective_;  // owned_dense_collective_, or communicator_
  const AllReduceOptions options_;
  ReplicatedModel model_{"all-reduce"};
  std::vector<float> buffer_;
  size_t bias_at_ = 0, examples_at_ = 0, touched_at_ = 0, training_at_ = 0;
  bool finished_ = false;
  // Compressed all-reduce (options_.codec top-K or sign1).
  std::unique_ptr<Codec> codec_;
  ErrorFeedback feedback_;
  GradientEncoder* encoder_ = nullptr;  // not owned; when set, it holds the residual
  absl::Duration codec_time_;           // since the last TakeCodecTime
  std::vector<std::byte> block_, blocks_;
  std::vector<float> small_;  // bias, examples, still training (and the counts of touched rows)
  // Sparse rounds: the keys this rank touched in the step, and those some rank touched.
  std::vector<uint64_t> step_keys_, union_, gathered_keys_;
  std::vector<std::byte> keys_block_;
  uint64_t sparse_rounds_ = 0, dense_rounds_ = 0;
  double examples_summed_ = 0;
  bool last_anyone_training_ = true;  // in the last round completed
  // Elastic (MakeElastic): the members (job ranks), the plan events met at, the agreed clocks of
  // the lost workers, the buffer and keys as they were before the round in progress, and the
  // traffic of communicators met before.
  std::optional<ElasticOptions> elastic_;
  std::vector<int> members_;
  int64_t next_clock_ = 0;      // the first round not completed here
  bool fresh_ = false;          // a joiner before its arrival: no model of the job's yet
  int64_t catch_up_to_ = -1;    // a joiner: its first clock, until CatchUp reached it
  absl::Status elastic_error_;  // a meeting between steps failed: the next round says so
  uint64_t met_at_ = 0;
  std::map<int, int64_t> departure_clocks_;
  std::vector<float> saved_buffer_;
  std::vector<uint64_t> saved_keys_;
  uint64_t earlier_sent_ = 0, earlier_received_ = 0;
};

// Builds an AllReduceBackend from the job spec: a communicator over every worker's data
// endpoint (or over `plane`), hosts told apart by the address each listens on (for the
// hierarchical algorithm).
ServerlessBackendFactory MakeAllReduceBackendFactory(CollectivePlane plane = {});

}  // namespace syncline

#endif  // SYNCLINE_COLLECTIVE_ALLREDUCE_BACKEND_H_
