// Text forms of the job's option types (syncline/options.h), as flags and job files write
// them: "ssp:3", "gossip:exp:async", "adagrad", "ctr", "criteo", "1". Each Parse function is
// the inverse of its Name function; a bad text is InvalidArgument naming it and what is
// allowed. The codec's text form is compression/codec.h's ParseCodec and CodecName.
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

}  // namespace syncline

#endif  // SYNCLINE_JOB_OPTIONS_H_
