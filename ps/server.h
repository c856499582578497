// ParameterServer: one shard of the parameter server. A single thread receives requests on the
// shard's endpoint and answers them; there is no queue or thread hop between the socket and
// the update code, which is what bounds small-message latency in ps-lite-style servers.
//
// Consistency: the server keeps every worker's clock (ClockTable) and serves a pull of
// iteration c only when the StalenessGate allows it; an early pull is parked (bounded) and
// answered, in clock order, as soon as the slowest worker catches up. Under BSP (staleness 0)
// pushes are summed per clock and applied once every worker has finished that clock, scaled by
// the examples all workers reported for it: the result equals synchronous SGD on the union of
// the workers' batches. Under SSP/ASP each push is applied at once.
//
// Every request is validated (header, table, key ranges, shard ownership, value lengths);
// a bad one gets an error reply and a log line, and the server goes on serving.
//
// Thread-safety: thread-compatible; Serve() runs on one thread. stats() may be read from
// that thread only.
#ifndef SYNCLINE_PS_SERVER_H_
#define SYNCLINE_PS_SERVER_H_

#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "checkpoint/checkpoint_requests.h"
#include "compression/codec.h"
#include "compression/sparse_rows.h"
#include "consistency/clock_table.h"
#include "core/transport.h"
#include "privacy/distributed_dp.h"
#include "privacy/secagg_protocol.h"
#include "ps/request_observer.h"
#include "ps/server_checkpoint.h"
#include "ps/shard_table.h"
#include "ps/update_pool.h"
#include "syncline/options.h"

namespace syncline {

struct ServerOptions {
  // Sees every request, parked pull and checkpoint capture (metrics, a trace); null: nothing.
  RequestObserver* observer = nullptr;
  int rank = 0;         // this shard
  int num_servers = 1;  // shards in the job
  int num_workers = 1;  // clients whose clocks are tracked
  // Workers that may join later take ranks num_workers..max_workers-1 (0: none); AddWorker
  // brings one into the clock set.
  int max_workers = 0;
  int64_t staleness = 0;  // 0 = BSP, -1 = ASP, s > 0 = SSP(s)
  // Pulls that may wait for slow workers at once; more are refused with ResourceExhausted.
  size_t max_parked_pulls = 1 << 16;
  // What one peer's waiting pulls may weigh: their requests plus the replies they will need
  // when they are answered (all at once, when the slowest worker moves). A pull past it is
  // refused with ResourceExhausted naming the limit. Two of the largest replies by default.
  uint64_t max_parked_bytes_per_peer = uint64_t{2} << 30;
  // Tables a server accepts.
  size_t max_tables = 1024;
  // What the declared tables may allocate together (dense values and optimizer state), and the
  // embedding stores (a RocksDB each, with its memory and descriptors) a server opens: a key
  // holder's thousand small declarations took a server from 16 MB to 1.24 GB and 6,016
  // descriptors. A declaration past either is refused, naming the limit. max_table_bytes 0:
  // half of this machine's memory.
  uint64_t max_table_bytes = 0;
  size_t max_stores = 16;
  // The largest part of one dense table (values and optimizer state) this shard allocates
  // when a worker declares it; a larger one is refused (ResourceExhausted). 0: half of this
  // machine's memory.
  uint64_t max_dense_table_bytes = 0;
  // The largest pull reply a server builds; a larger pull is refused (ResourceExhausted).
  uint64_t max_reply_bytes = uint64_t{1} << 30;
  // Replies wait in a backlog per peer while the peer's queue is full (it is not reading), so
  // that one slow or hung peer never stalls the server for the others. What the transport
  // still holds for the peer (Endpoint::QueuedBytes) and the backlog together are bounded by
  // this many bytes: a reply past it is dropped, and a backlog past it too (counted, and
  // logged naming the peer and this limit). Its requests then time out on its side.
  uint64_t max_reply_backlog_bytes = uint64_t{256} << 20;
  // Compressed pulls (--compress-pull): a sparse pull that asks for this codec is answered
  // with the deltas since what the worker holds, which the server keeps per worker and table
  // in a RowTable of at most `pull_copy_rows` rows (compression/sparse_rows.h). Kind none:
  // such pulls are refused.
  CodecSpec pull_codec;
  uint64_t pull_copy_rows = 1000000;
  // Sparse tables keep their rows in an EmbeddingStore (memory tier over RocksDB) when set:
  // table T's store lives in `embedding->path`/table-T and starts empty (a checkpoint, not
  // this folder, is what survives a restart). Unset: sparse rows stay in memory.
  std::optional<EmbeddingStoreOptions> embedding;
  // Checkpoints (with checkpoint_root set): when every worker has finished a multiple of
  // `checkpoint_every` clocks (0: never) or a clock RequestCheckpoint() named, the shard is
  // captured and written in the background into
  // CheckpointDir(checkpoint_root, clock); `on_checkpoint` is then called on the writer's
  // thread. Under BSP the capture holds exactly the updates of the clocks before it; under
  // SSP/ASP it may also hold faster workers' updates of up to `staleness` later clocks.
  std::string checkpoint_root;
  int64_t checkpoint_every = 0;
  std::function<void(int64_t clock, const absl::Status&)> on_checkpoint;
  // Threads that share a large dense update (the server's own counts): more than 1 only on
  // machines with cores to spare beside the network's; see ps/update_pool.h.
  int update_threads = 1;
  // How a synchronous clock's updates are combined (staleness 0 only): the weighted mean, or a
  // Byzantine-robust rule over the workers' per-example updates (ps/robust_aggregate.h).
  AggregateRule aggregate;
  // Federated rounds (--sync fedavg, staleness 0): clock r is round r. Each round waits only
  // for the clients PickClients(seed, r, ...) names, and at most `round_timeout` from its
  // start (the first request, for round 0; the previous round's close after that); then the
  // round closes: the clients that did not answer are named in the log, every worker's clock
  // moves to r + 1 and the round's updates are applied. An update or clock for a closed round
  // is acknowledged, counted and dropped.
  struct Federated {
    double participation = 1;
    absl::Duration round_timeout = absl::Seconds(60);
    uint64_t seed = 1;
    int64_t rounds = std::numeric_limits<int64_t>::max();  // rounds after the last stay shut
    // --dp client: the job's privacy key (64 hex digits). A round's clients are then a
    // Poisson sample drawn from it (job/federated.h's RoundPicker), and its noise too.
    std::string dp_key;
    // --dp client (DP-FedAvg), with dp_noise_stddev > 0: every round, an empty one too, is
    // applied as the sum of the clients' clipped updates plus Gaussian noise of this standard
    // deviation (z C) on every coordinate, divided by dp_expected_clients (q W) whatever came
    // (the count that came would tell). Each shard draws the noise of its own coordinates.
    double dp_noise_stddev = 0;
    double dp_expected_clients = 0;
    // --secure-aggregation (privacy/secagg_protocol.h; one server only): the rounds' updates
    // arrive masked, through the protocol's stages, and this server keeps only their running
    // sum. The advertise stage (which covers the clients' local training) ends at the round's
    // round_timeout, each later stage secagg_stage_timeout after the one before; the unmasked
    // sum of the dense tables (in table id order) and the clients' weight is the round's
    // update. The round then waits only for the clients still in it to clock.
    std::optional<SecAggParams> secagg;
    // --dp client under secure aggregation: the clients added the noise (distributed DP,
    // privacy/distributed_dp.h); the servers decode the unmasked sum with it, add no noise, and
    // divide every round by dp_expected_clients as above.
    std::optional<DistributedDpParams> distributed_dp;
    absl::Duration secagg_stage_timeout = absl::Seconds(15);
  };
  std::optional<Federated> federated;
  // The job's rollbacks so far (in-place recovery): a request of an older generation was sent
  // on a timeline the job has rolled back from, and is dropped unanswered (counted).
  uint32_t generation = 0;
};

inline constexpr size_t kMaxShortRounds = 1000;

struct ServerStats {
  uint64_t requests = 0;
  uint64_t rejected = 0;
  uint64_t parked = 0;
  uint64_t checkpoints = 0;         // captures started
  uint64_t replies_backlogged = 0;  // replies that waited for room in a peer's queue
  uint64_t replies_dropped = 0;     // replies dropped with a backlog past its limit
  absl::Duration checkpoint_pause;  // time the server spent capturing and waiting for writes
  StalenessHistogram staleness;
  // Federated rounds.
  uint64_t rounds = 0;                // closed
  uint64_t rounds_short = 0;          // closed at the timeout without every picked client
  uint64_t clients_missing = 0;       // picked clients absent from their rounds, summed
  uint64_t updates_late = 0;          // pushes that came after their round had closed
  std::vector<int64_t> short_rounds;  // the first kMaxShortRounds of them
  // Robust aggregation: rows (sparse) or clocks (dense) left unchanged because fewer updates
  // than the rule needs had them.
  uint64_t aggregates_skipped = 0;
  // Compressed pulls: rows sent whole (new to a worker's copy) and rows dropped from copies.
  uint64_t pull_rows_fresh = 0;
  uint64_t pull_rows_evicted = 0;
  // Examples of the iterations the workers finished: their clock messages' weights. Under BSP
  // exactly the examples whose gradients reached the model (a lost worker's unfinished
  // iteration is dropped).
  double examples_trained = 0;
  // Requests of an older generation, dropped after a rollback.
  uint64_t stale_dropped = 0;
  // Workers dropped while the job went on, with the clock this server had from each.
  std::vector<std::pair<int, int64_t>> lost_workers;
};

class ParameterServer {
 public:
  // `endpoint` is this shard's bound data endpoint; it must outlive the server.
  ParameterServer(Endpoint* endpoint, ServerOptions options);

  // Receives and handles messages until `deadline`. Returns OK at the deadline; an error only
  // when the endpoint itself fails.
  absl::Status ServeUntil(absl::Time deadline);

  // Handles one received message (public so that tests can drive the server directly).
  void Handle(Message message);

  // A worker is gone: it leaves the clock set and stops holding others back.
  void RemoveWorker(int worker);
  // A worker joined the running job (a slot of options.max_workers): it enters the clock set
  // at `clock`, the first iteration it trains, before it sends anything (the coordinator gives
  // it its table once every server has). FailedPrecondition for a slot that is not joinable.
  absl::Status AddWorker(int worker, int64_t clock);

  // Restores this shard from a validated checkpoint folder before serving: its tables (which
  // workers then declare again with the same specs) and every worker's clock.
  absl::Status Restore(const std::string& checkpoint_dir);
  // Waits until the checkpoint being written (if any) is on disk.
  void WaitForCheckpoints();
  // Time-based checkpoints: the coordinator asks for checkpoint `clock`, ahead of the workers;
  // it is taken when every worker has finished `clock` clocks (at once if they just have), and
  // reported failed through on_checkpoint when the workers are already past it. Needs
  // checkpoint_root.
  void RequestCheckpoint(int64_t clock);

  const ServerStats& stats() const { return stats_; }
  // The statistics of the embedding stores, summed over tables; tables counts them.
  struct EmbeddingTotals {
    uint32_t tables = 0;
    EmbeddingStoreStats stats;
    uint64_t budget_bytes = 0;  // memory budget in bytes over all stores (0: rows only)
  };
  EmbeddingTotals embedding_totals() const;
  const ClockTable& clocks() const { return clocks_; }
  size_t parked_pulls() const { return parked_.size(); }

 private:
  struct ParkedPull {
    std::string peer;
    Message request;
    int64_t clock;
    uint64_t bytes;  // the request's and its reply's
    absl::Time since;
  };

  absl::Status HandleRequest(Message& message);
  // The audit aid SYNCLINE_AUDIT_RECEIVED_FRAMES=FILE (off unless set): every frame of every
  // message this server receives, appended to FILE as it arrived (after the transport's own
  // decryption), so that a test or an auditor can check which bytes ever reached the server.
  void AuditReceived(const Message& message);
  absl::Status DeclareTable(Message& message);
  // A new dense table's values from a declaration's values frame (TableInit::values).
  absl::Status LoadInitialValues(ShardTable& table, Message& message);
  // Answers the declarations that waited for table `id` to be made (TableInit::awaitValues).
  void AnswerAwaitingDeclarations(const ShardTable& table);
  // Validates and applies (or, under BSP, accumulates) the push in `message`. When `acked` is
  // not null and the push is a plain asynchronous one, it answers the push once the request is
  // validated and before the update runs, and sets *acked: the update cannot fail from there
  // on, and every later message is handled after it, so the early answer only lets the
  // worker's next request travel while the server updates.
  absl::Status Push(Message& message, ShardTable& table, bool* acked);
  void AckPush(const Message& message);
  // A top-K block updates only the rows it carries (lazily, as sparse optimizers do).
  absl::Status PushTopK(Message& message, ShardTable& table, KeyRange range,
                        std::span<const std::byte> block);
  absl::Status CheckPushClock(const wire::Header::Reader& header) const;
  // Answers the pull part of `message` now or parks it (moving it away: a parsed message is
  // moved only then, as a move re-attaches its header reader).
  absl::Status PullOrPark(Message& message, ShardTable& table);
  absl::Status AnswerPull(const std::string& peer, Message& request, ShardTable& table);
  // The keys of a request: its first payload frame, which must hold keyCount keys, as uint64,
  // or (keyCoding 1) compact keys, decoded into *storage, or (keyCoding 2, pushes) the keys of
  // one of the sender's last kRecentPulls pulls with compact keys of the table.
  absl::StatusOr<std::span<const uint64_t>> KeysOf(Message& message,
                                                   std::vector<uint64_t>* storage);
  // A pull's reply header: request id, table, clock, staleness (recorded) and value count.
  MessageBuilder PullReply(const wire::Header::Reader& request, uint32_t table, uint64_t values);
  // --compress-pull: the deltas of `values` (the current rows of `keys`) against the worker's
  // copy.
  absl::Status AnswerCompressedPull(const std::string& peer, Message& request, const TableConfig& c,
                                    std::span<const uint64_t> keys, std::span<const float> values);
  absl::Status AdvanceClock(int worker, int64_t clock, float weight);
  absl::Status ApplyNoisyRounds(int64_t min_clock);
  absl::Status OnMinClockChanged();
  // Federated: whether a push or clock of `worker` is for a round that has closed already.
  bool LateForRound(int worker, int64_t clock) const;
  // Federated: closes the open rounds that have all their clients' updates, or whose time is
  // up, then applies what the min clock allows. Called after every clock change and timeout.
  absl::Status AdvanceRounds();
  void OpenRound(int64_t round);
  // Secure aggregation (server_secagg.cc): a stage's request, the relay's deadlines, its
  // answers, and the round's sum into the tables once it is unmasked (or its end if aborted).
  absl::Status HandleSecAgg(Message& message);
  void SecAggOnTime();
  void SendSecAggAnswers();
  void FinishSecAggRound();
  // The masked vector's length: every dense table's floats, in id order, and the weight.
  size_t SecAggLength() const;
  absl::StatusOr<ShardTable*> FindTable(uint32_t id);
  // Refuses a table past max_table_bytes (the dense part, returned in *dense_bytes), max_stores
  // or the descriptors a store needs.
  absl::Status ReserveForTable(const TableConfig& config, bool opens_store, uint64_t* dense_bytes);
  static constexpr int kStoreDescriptors = 32;
  absl::StatusOr<std::unique_ptr<ShardTable>> MakeTableUnchecked(const TableConfig& config,
                                                                 const std::string& restore_from);
  absl::StatusOr<std::unique_ptr<ShardTable>> MakeTable(const TableConfig& config,
                                                        const std::string& restore_from);
  void StartCheckpoint(int64_t clock);
  void MissCheckpoint(int64_t clock);
  void Reply(const std::string& peer, Message reply);
  // Logs, once per peer, that its unread replies passed the backlog limit.
  void LogUnreadReplies(const std::string& peer, uint64_t queued, uint64_t reply_bytes);
  // Sends what the backlogs hold, in order, while the peers' queues take it.
  void FlushBacklogs();
  void ReplyError(const std::string& peer, const wire::Header::Reader& request,
                  const absl::Status& status);

  Endpoint* const endpoint_;
  const ServerOptions options_;
  const StalenessGate gate_;
  ClockTable clocks_;
  std::vector<std::string> worker_ids_;      // "w<rank>", the routing id each worker must use
  std::unique_ptr<UpdatePool> update_pool_;  // null with one update thread; tables point to it
  absl::flat_hash_map<uint32_t, std::unique_ptr<ShardTable>> tables_;
  // Declarations waiting for a table to be made with its initial values, by table id.
  struct AwaitingDeclaration {
    std::string peer;
    uint64_t request_id = 0;
    TableConfig config;
  };
  absl::flat_hash_map<uint32_t, std::vector<AwaitingDeclaration>> awaiting_declarations_;
  size_t awaiting_count_ = 0;
  static constexpr size_t kMaxAwaitingDeclarations = 4096;
  uint64_t table_bytes_ = 0;  // what the tables' dense parts allocated (max_table_bytes)
  size_t stores_ = 0;         // embedding stores open (max_stores)
  // Examples each clock covered, summed over workers (BSP scaling), and per worker (robust
  // aggregation normalises each worker's update by its own examples).
  std::map<int64_t, double> clock_weight_;
  std::map<int64_t, std::map<int, double>> worker_weight_;
  // Federated: the open round, the clients it waits for, and when it closes regardless.
  int64_t round_ = 0;
  std::vector<int> round_clients_;
  absl::Time round_deadline_ = absl::InfiniteFuture();
  bool round_started_ = false;
  // --secure-aggregation: the open round's protocol, and the picked clients it lost (missing
  // from the round when it closes).
  std::unique_ptr<SecAggRelay> secagg_;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> received_audit_{nullptr, &std::fclose};
  bool secagg_finished_ = false;  // its sum applied (or its abort handled)
  std::vector<int> secagg_lost_;
  // --dp client: the first round whose noisy aggregate is not applied yet.
  int64_t noised_round_ = 0;
  uint64_t skip_reports_ = 0;  // robust aggregation: clocks that left something unchanged
  // The min clock the tables' stores have been stepped to.
  int64_t stepped_clock_ = 0;
  // Parked pulls keyed by the min clock they need, so release is in clock order.
  std::multimap<int64_t, ParkedPull> parked_;
  absl::flat_hash_map<std::string, uint64_t> parked_bytes_;  // by peer
  // Compressed pulls: per (worker, table), the rows that worker holds; and the codec.
  absl::flat_hash_map<std::pair<int, uint32_t>, RowTable> pull_copies_;
  std::unique_ptr<Codec> pull_codec_;
  uint64_t pull_stamp_ = 0;
  // Per (worker, table): the request ids and keys of its last pulls with compact keys.
  static constexpr size_t kRecentPulls = 4;
  absl::flat_hash_map<std::pair<int, uint32_t>,
                      std::deque<std::pair<uint64_t, std::vector<uint64_t>>>>
      recent_pull_keys_;
  // Replies waiting for room in their peer's queue, in order, and their bytes.
  struct Backlog {
    std::deque<Message> replies;
    uint64_t bytes = 0;
  };
  absl::flat_hash_map<std::string, Backlog> backlogs_;
  static constexpr size_t kMaxUnreadLogged = 4096;
  absl::flat_hash_set<std::string> unread_logged_;  // peers told of in LogUnreadReplies
  ServerStats stats_;
  int64_t last_checkpoint_clock_ = 0;
  CheckpointRequests checkpoint_requests_;
  // Declared after the tables: destroyed first, so stores outlive the snapshots being written.
  std::unique_ptr<CheckpointWriter> checkpoint_writer_;
};

}  // namespace syncline

#endif  // SYNCLINE_PS_SERVER_H_
