#include "launch/job_config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <sstream>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/string_view.h"
#include "compression/codec.h"
#include "embeddings/memory_budget.h"
#include "job/aggregate_rule.h"
#include "job/federated.h"
#include "job/job_spec.h"
#include "job/option_text.h"
#include "job/options.h"
#include "job/privacy_accountant.h"
#include "job/privacy_options.h"
#include "launch/spelling.h"
#include "toml++/toml.h"

namespace syncline {
namespace {

using FieldMember = std::variant<int JobConfig::*, uint64_t JobConfig::*, double JobConfig::*,
                                 std::string JobConfig::*>;

// One row per option, shared by the flag registration and the job-file reader so the two cannot
// drift apart.
struct Field {
  absl::string_view name;  // flag without "--", and job-file key
  FlagGroup group;
  FieldMember member;
  const char* help;
};

const std::array<Field, 81> kFields = {{
    {"servers", FlagGroup::kJob, &JobConfig::servers,
     "Number of parameter-server processes (1 to 4096); gossip and allreduce have none"},
    {"workers", FlagGroup::kJob, &JobConfig::workers, "Number of worker processes (1 to 4096)"},
    {"seed", FlagGroup::kJob, &JobConfig::seed,
     "Random seed of data generation, initialization and shuffling"},
    {"request-timeout", FlagGroup::kJob, &JobConfig::request_timeout_s,
     "Deadline of one push or pull, seconds"},
    {"max-reply", FlagGroup::kJob, &JobConfig::max_reply,
     "The largest pull reply a server builds, e.g. 1GiB (a larger pull is refused)"},
    {"max-parked", FlagGroup::kJob, &JobConfig::max_parked,
     "What one worker's pulls waiting for slow workers may weigh on a server (requests and "
     "replies), e.g. 2GiB"},
    {"reply-backlog", FlagGroup::kJob, &JobConfig::reply_backlog,
     "Bytes of replies a server holds for a worker that is not reading them before it drops "
     "them, e.g. 256MiB"},
    {"max-table-memory", FlagGroup::kJob, &JobConfig::max_table_memory,
     "What a server allocates for the tables declared to it, all together (dense values and "
     "optimizer state), e.g. 8GiB; a declaration past it is refused. auto: half of each "
     "server's machine's memory"},
    {"max-stores", FlagGroup::kJob, &JobConfig::max_stores,
     "Embedding stores (one RocksDB per sparse table, under OUT/embeddings) a server opens; a "
     "declaration past it is refused (1 to 1024)"},
    {"update-threads", FlagGroup::kJob, &JobConfig::update_threads,
     "Threads per server that share a large dense update (1: the server's own only)"},
    {"train", FlagGroup::kData, &JobConfig::train,
     "Training data file; empty: synthetic data generated into --out"},
    {"test", FlagGroup::kData, &JobConfig::test, "Test data file (needs --train)"},
    {"format", FlagGroup::kData, &JobConfig::format,
     "Data file format: auto (.csv is CSV, .tsv Criteo), libsvm, csv or criteo (streamed)"},
    {"index-base", FlagGroup::kData, &JobConfig::index_base,
     "First libsvm feature index: auto, 0 or 1"},
    {"gen-rows", FlagGroup::kData, &JobConfig::gen_rows, "Synthetic data: training examples"},
    {"gen-test-rows", FlagGroup::kData, &JobConfig::gen_test_rows,
     "Synthetic data: test examples (0: none)"},
    {"gen-features", FlagGroup::kData, &JobConfig::gen_features,
     "Synthetic data: feature dimension"},
    {"gen-nnz", FlagGroup::kData, &JobConfig::gen_nnz,
     "Synthetic data: nonzero features per example"},
    {"partition", FlagGroup::kData, &JobConfig::partition,
     "How training examples are split among workers: strided (i % workers), iid (seeded "
     "shuffle), dirichlet:ALPHA (per label, Dirichlet(ALPHA) shares; small ALPHA: skewed) or "
     "shards:K (K label-sorted shards per worker); histograms in OUT/label_histograms.tsv"},
    {"model", FlagGroup::kModel, &JobConfig::model,
     "Model: logreg, softmax, ctr (DLRM-style; Criteo data) or mlp (multilayer perceptron, "
     "softmax output; --hidden)"},
    {"classes", FlagGroup::kModel, &JobConfig::classes,
     "Number of classes (more than 2 needs --model softmax or mlp)"},
    {"embedding-dim", FlagGroup::kModel, &JobConfig::embedding_dim,
     "ctr: floats per categorical embedding"},
    {"hidden", FlagGroup::kModel, &JobConfig::hidden,
     "Hidden layer widths, comma-separated, input side first: ctr one (the top MLP's, default "
     "64), mlp 1 to 8 (default 256,128); each in [1, 4096]"},
    {"device", FlagGroup::kModel, &JobConfig::device,
     "Where workers compute: auto (GPU rank % visible GPUs when the build has CUDA and a GPU is "
     "visible, else the CPU; logs which and why), cpu, cuda or cuda:N (exits with code 2 naming "
     "what is missing when there is no such GPU)"},
    {"epochs", FlagGroup::kModel, &JobConfig::epochs, "Passes over the training data"},
    {"batch-size", FlagGroup::kModel, &JobConfig::batch_size, "Examples per worker step"},
    {"optimizer", FlagGroup::kModel, &JobConfig::optimizer,
     "Server-side update rule: sgd, adagrad, adam, ftrl, momentum (heavy ball, --lr and beta "
     "0.9) or yogi"},
    {"lr", FlagGroup::kModel, &JobConfig::learning_rate, "Learning rate"},
    {"l2", FlagGroup::kModel, &JobConfig::l2, "L2 regularization strength"},
    {"sync", FlagGroup::kSync, &JobConfig::sync,
     "Consistency model: bsp, asp, ssp:S (workers at most S steps ahead of the slowest), or "
     "serverless gossip:ring|exp|random (D-PSGD; :async for push-sum), or serverless "
     "allreduce[:ring|doubling|halving|hier|auto] (synchronous SGD, the same model as bsp), or "
     "hybrid "
     "(embeddings on the servers under --embedding-sync, the dense layers all-reduced every "
     "step), or fedavg (federated averaging: workers are clients that train locally for a "
     "round; see --rounds)"},
    {"allreduce-rows", FlagGroup::kSync, &JobConfig::allreduce_rows,
     "--sync allreduce: auto all-gathers the rows a step touched as (key, gradient) pairs "
     "when that moves fewer bytes than all-reducing every row (sparse batches), dense always "
     "all-reduces every row, pairs always all-gathers"},
    {"embedding-sync", FlagGroup::kSync, &JobConfig::embedding_sync,
     "--sync hybrid: the embeddings' consistency model on the servers, asp or ssp:S (the "
     "dense layers are all-reduced every step whatever it is)"},
    {"consensus-step", FlagGroup::kSync, &JobConfig::consensus_step,
     "Gossip with --compress topk:R or sign1 (CHOCO-SGD): the consensus step in (0, 1]; 0 "
     "picks the codec's (min(1, 2R) for topk:R, 0.1 for sign1)"},
    {"read-ahead", FlagGroup::kSync, &JobConfig::read_ahead,
     "on: under asp and ssp:S (S >= 1) pull the next batch while the current one computes "
     "(faster steps, one more step of staleness); off: every pull in its own step (bsp never "
     "reads ahead)"},
    {"straggler", FlagGroup::kSync, &JobConfig::straggler,
     "Experiments: RANK:FACTOR makes worker RANK always FACTOR times slower"},
    {"jitter", FlagGroup::kSync, &JobConfig::jitter,
     "Experiments: P:FACTOR makes each step FACTOR times slower with probability P"},
    {"delay", FlagGroup::kSync, &JobConfig::delay,
     "Experiments: RANK:MS delays each request of worker RANK by MS milliseconds"},
    {"min-step-ms", FlagGroup::kSync, &JobConfig::min_step_ms,
     "Experiments: pad each step's compute to at least this many milliseconds"},
    {"compress", FlagGroup::kCompression, &JobConfig::compress,
     "Gradient compression with error feedback: none, topk:R, sign1[:CHUNK] or fp16 (sparse "
     "rows stay sparse: top-K and sign1 keep a residual per row, see --residual-rows)"},
    {"compress-pull", FlagGroup::kCompression, &JobConfig::compress_pull,
     "Compressed pulls of sparse rows: none, fp16, topk:R or sign1[:CHUNK]. Servers answer "
     "with the change since the worker's last pull, keeping what they did not send (error "
     "feedback per worker; see --pull-copy-rows)"},
    {"residual-rows", FlagGroup::kCompression, &JobConfig::residual_rows,
     "Error-feedback rows a worker keeps per server for compressed sparse pushes; beyond it "
     "the oldest are sent whole (a GPU worker keeps them on its GPU: about 2 x rows x dim x 4 "
     "bytes per server)"},
    {"pull-copy-rows", FlagGroup::kCompression, &JobConfig::pull_copy_rows,
     "Rows a server keeps per worker of what that worker holds (--compress-pull); beyond it "
     "the least recently pulled are dropped and sent whole again (a GPU worker keeps its copy "
     "on its GPU: at most rows x dim x 4 bytes per server)"},
    {"embedding-memory", FlagGroup::kEmbeddings, &JobConfig::embedding_memory,
     "Memory budget of each server's embedding table: bytes (2GiB) or rows (1000000rows); the "
     "rest lives in RocksDB"},
    {"embedding-admit-after", FlagGroup::kEmbeddings, &JobConfig::embedding_admit_after,
     "Create an embedding row only at the N-th sighting of its id (0: at the first)"},
    {"embedding-expire-steps", FlagGroup::kEmbeddings, &JobConfig::embedding_expire_steps,
     "Delete embedding rows not touched for this many steps (0: never)"},
    {"min-workers", FlagGroup::kCheckpoints, &JobConfig::min_workers,
     "Go on while at least this many workers are left (bsp, ssp, asp, gossip, allreduce: its "
     "collective re-forms over the others at the next step): a lost worker's remaining batches "
     "of the epoch, and its share of later epochs, go to the workers still training "
     "(docs/FAULT_TOLERANCE.md). 0: the mode's default, every worker under bsp, ssp:0 and "
     "allreduce (a lost worker stops the job), 1 under ssp:S with S >= 1, asp and gossip"},
    {"max-restarts", FlagGroup::kCheckpoints, &JobConfig::max_restarts,
     "Restart up to this many failed nodes (workers or servers) in place, in all: the launcher "
     "starts a replacement, which restores the newest complete checkpoint, and every other node "
     "rolls back to it without restarting; all-reduce and gossip peers meet again under a new "
     "generation (bsp, ssp, asp, allreduce, hybrid, synchronous gossip; needs "
     "--checkpoint-every or --checkpoint-seconds; launcher local or ssh). Under bsp, allreduce, "
     "hybrid with ssp:0 rows and synchronous gossip the result is that of a run without "
     "failures, bit for bit. 0: a failed node is handled as --min-workers says"},
    {"max-workers", FlagGroup::kCheckpoints, &JobConfig::max_workers,
     "Let workers join the running job, up to this many workers in all: start one with "
     "`syncline-worker --coordinator ADDR --join` (the launcher logs ADDR). It enters at the "
     "others' clock with the current model (gossip: every peer takes it into its graph at one "
     "step, and it starts from its neighbours' models; allreduce: the ring re-forms with it at a "
     "step boundary and a member broadcasts it the model), and the workers still training give "
     "it every (n+1)-th of their remaining batches (bsp, ssp, asp, gossip, allreduce; not with "
     "checkpoints, --max-restarts or --compress topk/sign1 of gossip and allreduce). 0: "
     "--workers, no joins"},
    {"heartbeat-interval", FlagGroup::kCheckpoints, &JobConfig::heartbeat_interval_s,
     "Seconds between heartbeats"},
    {"heartbeat-timeout", FlagGroup::kCheckpoints, &JobConfig::heartbeat_timeout_s,
     "Seconds without a heartbeat before a node is declared dead"},
    {"peer-timeout", FlagGroup::kCheckpoints, &JobConfig::peer_timeout_s,
     "Gossip: seconds of silence before a neighbour is declared dead and dropped"},
    {"checkpoint-every", FlagGroup::kCheckpoints, &JobConfig::checkpoint_every,
     "Checkpoint every this many steps (0: never); the launcher warns when the job ends "
     "before the first"},
    {"checkpoint-seconds", FlagGroup::kCheckpoints, &JobConfig::checkpoint_seconds,
     "Also checkpoint about every this many seconds (0: never)"},
    {"checkpoint-dir", FlagGroup::kCheckpoints, &JobConfig::checkpoint_dir,
     "Checkpoint folder (default: OUT/checkpoints)"},
    {"checkpoint-keep", FlagGroup::kCheckpoints, &JobConfig::checkpoint_keep,
     "Complete checkpoints to keep"},
    {"aggregate", FlagGroup::kFederated, &JobConfig::aggregate,
     "How servers combine a bsp clock's or fedavg round's updates: mean, median, "
     "trimmed-mean:B, krum:F, multi-krum:F:M or bulyan:F (Byzantine-robust rules)"},
    {"byzantine", FlagGroup::kFederated, &JobConfig::byzantine,
     "Experiments: RANKS:ATTACK makes those workers send crafted updates; ATTACK is signflip, "
     "gaussian:SIGMA, scale:K or labelflip (e.g. 1,2:signflip)"},
    {"rounds", FlagGroup::kFederated, &JobConfig::rounds, "fedavg: communication rounds"},
    {"participation", FlagGroup::kFederated, &JobConfig::participation,
     "fedavg: fraction of the clients picked (seeded) for each round"},
    {"local-epochs", FlagGroup::kFederated, &JobConfig::local_epochs,
     "fedavg: epochs over its own examples a picked client trains per round"},
    {"local-steps", FlagGroup::kFederated, &JobConfig::local_steps,
     "fedavg: steps a picked client trains per round instead (0: use --local-epochs)"},
    {"round-timeout", FlagGroup::kFederated, &JobConfig::round_timeout_s,
     "fedavg: seconds the servers wait for a round's clients before aggregating without them"},
    {"client-dropout", FlagGroup::kFederated, &JobConfig::client_dropout,
     "fedavg experiments: probability that a picked client vanishes from a round (seeded)"},
    {"prox-mu", FlagGroup::kFederated, &JobConfig::prox_mu,
     "fedavg: FedProx proximal weight mu in the clients' local steps (0: plain FedAvg)"},
    {"server-lr", FlagGroup::kFederated, &JobConfig::server_lr,
     "fedavg: the servers' step on the averaged client update (1: the model becomes the average)"},
    {"server-optimizer", FlagGroup::kFederated, &JobConfig::server_optimizer,
     "fedavg: the servers' rule for a round's mean update at --server-lr (Reddi et al. 2021): "
     "sgd (FedAvg), momentum:B (FedAvgM), adagrad[:TAU], adam[:TAU] or yogi[:TAU] (beta1 0.9, "
     "beta2 0.99, TAU default 1e-3)"},
    {"secure-aggregation", FlagGroup::kFederated, &JobConfig::secure_aggregation,
     "fedavg: on makes the server learn only the sum of a round's updates (Bonawitz et al. "
     "2017's masks; needs --servers 1, --aggregate mean, --compress none or fp16; with --dp "
     "client the clients add Skellam noise shares before masking; docs/PRIVACY.md)"},
    {"secagg-threshold", FlagGroup::kFederated, &JobConfig::secagg_threshold,
     "--secure-aggregation: clients that must survive a round for its sum to be revealed (0: "
     "a majority of the round's clients, floor(k/2)+1; with --secagg-neighbours K, of a "
     "neighbourhood, floor((K+1)/2)+1); fewer end the round empty"},
    {"secagg-neighbours", FlagGroup::kFederated, &JobConfig::secagg_neighbours,
     "--secure-aggregation: each client masks with and shares its secrets among K others, a "
     "random K-regular graph per round (Bell et al. 2020; K even), instead of every other "
     "client: a client's cost grows with K, not with the round's clients (0: every other)"},
    {"dp", FlagGroup::kPrivacy, &JobConfig::dp,
     "Differential privacy: off, example (DP-SGD: per-example clipping, Poisson batches, "
     "Gaussian noise each step; bsp or allreduce) or client (DP-FedAvg: per-client clipping, "
     "Poisson rounds, noise each round; fedavg; the clients' Skellam shares under "
     "--secure-aggregation on). docs/PRIVACY.md"},
    {"dp-clip", FlagGroup::kPrivacy, &JobConfig::dp_clip,
     "--dp: the L2 norm each example's gradient (each client's round update) is clipped to"},
    {"dp-delta", FlagGroup::kPrivacy, &JobConfig::dp_delta, "--dp: the delta of (epsilon, delta)"},
    {"dp-noise-multiplier", FlagGroup::kPrivacy, &JobConfig::dp_noise_multiplier,
     "--dp: the noise's standard deviation over --dp-clip (0: calibrated from --dp-epsilon)"},
    {"dp-epsilon", FlagGroup::kPrivacy, &JobConfig::dp_epsilon,
     "--dp: the budget: alone, the noise is calibrated to it; with --dp-noise-multiplier, a job "
     "whose planned steps spend more is refused (0: none)"},
    {"dp-accountant", FlagGroup::kPrivacy, &JobConfig::dp_accountant,
     "--dp: rdp (Canonne-Kamath-Steinke 2020's conversion, as Google's dp-accounting) or "
     "rdp-classic (Mironov 2017's)"},
    {"dp-noise-seed", FlagGroup::kPrivacy, &JobConfig::dp_noise_seed,
     "--dp experiments: draw the sampling and noise from this seed so that the run repeats (0: "
     "fresh randomness; a seeded run's noise is known to whoever knows the seed)"},
    {"out", FlagGroup::kOutput, &JobConfig::out,
     "Output directory for metrics, logs and synthetic data"},
    {"log-every", FlagGroup::kOutput, &JobConfig::log_every,
     "Steps between metrics rows and progress updates"},
    {"eval-every", FlagGroup::kOutput, &JobConfig::eval_every,
     "Evaluate the model on --test every N steps of worker 0, or every Ns seconds, while the job "
     "trains (held-out curves in metrics.csv, TensorBoard and /metrics; under bsp the model "
     "after exactly N steps of every worker); 0: at the end only. Its time is left out of the "
     "step rate"},
    {"trace", FlagGroup::kOutput, &JobConfig::trace,
     "on: write OUT/trace.json (Chrome trace format, for ui.perfetto.dev): every node's "
     "--trace-steps, a worker's steps with their phases, a server's requests, checkpoints"},
    {"trace-steps", FlagGroup::kOutput, &JobConfig::trace_steps,
     "A:B: the steps [A, B) --trace on records"},
}};

std::vector<std::string> FieldNames() {
  std::vector<std::string> names;
  for (const Field& field : kFields) names.emplace_back(field.name);
  return names;
}

const Field* FindField(absl::string_view name) {
  for (const Field& field : kFields) {
    if (field.name == name) return &field;
  }
  return nullptr;
}

absl::string_view TypeName(toml::node_type type) {
  switch (type) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a number";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::date:
    case toml::node_type::time:
    case toml::node_type::date_time:
      return "a date/time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

// Stores `node` into `config->*member`, or says why it cannot.
class FieldAssigner {
 public:
  FieldAssigner(const toml::node& node, JobConfig* config) : node_(node), config_(config) {}

  std::string operator()(int JobConfig::*member) const {
    const std::optional<int64_t> value = node_.value_exact<int64_t>();
    if (!value) return Expected("an integer");
    if (*value < std::numeric_limits<int>::min() || *value > std::numeric_limits<int>::max()) {
      return absl::StrCat("value ", *value, " is out of range");
    }
    config_->*member = static_cast<int>(*value);
    return "";
  }
  std::string operator()(uint64_t JobConfig::*member) const {
    const std::optional<int64_t> value = node_.value_exact<int64_t>();
    if (!value) return Expected("an integer");
    if (*value < 0) return absl::StrCat("value ", *value, " is negative");
    config_->*member = static_cast<uint64_t>(*value);
    return "";
  }
  std::string operator()(double JobConfig::*member) const {
    // `lr = 1` should work, so integers count as numbers.
    if (!node_.is_floating_point() && !node_.is_integer()) return Expected("a number");
    config_->*member = *node_.value<double>();
    return "";
  }
  std::string operator()(std::string JobConfig::*member) const {
    if (const std::optional<std::string> value = node_.value_exact<std::string>()) {
      config_->*member = *value;
      return "";
    }
    // `index-base = 1` reads more naturally than `index-base = "1"`, and `hidden = 64` or
    // `hidden = [256, 128]` than `hidden = "256,128"`.
    const bool integer_text = member == &JobConfig::index_base || member == &JobConfig::hidden;
    if (integer_text && node_.is_integer()) {
      config_->*member = absl::StrCat(*node_.value_exact<int64_t>());
      return "";
    }
    if (member == &JobConfig::hidden && node_.is_array()) {
      std::vector<int64_t> widths;
      for (const toml::node& width : *node_.as_array()) {
        const std::optional<int64_t> value = width.value_exact<int64_t>();
        if (!value) return "expected an array of integers, e.g. [256, 128]";
        widths.push_back(*value);
      }
      config_->*member = absl::StrJoin(widths, ",");
      return "";
    }
    return Expected(member == &JobConfig::hidden ? "a string, an integer or an array of integers"
                                                 : "a string");
  }

 private:
  std::string Expected(absl::string_view type) const {
    return absl::StrCat("expected ", type, ", got ", TypeName(node_.type()));
  }

  const toml::node& node_;
  JobConfig* config_;
};

// Applies the job file at `path` to `config`, except the options for which `set_by_flag` is true;
// those are still type-checked, so a broken file is an error either way.
// Every text option, from a flag or a job file, without control characters (job/option_text.h).
absl::Status CheckOptionTexts(const JobConfig& c) {
  for (const Field& field : kFields) {
    const auto* member = std::get_if<std::string JobConfig::*>(&field.member);
    if (member == nullptr) continue;
    if (absl::Status s = RefuseControlCharacters(absl::StrCat("--", field.name), c.**member);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ApplyJobFile(const std::string& path,
                          const std::function<bool(absl::string_view name)>& set_by_flag,
                          JobConfig* config) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::ErrnoToStatus(errno, absl::StrFormat("cannot read job file %s", path));
  }
  std::stringstream text;
  text << in.rdbuf();

  toml::table table;
  try {
    table = toml::parse(text.str(), path);
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s:%d: %s", path, e.source().begin.line, e.description()));
  }

  // Every problem in the file at once, in file order, saves the user a round trip per mistake.
  std::vector<std::pair<uint32_t, std::string>> errors;
  for (auto&& [key, node] : table) {
    const absl::string_view name(key.str().data(), key.str().size());
    const Field* field = FindField(name);
    if (field == nullptr) {
      errors.emplace_back(key.source().begin.line,
                          absl::StrCat("unknown key '", name, "'", DidYouMean(name, FieldNames())));
      continue;
    }
    JobConfig scratch;
    const bool overridden = set_by_flag(field->name);
    JobConfig* target = overridden ? &scratch : config;
    const std::string error = std::visit(FieldAssigner(node, target), field->member);
    if (!error.empty()) {
      errors.emplace_back(node.source().begin.line, absl::StrCat(field->name, ": ", error));
      continue;
    }
    if (overridden) continue;
    const int line = static_cast<int>(node.source().begin.line);
    config->given[std::string(field->name)] = JobConfig::Origin{path, line};
    // A job file names its data and folders as seen from where it lies, wherever it is run
    // from.
    if (IsPathOption(field->name)) {
      std::string& value = config->*std::get<std::string JobConfig::*>(field->member);
      if (!value.empty() && std::filesystem::path(value).is_relative()) {
        value = (std::filesystem::path(path).parent_path() / value).lexically_normal().string();
      }
    }
  }
  if (errors.empty()) return absl::OkStatus();
  std::stable_sort(errors.begin(), errors.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  return absl::InvalidArgumentError(absl::StrJoin(
      errors, "\n", [&](std::string* out, const std::pair<uint32_t, std::string>& error) {
        absl::StrAppendFormat(out, "%s:%d: %s", path, error.first, error.second);
      }));
}

// " (did you mean '--servers'?)" for the unknown flags among what `app` did not take, each
// with the flag it is close to ("... '--servers' for --severs, '--workers' for --wrokers").
std::string SuggestFlags(const CLI::App& app) {
  std::vector<std::string> known;
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& name : option->get_lnames()) known.push_back(name);
  }
  std::vector<std::pair<std::string, std::string>> suggestions;  // typed, meant
  for (const std::string& arg : app.remaining()) {
    if (!arg.starts_with("--")) continue;
    const std::string typed = arg.substr(0, arg.find('='));
    if (std::optional<std::string> meant = ClosestName(typed.substr(2), known)) {
      suggestions.emplace_back(typed, "--" + *meant);
    }
  }
  if (suggestions.empty()) return "";
  if (suggestions.size() == 1)
    return absl::StrCat(" (did you mean '", suggestions[0].second, "'?)");
  return absl::StrCat(" (did you mean ",
                      absl::StrJoin(suggestions, ", ",
                                    [](std::string* out, const auto& s) {
                                      absl::StrAppend(out, "'", s.second, "' for ", s.first);
                                    }),
                      "?)");
}

// Parses the text of `flag` with `parse` into `*out`; a bad text is "--flag='text': must be one
// of ..." with the allowed names.
template <typename T, typename Parse>
absl::Status ParseOneOf(absl::string_view flag, const std::string& text, Parse parse,
                        absl::string_view allowed, T* out) {
  absl::StatusOr<T> parsed = parse(text);
  if (!parsed.ok()) {
    return InvalidFlag(flag, absl::StrCat("'", text, "'"),
                       absl::StrCat("must be one of ", allowed));
  }
  *out = *parsed;
  return absl::OkStatus();
}

absl::Status CheckReadableFile(absl::string_view flag, const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || access(path.c_str(), R_OK) != 0) {
    return InvalidFlag(flag, path, absl::StrCat("cannot read: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) return InvalidFlag(flag, path, "not a regular file");
  return absl::OkStatus();
}

// The phases of BuildJobSpec, each of one kind of option: the first error found is the one
// reported, so their order is the flags' order of checking.

// The options that are one of a few names.
absl::Status ParseNamedOptions(const JobConfig& c, JobSpec& s) {
  for (const absl::Status& status : {
           CheckAtLeast("servers", c.servers, 1),
           ParseOneOf("model", c.model, ParseModel, "logreg, softmax, ctr, mlp", &s.model.kind),
           ParseOneOf("format", c.format, ParseDataFormat, "auto, libsvm, csv, criteo",
                      &s.data.format),
           ParseOneOf("index-base", c.index_base, ParseIndexBase, "auto, 0, 1", &s.data.index_base),
           ParseOneOf("optimizer", c.optimizer, ParseOptimizer,
                      "sgd, adagrad, adam, ftrl, momentum, yogi", &s.training.optimizer),
       }) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

// --sync, and the options of one mode's exchange that change its text: --allreduce-rows and
// --embedding-sync; also --hidden and --device, which the mode's checks read.
absl::Status ParseSyncAndModel(const JobConfig& c, JobSpec& s) {
  absl::StatusOr<SyncMode> sync = ParseSyncMode(c.sync);
  if (!sync.ok()) {
    std::string rule =
        "must be bsp, asp, ssp:S with an integer staleness S >= 0, "
        "gossip:ring|exp|random[:async], allreduce[:ring|doubling|halving|hier|auto], "
        "hybrid[:asp|:ssp:S] or fedavg";
    // A gossip or all-reduce mode's own error says which part is wrong.
    if (c.sync.starts_with("gossip"))
      rule = std::string(ParseGossipMode(c.sync).status().message());
    if (c.sync.starts_with("allreduce") || c.sync.starts_with("hybrid")) {
      rule = std::string(sync.status().message());
    }
    return InvalidFlag("sync", absl::StrCat("'", c.sync, "'"), rule);
  }
  s.sync = *sync;
  absl::StatusOr<std::vector<int>> hidden = ParseHidden(c.hidden);
  if (!hidden.ok()) return InvalidFlag("hidden", c.hidden, hidden.status().message());
  // Given here or not, the spec says the widths (the workers and the manifest read them).
  s.model.hidden = hidden->empty() ? DefaultHidden(s.model.kind) : *hidden;
  absl::StatusOr<DeviceSpec> device = ParseDevice(c.device);
  if (!device.ok()) return InvalidFlag("device", c.device, device.status().message());
  s.device = *device;
  if (auto rows = ParseOneOf("allreduce-rows", c.allreduce_rows, ParseAllReduceRows,
                             "auto, dense, pairs", &s.sync.allreduce_rows);
      !rows.ok()) {
    return rows;
  }
  if (c.embedding_sync.empty()) return absl::OkStatus();
  if (!s.sync.hybrid() || c.sync.starts_with("hybrid:")) {
    return InvalidFlag(
        "embedding-sync", c.embedding_sync,
        s.sync.hybrid() ? "is given twice: also by --sync " + c.sync : "is for --sync hybrid");
  }
  auto embedding = ParseSyncMode("hybrid:" + c.embedding_sync);
  if (!embedding.ok()) {
    return InvalidFlag("embedding-sync", c.embedding_sync, "must be asp or ssp:S (S >= 0)");
  }
  s.sync.staleness = embedding->staleness;
  return absl::OkStatus();
}

// The codecs and the state they keep, and --read-ahead.
absl::Status ParseCompression(const JobConfig& c, JobSpec& s) {
  absl::StatusOr<CodecSpec> codec = ParseCodec(c.compress);
  if (!codec.ok()) return InvalidFlag("compress", c.compress, codec.status().message());
  s.training.codec = *codec;
  absl::StatusOr<CodecSpec> pull_codec = ParseCodec(c.compress_pull);
  if (!pull_codec.ok()) {
    return InvalidFlag("compress-pull", c.compress_pull, pull_codec.status().message());
  }
  s.training.pull_codec = *pull_codec;
  s.training.residual_rows = c.residual_rows;
  s.sync.consensus_step = c.consensus_step;
  s.training.pull_copy_rows = c.pull_copy_rows;
  if (c.read_ahead != "on" && c.read_ahead != "off") {
    return InvalidFlag("read-ahead", absl::StrCat("'", c.read_ahead, "'"), "must be on or off");
  }
  s.training.read_ahead = c.read_ahead == "on";
  return absl::OkStatus();
}

// How the examples are split, how updates are combined and attacked, and federated rounds.
absl::Status ParsePartitionAndRounds(const JobConfig& c, JobSpec& s) {
  absl::StatusOr<PartitionSpec> partition = ParsePartition(c.partition);
  if (!partition.ok()) return InvalidFlag("partition", c.partition, partition.status().message());
  s.data.partition = *partition;
  absl::StatusOr<AggregateRule> aggregate = ParseAggregateRule(c.aggregate);
  if (!aggregate.ok()) return InvalidFlag("aggregate", c.aggregate, aggregate.status().message());
  s.aggregate = *aggregate;
  absl::StatusOr<JobSpec::Byzantine> byzantine = ParseByzantine(c.byzantine);
  if (!byzantine.ok()) return InvalidFlag("byzantine", c.byzantine, byzantine.status().message());
  s.byzantine = *byzantine;
  s.federated = JobSpec::Federated{.rounds = c.rounds,
                                   .participation = c.participation,
                                   .local_epochs = c.local_epochs,
                                   .local_steps = c.local_steps,
                                   .round_timeout_s = c.round_timeout_s,
                                   .client_dropout = c.client_dropout,
                                   .prox_mu = c.prox_mu,
                                   .server_lr = c.server_lr};
  return absl::OkStatus();
}

// --server-optimizer, --secure-aggregation and --dp. The --dp-* flags without --dp are refused:
// a user who sets a budget and forgets --dp would train without privacy. An explicit --dp off
// lets them be (a job file's DP settings, turned off on the command line for a baseline).
absl::Status ParsePrivacy(const JobConfig& c, JobSpec& s) {
  absl::StatusOr<ServerOptimizerSpec> rule = ParseServerOptimizer(c.server_optimizer);
  if (!rule.ok())
    return InvalidFlag("server-optimizer", c.server_optimizer, rule.status().message());
  s.federated.server_optimizer = *rule;
  if (c.secure_aggregation != "on" && c.secure_aggregation != "off") {
    return InvalidFlag("secure-aggregation", absl::StrCat("'", c.secure_aggregation, "'"),
                       "must be on or off");
  }
  s.federated.secure_aggregation = c.secure_aggregation == "on";
  s.federated.secagg_threshold = c.secagg_threshold;
  s.federated.secagg_neighbours = c.secagg_neighbours;
  if (auto s2 = ParseOneOf("dp", c.dp, ParseDpLevel, "off, example, client", &s.privacy.level);
      !s2.ok()) {
    return s2;
  }
  if (auto s2 = ParseOneOf("dp-accountant", c.dp_accountant, ParseRdpConversion, "rdp, rdp-classic",
                           &s.privacy.accountant);
      !s2.ok()) {
    return s2;
  }
  s.privacy.clip = c.dp_clip;
  s.privacy.delta = c.dp_delta;
  s.privacy.noise_multiplier = c.dp_noise_multiplier;
  s.privacy.epsilon = c.dp_epsilon;
  s.privacy.noise_seed = c.dp_noise_seed;
  if (!s.privacy.on() && !c.given.contains("dp")) {
    for (const char* flag : {"dp-clip", "dp-delta", "dp-noise-multiplier", "dp-epsilon",
                             "dp-accountant", "dp-noise-seed"}) {
      if (c.given.contains(flag)) {
        return InvalidFlag(flag, "given", "needs --dp example or --dp client (--dp is off)");
      }
    }
  }
  return absl::OkStatus();
}

// The sizes a server holds: its replies, parked pulls and backlog, and its embeddings' memory.
absl::Status ParseServerSizes(const JobConfig& c, JobSpec& s) {
  for (const auto& [flag, text, out] :
       {std::tuple{"max-reply", &c.max_reply, &s.limits.reply_bytes},
        std::tuple{"max-parked", &c.max_parked, &s.limits.parked_bytes_per_worker},
        std::tuple{"reply-backlog", &c.reply_backlog, &s.limits.reply_backlog_bytes}}) {
    absl::StatusOr<MemoryBudget> size = ParseMemoryBudget(*text);
    if (!size.ok() || size->bytes == 0) {
      return InvalidFlag(flag, *text, "must be a size in bytes, e.g. 512MiB or 2GiB");
    }
    *out = size->bytes;
  }
  absl::StatusOr<MemoryBudget> budget = ParseMemoryBudget(c.embedding_memory);
  if (!budget.ok()) {
    return InvalidFlag("embedding-memory", c.embedding_memory, budget.status().message());
  }
  if (budget->bytes != 0 && budget->bytes < (uint64_t{1} << 20)) {
    return InvalidFlag("embedding-memory", c.embedding_memory,
                       "a byte budget must be at least 1MiB (the tier's rows, their bookkeeping "
                       "and its index; give rows, e.g. 100rows, for a tiny tier)");
  }
  s.embedding.memory_rows = budget->rows;
  s.embedding.memory_bytes = budget->bytes;
  if (c.max_table_memory != "auto") {
    absl::StatusOr<MemoryBudget> size = ParseMemoryBudget(c.max_table_memory);
    if (!size.ok() || size->bytes == 0) {
      return InvalidFlag("max-table-memory", c.max_table_memory,
                         "must be auto or a size in bytes, e.g. 8GiB");
    }
    s.limits.table_bytes = size->bytes;
  }
  s.limits.stores = c.max_stores;
  return absl::OkStatus();
}

// --trace, --trace-steps and --eval-every.
absl::Status ParseObserve(const JobConfig& c, JobSpec& s) {
  if (c.trace != "on" && c.trace != "off") {
    return InvalidFlag("trace", absl::StrCat("'", c.trace, "'"), "must be on or off");
  }
  if (c.trace == "on") {
    s.observe.trace_dir = (std::filesystem::path(c.out) / "trace").string();
  }
  absl::StatusOr<std::pair<int64_t, int64_t>> steps = ParseStepWindow(c.trace_steps);
  if (!steps.ok()) return InvalidFlag("trace-steps", c.trace_steps, steps.status().message());
  std::tie(s.observe.trace_first, s.observe.trace_end) = *steps;
  absl::StatusOr<EvalEvery> every = ParseEvalEvery(c.eval_every);
  if (!every.ok()) return InvalidFlag("eval-every", c.eval_every, every.status().message());
  s.observe.eval_every_steps = every->steps;
  s.observe.eval_every_seconds = every->seconds;
  return absl::OkStatus();
}

// The slowness injected for experiments; a rank must name one of the workers.
absl::Status ParseSlowness(const JobConfig& c, JobSpec& s) {
  if (!c.straggler.empty()) {
    auto straggler = ParseStraggler(c.straggler);
    if (!straggler.ok()) return straggler.status();
    if (straggler->first >= c.workers) {
      return InvalidFlag("straggler", c.straggler,
                         absl::StrCat("names no worker (", c.workers, " workers)"));
    }
    std::tie(s.slowness.straggler_rank, s.slowness.straggler_factor) = *straggler;
  }
  if (!c.delay.empty()) {
    auto delay = ParseDelay(c.delay);
    if (!delay.ok()) return delay.status();
    if (delay->first >= c.workers) {
      return InvalidFlag("delay", c.delay,
                         absl::StrCat("names no worker (", c.workers, " workers)"));
    }
    std::tie(s.slowness.delay_rank, s.slowness.delay_ms) = *delay;
  }
  if (!c.jitter.empty()) {
    auto jitter = ParseJitter(c.jitter);
    if (!jitter.ok()) return jitter.status();
    std::tie(s.slowness.jitter_probability, s.slowness.jitter_factor) = *jitter;
  }
  s.slowness.min_step_ms = c.min_step_ms;
  return absl::OkStatus();
}

// The options that are numbers or paths as they are.
void CopyPlainOptions(const JobConfig& c, JobSpec& s) {
  // Gossip peers are serverless.
  s.servers = s.sync.serverless() ? 0 : c.servers;
  s.workers = c.workers;
  s.min_workers = c.min_workers;
  s.max_restarts = c.max_restarts;
  s.max_workers = c.max_workers;
  s.model.classes = c.classes;
  s.model.embedding_dim = c.embedding_dim;
  s.data.train = c.train;
  s.data.test = c.test;
  s.training.epochs = c.epochs;
  s.training.batch_size = c.batch_size;
  s.training.learning_rate = c.learning_rate;
  s.training.l2 = c.l2;
  s.training.log_every = c.log_every;
  s.seed = c.seed;
  s.timeouts.request_s = c.request_timeout_s;
  s.timeouts.heartbeat_interval_s = c.heartbeat_interval_s;
  s.timeouts.heartbeat_timeout_s = c.heartbeat_timeout_s;
  s.timeouts.peer_s = c.peer_timeout_s;
  s.embedding.admit_after = c.embedding_admit_after;
  s.embedding.expire_steps = c.embedding_expire_steps;
  s.update_threads = c.update_threads;
  s.checkpoint.every = c.checkpoint_every;
  s.checkpoint.seconds = c.checkpoint_seconds;
  s.checkpoint.keep = c.checkpoint_keep;
  // Where the run's files go, all under --out unless said otherwise.
  const std::filesystem::path out(c.out);
  s.embedding.dir = (out / "embeddings").string();
  s.checkpoint.dir = c.checkpoint_dir.empty() ? (out / "checkpoints").string() : c.checkpoint_dir;
  if (!c.test.empty()) s.data.params_out = (out / "params.tsv").string();
  if (s.data.partition.kind != PartitionKind::kStrided) {
    s.data.histograms_out = (out / "label_histograms.tsv").string();
  }
}

// What only the launcher uses: the run folder, the data it generates, the files it is given.
absl::Status CheckLauncherInputs(const JobConfig& c) {
  if (c.out.empty()) return InvalidFlag("out", "''", "must name a directory");
  // The --gen-* flags shape the synthetic data, made only without --train.
  for (const absl::Status& status : {
           CheckAtLeast("gen-rows", c.gen_rows, 1),
           CheckAtLeast("gen-test-rows", c.gen_test_rows, 0),
           CheckAtLeast("gen-features", c.gen_features, 1),
           CheckAtLeast("gen-nnz", c.gen_nnz, 1),
       }) {
    if (!status.ok() && c.train.empty()) return status;
  }
  if (c.train.empty() && c.gen_nnz > c.gen_features) {
    return InvalidFlag("gen-nnz", absl::StrCat(c.gen_nnz),
                       absl::StrCat("must be <= --gen-features (", c.gen_features, ")"));
  }
  if (!c.train.empty()) {
    if (absl::Status status = CheckReadableFile("train", c.train); !status.ok()) return status;
  }
  if (!c.test.empty()) {
    if (absl::Status status = CheckReadableFile("test", c.test); !status.ok()) return status;
  }
  return absl::OkStatus();
}

}  // namespace

bool UsesCriteoData(const JobConfig& c) {
  JobSpec spec;
  spec.data.train = c.train;
  (void)ParseOneOf("format", c.format, ParseDataFormat, "", &spec.data.format);
  (void)ParseOneOf("model", c.model, ParseModel, "", &spec.model.kind);
  return UsesCriteoData(spec);
}

absl::Status AddJobFlags(CLI::App& app, JobConfig* config) {
  try {
    for (const Field& field : kFields) {
      CLI::Option* option = std::visit(
          [&](auto member) {
            CLI::Option* added =
                app.add_option(absl::StrCat("--", field.name), config->*member, field.help);
            // CLI11 2.1 converts with strtoull, which takes "-1" as 2^64-1 and saturates on
            // overflow; absl rejects both.
            if constexpr (std::is_same_v<decltype(member), uint64_t JobConfig::*>) {
              added->check(CLI::Validator(
                  [](std::string& value) -> std::string {
                    uint64_t parsed;
                    if (absl::SimpleAtoi(value, &parsed)) return "";
                    return absl::StrFormat("'%s' is not an integer in [0, 2^64)", value);
                  },
                  "", "uint64"));
            }
            return added;
          },
          field.member);
      option->capture_default_str()
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
          ->group(FlagGroupName(field.group));
    }
    CLI::Option* config_flag =
        app.add_option("--config", config->job_file,
                       "TOML job file: keys are the flag names without dashes; flags win over it")
            ->type_name("FILE")
            ->group(FlagGroupName(FlagGroup::kJob));
    CLI::Option* positional =
        app.add_option("job-file", config->job_file,
                       "Same as --config FILE; the file's paths are relative to its folder")
            ->type_name("JOB.toml");
    config_flag->excludes(positional);
  } catch (const CLI::Error& e) {
    return absl::AlreadyExistsError(e.what());
  }
  return absl::OkStatus();
}

absl::StatusOr<CommandLineAction> ParseJobCommandLine(int argc, const char* const* argv,
                                                      CLI::App& app, JobConfig* config) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success&) {
    return CommandLineAction::kShowHelp;
  } catch (const CLI::ExtrasError& e) {
    return absl::InvalidArgumentError(absl::StrCat(e.what(), SuggestFlags(app)));
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  for (const Field& field : kFields) {
    const CLI::Option* option = app.get_option_no_throw(absl::StrCat("--", field.name));
    if (option != nullptr && option->count() > 0) config->given[std::string(field.name)] = {};
  }
  if (config->job_file.empty()) return CommandLineAction::kRun;
  // Only a positional job file needs the suffix (--config takes any name). Checked here rather
  // than by a CLI11 validator, which would run before CLI11 reports unknown flags: "--severs 2"
  // would then complain about the stray "2" instead of "--severs".
  const CLI::Option* positional = app.get_option_no_throw("job-file");
  if (positional != nullptr && positional->count() > 0 && !config->job_file.ends_with(".toml")) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "unexpected argument '%s' (a job file must end in .toml)", config->job_file));
  }
  absl::Status status = ApplyJobFile(
      config->job_file,
      [&app](absl::string_view name) {
        const CLI::Option* option = app.get_option_no_throw(absl::StrCat("--", name));
        return option != nullptr && option->count() > 0;
      },
      config);
  if (!status.ok()) return status;
  return CommandLineAction::kRun;
}

absl::StatusOr<JobSpec> BuildJobSpec(const JobConfig& c) {
  JobSpec s;
  if (absl::Status texts = CheckOptionTexts(c); !texts.ok()) return AttributeToJobFile(texts, c);
  // The texts first: each is parsed once, here.
  for (absl::Status (*parse)(const JobConfig&, JobSpec&) :
       {ParseNamedOptions, ParseSyncAndModel, ParseCompression, ParsePartitionAndRounds,
        ParsePrivacy, ParseServerSizes, ParseSlowness, ParseObserve}) {
    if (absl::Status status = parse(c, s); !status.ok()) return AttributeToJobFile(status, c);
  }
  CopyPlainOptions(c, s);
  if (absl::Status status = ValidateJobSpec(s); !status.ok()) return AttributeToJobFile(status, c);
  if (absl::Status status = CheckLauncherInputs(c); !status.ok()) {
    return AttributeToJobFile(status, c);
  }
  return s;
}

absl::Status Validate(const JobConfig& c) { return BuildJobSpec(c).status(); }

absl::Status AttributeToJobFile(const absl::Status& status, const JobConfig& config) {
  const absl::string_view message = status.message();
  if (status.ok() || !absl::StartsWith(message, "--")) return status;
  const size_t end = message.find_first_of("=: ", 2);
  if (end == absl::string_view::npos) return status;
  const auto origin = config.given.find(message.substr(2, end - 2));
  if (origin == config.given.end() || origin->second.file.empty()) return status;
  // "job.toml:3: workers = 0: must be ...": the key as the file has it.
  std::string said(message.substr(2));
  if (message[end] == '=') said.replace(end - 2, 1, " = ");
  return absl::Status(status.code(),
                      absl::StrFormat("%s:%d: %s", origin->second.file, origin->second.line, said));
}

bool IsJobFileKey(absl::string_view name) { return FindField(name) != nullptr; }

bool IsPathOption(absl::string_view name) {
  return name == "train" || name == "test" || name == "out" || name == "checkpoint-dir";
}

const char* FlagGroupName(FlagGroup group) {
  switch (group) {
    case FlagGroup::kJob:
      return "Job";
    case FlagGroup::kData:
      return "Data";
    case FlagGroup::kModel:
      return "Model";
    case FlagGroup::kSync:
      return "Sync";
    case FlagGroup::kCompression:
      return "Compression";
    case FlagGroup::kEmbeddings:
      return "Embeddings";
    case FlagGroup::kCheckpoints:
      return "Checkpoints and faults";
    case FlagGroup::kCluster:
      return "Cluster";
    case FlagGroup::kFederated:
      return "Federated";
    case FlagGroup::kPrivacy:
      return "Privacy";
    case FlagGroup::kOutput:
      return "Output";
  }
  return "Other";
}

}  // namespace syncline
