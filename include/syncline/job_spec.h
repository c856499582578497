// JobSpec: one typed description of a Syncline job, parsed and validated once (by the launcher,
// from flags and a TOML job file) and handed by the coordinator to every node at registration,
// so that a node needs only the coordinator's address and its rank.
//
// Every member is a value of its own type, never a string to re-parse; text forms are in
// job/options.h, the one wire form (the schema's JobSpec struct) in job/job_wire.h.
//
// Thread-safety: a plain value; thread-compatible.
#ifndef SYNCLINE_JOB_SPEC_H_
#define SYNCLINE_JOB_SPEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "syncline/options.h"

namespace syncline {

// Words of a worker command (JobSpec::worker_command) at most.
inline constexpr size_t kMaxWorkerCommandWords = 4096;

struct JobSpec {
  // Each field's launcher flag in brackets.
  int servers = 2;  // [--servers] parameter-server shards (0 under gossip)
  int workers = 2;  // [--workers]
  // [--min-workers] The job goes on while at least this many workers are left; a lost worker's
  // remaining batches go to the others (--sync bsp, ssp, asp). 0: the mode's default, every
  // worker under BSP (a lost worker stops the job), 1 under SSP and ASP.
  int min_workers = 0;
  // [--max-restarts] Failed nodes the launcher restarts in place, in all, each time rolling
  // the job back to its newest complete checkpoint (--sync bsp, ssp, asp, allreduce, hybrid,
  // synchronous gossip; needs checkpoints).
  // 0: a failed node is handled as --min-workers says.
  int max_restarts = 0;
  // [--max-workers] Workers may join the running job (`syncline-worker --join`) up to this
  // many in all (--sync bsp, ssp, asp; not with checkpoints). 0: --workers, no joins.
  int max_workers = 0;
  SyncMode sync;  // [--sync]

  struct Model {
    ModelKind kind = ModelKind::kLogreg;  // [--model]
    int classes = 2;                      // [--classes]
    int embedding_dim = 8;                // [--embedding-dim] ctr
    // [--hidden] ctr: one width; mlp: 1 to kMaxHiddenLayers, input side first. Empty: the
    // model's DefaultHidden.
    std::vector<int> hidden;
    bool operator==(const Model&) const = default;
  } model;
  DeviceSpec device;  // [--device] where workers compute

  struct Data {
    std::string train;                        // [--train]
    std::string test;                         // [--test] empty: no evaluation
    DataFormat format = DataFormat::kAuto;    // [--format]
    IndexBase index_base = IndexBase::kAuto;  // [--index-base]
    // [--partition] How the training examples are split among the workers (by label for the
    // non-IID kinds); each worker's label histogram goes into the run's folder.
    PartitionSpec partition;
    // Where worker 0 writes every worker's label histogram (TSV); empty: nowhere.
    std::string histograms_out;
    // Where the evaluating worker writes the final parameters of the test set's features
    // (OUT/params.tsv); empty: nowhere.
    std::string params_out;
    bool operator==(const Data&) const = default;
  } data;

  struct Training {
    int epochs = 1;                                     // [--epochs]
    int batch_size = 256;                               // [--batch-size] examples per worker step
    OptimizerKind optimizer = OptimizerKind::kAdagrad;  // [--optimizer]
    double learning_rate = 0.1;                         // [--lr]
    double l2 = 0;                                      // [--l2]
    CodecSpec codec;                                    // [--compress]
    // [--compress-pull] Sparse pulls answered with compressed deltas since the worker's last
    // pull, with the servers' error feedback per worker (compression/sparse_rows.h); kind
    // none: float32 rows.
    CodecSpec pull_codec;
    // [--residual-rows] Rows of error-feedback residual a worker keeps for its compressed
    // sparse pushes, per server; the oldest are flushed (sent whole) beyond it.
    uint64_t residual_rows = 1000000;
    // [--pull-copy-rows] Rows a server keeps, per worker, of what that worker holds
    // (--compress-pull); the least recently pulled are dropped beyond it and sent whole again.
    uint64_t pull_copy_rows = 1000000;
    int log_every = 10;  // [--log-every] steps between progress reports
    // [--read-ahead on|off] Under ASP and SSP (S >= 1), pull the next batch's parameters while
    // the current one computes (worker/trainer.h): faster steps, one more step of staleness.
    // BSP never reads ahead.
    bool read_ahead = false;
    bool operator==(const Training&) const = default;
  } training;

  uint64_t seed = 1;  // [--seed] of every random choice

  // [syncline-launch ... -- COMMAND ARGS] The program every worker runs (a user's training
  // script, which joins through the worker session: the Python package's syncline.torch);
  // empty: syncline-worker and the built-in --model.
  std::vector<std::string> worker_command;

  // --sync fedavg: workers are the clients of federated averaging (McMahan et al. 2017).
  struct Federated {
    int rounds = 30;              // [--rounds]
    double participation = 1;     // [--participation C] fraction of clients picked per round
    int local_epochs = 1;         // [--local-epochs E] over the client's own examples
    int local_steps = 0;          // [--local-steps K] 0: local_epochs epochs per round
    double round_timeout_s = 60;  // [--round-timeout] the servers aggregate without stragglers
    double client_dropout = 0;    // [--client-dropout P] a picked client skips a round
    double prox_mu = 0;           // [--prox-mu] FedProx's proximal term; 0: FedAvg
    double server_lr = 1;         // [--server-lr] step on the averaged update
    // [--server-optimizer] The servers' rule for the round's mean update (Reddi et al. 2021).
    ServerOptimizerSpec server_optimizer;
    // [--secure-aggregation] The servers learn only the sum of a round's updates (Bonawitz et
    // al. 2017; ps/secure_aggregation.h), while at least secagg_threshold clients survive.
    bool secure_aggregation = false;
    int secagg_threshold = 0;  // [--secagg-threshold] 0: a majority of the round's clients
    // [--secagg-neighbours] K: each client pairs with K others (Bell et al. 2020's sparse
    // graph); 0: with every other client.
    int secagg_neighbours = 0;
    bool operator==(const Federated&) const = default;
  } federated;

  // [--dp] Differentially private training (docs/PRIVACY.md): each example's (client's)
  // contribution clipped to L2 norm `clip`, Gaussian noise of standard deviation
  // noise_multiplier * clip on the sum, and what that spends counted by the RDP accountant
  // (job/privacy_accountant.h).
  struct Privacy {
    DpLevel level = DpLevel::kOff;  // [--dp off|example|client]
    double clip = 1;                // [--dp-clip C]
    double delta = 1e-5;            // [--dp-delta]
    // [--dp-noise-multiplier Z]. With only --dp-epsilon, the launcher's calibration (the
    // smallest Z whose planned steps stay within it); 0 until then.
    double noise_multiplier = 0;
    double epsilon = 0;                                // [--dp-epsilon E] the budget; 0: none given
    RdpConversion accountant = RdpConversion::kTight;  // [--dp-accountant]
    // [--dp-noise-seed] 0: the key below is fresh randomness; else derived from this seed, so
    // that the run repeats (and its noise is known to whoever knows the seed).
    uint64_t noise_seed = 0;
    // --dp example: the training examples of the whole data set (all partitions), which the
    // launcher counts; the sampling rate and the steps follow from it.
    uint64_t examples = 0;
    // The privacy key (64 hex digits, privacy/dp_random.h) from which every node draws its
    // sampling and noise, so that servers and clients agree on a round's Poisson picks; the
    // launcher sets it. Never logged or written to the run's files.
    std::string key;
    bool on() const { return level != DpLevel::kOff; }
    bool operator==(const Privacy&) const = default;
  } privacy;

  // [--aggregate] How the servers combine one BSP clock's or one round's updates.
  AggregateRule aggregate;

  // [--byzantine RANKS:ATTACK] Workers that send crafted updates, for experiments.
  struct Byzantine {
    std::vector<int> ranks;
    AttackSpec attack;
    bool operator==(const Byzantine&) const = default;
  } byzantine;

  struct Timeouts {
    double request_s = 60;              // [--request-timeout]
    double heartbeat_interval_s = 0.5;  // [--heartbeat-interval]
    double heartbeat_timeout_s = 5;     // [--heartbeat-timeout]
    double peer_s = 10;                 // [--peer-timeout] gossip
    bool operator==(const Timeouts&) const = default;
  } timeouts;

  // Slowness injected on purpose, for experiments (seeded by `seed`).
  struct Slowness {
    int straggler_rank = -1;  // [--straggler RANK:FACTOR] -1: none
    double straggler_factor = 1;
    double jitter_probability = 0;  // [--jitter P:FACTOR]
    double jitter_factor = 1;
    int delay_rank = -1;  // [--delay RANK:MS] -1: none
    double delay_ms = 0;
    double min_step_ms = 0;  // [--min-step-ms]
    bool operator==(const Slowness&) const = default;
  } slowness;

  // The servers' sparse (embedding) tables.
  struct Embedding {
    // Folder under which server R keeps its RocksDB tier (DIR/psR); empty: rows stay in memory.
    std::string dir;
    uint64_t memory_rows = 1000000;  // [--embedding-memory] 0: no row limit
    uint64_t memory_bytes = 0;       // 0: no byte limit
    int admit_after = 0;             // [--embedding-admit-after]
    int expire_steps = 0;            // [--embedding-expire-steps] 0: never
    bool operator==(const Embedding&) const = default;
  } embedding;

  int update_threads = 1;  // [--update-threads] per server

  // What one server may hold for its peers, in bytes; a request past a limit is refused with an
  // error that names the limit and its flag.
  struct ServerLimits {
    uint64_t reply_bytes = uint64_t{1} << 30;              // [--max-reply] one pull's reply
    uint64_t parked_bytes_per_worker = uint64_t{2} << 30;  // [--max-parked] pulls waiting
    uint64_t reply_backlog_bytes = uint64_t{256} << 20;    // [--reply-backlog] unread replies
    // [--max-table-memory] the tables a server allocates when they are declared (dense values
    // and optimizer state), all together; 0: half of the server's machine's memory.
    uint64_t table_bytes = 0;
    int stores = 16;  // [--max-stores] embedding stores (one RocksDB per sparse table)
    bool operator==(const ServerLimits&) const = default;
  } limits;

  struct Checkpoint {
    std::string dir;      // [--checkpoint-dir]
    int every = 0;        // [--checkpoint-every] clocks; 0: never
    double seconds = 0;   // [--checkpoint-seconds] 0: never
    int keep = 3;         // [--checkpoint-keep]
    std::string restore;  // the checkpoint folder this run starts from (--resume); empty: none
    // Whether nodes write checkpoints at all (periodic or requested ones).
    bool enabled() const { return every > 0 || seconds > 0; }
    bool operator==(const Checkpoint&) const = default;
  } checkpoint;

  // What a running job shows of itself beyond its progress (docs/OBSERVABILITY.md).
  struct Observe {
    // [--trace on] The folder each node writes its Chrome-trace file into (the launcher's
    // OUT/trace/, merged into OUT/trace.json at the end); empty: no trace.
    std::string trace_dir;
    // [--trace-steps A:B] The workers' steps [A, B) traced, and what the servers did while
    // any worker was in them.
    int64_t trace_first = 0;
    int64_t trace_end = 100;
    // [--eval-every N|Ns] The first live worker evaluates the model on the test set every N
    // of its steps, or every N seconds, while the job trains (0: only at the end).
    int64_t eval_every_steps = 0;
    double eval_every_seconds = 0;
    bool tracing() const { return !trace_dir.empty(); }
    bool evaluates() const { return eval_every_steps > 0 || eval_every_seconds > 0; }
    bool operator==(const Observe&) const = default;
  } observe;

  bool operator==(const JobSpec&) const = default;
};

}  // namespace syncline

#endif  // SYNCLINE_JOB_SPEC_H_
