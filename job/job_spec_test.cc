#include "job/job_spec.h"

#include <capnp/message.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
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
  s.model = {.kind = ModelKind::kSoftmax, .classes = 7, .embedding_dim = 16, .hidden = 32};
  s.data = {.train = "/data/a.svm",
            .test = "/data/b.svm",
            .format = DataFormat::kLibsvm,
            .index_base = IndexBase::kOne,
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
  return s;
}

TEST(JobSpecTest, DefaultsAreValid) { EXPECT_TRUE(ValidateJobSpec(JobSpec{}).ok()); }

TEST(JobSpecTest, RoundTripsThroughTheWire) {
  const JobSpec spec = Unusual();
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  absl::StatusOr<JobSpec> back = JobSpecFromBytes(JobSpecToBytes(spec));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == spec);

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
  s.training.codec = CodecSpec{.kind = CodecKind::kSign1};
  EXPECT_THAT(Message(ValidateJobSpec(s)), HasSubstr("--compress=sign1"));

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

TEST(JobSpecTest, HeartbeatsThatWouldOverflowTheNodeTableAreRefused) {
  JobSpec s;
  s.timeouts.heartbeat_timeout_s = 3e6;  // 3e9 ms does not fit the table's 32 bits
  EXPECT_THAT(Message(ValidateJobSpec(s)), HasSubstr("--heartbeat-timeout=3e+06: must be at most"));
}

TEST(OptionsTest, TextFormsRoundTrip) {
  for (const char* text :
       {"bsp", "asp", "ssp:0", "ssp:12", "gossip:ring", "gossip:exp:async", "gossip:random"}) {
    absl::StatusOr<SyncMode> mode = ParseSyncMode(text);
    ASSERT_TRUE(mode.ok()) << text << ": " << mode.status();
    EXPECT_EQ(SyncModeName(*mode), text);
  }
  EXPECT_EQ(SyncModeName(*ParseSyncMode("gossip-async:ring")), "gossip:ring:async");
  for (const char* bad : {"", "bulk", "ssp:", "ssp:-1", "ssp: 3", "ssp:+3", "gossip:star"}) {
    EXPECT_FALSE(ParseSyncMode(bad).ok()) << bad;
  }
  EXPECT_EQ(ParseSyncMode("ssp:5")->server_staleness(), 5);
  EXPECT_EQ(ParseSyncMode("asp")->server_staleness(), -1);
  EXPECT_EQ(ParseSyncMode("bsp")->server_staleness(), 0);
  for (OptimizerKind k :
       {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kAdam, OptimizerKind::kFtrl}) {
    EXPECT_EQ(*ParseOptimizer(OptimizerName(k)), k);
  }
  EXPECT_THAT(Message(ParseOptimizer("rmsprop").status()),
              HasSubstr("expected sgd, adagrad, adam, ftrl"));
  for (ModelKind k : {ModelKind::kLogreg, ModelKind::kSoftmax, ModelKind::kCtr}) {
    EXPECT_EQ(*ParseModel(ModelName(k)), k);
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
