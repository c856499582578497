// JobConfig is the launcher's flags and job-file keys of one training job, as text: one row per
// option (job_config.cc) gives both the flag and the key. BuildJobSpec turns it into the typed
// JobSpec (syncline/job_spec.h) that the coordinator hands to every node; nothing else parses
// an option's text.
//
// JobConfig is a plain struct; it and the functions below are thread-compatible.

#ifndef SYNCLINE_LAUNCH_JOB_CONFIG_H_
#define SYNCLINE_LAUNCH_JOB_CONFIG_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "syncline/job_spec.h"

namespace syncline {

// The sections of `syncline-launch --help` and of docs/FLAGS.md, in their order; every flag
// of the launcher is in one.
enum class FlagGroup {
  kJob,
  kData,
  kModel,
  kSync,
  kCompression,
  kEmbeddings,
  kCheckpoints,  // checkpoints and faults
  kCluster,
  kFederated,
  kPrivacy,
  kOutput,
};
inline constexpr FlagGroup kFlagGroups[] = {
    FlagGroup::kJob,         FlagGroup::kData,       FlagGroup::kModel,       FlagGroup::kSync,
    FlagGroup::kCompression, FlagGroup::kEmbeddings, FlagGroup::kCheckpoints, FlagGroup::kCluster,
    FlagGroup::kFederated,   FlagGroup::kPrivacy,    FlagGroup::kOutput};
// The heading: "Job", ..., "Checkpoints and faults", ...
const char* FlagGroupName(FlagGroup group);

// Each field's flag is given in brackets; a TOML job file uses the same name without the dashes,
// e.g. `batch-size = 64`.
struct JobConfig {
  // [--servers] Number of parameter-server processes. Default 2.
  int servers = 2;
  // [--workers] Number of worker processes. Default 2.
  int workers = 2;
  int min_workers = 0;
  int max_restarts = 0;
  int max_workers = 0;
  // [--sync] Consistency model: "bsp" (bulk synchronous), "asp" (asynchronous) or "ssp:S" (stale
  // synchronous: a worker may run at most S steps ahead of the slowest; S >= 0), or a serverless
  // gossip mode "gossip:ring|exp|random" (D-PSGD; add ":async" for push-sum). Default "bsp".
  std::string sync = "bsp";
  // [--embedding-sync] --sync hybrid: "asp" or "ssp:S" for the embeddings on the servers
  // (empty: asp, or what --sync hybrid:... says).
  std::string embedding_sync;
  // [--allreduce-rows] --sync allreduce: "auto", "dense" or "pairs" (see syncline/options.h).
  std::string allreduce_rows = "auto";
  // [--compress] Gradient compression of the model's row pushes, with error feedback: "none",
  // "topk:R" (the fraction R of largest entries), "sign1" (1 bit per entry and a scale per
  // chunk; "sign1:CHUNK"), "fp16". Sparse rows stay sparse (top-K and sign1 keep a residual
  // per row); only dense CSV data compresses a dense table of rows.
  std::string compress = "none";
  // [--compress-pull] none, fp16, topk:R or sign1[:CHUNK]: compressed pull replies.
  std::string compress_pull = "none";
  uint64_t residual_rows = 1000000;   // [--residual-rows]
  uint64_t pull_copy_rows = 1000000;  // [--pull-copy-rows]
  double consensus_step = 0;          // [--consensus-step] CHOCO gossip's gamma; 0: default
  // [--model] "logreg" (binary logistic regression), "softmax", "ctr" (DLRM-style click model;
  // Criteo data only) or "mlp" (multilayer perceptron, softmax over --classes). Default "logreg".
  std::string model = "logreg";
  // [--classes] Number of classes; only softmax and mlp may have more than 2. Default 2.
  int classes = 2;
  // [--embedding-dim] ctr: floats per categorical embedding, in [1, 256]. Default 8.
  int embedding_dim = 8;
  // [--hidden] Hidden layer widths, input side first, comma-separated: ctr one width (default
  // 64), mlp 1 to 8 (default "256,128"); each in [1, 4096]. A job file may give an integer, a
  // string or an array of integers. Empty: the model's default.
  std::string hidden;
  // [--device] Where workers compute: "auto", "cpu", "cuda" or "cuda:N". No model has GPU
  // kernels yet: auto means the CPU, and cuda is refused. Default "auto".
  std::string device = "auto";
  // [--train] Training data file. Empty: the launcher generates synthetic data into `out`.
  std::string train;
  // [--test] Test data file, evaluated once training is done. Empty: none (synthetic data brings
  // its own). Requires `train`.
  std::string test;
  // [--format] Data file format: "auto" (from the extension and content: .csv is CSV, .tsv
  // Criteo), "libsvm", "csv" or "criteo" (streamed from disk). Default "auto".
  std::string format = "auto";
  // [--index-base] Whether libsvm feature indices start at "0" or "1"; "auto" guesses from the
  // data. Default "auto".
  std::string index_base = "auto";
  // [--epochs] Passes over the training data. Default 1.
  int epochs = 1;
  // [--batch-size] Examples per worker step. Default 256.
  int batch_size = 256;
  // [--optimizer] Update rule the servers apply: "sgd", "adagrad" or "adam". Default "adagrad",
  // which suits sparse features (rare ids keep larger steps).
  std::string optimizer = "adagrad";
  // [--lr] Learning rate (> 0). Default 0.1.
  double learning_rate = 0.1;
  // [--l2] L2 regularization strength (>= 0). Default 0.
  double l2 = 0.0;
  // [--out] Directory for metrics, logs and synthetic data. Default "runs/latest".
  std::string out = "runs/latest";
  // [--seed] Seed of every random choice (data generation, initialization, shuffling), so a run
  // can be replayed. Default 1.
  uint64_t seed = 1;
  // [--log-every] Steps between metrics rows and progress updates. Default 10.
  int log_every = 10;
  // [--trace] on: every node records a trace of --trace-steps into OUT/trace/, merged into
  // OUT/trace.json (Chrome trace format; Perfetto opens it). Default "off".
  std::string trace = "off";
  // [--trace-steps A:B] The steps [A, B) a trace covers. Default "0:100".
  std::string trace_steps = "0:100";
  // [--eval-every N|Ns] Evaluate on the test set every N steps of the first worker, or every N
  // seconds, while training (metrics.csv, TensorBoard, /metrics); "0": only at the end.
  std::string eval_every = "0";
  // [--read-ahead] on: under ASP and SSP (S >= 1) a worker pulls its next batch's parameters
  // while the current batch computes (its reads then miss its own last push); off: every pull
  // in its own step. Default "off".
  std::string read_ahead = "off";
  // [--request-timeout] Deadline of one push or pull, in seconds. Default 60.
  double request_timeout_s = 60;
  // [--heartbeat-interval] Seconds between a node's heartbeats. Default 0.5.
  double heartbeat_interval_s = 0.5;
  // [--heartbeat-timeout] Seconds without a heartbeat after which a node is declared dead; more
  // than the interval. Default 5.
  double heartbeat_timeout_s = 5;
  // [--peer-timeout] Gossip: seconds of silence from an awaited neighbour after which it is
  // declared dead and dropped from the graph (at most --request-timeout). Default 10.
  double peer_timeout_s = 10;
  // Synthetic data, used when `train` is empty:
  // [--gen-rows] Training examples. Default 20000.
  int gen_rows = 20000;
  // [--gen-test-rows] Test examples; 0 for none. Default 4000.
  int gen_test_rows = 4000;
  // [--gen-features] Feature dimension. Default 10000.
  int gen_features = 10000;
  // [--gen-nnz] Nonzero features per example (<= gen-features). Default 20.
  int gen_nnz = 20;
  // Slowness injection for experiments (seeded by `seed`):
  // [--straggler RANK:FACTOR] Worker RANK's steps always take FACTOR times as long. Empty: none.
  std::string straggler;
  // [--jitter P:FACTOR] Each step of every worker takes FACTOR times as long with probability P.
  std::string jitter;
  // [--delay RANK:MS] Worker RANK waits MS milliseconds before each request, like a slow link.
  std::string delay;
  // [--min-step-ms] Pads each step's compute to at least this many milliseconds. Default 0.
  double min_step_ms = 0;
  // [--embedding-memory] Memory tier budget of each server's embedding (sparse) table, in bytes
  // ("2GiB") or rows ("1000000rows"); colder rows live in RocksDB under OUT/embeddings.
  std::string embedding_memory = "1000000rows";
  // [--embedding-admit-after] Create an embedding row at the N-th sighting of its id. Default 0.
  int embedding_admit_after = 0;
  // [--embedding-expire-steps] Delete embedding rows untouched for this many clocks (0: never).
  int embedding_expire_steps = 0;
  // [--update-threads] Threads per server that share a large dense update (the server's own
  // included); more than 1 only where cores are spare beside the network's. Default 1.
  int update_threads = 1;
  // [--max-reply] The largest pull reply a server builds (a larger pull is refused). "1GiB".
  std::string max_reply = "1GiB";
  // [--max-parked] What one worker's pulls waiting for slow workers may weigh on a server
  // (requests and replies; one past it is refused). "2GiB".
  std::string max_parked = "2GiB";
  // [--reply-backlog] Replies a server holds for a worker that is not reading them, in bytes;
  // past it they are dropped and the worker's requests time out. "256MiB".
  std::string reply_backlog = "256MiB";
  // [--max-table-memory] What a server allocates for the tables declared to it, all together
  // (dense values and optimizer state); "auto": half of each server's machine's memory.
  std::string max_table_memory = "auto";
  // [--max-stores] Embedding stores (one RocksDB per sparse table) a server opens. Default 16.
  int max_stores = 16;
  // [--checkpoint-every] Checkpoint every this many clocks (0: never). Default 0.
  int checkpoint_every = 0;
  // [--checkpoint-seconds] Also checkpoint about every this many seconds (0: never): the
  // coordinator picks a clock just ahead of the fastest worker. Default 0.
  double checkpoint_seconds = 0;
  // [--checkpoint-dir] Where checkpoints go. Default: OUT/checkpoints.
  std::string checkpoint_dir;
  // [--checkpoint-keep] Complete checkpoints to keep (older ones are deleted). Default 3.
  int checkpoint_keep = 3;
  // [--partition] strided, iid, dirichlet:ALPHA or shards:K (by label). Default strided.
  std::string partition = "strided";
  // [--aggregate] mean, median, trimmed-mean:B, krum:F, multi-krum:F:M or bulyan:F. Default mean.
  std::string aggregate = "mean";
  // [--byzantine] RANKS:ATTACK, e.g. 1,2:signflip. Default none.
  std::string byzantine = "none";
  // --sync fedavg: [--rounds], [--participation], [--local-epochs], [--local-steps],
  // [--round-timeout], [--client-dropout], [--prox-mu], [--server-lr] (JobSpec::Federated).
  int rounds = 30;
  double participation = 1;
  int local_epochs = 1;
  int local_steps = 0;
  double round_timeout_s = 60;
  double client_dropout = 0;
  double prox_mu = 0;
  double server_lr = 1;
  // [--server-optimizer] sgd, momentum:B, adagrad[:TAU], adam[:TAU] or yogi[:TAU].
  std::string server_optimizer = "sgd";
  // [--secure-aggregation] "on" or "off"; [--secagg-threshold] (JobSpec::Federated).
  std::string secure_aggregation = "off";
  int secagg_threshold = 0;
  int secagg_neighbours = 0;
  // Differential privacy (JobSpec::Privacy): [--dp] off, example or client; [--dp-clip],
  // [--dp-delta], [--dp-noise-multiplier], [--dp-epsilon], [--dp-accountant] rdp or
  // rdp-classic, [--dp-noise-seed].
  std::string dp = "off";
  double dp_clip = 1;
  double dp_delta = 1e-5;
  double dp_noise_multiplier = 0;
  double dp_epsilon = 0;
  std::string dp_accountant = "rdp";
  uint64_t dp_noise_seed = 0;
  // [--config FILE, or a positional argument ending in .toml] The TOML job file the values above
  // were read from; empty when there was none. Not a key of the job file itself.
  std::string job_file;

  // Where an option that was given came from: a flag (no file), or a line of the job file.
  struct Origin {
    std::string file;
    int line = 0;
  };
  // The options given, by name (the flag without dashes); an option left at its default is
  // absent. ParseJobCommandLine fills it; the launcher adds its own flags (--external-workers).
  std::map<std::string, Origin, std::less<>> given;
};

// Registers one flag per JobConfig field on `app`, bound to `*config` and showing its default, plus
// the job file as `--config FILE` or a positional `JOB.toml`. A flag given twice keeps the last
// value. `config` must outlive `app`'s parsing. Fails if a flag name is already taken.
absl::Status AddJobFlags(CLI::App& app, JobConfig* config);

enum class CommandLineAction {
  kRun,       // *config is filled in; call Validate() next.
  kShowHelp,  // --help was given: print app.help() to stdout and exit 0.
};

// Parses the command line into `*config`, which AddJobFlags(app, config) must have bound to `app`:
// the flags, then the job file for every option that no flag set, so flags win over the file.
// Paths in the job file (train, test, out, checkpoint-dir) are relative to the job file's folder.
// Fills config->given. Errors (unknown flag or key, with the closest known name; malformed value,
// unreadable job file, a TOML syntax error or wrong type, reported as "FILE:LINE: ...") come back
// as a status whose message is meant for the user; the launcher prints it and exits 2. Does not
// call Validate().
absl::StatusOr<CommandLineAction> ParseJobCommandLine(int argc, const char* const* argv,
                                                      CLI::App& app, JobConfig* config);

// Whether the job reads Criteo data: --format criteo, a .tsv --train file with --format auto,
// or (no --train) the synthetic data the launcher generates for --model ctr.
bool UsesCriteoData(const JobConfig& config);

// The typed job spec of `config`: every text parsed once, every value and combination checked
// (ValidateJobSpec), and that the given data files are readable. The run's files go under
// `out`: OUT/embeddings (the servers' RocksDB tier), OUT/checkpoints unless --checkpoint-dir,
// OUT/params.tsv when there is a test set. The InvalidArgument error names the flag and the bad
// value, and for a value from the job file, its file and line ("job.toml:3: workers = 0: ...").
// Without --train the spec has no data yet: the launcher generates it and fills it in.
absl::StatusOr<JobSpec> BuildJobSpec(const JobConfig& config);
// BuildJobSpec's verdict alone.
absl::Status Validate(const JobConfig& config);

// `status` with "FILE:LINE: " first when its message is about an option ("--name=...") whose
// value came from the job file; `status` itself otherwise.
absl::Status AttributeToJobFile(const absl::Status& status, const JobConfig& config);

// Whether `name` (a flag without dashes) is also a key of the job file.
bool IsJobFileKey(absl::string_view name);

// Whether the job-file key (or flag without dashes) `name` is a path, resolved against the job
// file's folder.
bool IsPathOption(absl::string_view name);

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_JOB_CONFIG_H_
