// Text forms of the job's option types (syncline/options.h), as flags and job files write
// them: "ssp:3", "gossip:exp:async", "adagrad", "ctr", "criteo", "1". Each Parse function is
// the inverse of its Name function; a bad text is InvalidArgument naming it and what is
// allowed.
//
// Thread-safety: stateless.
#ifndef SYNCLINE_JOB_OPTIONS_H_
#define SYNCLINE_JOB_OPTIONS_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "syncline/options.h"

namespace syncline {

// "bsp" | "asp" | "ssp:S" (S a plain integer >= 0) | "gossip:ring|exp|random[:async]"
// | "allreduce[:ALGORITHM]" | "hybrid[:asp|:ssp:S]" | "fedavg" ("gossip-async:TOPOLOGY" is the same
// as "gossip:TOPOLOGY:async").
absl::StatusOr<SyncMode> ParseSyncMode(const std::string& text);
std::string SyncModeName(const SyncMode& mode);

const char* GossipTopologyName(GossipTopology topology);
const char* AllReduceAlgorithmName(AllReduceAlgorithm algorithm);
// "auto" | "dense" | "pairs".
const char* AllReduceRowsName(AllReduceRows rows);
absl::StatusOr<AllReduceRows> ParseAllReduceRows(const std::string& name);
// The topology and whether the mode is asynchronous, of a "gossip:..." text.
absl::StatusOr<std::pair<GossipTopology, bool>> ParseGossipMode(const std::string& sync);

absl::StatusOr<OptimizerKind> ParseOptimizer(const std::string& name);
const char* OptimizerName(OptimizerKind kind);

absl::StatusOr<ModelKind> ParseModel(const std::string& name);
const char* ModelName(ModelKind kind);

// --hidden: comma-separated layer widths, input side first, e.g. "256,128" (each a plain
// integer; the count and ranges are ValidateJobSpec's to check, per model). "" is the empty
// list: the model's default.
absl::StatusOr<std::vector<int>> ParseHidden(std::string_view text);
std::string HiddenName(const std::vector<int>& hidden);

// --device: "auto" | "cpu" | "cuda" | "cuda:N" (N a plain integer >= 0; "cuda" is "cuda:0").
absl::StatusOr<DeviceSpec> ParseDevice(std::string_view text);
std::string DeviceName(const DeviceSpec& device);

absl::StatusOr<DataFormat> ParseDataFormat(const std::string& name);
const char* DataFormatName(DataFormat format);

absl::StatusOr<IndexBase> ParseIndexBase(const std::string& name);
const char* IndexBaseName(IndexBase base);

// --partition: "strided" | "iid" | "dirichlet:ALPHA" (ALPHA a finite number > 0) | "shards:K"
// (K a plain integer >= 1). Errors: InvalidArgument naming the text and what is allowed.
absl::StatusOr<PartitionSpec> ParsePartition(std::string_view text);
// The inverse of ParsePartition: "dirichlet:0.1" (the shortest decimal that parses back to
// alpha), "shards:2". Only the field of spec.kind is printed.
std::string PartitionName(const PartitionSpec& spec);

// "none" | "topk:RATIO" | "sign1" | "sign1:CHUNK" | "fp16". Anything else, or a ratio or chunk
// out of range, is InvalidArgument naming the text.
absl::StatusOr<CodecSpec> ParseCodec(const std::string& text);
// The inverse of ParseCodec: ParseCodec(CodecName(s)) == s for every valid spec. Fields that
// do not belong to the kind are not part of the name (and come back as their defaults).
std::string CodecName(const CodecSpec& spec);
// The shortest "%g" text that parses back to exactly `value` ("0.01", "1e-05"): how CodecName
// and the other option names (job/aggregate_rule.h) print a fraction.
std::string ShortestDouble(double value);

// --straggler: "RANK:FACTOR" (factor >= 1), as in --straggler 1:3.
absl::StatusOr<std::pair<int, double>> ParseStraggler(const std::string& text);
// --jitter: "P:FACTOR" (0 <= P <= 1, factor >= 1), as in --jitter 0.1:5.
absl::StatusOr<std::pair<double, double>> ParseJitter(const std::string& text);
// --delay: "RANK:MS" (0 <= ms <= 60000), as in --delay 1:20.
absl::StatusOr<std::pair<int, double>> ParseDelay(const std::string& text);

// --trace-steps: "A:B", the steps [A, B) (0 <= A < B). InvalidArgument saying what is wrong.
absl::StatusOr<std::pair<int64_t, int64_t>> ParseStepWindow(const std::string& text);

// --eval-every: "N" (steps), "Ns" (seconds) or "0" (never); N > 0.
struct EvalEvery {
  int64_t steps = 0;
  double seconds = 0;
};
absl::StatusOr<EvalEvery> ParseEvalEvery(const std::string& text);

}  // namespace syncline

#endif  // SYNCLINE_JOB_OPTIONS_H_
