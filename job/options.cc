#include "job/options.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace syncline {
namespace {

constexpr char kPartitionForms[] =
    "strided, iid, dirichlet:ALPHA with a number ALPHA > 0, or shards:K with an integer K >= 1";

absl::Status BadPartition(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("partition '", text, "': ", why, " (expected ", kPartitionForms, ")"));
}

// The shortest decimal text that parses back to exactly `value` ("100", "0.1", "1e-05").
std::string ShortestRoundTrip(double value) {
  char buffer[32];
  const std::to_chars_result result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

bool ValidAlpha(double alpha) { return std::isfinite(alpha) && alpha > 0; }

// The value whose Name() is `text` among `values`, or InvalidArgument listing the names.
template <typename T, size_t N>
absl::StatusOr<T> ByName(const char* what, const std::string& text, const T (&values)[N],
                         const char* (*name)(T)) {
  std::string allowed;
  for (T v : values) {
    if (text == name(v)) return v;
    absl::StrAppend(&allowed, allowed.empty() ? "" : ", ", name(v));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown ", what, " '", text, "' (expected ", allowed, ")"));
}

absl::Status BadCodec(const std::string& text, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "bad codec \"%s\": %s (expected none, fp16, sign1, sign1:CHUNK with 1 <= CHUNK <= %d, "
      "or topk:RATIO with 0 < RATIO <= 1)",
      text, why, kMaxSign1Chunk));
}

absl::StatusOr<std::pair<std::string, std::string>> SplitPair(const std::string& text,
                                                              const char* flag, const char* form) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("--%s='%s': expected %s", flag, text, form));
  }
  return std::make_pair(parts[0], parts[1]);
}

}  // namespace

const char* GossipTopologyName(GossipTopology topology) {
  switch (topology) {
    case GossipTopology::kRing:
      return "ring";
    case GossipTopology::kExponential:
      return "exp";
    case GossipTopology::kRandom:
      return "random";
  }
  return "unknown";
}

absl::StatusOr<std::pair<GossipTopology, bool>> ParseGossipMode(const std::string& sync) {
  std::string rest;
  bool async = false;
  if (absl::StartsWith(sync, "gossip-async:")) {
    rest = sync.substr(13);
    async = true;
  } else if (absl::StartsWith(sync, "gossip:")) {
    rest = sync.substr(7);
    if (absl::EndsWith(rest, ":async")) {
      rest.resize(rest.size() - 6);
      async = true;
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("not a gossip mode: '", sync, "' (want gossip:ring|exp|random[:async])"));
  }
  for (GossipTopology t :
       {GossipTopology::kRing, GossipTopology::kExponential, GossipTopology::kRandom}) {
    if (rest == GossipTopologyName(t)) return std::make_pair(t, async);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown gossip topology '", rest, "' in '", sync,
                                                 "' (want ring, exp or random)"));
}

const char* AllReduceAlgorithmName(AllReduceAlgorithm a) {
  switch (a) {
    case AllReduceAlgorithm::kAuto:
      return "auto";
    case AllReduceAlgorithm::kRing:
      return "ring";
    case AllReduceAlgorithm::kDoubling:
      return "doubling";
    case AllReduceAlgorithm::kHierarchical:
      return "hier";
    case AllReduceAlgorithm::kHalving:
      return "halving";
  }
  return "?";
}

absl::StatusOr<SyncMode> ParseSyncMode(const std::string& text) {
  SyncMode mode;
  if (text == "bsp") return mode;
  if (text == "asp") {
    mode.kind = SyncKind::kAsp;
    return mode;
  }
  if (text == "fedavg") {
    mode.kind = SyncKind::kFedAvg;
    return mode;
  }
  if (text.starts_with("gossip")) {
    auto gossip = ParseGossipMode(text);
    if (!gossip.ok()) return gossip.status();
    mode.kind = SyncKind::kGossip;
    mode.topology = gossip->first;
    mode.asynchronous = gossip->second;
    return mode;
  }
  if (text == "allreduce" || text.starts_with("allreduce:")) {
    mode.kind = SyncKind::kAllReduce;
    const std::string algorithm = text == "allreduce" ? "auto" : text.substr(10);
    for (AllReduceAlgorithm a :
         {AllReduceAlgorithm::kAuto, AllReduceAlgorithm::kRing, AllReduceAlgorithm::kDoubling,
          AllReduceAlgorithm::kHierarchical, AllReduceAlgorithm::kHalving}) {
      if (algorithm == AllReduceAlgorithmName(a)) {
        mode.algorithm = a;
        return mode;
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown all-reduce algorithm '", algorithm, "' in '", text,
                     "' (want ring, doubling, halving, hier or auto)"));
  }
  if (text == "hybrid" || text.starts_with("hybrid:")) {
    // hybrid[:asp|:ssp:S]: the embeddings' consistency model on the servers.
    auto embedding = ParseSyncMode(text == "hybrid" ? "asp" : text.substr(7));
    if (!embedding.ok() ||
        (embedding->kind != SyncKind::kAsp && embedding->kind != SyncKind::kSsp)) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", text,
                       "': hybrid takes the embeddings' consistency model, asp or ssp:S (hybrid, "
                       "hybrid:asp or hybrid:ssp:3)"));
    }
    mode.kind = SyncKind::kHybrid;
    mode.staleness = embedding->server_staleness();
    return mode;
  }
  if (text.starts_with("ssp:")) {
    const absl::string_view staleness = absl::string_view(text).substr(4);
    int s;
    // SimpleAtoi alone would also take " 3" and "+3".
    if (!staleness.empty() &&
        std::all_of(staleness.begin(), staleness.end(), absl::ascii_isdigit) &&
        absl::SimpleAtoi(staleness, &s)) {
      mode.kind = SyncKind::kSsp;
      mode.staleness = s;
      return mode;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", text,
                   "' must be bsp, asp, ssp:S with an integer staleness S >= 0, "
                   "gossip:ring|exp|random[:async], allreduce[:ring|doubling|halving|hier|auto], "
                   "hybrid[:asp|:ssp:S] or fedavg"));
}

std::string SyncModeName(const SyncMode& mode) {
  switch (mode.kind) {
    case SyncKind::kBsp:
      return "bsp";
    case SyncKind::kAsp:
      return "asp";
    case SyncKind::kSsp:
      return absl::StrCat("ssp:", mode.staleness);
    case SyncKind::kGossip:
      return absl::StrCat("gossip:", GossipTopologyName(mode.topology),
                          mode.asynchronous ? ":async" : "");
    case SyncKind::kAllReduce:
      return absl::StrCat("allreduce:", AllReduceAlgorithmName(mode.algorithm));
    case SyncKind::kFedAvg:
      return "fedavg";
    case SyncKind::kHybrid:
      return mode.staleness < 0 ? "hybrid:asp" : absl::StrCat("hybrid:ssp:", mode.staleness);
  }
  return "unknown";
}

const char* OptimizerName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return "sgd";
    case OptimizerKind::kAdagrad:
      return "adagrad";
    case OptimizerKind::kAdam:
      return "adam";
    case OptimizerKind::kFtrl:
      return "ftrl";
    case OptimizerKind::kMomentum:
      return "momentum";
    case OptimizerKind::kYogi:
      return "yogi";
  }
  return "unknown";
}

const char* AllReduceRowsName(AllReduceRows rows) {
  switch (rows) {
    case AllReduceRows::kAuto:
      return "auto";
    case AllReduceRows::kDense:
      return "dense";
    case AllReduceRows::kPairs:
      return "pairs";
  }
  return "?";
}

absl::StatusOr<AllReduceRows> ParseAllReduceRows(const std::string& name) {
  static constexpr AllReduceRows kAll[] = {AllReduceRows::kAuto, AllReduceRows::kDense,
                                           AllReduceRows::kPairs};
  return ByName("allreduce-rows", name, kAll, &AllReduceRowsName);
}

absl::StatusOr<OptimizerKind> ParseOptimizer(const std::string& name) {
  static constexpr OptimizerKind kAll[] = {OptimizerKind::kSgd,      OptimizerKind::kAdagrad,
                                           OptimizerKind::kAdam,     OptimizerKind::kFtrl,
                                           OptimizerKind::kMomentum, OptimizerKind::kYogi};
  return ByName("optimizer", name, kAll, &OptimizerName);
}

const char* ModelName(ModelKind kind) {
  switch (kind) {
    case ModelKind::kLogreg:
      return "logreg";
    case ModelKind::kSoftmax:
      return "softmax";
    case ModelKind::kCtr:
      return "ctr";
    case ModelKind::kMlp:
      return "mlp";
  }
  return "unknown";
}

absl::StatusOr<ModelKind> ParseModel(const std::string& name) {
  static constexpr ModelKind kAll[] = {ModelKind::kLogreg, ModelKind::kSoftmax, ModelKind::kCtr,
                                       ModelKind::kMlp};
  return ByName("model", name, kAll, &ModelName);
}

absl::StatusOr<std::vector<int>> ParseHidden(std::string_view text) {
  std::vector<int> hidden;
  if (text.empty()) return hidden;
  for (const absl::string_view part :
       absl::StrSplit(absl::string_view(text.data(), text.size()), ',')) {
    int width;
    if (part.empty() || !std::isdigit(static_cast<unsigned char>(part[0])) ||
        !absl::SimpleAtoi(part, &width)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "hidden layer widths '%s': must be integers separated by commas, e.g. 256,128", text));
    }
    hidden.push_back(width);
  }
  return hidden;
}

std::string HiddenName(const std::vector<int>& hidden) { return absl::StrJoin(hidden, ","); }

absl::StatusOr<DeviceSpec> ParseDevice(std::string_view whole) {
  absl::string_view text(whole.data(), whole.size());
  if (text == "auto") return DeviceSpec{.kind = DeviceKind::kAuto};
  if (text == "cpu") return DeviceSpec{.kind = DeviceKind::kCpu};
  if (text == "cuda") return DeviceSpec{.kind = DeviceKind::kCuda};
  int index;
  if (absl::ConsumePrefix(&text, "cuda:") && !text.empty() &&
      std::isdigit(static_cast<unsigned char>(text[0])) && absl::SimpleAtoi(text, &index)) {
    return DeviceSpec{.kind = DeviceKind::kCuda, .index = index};
  }
  return absl::InvalidArgumentError("must be auto, cpu, cuda or cuda:N (N a device number >= 0)");
}

std::string DeviceName(const DeviceSpec& device) {
  switch (device.kind) {
    case DeviceKind::kAuto:
      return "auto";
    case DeviceKind::kCpu:
      return "cpu";
    case DeviceKind::kCuda:
      return absl::StrCat("cuda:", device.index);
  }
  return "unknown";
}

const char* DataFormatName(DataFormat format) {
  switch (format) {
    case DataFormat::kAuto:
      return "auto";
    case DataFormat::kLibsvm:
      return "libsvm";
    case DataFormat::kCsv:
      return "csv";
    case DataFormat::kCriteo:
      return "criteo";
  }
  return "unknown";
}

absl::StatusOr<DataFormat> ParseDataFormat(const std::string& name) {
  static constexpr DataFormat kAll[] = {DataFormat::kAuto, DataFormat::kLibsvm, DataFormat::kCsv,
                                        DataFormat::kCriteo};
  return ByName("format", name, kAll, &DataFormatName);
}

const char* IndexBaseName(IndexBase base) {
  switch (base) {
    case IndexBase::kAuto:
      return "auto";
    case IndexBase::kZero:
      return "0";
    case IndexBase::kOne:
      return "1";
  }
  return "unknown";
}

absl::StatusOr<IndexBase> ParseIndexBase(const std::string& name) {
  static constexpr IndexBase kAll[] = {IndexBase::kAuto, IndexBase::kZero, IndexBase::kOne};
  return ByName("index base", name, kAll, &IndexBaseName);
}

absl::StatusOr<PartitionSpec> ParsePartition(std::string_view std_text) {
  // This abseil's string_view is its own type.
  const absl::string_view text(std_text.data(), std_text.size());
  PartitionSpec spec;
  const size_t colon = text.find(':');
  const absl::string_view name = text.substr(0, colon);
  const bool has_arg = colon != absl::string_view::npos;
  const absl::string_view arg = has_arg ? text.substr(colon + 1) : absl::string_view();
  if (name == "strided" || name == "iid") {
    if (has_arg) return BadPartition(text, absl::StrCat(name, " takes no parameter"));
    spec.kind = name == "strided" ? PartitionKind::kStrided : PartitionKind::kIid;
    return spec;
  }
  // SimpleAtod and SimpleAtoi would also take " 0.5" and "2 ".
  const bool blank = std::any_of(arg.begin(), arg.end(), [](char c) {
    return absl::ascii_isspace(static_cast<unsigned char>(c));
  });
  if (name == "dirichlet") {
    double alpha = 0;
    if (!has_arg) return BadPartition(text, "dirichlet needs ALPHA");
    if (blank || !absl::SimpleAtod(arg, &alpha) || !ValidAlpha(alpha)) {
      return BadPartition(text, absl::StrCat("ALPHA '", arg, "' is not a number > 0"));
    }
    spec.kind = PartitionKind::kDirichlet;
    spec.alpha = alpha;
    return spec;
  }
  if (name == "shards") {
    int shards = 0;
    if (!has_arg) return BadPartition(text, "shards needs K");
    if (arg.empty() || !std::all_of(arg.begin(), arg.end(), absl::ascii_isdigit) ||
        !absl::SimpleAtoi(arg, &shards) || shards < 1) {
      return BadPartition(text, absl::StrCat("K '", arg, "' is not an integer >= 1"));
    }
    spec.kind = PartitionKind::kShards;
    spec.shards = shards;
    return spec;
  }
  return BadPartition(text, "unknown partition");
}

std::string PartitionName(const PartitionSpec& spec) {
  switch (spec.kind) {
    case PartitionKind::kStrided:
      return "strided";
    case PartitionKind::kIid:
      return "iid";
    case PartitionKind::kDirichlet:
      return absl::StrCat("dirichlet:", ShortestRoundTrip(spec.alpha));
    case PartitionKind::kShards:
      return absl::StrCat("shards:", spec.shards);
  }
  return absl::StrCat("unknown(", static_cast<int>(spec.kind), ")");
}

std::string ShortestDouble(double value) {
  for (int precision = 1; precision < 17; ++precision) {
    std::string text = absl::StrFormat("%.*g", precision, value);
    if (std::strtod(text.c_str(), nullptr) == value) return text;
  }
  return absl::StrFormat("%.17g", value);
}

absl::StatusOr<CodecSpec> ParseCodec(const std::string& text) {
  CodecSpec spec;
  const size_t colon = text.find(':');
  const std::string name = text.substr(0, colon);
  const bool has_arg = colon != std::string::npos;
  const std::string arg = has_arg ? text.substr(colon + 1) : std::string();
  if (arg.find_first_of(" \t\n\r\f\v") != std::string::npos) {
    return BadCodec(text, "unexpected whitespace");
  }
  if (name == "none" || name == "fp16") {
    if (has_arg) return BadCodec(text, absl::StrCat(name, " takes no parameter"));
    spec.kind = name == "none" ? CodecKind::kNone : CodecKind::kFp16;
    return spec;
  }
  if (name == "sign1") {
    spec.kind = CodecKind::kSign1;
    if (has_arg) {
      uint32_t chunk = 0;
      if (!absl::SimpleAtoi(arg, &chunk) || chunk == 0 || chunk > kMaxSign1Chunk) {
        return BadCodec(text, absl::StrCat("chunk \"", arg, "\" is not an integer in range"));
      }
      spec.chunk = chunk;
    }
    return spec;
  }
  if (name == "topk") {
    spec.kind = CodecKind::kTopK;
    double ratio = 0;
    if (!has_arg) return BadCodec(text, "topk needs a ratio");
    if (!absl::SimpleAtod(arg, &ratio) || !std::isfinite(ratio) || ratio <= 0 || ratio > 1) {
      return BadCodec(text, absl::StrCat("ratio \"", arg, "\" is not a number in (0, 1]"));
    }
    spec.ratio = ratio;
    return spec;
  }
  return BadCodec(text, "unknown codec");
}

std::string CodecName(const CodecSpec& spec) {
  switch (spec.kind) {
    case CodecKind::kNone:
      return "none";
    case CodecKind::kFp16:
      return "fp16";
    case CodecKind::kSign1:
      return spec.chunk == CodecSpec{}.chunk ? "sign1" : absl::StrCat("sign1:", spec.chunk);
    case CodecKind::kTopK:
      return absl::StrCat("topk:", ShortestDouble(spec.ratio));
  }
  return absl::StrCat("unknown(", static_cast<int>(spec.kind), ")");
}

absl::StatusOr<std::pair<int, double>> ParseStraggler(const std::string& text) {
  auto parts = SplitPair(text, "straggler", "RANK:FACTOR, e.g. 1:3");
  if (!parts.ok()) return parts.status();
  int rank = 0;
  double factor = 0;
  if (!absl::SimpleAtoi(parts->first, &rank) || rank < 0 ||
      !absl::SimpleAtod(parts->second, &factor) || !std::isfinite(factor) || factor < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--straggler='%s': RANK must be >= 0 and FACTOR a number >= 1", text));
  }
  return std::make_pair(rank, factor);
}

absl::StatusOr<std::pair<double, double>> ParseJitter(const std::string& text) {
  auto parts = SplitPair(text, "jitter", "P:FACTOR, e.g. 0.1:5");
  if (!parts.ok()) return parts.status();
  double p = 0, factor = 0;
  if (!absl::SimpleAtod(parts->first, &p) || !(p >= 0 && p <= 1) ||
      !absl::SimpleAtod(parts->second, &factor) || !std::isfinite(factor) || factor < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--jitter='%s': P must be in [0, 1] and FACTOR a number >= 1", text));
  }
  return std::make_pair(p, factor);
}

absl::StatusOr<std::pair<int, double>> ParseDelay(const std::string& text) {
  auto parts = SplitPair(text, "delay", "RANK:MS, e.g. 1:20");
  if (!parts.ok()) return parts.status();
  int rank = 0;
  double ms = 0;
  if (!absl::SimpleAtoi(parts->first, &rank) || rank < 0 || !absl::SimpleAtod(parts->second, &ms) ||
      !std::isfinite(ms) || ms < 0 || ms > 60000) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--delay='%s': RANK must be >= 0 and MS in [0, 60000]", text));
  }
  return std::make_pair(rank, ms);
}

absl::StatusOr<std::pair<int64_t, int64_t>> ParseStepWindow(const std::string& text) {
  const size_t colon = text.find(':');
  int64_t first = 0, end = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(text.substr(0, colon), &first) ||
      !absl::SimpleAtoi(text.substr(colon + 1), &end) || first < 0 || end <= first) {
    return absl::InvalidArgumentError(
        "must be A:B with 0 <= A < B (the steps [A, B)), e.g. 100:120");
  }
  return std::make_pair(first, end);
}

absl::StatusOr<EvalEvery> ParseEvalEvery(const std::string& text) {
  EvalEvery every;
  const bool seconds = !text.empty() && text.back() == 's';
  const std::string number = seconds ? text.substr(0, text.size() - 1) : text;
  if (seconds) {
    if (!absl::SimpleAtod(number, &every.seconds) || !std::isfinite(every.seconds) ||
        every.seconds <= 0 || every.seconds > 1e6) {
      return absl::InvalidArgumentError("must be N (steps), Ns (seconds, N > 0) or 0 (never)");
    }
    return every;
  }
  if (!absl::SimpleAtoi(number, &every.steps) || every.steps < 0) {
    return absl::InvalidArgumentError("must be N (steps), Ns (seconds, N > 0) or 0 (never)");
  }
  return every;
}

}  // namespace syncline
