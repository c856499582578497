// The option types of a Syncline job: plain enums and small structs, with no dependency on the
// wire schema, so that user programs, the launcher and the nodes share them. Conversion to and
// from the wire happens only in job/job_wire.cc (and the table spec's ToWire/FromWire); text
// forms ("ssp:3", "topk:0.01") are parsed and printed by job/options.h.
//
// Thread-safety: plain values.
#ifndef SYNCLINE_OPTIONS_H_
#define SYNCLINE_OPTIONS_H_

#include <cstdint>
#include <vector>

namespace syncline {

// How workers keep their replicas in sync.
enum class SyncKind {
  kBsp,        // bulk synchronous: every worker finishes clock c before any reads clock c+1
  kAsp,        // asynchronous: no bound on staleness
  kSsp,        // stale synchronous: at most `staleness` clocks ahead of the slowest worker
  kGossip,     // no servers: each worker averages its whole model with neighbours (D-PSGD)
  kAllReduce,  // no servers: every worker holds the model; gradients are summed by all-reduce
  kFedAvg,     // federated averaging: clients train locally for a round, the servers average
  kHybrid,     // embeddings on the servers under ASP or SSP, the dense layers all-reduced
};

// How --sync allreduce sums (collective/communicator.h): auto picks by size and topology.
enum class AllReduceAlgorithm { kAuto, kRing, kDoubling, kHierarchical, kHalving };

// How --sync allreduce exchanges uncompressed rows [--allreduce-rows]: kAuto all-gathers the
// rows a step touched as (key, gradient) pairs when that moves fewer bytes than all-reducing
// every row, kDense always all-reduces every row, kPairs always all-gathers pairs.
enum class AllReduceRows { kAuto, kDense, kPairs };

// The graph gossip peers average over.
enum class GossipTopology { kRing, kExponential, kRandom };

struct SyncMode {
  SyncKind kind = SyncKind::kBsp;
  // kSsp: S >= 0. kHybrid: the embeddings' bound on the servers (--embedding-sync), -1 for
  // asp or S >= 0 for ssp:S.
  int64_t staleness = 0;
  GossipTopology topology = GossipTopology::kRing;  // kGossip only
  bool asynchronous = false;                        // kGossip only: push-sum instead of D-PSGD
  AllReduceAlgorithm algorithm = AllReduceAlgorithm::kAuto;  // kAllReduce and kHybrid
  AllReduceRows allreduce_rows = AllReduceRows::kAuto;       // kAllReduce only
  // kGossip with --compress topk or sign1 (CHOCO-SGD): the consensus step gamma in (0, 1];
  // 0: the codec's default (docs/GOSSIP_COMPRESSION.md). [--consensus-step]
  double consensus_step = 0;

  bool gossip() const { return kind == SyncKind::kGossip; }
  bool fedavg() const { return kind == SyncKind::kFedAvg; }
  bool allreduce() const { return kind == SyncKind::kAllReduce; }
  bool hybrid() const { return kind == SyncKind::kHybrid; }
  // Every worker takes part in every step's all-reduce: a lost worker stops the job, and a
  // resume needs every worker's state.
  bool collective() const { return allreduce() || hybrid(); }
  // No parameter servers: the workers hold the model.
  bool serverless() const { return gossip() || allreduce(); }
  // The bound the servers enforce: 0 for BSP (and all-reduce, which is as synchronous: a lost
  // worker stops the job), -1 (unbounded) for ASP and gossip, S for SSP(S).
  int64_t server_staleness() const {
    switch (kind) {
      case SyncKind::kBsp:
      case SyncKind::kAllReduce:
      case SyncKind::kFedAvg:  // one clock per round
        return 0;
      case SyncKind::kSsp:
      case SyncKind::kHybrid:
        return staleness;
      case SyncKind::kAsp:
      case SyncKind::kGossip:
        break;
    }
    return -1;
  }
  bool operator==(const SyncMode&) const = default;
};

// The update rule the servers (or gossip peers) apply.
enum class OptimizerKind {
  kSgd,
  kAdagrad,
  kAdam,
  kFtrl,      // FTRL-Proximal (McMahan et al. 2013): per-weight z and n, L1 gives exact zeros
  kMomentum,  // heavy ball: m = beta1 m + g, w -= lr m (FedAvgM's server rule, Hsu et al. 2019)
  kYogi,      // Adam whose second moment moves by sign(v - g^2) (Zaheer et al. 2018)
};

// A server-side update rule and its hyperparameters (optim/optimizer.h applies it).
struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kSgd;
  float learning_rate = 0.1f;
  float l2 = 0.0f;         // weight decay added to the gradient
  float beta1 = 0.9f;      // Adam, Yogi; Momentum's momentum
  float beta2 = 0.999f;    // Adam, Yogi
  float epsilon = 1e-8f;   // Adam, Adagrad and Yogi
  float l1 = 0.0f;         // FTRL
  float ftrl_beta = 1.0f;  // FTRL
  bool operator==(const OptimizerConfig&) const = default;
};

enum class ModelKind {
  kLogreg,   // binary logistic regression on sparse features
  kSoftmax,  // multiclass logistic regression
  kCtr,      // DLRM-style click-through-rate model (Criteo data)
  kMlp,      // multilayer perceptron over sparse features, softmax over the classes
};

// Limits on a model's hidden layers [--hidden]: ctr has one, mlp 1 to kMaxHiddenLayers, each of
// 1 to kMaxHiddenWidth units; an mlp's dense layers (its bias table) hold at most
// kMaxMlpDenseParams floats (256 MiB).
inline constexpr int kMaxHiddenLayers = 8;
inline constexpr int kMaxHiddenWidth = 4096;
inline constexpr uint64_t kMaxMlpDenseParams = uint64_t{1} << 26;

// The hidden layer widths a model has when none are given: ctr {64}, mlp {256, 128}; the
// linear models have none.
inline std::vector<int> DefaultHidden(ModelKind kind) {
  switch (kind) {
    case ModelKind::kCtr:
      return {64};
    case ModelKind::kMlp:
      return {256, 128};
    case ModelKind::kLogreg:
    case ModelKind::kSoftmax:
      break;
  }
  return {};
}

// Where workers compute [--device]. No model has GPU kernels yet: every worker computes on the
// CPU, and a job that asks for CUDA is refused (docs/ARCHITECTURE.md, "Device").
enum class DeviceKind : uint8_t {
  kAuto,  // a GPU when the build, the machine and the model allow it, else the CPU
  kCpu,
  kCuda,  // the GPU `index`; the worker stops with an error when it cannot use it
};

struct DeviceSpec {
  DeviceKind kind = DeviceKind::kAuto;
  int index = 0;  // kCuda: the CUDA device ordinal, 0 .. visible devices - 1
  bool operator==(const DeviceSpec&) const = default;
};

enum class DataFormat {
  kAuto,    // By extension: ".csv" (any case) is CSV, ".tsv" Criteo, everything else libsvm.
  kLibsvm,  // "label id:value id:value ... [# comment]"
  kCsv,     // "label,f0,f1,..." dense rows, optional header line.
  kCriteo,  // "label<TAB>13 integers<TAB>26 hex categories", binary; layout in data/criteo.h.
};

// How libsvm feature ids are numbered in the file.
enum class IndexBase {
  kAuto,  // 0-based if any id 0 appears anywhere in the file, else 1-based.
  kZero,
  kOne,  // Id 0 is an error.
};

// Gradient compression. The values are the wire header's codec byte.
enum class CodecKind : uint8_t { kNone = 0, kTopK = 1, kSign1 = 2, kFp16 = 3 };

// Largest sign1 chunk a codec spec may have (entries per scale).
inline constexpr uint32_t kMaxSign1Chunk = 1u << 24;

struct CodecSpec {
  CodecKind kind = CodecKind::kNone;
  // topk: fraction of entries kept, 0 < ratio <= 1 (see TopKCount).
  double ratio = 0.01;
  // sign1: entries per scale, 1 <= chunk <= kMaxSign1Chunk.
  uint32_t chunk = 512;

  bool operator==(const CodecSpec&) const = default;
};

// How the servers combine the workers' updates of one BSP clock or one federated round
// (ps/robust_aggregate.h has the rules and their bounds).
enum class AggregateKind : uint8_t {
  kMean,         // weighted by the examples each worker covered: plain synchronous SGD / FedAvg
  kMedian,       // coordinate-wise median (Yin et al. 2018)
  kTrimmedMean,  // coordinate-wise mean without the floor(trim * n) lowest and highest
  kKrum,         // the one update closest to its n - f - 2 nearest others (Blanchard et al. 2017)
  kMultiKrum,    // the mean of the m updates with the best Krum scores
  kBulyan,       // Krum selection of n - 2f, then a trimmed mean around the median (El Mhamdi 2018)
};

struct AggregateRule {
  AggregateKind kind = AggregateKind::kMean;
  double trim = 0;  // trimmed-mean: 0 <= trim < 0.5
  int f = 0;        // krum, multi-krum, bulyan: Byzantine updates tolerated
  int m = 1;        // multi-krum: updates averaged
  bool robust() const { return kind != AggregateKind::kMean; }
  bool operator==(const AggregateRule&) const = default;
};

// The servers' rule for a federated round's mean update, the pseudo-gradient (--server-optimizer;
// Reddi et al. 2021, "Adaptive Federated Optimization").
enum class ServerOptimizerKind : uint8_t {
  kSgd,       // FedAvg: w -= server_lr * mean delta
  kMomentum,  // FedAvgM
  kAdagrad,   // FedAdagrad
  kAdam,      // FedAdam
  kYogi,      // FedYogi
};

struct ServerOptimizerSpec {
  ServerOptimizerKind kind = ServerOptimizerKind::kSgd;
  double momentum = 0.9;  // momentum:B, 0 <= B < 1
  // The adaptive rules' tau, added to the root of the second moment (Reddi et al. tune it in
  // [1e-5, 1e-1]; adagrad:TAU, adam:TAU, yogi:TAU).
  double tau = 1e-3;
  bool operator==(const ServerOptimizerSpec&) const = default;
};

// Differential privacy of training (--dp; docs/PRIVACY.md).
enum class DpLevel : uint8_t {
  kOff,
  kExample,  // DP-SGD (Abadi et al. 2016): per-example clipping, Poisson batches, noise each step
  kClient,   // DP-FedAvg (McMahan et al. 2018): per-client clipping, Poisson rounds, noise each
             // round
};

// How the RDP accountant converts to (epsilon, delta) [--dp-accountant]
// (job/privacy_accountant.h): Canonne-Kamath-Steinke 2020's bound, as Google's dp-accounting,
// or Mironov 2017's classic one.
enum class RdpConversion : uint8_t { kTight, kClassic };

// How the training examples are split among the workers.
enum class PartitionKind : uint8_t {
  kStrided,    // example i to worker i % workers (the default: every worker sees every label)
  kIid,        // a seeded random permutation, dealt out in equal parts
  kDirichlet,  // per label, proportions over workers drawn from Dirichlet(alpha)
  kShards,     // sorted by label, cut into shards; each worker gets `shards` of them
};

struct PartitionSpec {
  PartitionKind kind = PartitionKind::kStrided;
  double alpha = 0.5;  // dirichlet
  int shards = 2;      // shards per worker
  bool operator==(const PartitionSpec&) const = default;
};

// Crafted updates some workers send, for robustness experiments.
enum class AttackKind : uint8_t {
  kNone,
  kSignFlip,   // the honest update times -1
  kGaussian,   // noise N(0, sigma^2) in place of the update
  kScale,      // the honest update times `factor`
  kLabelFlip,  // trains on label K-1-y
};

struct AttackSpec {
  AttackKind kind = AttackKind::kNone;
  double sigma = 1;   // gaussian
  double factor = 1;  // scale
  bool operator==(const AttackSpec&) const = default;
};

}  // namespace syncline

#endif  // SYNCLINE_OPTIONS_H_
