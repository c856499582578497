#include "job/job_spec.h"

#include <capnp/message.h>

#include <algorithm>
#include <string>
#include <vector>

#include "compression/codec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "job/federated.h"
#include "job/job_wire.h"
#include "job/options.h"

namespace syncline {
namespace {

using ::testing::HasSubstr;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

// A spec with every field away from its default.
JobSpec Unusual() {
  JobSpec s;
  s.servers = 3;
  s.workers = 5;
  s.sync = SyncMode{.kind = SyncKind::kSsp, .staleness = 4};
  s.model = {.kind = ModelKind::kMlp, .classes = 7, .embedding_dim = 16, .hidden = {32, 24, 8}};
  s.device = DeviceSpec{.kind = DeviceKind::kCuda, .index = 3};
  s.data = {.train = "/data/a.svm",
            .test = "/data/b.svm",
            .format = DataFormat::kLibsvm,
            .index_base = IndexBase::kOne,
            .partition = PartitionSpec{.kind = PartitionKind::kDirichlet, .alpha = 0.25},
            .histograms_out = "/runs/x/label_histograms.tsv",
            .params_out = "/runs/x/params.tsv"};
  s.training = {.epochs = 3,
                .batch_size = 64,
                .optimizer = OptimizerKind::kFtrl,
                .learning_rate = 0.025,
                .l2 = 1e-4,
                .codec = CodecSpec{.kind = CodecKind::kTopK, .ratio = 0.05},
                .log_every = 7,
                .read_ahead = true};
  s.seed = 123456789012345ull;
  s.timeouts = {
      .request_s = 30, .heartbeat_interval_s = 0.25, .heartbeat_timeout_s = 3, .peer_s = 4};
  s.slowness = {.straggler_rank = 1,
                .straggler_factor = 3,
                .jitter_probability = 0.1,
                .jitter_factor = 5,
                .delay_rank = 4,
                .delay_ms = 20,
                .min_step_ms = 2};
  s.embedding = {.dir = "/runs/x/embeddings",
                 .memory_rows = 0,
                 .memory_bytes = 1 << 30,
                 .admit_after = 2,
                 .expire_steps = 100};
  s.update_threads = 2;
  s.limits = {
      .reply_bytes = 3 << 20, .parked_bytes_per_worker = 5 << 20, .reply_backlog_bytes = 7 << 20};
  s.checkpoint = {.dir = "/runs/x/checkpoints",
                  .every = 50,
                  .seconds = 1.5,
                  .keep = 4,
                  .restore = "/runs/x/checkpoints/ckpt-50"};
  s.federated = {.rounds = 12,
                 .participation = 0.4,
                 .local_epochs = 2,
                 .local_steps = 9,
                 .round_timeout_s = 7.5,
                 .client_dropout = 0.2,
                 .prox_mu = 0.01,
                 .server_lr = 0.5};
  // (A robust --aggregate needs bsp or fedavg: the fedavg spec below carries one.)
  s.byzantine = {.ranks = {1, 3}, .attack = AttackSpec{.kind = AttackKind::kScale, .factor = -4}};
  return s;
}

TEST(JobSpecTest, DefaultsAreValid) { EXPECT_TRUE(ValidateJobSpec(JobSpec{}).ok()); }

TEST(JobSpecTest, RoundTripsThroughTheWire) {
  const JobSpec spec = Unusual();
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  absl::StatusOr<JobSpec> back = JobSpecFromBytes(JobSpecToBytes(spec));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == spec);

  JobSpec fedavg;
  fedavg.sync = SyncMode{.kind = SyncKind::kFedAvg};
  fedavg.workers = 10;
  fedavg.federated.participation = 0.5;
  fedavg.aggregate = AggregateRule{.kind = AggregateKind::kMultiKrum, .f = 1, .m = 2};
  fedavg.byzantine = {.ranks = {0},
                      .attack = AttackSpec{.kind = AttackKind::kGaussian, .sigma = 3}};
  ASSERT_TRUE(ValidateJobSpec(fedavg).ok()) << ValidateJobSpec(fedavg);
  back = JobSpecFromBytes(JobSpecToBytes(fedavg));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == fedavg);

  JobSpec gossip;
  gossip.servers = 0;
  gossip.sync = SyncMode{
      .kind = SyncKind::kGossip, .topology = GossipTopology::kExponential, .asynchronous = true};
  back = JobSpecFromBytes(JobSpecToBytes(gossip));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == gossip);
}

TEST(JobSpecTest, AnInvalidSpecFromTheWireIsRefusedNamingTheFlag) {
  JobSpec spec;
  spec.training.epochs = 0;
  absl::StatusOr<JobSpec> back = JobSpecFromBytes(JobSpecToBytes(spec));
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(back.status()), HasSubstr("--epochs=0: must be >= 1"));
}

TEST(JobSpecTest, AnUnknownEnumValueFromTheWireIsRefused) {
  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<wire::JobSpec>();
  JobSpecToWire(JobSpec{}, root);
  root.setModel(static_cast<wire::ModelKind>(42));
  absl::StatusOr<JobSpec> back = JobSpecFromWire(root.asReader());
  ASSERT_FALSE(back.ok());
  EXPECT_THAT(Message(back.status()), HasSubstr("does not know"));
}

TEST(JobSpecTest, GarbageBytesAreRefused) {
  EXPECT_FALSE(JobSpecFromBytes("").ok());
  EXPECT_FALSE(JobSpecFromBytes("not a message").ok());
  EXPECT_FALSE(JobSpecFromBytes(std::string(64, '\xff')).ok());
}

TEST(JobSpecTest, ChecksCombinations) {
  JobSpec s;
  s.model.kind = ModelKind::kCtr;
  s.data.train = "a.svm";
  EXPECT_THAT(Message(ValidateJobSpec(s)), HasSubstr("--model=ctr: needs Criteo data"));
  s.data.train = "a.tsv";
  EXPECT_TRUE(ValidateJobSpec(s).ok());
  // Criteo rows stay sparse: top-K and sign1 keep a residual per row, pulls may be compressed.
  s.training.codec = CodecSpec{.kind = CodecKind::kSign1};
  s.training.pull_codec = CodecSpec{.kind = CodecKind::kTopK, .ratio = 0.01};
  EXPECT_TRUE(ValidateJobSpec(s).ok());
  s.sync = SyncMode{.kind = SyncKind::kFedAvg};
  EXPECT_THAT(Message(ValidateJobSpec(s)), HasSubstr("--compress=sign1"));
  s.training.codec = CodecSpec{};
  EXPECT_THAT(Message(ValidateJobSpec(s)), HasSubstr("--compress-pull=topk:0.01"));
  JobSpec dense;
  dense.data.train = "a.csv";
  dense.training.pull_codec = CodecSpec{.kind = CodecKind::kFp16};
  EXPECT_THAT(Message(ValidateJobSpec(dense)), HasSubstr("CSV data keeps its rows in a dense"));
  dense.data.train = "a.svm";
  dense.training.residual_rows = 0;
  EXPECT_THAT(Message(ValidateJobSpec(dense)), HasSubstr("--residual-rows=0"));

  JobSpec g;
  g.sync = SyncMode{.kind = SyncKind::kGossip};
  EXPECT_THAT(Message(ValidateJobSpec(g)), HasSubstr("--servers=2: must be in [0, 0]"));
  g.servers = 0;
  EXPECT_TRUE(ValidateJobSpec(g).ok());
  g.sync.asynchronous = true;
  g.checkpoint.every = 10;
  EXPECT_THAT(Message(ValidateJobSpec(g)), HasSubstr("is asynchronous"));

  JobSpec straggler;
  straggler.slowness.straggler_rank = 2;  // of 2 workers
  straggler.slowness.straggler_factor = 3;
  EXPECT_THAT(Message(ValidateJobSpec(straggler)), HasSubstr("--straggler="));
}

TEST(JobSpecTest, ChecksTheFederatedAndRobustSettings) {
  JobSpec f;
  f.sync = SyncMode{.kind = SyncKind::kFedAvg};
  f.workers = 10;
  EXPECT_TRUE(ValidateJobSpec(f).ok());
  f.federated.participation = 0;
  EXPECT_THAT(Message(ValidateJobSpec(f)), HasSubstr("--participation=0: must be in (0, 1]"));
  f.federated.participation = 0.5;
  f.federated.client_dropout = 1;
  EXPECT_THAT(Message(ValidateJobSpec(f)), HasSubstr("--client-dropout=1: must be in [0, 1)"));
  f.federated.client_dropout = 0;
  f.federated.rounds = 0;
  EXPECT_THAT(Message(ValidateJobSpec(f)), HasSubstr("--rounds=0: must be >= 1"));
  f.federated.rounds = 3;
  // 5 clients a round: krum:1 needs 5, krum:2 needs 7.
  f.aggregate = AggregateRule{.kind = AggregateKind::kKrum, .f = 1};
  EXPECT_TRUE(ValidateJobSpec(f).ok()) << ValidateJobSpec(f);
  f.aggregate.f = 2;
  EXPECT_THAT(Message(ValidateJobSpec(f)),
              HasSubstr("--aggregate=krum:2: krum:2 needs at least 2f+3 = 7 updates, has 5 "
                        "(clients per round)"));
  f.aggregate = AggregateRule{};
  f.checkpoint.every = 5;
  EXPECT_THAT(Message(ValidateJobSpec(f)), HasSubstr("not supported with federated rounds"));
  f.checkpoint.every = 0;
  f.data.train = "clicks.tsv";  // sparse rows: the clients pull the rows their data holds
  f.model.kind = ModelKind::kCtr;
  EXPECT_TRUE(ValidateJobSpec(f).ok()) << ValidateJobSpec(f);

  JobSpec asp;
  asp.sync = SyncMode{.kind = SyncKind::kAsp};
  asp.aggregate = AggregateRule{.kind = AggregateKind::kMedian};
  EXPECT_THAT(Message(ValidateJobSpec(asp)), HasSubstr("needs --sync bsp or fedavg, not asp"));

  JobSpec b;
  b.byzantine = {.ranks = {2}, .attack = AttackSpec{.kind = AttackKind::kSignFlip}};
  EXPECT_THAT(Message(ValidateJobSpec(b)), HasSubstr("rank 2 is not a worker (2 workers)"));
  b.byzantine.ranks = {1};
  EXPECT_TRUE(ValidateJobSpec(b).ok());

  JobSpec p;
  p.data.partition = PartitionSpec{.kind = PartitionKind::kDirichlet, .alpha = 0};
  EXPECT_THAT(Message(ValidateJobSpec(p)), HasSubstr("ALPHA must be a positive number"));
  p.data.partition.alpha = 1;
  p.data.train = "clicks.tsv";
  EXPECT_THAT(Message(ValidateJobSpec(p)), HasSubstr("Criteo files are streamed"));
}

TEST(FederatedTest, PicksTheSameClientsForTheSameSeedAndRound) {
  EXPECT_EQ(ClientsPerRound(10, 0.5), 5);
  EXPECT_EQ(ClientsPerRound(10, 0.01), 1);
  EXPECT_EQ(ClientsPerRound(3, 1), 3);
  std::vector<int> seen(10, 0);
  for (int64_t round = 0; round < 400; ++round) {
    const std::vector<int> picked = PickClients(7, round, 10, 0.3);
    ASSERT_EQ(picked.size(), 3u);
    EXPECT_TRUE(std::is_sorted(picked.begin(), picked.end()));
    EXPECT_EQ(std::adjacent_find(picked.begin(), picked.end()), picked.end());
    EXPECT_EQ(picked, PickClients(7, round, 10, 0.3));
    for (int c : picked) ++seen[c];
  }
  // Uniform: each client in about 30% of the rounds (120 of 400; 4 sigma is about 37).
  for (int c = 0; c < 10; ++c) EXPECT_NEAR(seen[c], 120, 40) << c;
  EXPECT_NE(PickClients(7, 0, 10, 0.3), PickClients(8, 0, 10, 0.3));
  EXPECT_EQ(PickClients(7, 0, 4, 1), (std::vector<int>{0, 1, 2, 3}));
}

TEST(FederatedTest, DropsOutAtTheRateAsked) {
  int dropped = 0;
  for (int64_t round = 0; round < 1000; ++round) dropped += ClientDropsOut(3, round, 2, 0.3);
  EXPECT_NEAR(dropped, 300, 60);
  EXPECT_EQ(ClientDropsOut(3, 17, 2, 0.3), ClientDropsOut(3, 17, 2, 0.3));
  EXPECT_FALSE(ClientDropsOut(3, 17, 2, 0));
}

TEST(FederatedTest, ByzantineTextRoundTripsAndBadOnesAreRefused) {
  for (const char* text :
       {"none", "1,2:signflip", "0:gaussian:10", "3:scale:-4", "0,4:labelflip"}) {
    absl::StatusOr<JobSpec::Byzantine> b = ParseByzantine(text);
    ASSERT_TRUE(b.ok()) << text << ": " << b.status();
    EXPECT_EQ(ByzantineName(*b), text);
  }
  EXPECT_EQ(ByzantineName(*ParseByzantine("2,1:signflip")), "1,2:signflip");
  EXPECT_TRUE(ParseByzantine("")->ranks.empty());
  for (const char* bad : {"signflip", "1:flip", "a:signflip", "-1:signflip", "1,1:signflip",
                          "1:gaussian", "1:gaussian:0", "1:scale:x", "1:signflip:2"}) {
    EXPECT_FALSE(ParseByzantine(bad).ok()) << bad;
  }
  JobSpec::Byzantine b = *ParseByzantine("1,3:signflip");
  EXPECT_TRUE(IsByzantine(b, 3));
  EXPECT_FALSE(IsByzantine(b, 2));
}

TEST(JobSpecTest, ChecksTheHiddenLayersPerModel) {
  JobSpec s;
  s.model.kind = ModelKind::kMlp;
  s.model.classes = 10;
  for (const std::vector<int>& ok :
       {std::vector<int>{}, {1}, {4096}, {256, 128}, {8, 8, 8, 8, 8, 8, 8, 8}}) {
    s.model.hidden = ok;
    EXPECT_TRUE(ValidateJobSpec(s).ok()) << HiddenName(ok) << ": " << ValidateJobSpec(s);
  }
  s.model.hidden = {256, 0};
  EXPECT_THAT(Message(ValidateJobSpec(s)),
              HasSubstr("--hidden=256,0: every width must be in [1, 4096]"));
  s.model.hidden = {4097};
  EXPECT_THAT(Message(ValidateJobSpec(s)), HasSubstr("--hidden=4097: every width"));
  s.model.hidden = std::vector<int>(9, 8);
  EXPECT_THAT(Message(ValidateJobSpec(s)), HasSubstr("at most 8 hidden layers"));
  s.model.hidden = {4096, 4096, 4096, 4096, 4096};
  EXPECT_THAT(Message(ValidateJobSpec(s)), HasSubstr("parameters, more than 67108864"));
  // The spec from the wire is checked the same way.
  EXPECT_THAT(Message(JobSpecFromBytes(JobSpecToBytes(s)).status()), HasSubstr("--hidden="));

  // ctr has one hidden layer; the linear models have none and ignore the flag.
  s.model.kind = ModelKind::kCtr;
  s.model.classes = 2;
  s.data.format = DataFormat::kCriteo;
  s.model.hidden = {64, 32};
  EXPECT_THAT(Message(ValidateJobSpec(s)), HasSubstr("the ctr model has one hidden layer"));
  s.model.hidden = {32};
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s);
  s.model.kind = ModelKind::kLogreg;
  s.model.hidden = {64, 32};
  EXPECT_TRUE(ValidateJobSpec(s).ok()) << ValidateJobSpec(s);

  // The manifest (which --resume compares) holds the widths the model has, defaults included.
  auto hidden_entry = [](const JobSpec& spec) -> std::string {
    for (const auto& [key, value] : ManifestEntries(spec)) {
      if (key == "hidden") return value;
    }
    return "(none)";
  };
  EXPECT_EQ(hidden_entry(s), "(none)");
  // --resume refuses a changed pull codec, as a changed push codec.
  s.training.pull_codec = *ParseCodec("fp16");
  bool has_pull_codec = false;
  for (const auto& [key, value] : ManifestEntries(s)) {
    has_pull_codec |= key == "compress-pull" && value == "fp16";
  }
  EXPECT_TRUE(has_pull_codec);
  s.model = {.kind = ModelKind::kMlp, .classes = 10};
  EXPECT_EQ(hidden_entry(s), "256,128");
  s.model.hidden = {64};
  EXPECT_EQ(hidden_entry(s), "64");
}

// Valid settings that are likely a mistake are named: a sparse top-K pull of a model with dense
// layers under uncompressed pushes, and --hidden on a linear model.
TEST(JobSpecTest, WarnsOfSettingsThatAreLikelyAMistake) {
  JobSpec s;
  EXPECT_THAT(JobSpecWarnings(s), testing::IsEmpty());
  s.model = {.kind = ModelKind::kCtr, .classes = 2};
  s.training.pull_codec = *ParseCodec("topk:0.01");
  ASSERT_EQ(JobSpecWarnings(s).size(), 1u);
  EXPECT_THAT(JobSpecWarnings(s)[0], HasSubstr("--compress-pull topk:0.01 with uncompressed"));
  s.training.codec = *ParseCodec("topk:0.01");
  EXPECT_THAT(JobSpecWarnings(s), testing::IsEmpty());
  s.training.codec = {};
  s.training.pull_codec = *ParseCodec("topk:0.1");
  EXPECT_THAT(JobSpecWarnings(s), testing::IsEmpty());
  s.model = {.kind = ModelKind::kLogreg, .classes = 2, .hidden = {64}};
  s.training.pull_codec = *ParseCodec("topk:0.01");
  ASSERT_EQ(JobSpecWarnings(s).size(), 1u);
  EXPECT_THAT(JobSpecWarnings(s)[0], HasSubstr("--hidden has no effect on the logreg model"));
}

TEST(JobSpecTest, ChecksTheDevice) {
  JobSpec s;
  s.device = DeviceSpec{.kind = DeviceKind::kCuda, .index = 1024};
  EXPECT_THAT(Message(ValidateJobSpec(s)), HasSubstr("--device=cuda:1024"));
  s.device.index = -1;
  EXPECT_THAT(Message(ValidateJobSpec(s)), HasSubstr("must be in [0, 1023]"));
  s.device.index = 0;
  EXPECT_TRUE(ValidateJobSpec(s).ok());

  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<wire::JobSpec>();
  JobSpecToWire(JobSpec{}, root);
  root.setDeviceKind(3);
  EXPECT_THAT(Message(JobSpecFromWire(root.asReader()).status()), HasSubstr("does not know"));
  root.setDeviceKind(0);
  root.initHiddenLayers(1000);
  EXPECT_THAT(Message(JobSpecFromWire(root.asReader()).status()),
              HasSubstr("too many hidden layers"));
}

TEST(JobSpecTest, HeartbeatsThatWouldOverflowTheNodeTableAreRefused) {
  JobSpec s;
  s.timeouts.heartbeat_timeout_s = 3e6;  // 3e9 ms does not fit the table's 32 bits
  EXPECT_THAT(Message(ValidateJobSpec(s)), HasSubstr("--heartbeat-timeout=3e+06: must be at most"));
}

TEST(OptionsTest, TextFormsRoundTrip) {
  for (const char* text : {"bsp", "asp", "ssp:0", "ssp:12", "gossip:ring", "gossip:exp:async",
                           "gossip:random", "fedavg", "hybrid:asp", "hybrid:ssp:3"}) {
    absl::StatusOr<SyncMode> mode = ParseSyncMode(text);
    ASSERT_TRUE(mode.ok()) << text << ": " << mode.status();
    EXPECT_EQ(SyncModeName(*mode), text);
  }
  EXPECT_EQ(SyncModeName(*ParseSyncMode("gossip-async:ring")), "gossip:ring:async");
  for (const char* bad : {"", "bulk", "ssp:", "ssp:-1", "ssp: 3", "ssp:+3", "gossip:star",
                          "hybrid:bsp", "hybrid:gossip:ring", "hybrid:ssp:", "hybrid:"}) {
    EXPECT_FALSE(ParseSyncMode(bad).ok()) << bad;
  }
  // hybrid: the embeddings' bound on the servers (asp by default); every worker all-reduces.
  EXPECT_EQ(SyncModeName(*ParseSyncMode("hybrid")), "hybrid:asp");
  EXPECT_EQ(ParseSyncMode("hybrid")->server_staleness(), -1);
  EXPECT_EQ(ParseSyncMode("hybrid:ssp:2")->server_staleness(), 2);
  EXPECT_TRUE(ParseSyncMode("hybrid")->collective());
  EXPECT_FALSE(ParseSyncMode("hybrid")->serverless());
  EXPECT_THAT(Message(ParseSyncMode("hybrid:bsp").status()), HasSubstr("asp or ssp:S"));
  EXPECT_EQ(ParseSyncMode("ssp:5")->server_staleness(), 5);
  EXPECT_EQ(ParseSyncMode("asp")->server_staleness(), -1);
  EXPECT_EQ(ParseSyncMode("bsp")->server_staleness(), 0);
  for (OptimizerKind k :
       {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kAdam, OptimizerKind::kFtrl}) {
    EXPECT_EQ(*ParseOptimizer(OptimizerName(k)), k);
  }
  EXPECT_THAT(Message(ParseOptimizer("rmsprop").status()),
              HasSubstr("expected sgd, adagrad, adam, ftrl"));
  for (ModelKind k : {ModelKind::kLogreg, ModelKind::kSoftmax, ModelKind::kCtr, ModelKind::kMlp}) {
    EXPECT_EQ(*ParseModel(ModelName(k)), k);
  }
  for (const char* text : {"", "64", "256,128", "4096,1,7"}) {
    absl::StatusOr<std::vector<int>> hidden = ParseHidden(text);
    ASSERT_TRUE(hidden.ok()) << text << ": " << hidden.status();
    EXPECT_EQ(HiddenName(*hidden), text);
  }
  for (const char* bad :
       {",", "256,", ",128", "256,,128", "a", "1.5", "-3", "+3", "256 128", "99999999999999"}) {
    EXPECT_THAT(Message(ParseHidden(bad).status()), HasSubstr("integers separated by commas"))
        << bad;
  }
  for (const char* text : {"auto", "cpu", "cuda:0", "cuda:3"}) {
    absl::StatusOr<DeviceSpec> device = ParseDevice(text);
    ASSERT_TRUE(device.ok()) << text << ": " << device.status();
    EXPECT_EQ(DeviceName(*device), text);
  }
  EXPECT_EQ(*ParseDevice("cuda"), (DeviceSpec{.kind = DeviceKind::kCuda, .index = 0}));
  for (const char* bad : {"", "gpu", "CUDA", "cuda:", "cuda:-1", "cuda:x", "cuda:1:2", "cpu:0"}) {
    EXPECT_THAT(Message(ParseDevice(bad).status()), HasSubstr("auto, cpu, cuda or cuda:N")) << bad;
  }
  for (DataFormat f :
       {DataFormat::kAuto, DataFormat::kLibsvm, DataFormat::kCsv, DataFormat::kCriteo}) {
    EXPECT_EQ(*ParseDataFormat(DataFormatName(f)), f);
  }
  for (IndexBase b : {IndexBase::kAuto, IndexBase::kZero, IndexBase::kOne}) {
    EXPECT_EQ(*ParseIndexBase(IndexBaseName(b)), b);
  }
}

}  // namespace
}  // namespace syncline
