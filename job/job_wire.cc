#include "job/job_wire.h"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "job/job_spec.h"

namespace syncline {
namespace {

// Wire enum <-> option enum, where the two are declared in the same order.
template <typename To, typename From>
To Cast(From value) {
  return static_cast<To>(static_cast<int>(value));
}

// Whether a wire enum value is one of the `count` this build knows.
template <typename E>
bool Known(E value, int count) {
  const int v = static_cast<int>(value);
  return v >= 0 && v < count;
}

}  // namespace

void JobSpecToWire(const JobSpec& s, wire::JobSpec::Builder out) {
  out.setServers(s.servers);
  out.setWorkers(s.workers);
  out.setMinWorkers(s.min_workers);
  out.setMaxRestarts(s.max_restarts);
  out.setMaxWorkers(s.max_workers);
  out.setSyncKind(Cast<wire::SyncKind>(s.sync.kind));
  out.setStaleness(s.sync.staleness);
  out.setGossipTopology(Cast<wire::GossipTopology>(s.sync.topology));
  out.setGossipAsync(s.sync.asynchronous);
  out.setConsensusStep(s.sync.consensus_step);
  out.setAllreduceAlgorithm(Cast<wire::AllReduceAlgorithm>(s.sync.algorithm));
  out.setAllreduceRows(static_cast<uint8_t>(s.sync.allreduce_rows));
  out.setModel(Cast<wire::ModelKind>(s.model.kind));
  out.setClasses(s.model.classes);
  out.setEmbeddingDim(s.model.embedding_dim);
  auto hidden = out.initHiddenLayers(s.model.hidden.size());
  for (size_t i = 0; i < s.model.hidden.size(); ++i) hidden.set(i, s.model.hidden[i]);
  auto command = out.initWorkerCommand(s.worker_command.size());
  for (size_t i = 0; i < s.worker_command.size(); ++i) command.set(i, s.worker_command[i]);
  out.setTraceDir(s.observe.trace_dir);
  out.setTraceFirst(s.observe.trace_first);
  out.setTraceEnd(s.observe.trace_end);
  out.setEvalEverySteps(s.observe.eval_every_steps);
  out.setEvalEverySeconds(s.observe.eval_every_seconds);
  out.setDeviceKind(static_cast<uint8_t>(s.device.kind));
  out.setDeviceIndex(s.device.index);
  out.setTrain(s.data.train);
  out.setTest(s.data.test);
  out.setFormat(Cast<wire::DataFormat>(s.data.format));
  out.setIndexBase(Cast<wire::IndexBase>(s.data.index_base));
  out.setParamsOut(s.data.params_out);
  out.setEpochs(s.training.epochs);
  out.setBatchSize(s.training.batch_size);
  out.setOptimizer(Cast<wire::OptimizerKind>(s.training.optimizer));
  out.setLearningRate(s.training.learning_rate);
  out.setL2(s.training.l2);
  out.setCodec(static_cast<uint8_t>(s.training.codec.kind));
  out.setCodecRatio(s.training.codec.ratio);
  out.setCodecChunk(s.training.codec.chunk);
  out.setPullCodec(static_cast<uint8_t>(s.training.pull_codec.kind));
  out.setPullCodecRatio(s.training.pull_codec.ratio);
  out.setPullCodecChunk(s.training.pull_codec.chunk);
  out.setResidualRows(s.training.residual_rows);
  out.setPullCopyRows(s.training.pull_copy_rows);
  out.setLogEvery(s.training.log_every);
  out.setReadAhead(s.training.read_ahead);
  out.setSeed(s.seed);
  out.setRequestTimeoutS(s.timeouts.request_s);
  out.setHeartbeatIntervalS(s.timeouts.heartbeat_interval_s);
  out.setHeartbeatTimeoutS(s.timeouts.heartbeat_timeout_s);
  out.setPeerTimeoutS(s.timeouts.peer_s);
  out.setStragglerRank(s.slowness.straggler_rank);
  out.setStragglerFactor(s.slowness.straggler_factor);
  out.setJitterProbability(s.slowness.jitter_probability);
  out.setJitterFactor(s.slowness.jitter_factor);
  out.setDelayRank(s.slowness.delay_rank);
  out.setDelayMs(s.slowness.delay_ms);
  out.setMinStepMs(s.slowness.min_step_ms);
  out.setEmbeddingDir(s.embedding.dir);
  out.setEmbeddingMemoryRows(s.embedding.memory_rows);
  out.setEmbeddingMemoryBytes(s.embedding.memory_bytes);
  out.setEmbeddingAdmitAfter(s.embedding.admit_after);
  out.setEmbeddingExpireSteps(s.embedding.expire_steps);
  out.setUpdateThreads(s.update_threads);
  out.setMaxReplyBytes(s.limits.reply_bytes);
  out.setMaxParkedBytes(s.limits.parked_bytes_per_worker);
  out.setReplyBacklogBytes(s.limits.reply_backlog_bytes);
  out.setMaxTableBytes(s.limits.table_bytes);
  out.setMaxStores(s.limits.stores);
  out.setCheckpointDir(s.checkpoint.dir);
  out.setCheckpointEvery(s.checkpoint.every);
  out.setCheckpointSeconds(s.checkpoint.seconds);
  out.setCheckpointKeep(s.checkpoint.keep);
  out.setRestore(s.checkpoint.restore);
  out.setHistogramsOut(s.data.histograms_out);
  out.setPartitionKind(static_cast<uint8_t>(s.data.partition.kind));
  out.setPartitionAlpha(s.data.partition.alpha);
  out.setPartitionShards(s.data.partition.shards);
  out.setRounds(s.federated.rounds);
  out.setParticipation(s.federated.participation);
  out.setLocalEpochs(s.federated.local_epochs);
  out.setLocalSteps(s.federated.local_steps);
  out.setRoundTimeoutS(s.federated.round_timeout_s);
  out.setClientDropout(s.federated.client_dropout);
  out.setProxMu(s.federated.prox_mu);
  out.setServerLr(s.federated.server_lr);
  out.setAggregateKind(static_cast<uint8_t>(s.aggregate.kind));
  out.setAggregateTrim(s.aggregate.trim);
  out.setAggregateF(s.aggregate.f);
  out.setAggregateM(s.aggregate.m);
  auto ranks = out.initByzantineRanks(s.byzantine.ranks.size());
  for (size_t i = 0; i < s.byzantine.ranks.size(); ++i) ranks.set(i, s.byzantine.ranks[i]);
  out.setAttackKind(static_cast<uint8_t>(s.byzantine.attack.kind));
  out.setAttackSigma(s.byzantine.attack.sigma);
  out.setAttackFactor(s.byzantine.attack.factor);
  out.setServerOptimizer(static_cast<uint8_t>(s.federated.server_optimizer.kind));
  out.setServerMomentum(s.federated.server_optimizer.momentum);
  out.setServerTau(s.federated.server_optimizer.tau);
  out.setSecureAggregation(s.federated.secure_aggregation);
  out.setSecaggThreshold(s.federated.secagg_threshold);
  out.setSecaggNeighbours(s.federated.secagg_neighbours);
  out.setDpLevel(static_cast<uint8_t>(s.privacy.level));
  out.setDpClip(s.privacy.clip);
  out.setDpDelta(s.privacy.delta);
  out.setDpNoiseMultiplier(s.privacy.noise_multiplier);
  out.setDpEpsilon(s.privacy.epsilon);
  out.setDpAccountant(static_cast<uint8_t>(s.privacy.accountant));
  out.setDpNoiseSeed(s.privacy.noise_seed);
  out.setDpExamples(s.privacy.examples);
  out.setDpKey(s.privacy.key);
}

absl::StatusOr<JobSpec> JobSpecFromWire(wire::JobSpec::Reader in) {
  if (!Known(in.getSyncKind(), 7) || !Known(in.getGossipTopology(), 3) ||
      !Known(in.getAllreduceAlgorithm(), 5) || !Known(in.getModel(), 4) ||
      !Known(in.getFormat(), 4) || !Known(in.getIndexBase(), 3) || !Known(in.getOptimizer(), 6) ||
      in.getCodec() > static_cast<uint8_t>(CodecKind::kFp16) ||
      in.getPullCodec() > static_cast<uint8_t>(CodecKind::kFp16) ||
      in.getPartitionKind() > static_cast<uint8_t>(PartitionKind::kShards) ||
      in.getAggregateKind() > static_cast<uint8_t>(AggregateKind::kBulyan) ||
      in.getAttackKind() > static_cast<uint8_t>(AttackKind::kLabelFlip) ||
      in.getAllreduceRows() > static_cast<uint8_t>(AllReduceRows::kPairs) ||
      in.getDeviceKind() > static_cast<uint8_t>(DeviceKind::kCuda) ||
      in.getServerOptimizer() > static_cast<uint8_t>(ServerOptimizerKind::kYogi) ||
      in.getDpLevel() > static_cast<uint8_t>(DpLevel::kClient) ||
      in.getDpAccountant() > static_cast<uint8_t>(RdpConversion::kClassic)) {
    return absl::InvalidArgumentError(
        "job spec: an enum value this build does not know (a node of another version?)");
  }
  JobSpec s;
  s.servers = in.getServers();
  s.workers = in.getWorkers();
  s.min_workers = in.getMinWorkers();
  s.max_restarts = in.getMaxRestarts();
  s.max_workers = in.getMaxWorkers();
  s.sync.kind = Cast<SyncKind>(in.getSyncKind());
  s.sync.staleness = in.getStaleness();
  s.sync.topology = Cast<GossipTopology>(in.getGossipTopology());
  s.sync.asynchronous = in.getGossipAsync();
  s.sync.consensus_step = in.getConsensusStep();
  s.sync.algorithm = Cast<AllReduceAlgorithm>(in.getAllreduceAlgorithm());
  s.sync.allreduce_rows = static_cast<AllReduceRows>(in.getAllreduceRows());
  s.model.kind = Cast<ModelKind>(in.getModel());
  s.model.classes = in.getClasses();
  s.model.embedding_dim = in.getEmbeddingDim();
  // A list from the network: longer than any model takes is refused before it is copied.
  if (in.getHiddenLayers().size() > static_cast<unsigned>(kMaxHiddenLayers)) {
    return absl::InvalidArgumentError("job spec: too many hidden layers");
  }
  for (int32_t width : in.getHiddenLayers()) s.model.hidden.push_back(width);
  if (in.getWorkerCommand().size() > kMaxWorkerCommandWords) {
    return absl::InvalidArgumentError("job spec: the worker command has too many words");
  }
  for (auto word : in.getWorkerCommand()) s.worker_command.emplace_back(word.cStr());
  s.observe.trace_dir = in.getTraceDir();
  s.observe.trace_first = in.getTraceFirst();
  s.observe.trace_end = in.getTraceEnd();
  s.observe.eval_every_steps = in.getEvalEverySteps();
  s.observe.eval_every_seconds = in.getEvalEverySeconds();
  s.device.kind = static_cast<DeviceKind>(in.getDeviceKind());
  s.device.index = in.getDeviceIndex();
  s.data.train = in.getTrain();
  s.data.test = in.getTest();
  s.data.format = Cast<DataFormat>(in.getFormat());
  s.data.index_base = Cast<IndexBase>(in.getIndexBase());
  s.data.params_out = in.getParamsOut();
  s.training.epochs = in.getEpochs();
  s.training.batch_size = in.getBatchSize();
  s.training.optimizer = Cast<OptimizerKind>(in.getOptimizer());
  s.training.learning_rate = in.getLearningRate();
  s.training.l2 = in.getL2();
  s.training.codec.kind = static_cast<CodecKind>(in.getCodec());
  s.training.codec.ratio = in.getCodecRatio();
  s.training.codec.chunk = in.getCodecChunk();
  s.training.pull_codec.kind = static_cast<CodecKind>(in.getPullCodec());
  s.training.pull_codec.ratio = in.getPullCodecRatio();
  s.training.pull_codec.chunk = in.getPullCodecChunk();
  s.training.residual_rows = in.getResidualRows();
  s.training.pull_copy_rows = in.getPullCopyRows();
  s.training.log_every = in.getLogEvery();
  s.training.read_ahead = in.getReadAhead();
  s.seed = in.getSeed();
  s.timeouts.request_s = in.getRequestTimeoutS();
  s.timeouts.heartbeat_interval_s = in.getHeartbeatIntervalS();
  s.timeouts.heartbeat_timeout_s = in.getHeartbeatTimeoutS();
  s.timeouts.peer_s = in.getPeerTimeoutS();
  s.slowness.straggler_rank = in.getStragglerRank();
  s.slowness.straggler_factor = in.getStragglerFactor();
  s.slowness.jitter_probability = in.getJitterProbability();
  s.slowness.jitter_factor = in.getJitterFactor();
  s.slowness.delay_rank = in.getDelayRank();
  s.slowness.delay_ms = in.getDelayMs();
  s.slowness.min_step_ms = in.getMinStepMs();
  s.embedding.dir = in.getEmbeddingDir();
  s.embedding.memory_rows = in.getEmbeddingMemoryRows();
  s.embedding.memory_bytes = in.getEmbeddingMemoryBytes();
  s.embedding.admit_after = in.getEmbeddingAdmitAfter();
  s.embedding.expire_steps = in.getEmbeddingExpireSteps();
  s.update_threads = in.getUpdateThreads();
  s.limits.reply_bytes = in.getMaxReplyBytes();
  s.limits.parked_bytes_per_worker = in.getMaxParkedBytes();
  s.limits.reply_backlog_bytes = in.getReplyBacklogBytes();
  s.limits.table_bytes = in.getMaxTableBytes();
  s.limits.stores = in.getMaxStores();
  s.checkpoint.dir = in.getCheckpointDir();
  s.checkpoint.every = in.getCheckpointEvery();
  s.checkpoint.seconds = in.getCheckpointSeconds();
  s.checkpoint.keep = in.getCheckpointKeep();
  s.checkpoint.restore = in.getRestore();
  s.data.histograms_out = in.getHistogramsOut();
  s.data.partition.kind = static_cast<PartitionKind>(in.getPartitionKind());
  s.data.partition.alpha = in.getPartitionAlpha();
  s.data.partition.shards = in.getPartitionShards();
  s.federated.rounds = in.getRounds();
  s.federated.participation = in.getParticipation();
  s.federated.local_epochs = in.getLocalEpochs();
  s.federated.local_steps = in.getLocalSteps();
  s.federated.round_timeout_s = in.getRoundTimeoutS();
  s.federated.client_dropout = in.getClientDropout();
  s.federated.prox_mu = in.getProxMu();
  s.federated.server_lr = in.getServerLr();
  s.aggregate.kind = static_cast<AggregateKind>(in.getAggregateKind());
  s.aggregate.trim = in.getAggregateTrim();
  s.aggregate.f = in.getAggregateF();
  s.aggregate.m = in.getAggregateM();
  // A list from the network: bounded by the workers it may name (checked below).
  if (in.getByzantineRanks().size() > 1u << 16) {
    return absl::InvalidArgumentError("job spec: too many byzantine ranks");
  }
  for (int32_t r : in.getByzantineRanks()) s.byzantine.ranks.push_back(r);
  s.byzantine.attack.kind = static_cast<AttackKind>(in.getAttackKind());
  s.byzantine.attack.sigma = in.getAttackSigma();
  s.byzantine.attack.factor = in.getAttackFactor();
  s.federated.server_optimizer.kind = static_cast<ServerOptimizerKind>(in.getServerOptimizer());
  s.federated.server_optimizer.momentum = in.getServerMomentum();
  s.federated.server_optimizer.tau = in.getServerTau();
  s.federated.secure_aggregation = in.getSecureAggregation();
  s.federated.secagg_threshold = in.getSecaggThreshold();
  s.federated.secagg_neighbours = in.getSecaggNeighbours();
  s.privacy.level = static_cast<DpLevel>(in.getDpLevel());
  s.privacy.clip = in.getDpClip();
  s.privacy.delta = in.getDpDelta();
  s.privacy.noise_multiplier = in.getDpNoiseMultiplier();
  s.privacy.epsilon = in.getDpEpsilon();
  s.privacy.accountant = static_cast<RdpConversion>(in.getDpAccountant());
  s.privacy.noise_seed = in.getDpNoiseSeed();
  s.privacy.examples = in.getDpExamples();
  s.privacy.key = in.getDpKey();
  if (absl::Status valid = ValidateJobSpec(s); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("job spec: ", valid.message()));
  }
  return s;
}

std::string JobSpecToBytes(const JobSpec& spec) {
  capnp::MallocMessageBuilder message;
  JobSpecToWire(spec, message.initRoot<wire::JobSpec>());
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

absl::StatusOr<JobSpec> JobSpecFromBytes(const std::string& bytes) {
  if (bytes.empty() || bytes.size() % sizeof(capnp::word) != 0) {
    return absl::InvalidArgumentError("job spec: not a Cap'n Proto message");
  }
  // Copy into word-aligned storage: the string's buffer need not be aligned.
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), bytes.data(), bytes.size());
  try {
    capnp::FlatArrayMessageReader reader(words);
    return JobSpecFromWire(reader.getRoot<wire::JobSpec>());
  } catch (const kj::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("job spec: malformed message: ", e.getDescription().cStr()));
  }
}

}  // namespace syncline
