// Text forms of the job's option types (syncline/options.h), as flags and job files write
// them: "ssp:3", "gossip:exp:async", "adagrad", "ctr", "criteo", "1". Each Parse function is
// the inverse of its Name function; a bad text is InvalidArgument naming it and what is
// allowed. The codec's text form is compression/codec.h's ParseCodec and CodecName.
//
// Thread-safety: stateless.
#ifndef SYNCLINE_JOB_OPTIONS_H_
#define SYNCLINE_JOB_OPTIONS_H_

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "syncline/options.h"

namespace syncline {

// "bsp" | "asp" | "ssp:S" (S a plain integer >= 0) | "gossip:ring|exp|random[:async]"
// | "allreduce[:ALGORITHM]" | "fedavg" ("gossip-async:TOPOLOGY" is the same as
// "gossip:TOPOLOGY:async").
absl::StatusOr<SyncMode> ParseSyncMode(const std::string& text);
std::string SyncModeName(const SyncMode& mode);

const char* GossipTopologyName(GossipTopology topology);
const char* AllReduceAlgorithmName(AllReduceAlgorithm algorithm);
// The topology and whether the mode is asynchronous, of a "gossip:..." text.
absl::StatusOr<std::pair<GossipTopology, bool>> ParseGossipMode(const std::string& sync);

absl::StatusOr<OptimizerKind> ParseOptimizer(const std::string& name);
const char* OptimizerName(OptimizerKind kind);

absl::StatusOr<ModelKind> ParseModel(const std::string& name);
const char* ModelName(ModelKind kind);

absl::StatusOr<DataFormat> ParseDataFormat(const std::string& name);
const char* DataFormatName(DataFormat format);

absl::StatusOr<IndexBase> ParseIndexBase(const std::string& name);
const char* IndexBaseName(IndexBase base);

}  // namespace syncline

#endif  // SYNCLINE_JOB_OPTIONS_H_
