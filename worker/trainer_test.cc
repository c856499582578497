#include "worker/trainer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "client/kv_client.h"
#include "core/inproc_transport.h"
#include "data/criteo.h"
#include "data/test_data.h"
#include "device/device_model.h"
#include "device/host_executor.h"
#include "job/options.h"
#include "models/ctr_model.h"
#include "ps/server.h"
#include "worker/ps_backend.h"
#include "worker/worker_checkpoint.h"

namespace syncline {
namespace {

Dataset MakeData(uint64_t seed, int n, int features, int partition, int parts) {
  return MakeLogisticData(seed, n, features, partition, parts);
}

// Checkpoint and resume in Train(): with `every` > 0, checkpoints go to `root` every `every`
// clocks and the workers stop right after writing the one at `stop_at` (a crash at a
// checkpoint); with `resume` set, servers and workers start from that checkpoint folder.
struct Checkpointing {
  std::string root;
  int64_t every = 0;
  int64_t stop_at = -1;
  std::string resume;
};

// Where the workers' model computes: the CPU model, or the device steps on the host executor
// (device/device_model.h), which may keep its gradients and encode them itself.
// kDeviceModelUnstaged: without the next batch staged during each step (Model::Prefetch).
// kDeviceModelPacked: from a source that does not say its data is resident, so that the model
// packs every batch instead of keeping the partition on its device (Model::KeepData).
enum class Compute {
  kCpu,
  kDeviceModel,
  kDeviceModelEncoding,
  kDeviceModelUnstaged,
  kDeviceModelPacked
};

// An in-memory source that does not say so.
class PackedSource final : public ExampleSource {
 public:
  explicit PackedSource(const Dataset& data) : source_(data) {}
  bool KeepsPreviousSlice() const override { return true; }
  uint64_t size() const override { return source_.size(); }
  absl::Status Rewind() override { return source_.Rewind(); }
  absl::StatusOr<DataSlice> Next(size_t max_examples) override {
    return source_.Next(max_examples);
  }

 private:
  InMemorySource source_;
};

// The tests' models: logreg, or an mlp whose dense table (1178 floats) is large enough to be
// compressed.
ModelOptions OptionsOf(const std::string& name) {
  return name == "mlp" ? ModelOptions{.num_classes = 2, .hidden = {128, 8}} : ModelOptions{};
}

std::unique_ptr<Model> HostDeviceModel(const std::string& name, bool prefetch = true) {
  auto reference = *Model::Create(name, OptionsOf(name));
  device_step::Shape shape;
  EXPECT_TRUE(DeviceShapeOf(*reference, OptionsOf(name), &shape));
  return std::make_unique<DeviceModel<device_step::HostExecutor>>(
      std::move(reference), std::move(shape), device_step::HostExecutor{}, prefetch);
}

// Trains `workers` workers against `servers` servers under `staleness` and returns the final
// parameters of every feature followed by the bias.
std::vector<float> Train(int servers, int workers, int64_t staleness, int batch,
                         OptimizerKind optimizer, CodecSpec codec = {},
                         const Checkpointing& ckpt = {}, bool read_ahead = false,
                         bool sparse_rows = false, Compute compute = Compute::kCpu,
                         const std::string& model_name = "logreg", CodecSpec pull = {}) {
  constexpr int kFeatures = 200;
  InprocTransport transport;
  std::vector<std::unique_ptr<Endpoint>> server_eps;
  std::vector<std::unique_ptr<ParameterServer>> ps;
  std::vector<std::string> ids;
  for (int s = 0; s < servers; ++s) {
    server_eps.push_back(*transport.CreateEndpoint("ps" + std::to_string(s)));
    ps.push_back(std::make_unique<ParameterServer>(server_eps.back().get(),
                                                   ServerOptions{.rank = s,
                                                                 .num_servers = servers,
                                                                 .num_workers = workers,
                                                                 .staleness = staleness,
                                                                 .pull_codec = pull,
                                                                 .pull_copy_rows = 60,
                                                                 .checkpoint_root = ckpt.root,
                                                                 .checkpoint_every = ckpt.every}));
    if (!ckpt.resume.empty()) {
      auto restored = ps.back()->Restore(ckpt.resume);
      EXPECT_TRUE(restored.ok()) << restored;
    }
    ids.push_back("ps" + std::to_string(s));
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> serving;
  for (auto& s : ps) {
    serving.emplace_back([&stop, s = s.get()] {
      while (!stop.load()) (void)s->ServeUntil(absl::Now() + absl::Milliseconds(5));
    });
  }
  auto model = *Model::Create(model_name, OptionsOf(model_name));
  ParameterLayout layout;
  layout.num_features = kFeatures;
  layout.row_dim = model->row_dim();
  layout.bias_dim = model->bias_dim();
  layout.row_init_scale = model->row_init_scale();
  layout.bias_init_scale = model->bias_init_scale();
  layout.optimizer.kind = optimizer;
  layout.optimizer.learning_rate = model_name == "mlp" ? 0.05f : 0.5f;
  // Sparse rows keep a residual per row, at most 50 per shard here: the oldest are flushed.
  layout.dense_rows = codec.kind != CodecKind::kNone && !sparse_rows;
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      auto ep = *transport.CreateEndpoint("w" + std::to_string(w));
      KVClient client(ep.get(), KVClientOptions{.rank = w, .server_ids = ids, .pull_codec = pull});
      PsBackend backend(&client, absl::Seconds(10), codec, sparse_rows ? 50 : 1000000);
      ASSERT_TRUE(backend.Init(layout).ok());
      // A device model of this worker's own (an encoder keeps one worker's gradients).
      const std::unique_ptr<Model> device =
          compute == Compute::kCpu
              ? nullptr
              : HostDeviceModel(model_name, compute != Compute::kDeviceModelUnstaged);
      const Model& worker_model = device != nullptr ? *device : *model;
      if (compute == Compute::kDeviceModelEncoding) {
        const std::vector<GradientCompression> wanted = backend.CompressionWanted();
        const std::optional<RowCompression> rows_wanted = backend.RowCompressionWanted();
        const std::optional<PullDecoding> pulls_wanted = backend.PullDecodingWanted();
        ASSERT_TRUE(!wanted.empty() || rows_wanted.has_value() || pulls_wanted.has_value());
        ASSERT_EQ(pulls_wanted.has_value(), pull.kind != CodecKind::kNone && !layout.dense_rows);
        if (pulls_wanted.has_value()) {
          PulledRowDecoder* decoder = device->DecodePulls(*pulls_wanted);
          ASSERT_NE(decoder, nullptr);
          backend.SetPullDecoder(decoder);
        }
        if (rows_wanted.has_value()) {
          ASSERT_EQ(rows_wanted->shards, static_cast<size_t>(servers));
          RowGradientEncoder* encoder = device->EncodeRows(*rows_wanted);
          ASSERT_NE(encoder, nullptr);
          backend.SetRowEncoder(encoder);
        }
        for (const GradientCompression& want : wanted) {
          ASSERT_EQ(want.parts.size(), static_cast<size_t>(servers));
          GradientEncoder* encoder = device->EncodeGradients(want);
          ASSERT_NE(encoder, nullptr);
          backend.SetEncoder(want.table, encoder);
        }
      }
      Dataset data = MakeData(7, 1200, kFeatures, w, workers);
      TrainerOptions options{.epochs = 2, .batch_size = batch};
      options.read_ahead = read_ahead;
      if (!ckpt.resume.empty()) {
        auto saved = ReadWorkerCheckpoint(ckpt.resume, w);
        ASSERT_TRUE(saved.ok()) << saved.status();
        ASSERT_TRUE(backend.RestoreState(saved->state).ok());
        options.start_step = saved->clock;
      }
      options.checkpoint_every = ckpt.every;
      options.on_checkpoint = [&](int64_t clock) -> absl::Status {
        auto state = backend.SaveState();
        if (!state.ok()) return state.status();
        if (auto s = WriteWorkerCheckpoint(ckpt.root, w, {clock, *state}); !s.ok()) return s;
        return clock == ckpt.stop_at ? absl::CancelledError("crash") : absl::OkStatus();
      };
      Trainer trainer(worker_model, backend, options);
      PackedSource packed(data);
      auto result = compute == Compute::kDeviceModelPacked ? trainer.Run(packed, nullptr)
                                                           : trainer.Run(data, nullptr);
      if (ckpt.stop_at >= 0) {
        ASSERT_TRUE(absl::IsCancelled(result.status())) << result.status();
        return;
      }
      ASSERT_TRUE(result.ok()) << result.status();
      if (device != nullptr) {
        // Every step after the first took the batch staged during the step before, or none.
        const int64_t staged =
            static_cast<const DeviceModel<device_step::HostExecutor>&>(*device).prefetched();
        const int64_t ran = result->steps - options.start_step;
        EXPECT_EQ(staged, compute == Compute::kDeviceModelUnstaged ? 0 : ran - 1);
        // Every step's batch was gathered from the partition kept on the device, or none.
        const auto& host = static_cast<const DeviceModel<device_step::HostExecutor>&>(*device);
        if (compute == Compute::kDeviceModelPacked) {
          EXPECT_EQ(host.batches_gathered(), 0);
        } else {
          EXPECT_GE(host.batches_gathered(), ran);
        }
        // The rows of every training read were decoded by the model.
        const int64_t decoded = host.rows_decoded();
        if (compute == Compute::kDeviceModelEncoding && pull.kind != CodecKind::kNone &&
            !layout.dense_rows) {
          EXPECT_GE(decoded, ran);
        } else {
          EXPECT_EQ(decoded, 0);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  if (ckpt.stop_at >= 0) {
    // Every server's part of the checkpoint is written once it has seen every worker's clock.
    const std::string dir = CheckpointDir(ckpt.root, ckpt.stop_at);
    for (int s = 0; s < servers; ++s) {
      const absl::Time deadline = absl::Now() + absl::Seconds(20);
      while (!std::filesystem::exists(dir + "/ps" + std::to_string(s) + ".receipt") &&
             absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(5));
      }
    }
    stop.store(true);
    for (auto& t : serving) t.join();
    for (auto& s : ps) s->WaitForCheckpoints();
    return {};
  }
  // Read the result as worker 0 would after training (an ungated read).
  std::vector<uint64_t> keys(kFeatures);
  for (int i = 0; i < kFeatures; ++i) keys[i] = i;
  std::vector<float> rows(kFeatures * layout.row_dim), bias(layout.bias_dim);
  {
    auto reader = *transport.CreateEndpoint("w0");
    KVClient client(reader.get(), KVClientOptions{.rank = 0, .server_ids = ids});
    PsBackend backend(&client, absl::Seconds(10));
    EXPECT_TRUE(backend.Init(layout).ok());
    EXPECT_TRUE(backend.Read(-1, keys, rows, bias).ok());
  }
  stop.store(true);
  for (auto& t : serving) t.join();
  rows.insert(rows.end(), bias.begin(), bias.end());
  return rows;
}

TEST(TrainerTest, StepsPerEpochRoundsUp) {
  EXPECT_EQ(StepsPerEpoch(10, 3), 4);
  EXPECT_EQ(StepsPerEpoch(9, 3), 3);
  EXPECT_EQ(StepsPerEpoch(0, 3), 0);
}

class BspEquivalenceTest : public testing::TestWithParam<OptimizerKind> {};

TEST_P(BspEquivalenceTest, TwoWorkersEqualOneWorkerWithTheUnionBatch) {
  const std::vector<float> one = Train(1, 1, 0, 40, GetParam());
  const std::vector<float> two = Train(2, 2, 0, 20, GetParam());
  ASSERT_EQ(one.size(), two.size());
  double moved = 0;
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_NEAR(one[i], two[i], 1e-5) << "parameter " << i;
    moved += std::abs(one[i]);
  }
  EXPECT_GT(moved, 1.0) << "training must have changed the parameters";
}

INSTANTIATE_TEST_SUITE_P(Optimizers, BspEquivalenceTest,
                         testing::Values(OptimizerKind::kSgd, OptimizerKind::kAdagrad,
                                         OptimizerKind::kAdam));

TEST(TrainerTest, BspRunsAreBitwiseReproducible) {
  const std::vector<float> a = Train(2, 3, 0, 16, OptimizerKind::kAdagrad);
  const std::vector<float> b = Train(2, 3, 0, 16, OptimizerKind::kAdagrad);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "parameter " << i;
}

// The loss of the full data at the given parameters (features..., bias).
double FullLoss(const std::vector<float>& params) {
  Dataset data = MakeData(7, 1200, 200, 0, 1);
  auto model = *Model::Create("logreg", 2);
  std::vector<uint32_t> all(data.size());
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
  std::vector<uint64_t> keys(200);
  for (int i = 0; i < 200; ++i) keys[i] = i;
  std::vector<float> rows(params.begin(), params.begin() + 200), bias = {params[200]};
  std::vector<float> g(200), gb(1);
  return model->LossAndGradient(data, all, keys, rows, bias, absl::MakeSpan(g),
                                absl::MakeSpan(gb)) /
         data.size();
}

TEST(TrainerTest, CompressedTrainingWithErrorFeedbackStaysCloseToUncompressed) {
  const double plain = FullLoss(Train(2, 2, 0, 20, OptimizerKind::kSgd));
  for (const char* spec : {"topk:0.05", "sign1:64", "fp16"}) {
    SCOPED_TRACE(spec);
    for (bool sparse : {false, true}) {
      SCOPED_TRACE(sparse ? "sparse rows" : "dense rows");
      const double compressed =
          FullLoss(Train(2, 2, 0, 20, OptimizerKind::kSgd, *ParseCodec(spec), {}, false, sparse));
      EXPECT_LT(compressed, std::log(2.0) * 0.97) << "must have learned something";
      EXPECT_LT(compressed, plain * 1.05) << "plain " << plain;
    }
  }
}

// A device model that keeps its dense row gradients and encodes each shard's part itself (as a
// GPU worker does, so that only blocks cross PCIe) trains the bits of the backend's encoding
// of the gradients it hands back.
TEST(TrainerTest, DenseRowsEncodedByTheModelTrainTheBitsOfTheBackendsEncoding) {
  for (const char* spec : {"topk:0.05", "sign1:64", "fp16"}) {
    SCOPED_TRACE(spec);
    const CodecSpec codec = *ParseCodec(spec);
    const std::vector<float> handed =
        Train(2, 2, 0, 20, OptimizerKind::kSgd, codec, {}, false, false, Compute::kDeviceModel);
    const std::vector<float> kept = Train(2, 2, 0, 20, OptimizerKind::kSgd, codec, {}, false, false,
                                          Compute::kDeviceModelEncoding);
    EXPECT_EQ(kept, handed);
    EXPECT_LT(FullLoss(kept), std::log(2.0) * 0.97) << "must have learned something";
  }
}

// Sparse rows (a residual per row, the oldest flushed past 50 a shard) kept and encoded by the
// model on its device train the bits of the backend's encoding of the rows handed back: for
// logreg's rows of one float (top-K's float32 form) and an mlp's rows of 128.
TEST(TrainerTest, SparseRowsEncodedByTheModelTrainTheBitsOfTheBackendsEncoding) {
  for (const char* model : {"logreg", "mlp"}) {
    for (const char* spec : {"topk:0.05", "sign1:64"}) {
      SCOPED_TRACE(testing::Message() << model << " " << spec);
      const CodecSpec codec = *ParseCodec(spec);
      const std::vector<float> handed = Train(2, 2, 0, 20, OptimizerKind::kAdagrad, codec, {},
                                              false, true, Compute::kDeviceModel, model);
      const std::vector<float> kept = Train(2, 2, 0, 20, OptimizerKind::kAdagrad, codec, {}, false,
                                            true, Compute::kDeviceModelEncoding, model);
      EXPECT_EQ(kept, handed);
      const std::vector<float> plain = Train(2, 2, 0, 20, OptimizerKind::kAdagrad, {}, {}, false,
                                             false, Compute::kDeviceModel, model);
      EXPECT_NE(kept, plain) << "compression must have changed something";
    }
  }
}

// A device model keeping the worker's partition on its device (each batch gathered there from
// its example indices) trains the bits of one packing every batch on the host, under BSP and
// with a read-ahead (one worker, so that the reads do not depend on timing).
TEST(TrainerTest, APartitionKeptOnTheDeviceTrainsThePackedBatchesBits) {
  for (const char* model : {"logreg", "mlp"}) {
    SCOPED_TRACE(model);
    EXPECT_EQ(Train(2, 2, 0, 20, OptimizerKind::kAdagrad, {}, {}, false, false,
                    Compute::kDeviceModel, model),
              Train(2, 2, 0, 20, OptimizerKind::kAdagrad, {}, {}, false, false,
                    Compute::kDeviceModelPacked, model));
    EXPECT_EQ(Train(2, 1, 2, 20, OptimizerKind::kAdagrad, {}, {}, true, false,
                    Compute::kDeviceModel, model),
              Train(2, 1, 2, 20, OptimizerKind::kAdagrad, {}, {}, true, false,
                    Compute::kDeviceModelPacked, model));
  }
}

// Compressed pulls decoded by a device model (the copy of the pulled rows on its device, the
// rows of each read written there) train the bits of the client's own decoding, with rows
// evicted from the servers' copies (60 rows each) and with the pushes compressed too.
TEST(TrainerTest, PullsDecodedByTheModelTrainTheBitsOfTheClientsDecoding) {
  struct Run {
    const char* model;
    const char* pull;
    const char* push;  // "" none
  };
  for (const Run& run :
       {Run{"logreg", "fp16", ""}, Run{"logreg", "topk:0.3", ""}, Run{"mlp", "sign1", ""},
        Run{"logreg", "fp16", "topk:0.05"}, Run{"mlp", "topk:0.3", "sign1:64"}}) {
    SCOPED_TRACE(testing::Message() << run.model << " pull " << run.pull << " push " << run.push);
    const CodecSpec pull = *ParseCodec(run.pull);
    const CodecSpec push = *run.push != '\0' ? *ParseCodec(run.push) : CodecSpec{};
    const std::vector<float> client = Train(2, 2, 0, 20, OptimizerKind::kAdagrad, push, {}, false,
                                            true, Compute::kDeviceModel, run.model, pull);
    const std::vector<float> model = Train(2, 2, 0, 20, OptimizerKind::kAdagrad, push, {}, false,
                                           true, Compute::kDeviceModelEncoding, run.model, pull);
    EXPECT_EQ(model, client);
    const std::vector<float> exact = Train(2, 2, 0, 20, OptimizerKind::kAdagrad, push, {}, false,
                                           true, Compute::kDeviceModel, run.model);
    EXPECT_NE(model, exact) << "the pulls' compression must have changed something";
  }
}

// With a read-ahead (SSP), two reads are open at once: the next batch's read is begun before
// the current one's step takes its rows (its replies are decoded after that step, in the next
// Read's wait). One worker, so that what each read sees does not depend
// on timing (its read of t + 1 reaches each server before its push of t).
TEST(TrainerTest, PullsDecodedByTheModelWithAReadAheadTrainTheSameBits) {
  const CodecSpec pull = *ParseCodec("fp16");
  const std::vector<float> client = Train(2, 1, 2, 20, OptimizerKind::kAdagrad, {}, {}, true, true,
                                          Compute::kDeviceModel, "logreg", pull);
  const std::vector<float> model = Train(2, 1, 2, 20, OptimizerKind::kAdagrad, {}, {}, true, true,
                                         Compute::kDeviceModelEncoding, "logreg", pull);
  EXPECT_EQ(model, client);
}

// The same for an mlp, whose dense table (1178 floats) is compressed too and flushed whole,
// with its residual, at the last clock: both tables' gradients kept and encoded by the model.
TEST(TrainerTest, BothTablesEncodedByTheModelTrainTheBitsOfTheBackendsEncoding) {
  for (const char* spec : {"topk:0.05", "sign1:64"}) {
    SCOPED_TRACE(spec);
    const CodecSpec codec = *ParseCodec(spec);
    const std::vector<float> handed = Train(2, 2, 0, 20, OptimizerKind::kSgd, codec, {}, false,
                                            false, Compute::kDeviceModel, "mlp");
    const std::vector<float> kept = Train(2, 2, 0, 20, OptimizerKind::kSgd, codec, {}, false, false,
                                          Compute::kDeviceModelEncoding, "mlp");
    EXPECT_EQ(kept, handed);
    const std::vector<float> plain =
        Train(2, 2, 0, 20, OptimizerKind::kSgd, {}, {}, false, false, Compute::kDeviceModel, "mlp");
    EXPECT_NE(kept, plain) << "compression must have changed something";
  }
}

// A device model that is handed each next batch early and stages it while the current step
// computes trains the bits of one that packs and uploads each batch in its own step, under BSP
// and with a read-ahead under SSP.
TEST(TrainerTest, BatchesStagedDuringTheStepBeforeTrainTheSameBits) {
  for (const int64_t staleness : {0, 2}) {
    SCOPED_TRACE(staleness);
    const bool ahead = staleness > 0;
    const std::vector<float> staged = Train(2, 2, staleness, 20, OptimizerKind::kAdagrad, {}, {},
                                            ahead, false, Compute::kDeviceModel, "mlp");
    const std::vector<float> unstaged = Train(2, 2, staleness, 20, OptimizerKind::kAdagrad, {}, {},
                                              ahead, false, Compute::kDeviceModelUnstaged, "mlp");
    // SSP's reads depend on timing: there, Train checks that every step took a staged batch.
    if (staleness == 0) {
      EXPECT_EQ(staged, unstaged);
    }
  }
}

class ResumeTest : public testing::TestWithParam<const char*> {};

// A BSP run stopped right after a checkpoint and resumed from it ends with exactly the
// parameters of an uninterrupted run: server tables, optimizer state, clocks, the data position
// and the workers' error-feedback residuals all came back.
TEST_P(ResumeTest, ResumingFromACheckpointIsBitwiseAnUninterruptedRun) {
  // "sparse-" keeps sparse rows: the residuals per row (and their recency) come back too.
  // "device-": a device model encodes the dense rows, and the residuals come back to it.
  const std::string param = GetParam();
  // "device-mlp-": an mlp, whose dense table is encoded by the model as well.
  // "device-sparse-": sparse rows, their residual rows kept by the model.
  const bool device_sparse = param.starts_with("device-sparse-");
  const bool sparse = param.starts_with("sparse-") || device_sparse;
  const bool device = param.starts_with("device-");
  const bool mlp = param.starts_with("device-mlp-");
  const Compute compute = device ? Compute::kDeviceModelEncoding : Compute::kCpu;
  const std::string model_name = mlp ? "mlp" : "logreg";
  const CodecSpec codec = *ParseCodec(device_sparse      ? param.substr(14)
                                      : mlp              ? param.substr(11)
                                      : sparse || device ? param.substr(7)
                                                         : param);
  const std::string root = testing::TempDir() + "resume_" + std::to_string(getpid()) + "_" +
                           std::to_string(std::hash<std::string>()(param) % 100000);
  std::filesystem::remove_all(root);
  const std::vector<float> whole =
      Train(2, 2, 0, 20, OptimizerKind::kAdam, codec, {}, false, sparse, compute, model_name);
  // 1200 examples, 2 workers, batches of 20: 30 steps per epoch, 60 in all.
  Train(2, 2, 0, 20, OptimizerKind::kAdam, codec, {.root = root, .every = 7, .stop_at = 35}, false,
        sparse, compute, model_name);
  const std::string dir = CheckpointDir(root, 35);
  ASSERT_TRUE(std::filesystem::exists(dir + "/w1.state"));
  const std::vector<float> resumed =
      Train(2, 2, 0, 20, OptimizerKind::kAdam, codec, {.root = root, .resume = dir}, false, sparse,
            compute, model_name);
  ASSERT_EQ(whole.size(), resumed.size());
  for (size_t i = 0; i < whole.size(); ++i) ASSERT_EQ(whole[i], resumed[i]) << "parameter " << i;
  std::filesystem::remove_all(root);
}

INSTANTIATE_TEST_SUITE_P(Codecs, ResumeTest,
                         testing::Values("none", "topk:0.05", "sparse-topk:0.05", "sparse-sign1",
                                         "device-topk:0.05", "device-sign1", "device-mlp-topk:0.05",
                                         "device-sparse-topk:0.05", "device-sparse-sign1"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

TEST(TrainerTest, AspConvergesToo) {
  const std::vector<float> asp = Train(2, 2, -1, 20, OptimizerKind::kSgd);
  double moved = 0;
  for (float v : asp) moved += std::abs(v);
  EXPECT_GT(moved, 1.0);
}

TEST(TrainerTest, ReadingABatchAheadUnderSspAndAspStillConverges) {
  const double bsp = FullLoss(Train(2, 2, 0, 20, OptimizerKind::kSgd));
  for (const int64_t staleness : {1, -1}) {
    SCOPED_TRACE(staleness);
    const double ahead =
        FullLoss(Train(2, 2, staleness, 20, OptimizerKind::kSgd, {}, {}, /*read_ahead=*/true));
    EXPECT_LT(ahead, std::log(2.0) * 0.9) << "must have learned";
    EXPECT_LT(ahead, bsp * 1.05) << "BSP " << bsp;
  }
}

// Records the trainer's calls; reads fill every row with the clock read, so a gradient shows
// which read it was computed from.
class RecordingBackend final : public SyncBackend {
 public:
  explicit RecordingBackend(bool can_read_ahead) : can_read_ahead_(can_read_ahead) {}

  absl::Status Init(const ParameterLayout&) override { return absl::OkStatus(); }
  bool ReadAhead(int64_t clock, std::span<const uint64_t> keys, std::span<float> rows,
                 std::span<float> bias) override {
    if (!can_read_ahead_) return false;
    events.push_back(absl::StrCat("ahead ", clock));
    ahead_keys_[clock] = std::vector<uint64_t>(keys.begin(), keys.end());
    ahead_rows_[clock] = rows.data();
    Fill(clock, rows, bias);
    return true;
  }
  absl::Status Read(int64_t clock, std::span<const uint64_t> keys, std::span<float> rows,
                    std::span<float> bias) override {
    events.push_back(absl::StrCat("read ", clock));
    if (auto it = ahead_keys_.find(clock); it != ahead_keys_.end()) {
      EXPECT_EQ(it->second, std::vector<uint64_t>(keys.begin(), keys.end())) << clock;
      EXPECT_EQ(ahead_rows_[clock], rows.data()) << clock;
      // A read-ahead's buffers were filled then; nothing may have overwritten them.
      for (float v : rows) EXPECT_EQ(v, static_cast<float>(clock)) << clock;
    } else {
      Fill(clock, rows, bias);
    }
    read_keys_[clock] = std::vector<uint64_t>(keys.begin(), keys.end());
    return absl::OkStatus();
  }
  absl::Status Update(int64_t clock, std::span<const uint64_t> keys, std::span<const float>,
                      std::span<const float>, float examples) override {
    events.push_back(absl::StrCat("update ", clock));
    EXPECT_EQ(read_keys_[clock], std::vector<uint64_t>(keys.begin(), keys.end())) << clock;
    examples_ += examples;
    return absl::OkStatus();
  }
  absl::Status EndIteration(int64_t, float) override { return absl::OkStatus(); }
  absl::Status Finish() override { return absl::OkStatus(); }
  uint64_t bytes_pushed() const override { return 0; }
  uint64_t bytes_pulled() const override { return 0; }

  std::vector<std::string> events;
  double examples() const { return examples_; }

 private:
  static void Fill(int64_t clock, std::span<float> rows, std::span<float> bias) {
    std::fill(rows.begin(), rows.end(), static_cast<float>(clock));
    std::fill(bias.begin(), bias.end(), 0.0f);
  }

  const bool can_read_ahead_;
  std::map<int64_t, std::vector<uint64_t>> ahead_keys_, read_keys_;
  std::map<int64_t, const float*> ahead_rows_;
  double examples_ = 0;
};

// With a read-ahead, iteration t+1's read leaves before t's update, across the epoch's end
// too, and every push carries the keys its own read had.
TEST(TrainerTest, AReadAheadLeavesBeforeTheUpdateAndKeepsEachBatchsKeys) {
  const Dataset data = MakeData(3, 50, 30, 0, 1);
  auto model = *Model::Create("logreg", 2);
  for (const bool can : {true, false}) {
    SCOPED_TRACE(can);
    RecordingBackend backend(can);
    TrainerOptions options{.epochs = 2, .batch_size = 20};  // 3 steps per epoch, the last short
    options.read_ahead = true;
    Trainer trainer(*model, backend, options);
    auto result = trainer.Run(data, nullptr);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->steps, 6);
    EXPECT_EQ(backend.examples(), 100);
    std::vector<std::string> expected;
    for (int t = 0; t < 6; ++t) {
      expected.push_back(absl::StrCat("read ", t));
      if (can && t + 1 < 6) expected.push_back(absl::StrCat("ahead ", t + 1));
      expected.push_back(absl::StrCat("update ", t));
    }
    EXPECT_EQ(backend.events, expected);
  }
}

// A backend whose calls take a known time: each call sleeps `call` and reports `codec` of it as
// codec time.
class TimedBackend final : public SyncBackend {
 public:
  TimedBackend(absl::Duration call, absl::Duration codec) : call_(call), codec_(codec) {}

  absl::Status Init(const ParameterLayout&) override { return absl::OkStatus(); }
  absl::Status Read(int64_t, std::span<const uint64_t>, std::span<float> rows,
                    std::span<float> bias) override {
    std::fill(rows.begin(), rows.end(), 0.0f);
    std::fill(bias.begin(), bias.end(), 0.0f);
    return Call();
  }
  absl::Status Update(int64_t, std::span<const uint64_t>, std::span<const float>,
                      std::span<const float>, float) override {
    return Call();
  }
  absl::Status EndIteration(int64_t, float) override { return Call(); }
  absl::Status Finish() override { return absl::OkStatus(); }
  absl::Duration TakeCodecTime() override {
    return std::exchange(codec_time_, absl::ZeroDuration());
  }
  uint64_t bytes_pushed() const override { return 0; }
  uint64_t bytes_pulled() const override { return 0; }

 private:
  absl::Status Call() {
    absl::SleepFor(call_);
    codec_time_ += codec_;
    return absl::OkStatus();
  }

  const absl::Duration call_, codec_;
  absl::Duration codec_time_;
};

// logreg whose every LossAndGradient takes at least `compute` and reports copies of `upload`
// and `download`, as a GPU model would.
class CopyingModel final : public Model {
 public:
  CopyingModel(absl::Duration compute, TransferTimes copies)
      : logreg_(*Model::Create("logreg", 2)), compute_(compute), copies_(copies) {}

  std::string_view name() const override { return "copying"; }
  int row_dim() const override { return logreg_->row_dim(); }
  int bias_dim() const override { return logreg_->bias_dim(); }
  int num_classes() const override { return logreg_->num_classes(); }
  bool binary() const override { return logreg_->binary(); }
  double LossAndGradient(const Dataset& data, absl::Span<const uint32_t> examples,
                         absl::Span<const uint64_t> keys, absl::Span<const float> rows,
                         absl::Span<const float> bias, absl::Span<float> row_grads,
                         absl::Span<float> bias_grad) const override {
    absl::SleepFor(compute_);
    taken_.upload += copies_.upload;
    taken_.download += copies_.download;
    return logreg_->LossAndGradient(data, examples, keys, rows, bias, row_grads, bias_grad);
  }
  void Predict(const Dataset& data, absl::Span<const uint32_t> examples,
               absl::Span<const uint64_t> keys, absl::Span<const float> rows,
               absl::Span<const float> bias, std::vector<float>* scores) const override {
    logreg_->Predict(data, examples, keys, rows, bias, scores);
  }
  TransferTimes TakeTransferTimes() const override { return std::exchange(taken_, {}); }

 private:
  std::unique_ptr<Model> logreg_;
  const absl::Duration compute_;
  const TransferTimes copies_;
  mutable TransferTimes taken_;
};

// The step split: the backend's codec time comes out of its calls' time (network) into
// compress, the model's copies out of its time (compute) into upload and download; every part
// is non-negative, the parts add up to no more than the run's time, and the progress reports
// split the same iterations.
TEST(TrainerTest, StepTimesSplitCodecTimeFromNetworkAndCopiesFromCompute) {
  const Dataset data = MakeData(3, 50, 30, 0, 1);
  const absl::Duration ms = absl::Milliseconds(1);
  CopyingModel model(/*compute=*/4 * ms, TransferTimes{.upload = ms, .download = 2 * ms});
  TimedBackend backend(/*call=*/3 * ms, /*codec=*/ms);
  TrainerOptions options{.epochs = 2, .batch_size = 20, .log_every = 2};  // 6 steps
  Trainer trainer(model, backend, options);
  StepTimes reported;
  const absl::Time start = absl::Now();
  auto result = trainer.Run(data, [&](const TrainProgress& p) { reported += p.times; });
  const absl::Duration wall = absl::Now() - start;
  ASSERT_TRUE(result.ok()) << result.status();
  const StepTimes& t = result->times;
  ASSERT_EQ(t.steps, 6);
  for (absl::Duration part : {t.batch, t.upload, t.compute, t.compress, t.download, t.network}) {
    EXPECT_GE(part, absl::ZeroDuration());
  }
  // Three backend calls an iteration, each 1 ms of codec in at least 3 ms.
  EXPECT_EQ(t.compress, 6 * 3 * ms);
  EXPECT_GE(t.network, 6 * 3 * (3 * ms - ms));
  // One model call an iteration: its copies, and the rest of its at least 4 ms.
  EXPECT_EQ(t.upload, 6 * ms);
  EXPECT_EQ(t.download, 6 * 2 * ms);
  EXPECT_GE(t.compute, 6 * (4 * ms - 3 * ms));
  EXPECT_EQ(t.total(), t.batch + t.upload + t.compute + t.compress + t.download + t.network);
  EXPECT_LE(t.total(), wall);
  // The reports covered every iteration, with the same split.
  EXPECT_EQ(reported.steps, t.steps);
  EXPECT_EQ(reported.total(), t.total());
  EXPECT_EQ(reported.compress, t.compress);
  EXPECT_EQ(reported.upload, t.upload);
  EXPECT_NE(t.ToString().find("compress"), std::string::npos) << t.ToString();
}

// A local backend (a federated client's replica) has no wire: its calls' time is compute, less
// the codec time it reports, which is still compress.
TEST(TrainerTest, ALocalBackendsCallsAreComputeNotNetwork) {
  const Dataset data = MakeData(3, 50, 30, 0, 1);
  const absl::Duration ms = absl::Milliseconds(1);
  CopyingModel model(/*compute=*/ms, TransferTimes{});
  TimedBackend backend(/*call=*/3 * ms, /*codec=*/ms);
  TrainerOptions options{.epochs = 2, .batch_size = 20};  // 6 steps
  options.local_backend = true;
  Trainer trainer(model, backend, options);
  auto result = trainer.Run(data, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  const StepTimes& t = result->times;
  ASSERT_EQ(t.steps, 6);
  EXPECT_EQ(t.network, absl::ZeroDuration());
  EXPECT_EQ(t.compress, 6 * 3 * ms);
  // The model's 1 ms and three calls' 2 ms beyond their codec, each iteration.
  EXPECT_GE(t.compute, 6 * (ms + 3 * 2 * ms));
}

// Codec time and copies reported beyond the calls' own time are cut to it: no part goes
// negative, and the split never adds up to more than the time that passed.
TEST(TrainerTest, StepTimesNeverExceedTheCallsTheyCameFrom) {
  const Dataset data = MakeData(3, 50, 30, 0, 1);
  CopyingModel model(absl::ZeroDuration(),
                     TransferTimes{.upload = absl::Seconds(5), .download = absl::Seconds(5)});
  TimedBackend backend(absl::ZeroDuration(), absl::Seconds(5));
  Trainer trainer(model, backend, TrainerOptions{.epochs = 1, .batch_size = 20});
  const absl::Time start = absl::Now();
  auto result = trainer.Run(data, nullptr);
  const absl::Duration wall = absl::Now() - start;
  ASSERT_TRUE(result.ok()) << result.status();
  const StepTimes& t = result->times;
  for (absl::Duration part : {t.batch, t.upload, t.compute, t.compress, t.download, t.network}) {
    EXPECT_GE(part, absl::ZeroDuration());
  }
  EXPECT_LE(t.total(), wall);
}

// Against parameter servers, a compressed push's error feedback and codec count as compress;
// the rest of the backend's calls as network. Without a codec there is no compress time.
TEST(TrainerTest, PsBackendReportsItsCodecTimeAsCompress) {
  for (const CodecKind kind : {CodecKind::kNone, CodecKind::kTopK}) {
    SCOPED_TRACE(CodecName(CodecSpec{.kind = kind}));
    InprocTransport transport;
    auto server_ep = *transport.CreateEndpoint("ps0");
    ParameterServer server(
        server_ep.get(),
        ServerOptions{.rank = 0, .num_servers = 1, .num_workers = 1, .staleness = 0});
    std::atomic<bool> stop{false};
    std::thread serving([&] {
      while (!stop.load()) (void)server.ServeUntil(absl::Now() + absl::Milliseconds(5));
    });
    auto model = *Model::Create("logreg", 2);
    ParameterLayout layout;
    layout.num_features = 200;
    layout.dense_rows = kind != CodecKind::kNone;
    auto ep = *transport.CreateEndpoint("w0");
    KVClient client(ep.get(), KVClientOptions{.rank = 0, .server_ids = {"ps0"}});
    PsBackend backend(&client, absl::Seconds(10), CodecSpec{.kind = kind, .ratio = 0.1});
    ASSERT_TRUE(backend.Init(layout).ok());
    Trainer trainer(*model, backend, TrainerOptions{.epochs = 1, .batch_size = 50});
    auto result = trainer.Run(MakeData(7, 600, 200, 0, 1), nullptr);
    stop.store(true);
    serving.join();
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->times.steps, 12);
    EXPECT_GT(result->times.network, absl::ZeroDuration());
    if (kind == CodecKind::kNone) {
      EXPECT_EQ(result->times.compress, absl::ZeroDuration());
    } else {
      EXPECT_GT(result->times.compress, absl::ZeroDuration());
    }
    EXPECT_EQ(result->times.upload + result->times.download, absl::ZeroDuration());
  }
}

// A small Criteo file whose label follows C1's value.
std::string WriteCriteoFile(int n) {
  const std::string path = testing::TempDir() + "trainer_test_criteo.tsv";
  std::ofstream out(path);
  std::mt19937_64 rng(5);
  for (int i = 0; i < n; ++i) {
    const int c1 = static_cast<int>(rng() % 20);
    const bool positive = (rng() % 100) < static_cast<uint64_t>(c1 < 10 ? 80 : 20);
    out << (positive ? 1 : 0) << '\t' << i % 7;
    for (int j = 1; j < kCriteoDenseFields; ++j) out << '\t';
    out << '\t' << std::hex << c1 << std::dec;
    for (int f = 1; f < kCriteoCategoricalFields; ++f) out << '\t' << (f % 3 == 0 ? "" : "a");
    out << '\n';
  }
  return path;
}

// Trains `model` with `workers` workers under BSP, each on the source make_source(w) gives,
// then returns what evaluate(backend) returns from an ungated reader.
template <typename Evaluate>
auto TrainOnSources(const Model& model, int workers,
                    const std::function<std::unique_ptr<ExampleSource>(int)>& make_source,
                    Evaluate evaluate) {
  InprocTransport transport;
  auto server_ep = *transport.CreateEndpoint("ps0");
  ParameterServer server(
      server_ep.get(),
      ServerOptions{.rank = 0, .num_servers = 1, .num_workers = workers, .staleness = 0});
  std::atomic<bool> stop{false};
  std::thread serving([&] {
    while (!stop.load()) (void)server.ServeUntil(absl::Now() + absl::Milliseconds(5));
  });
  ParameterLayout layout;
  layout.row_dim = model.row_dim();
  layout.bias_dim = model.bias_dim();
  layout.optimizer.kind = OptimizerKind::kAdagrad;
  layout.row_init_scale = model.row_init_scale();
  layout.bias_init_scale = model.bias_init_scale();
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      auto ep = *transport.CreateEndpoint("w" + std::to_string(w));
      KVClient client(ep.get(), KVClientOptions{.rank = w, .server_ids = {"ps0"}});
      PsBackend backend(&client, absl::Seconds(10));
      ASSERT_TRUE(backend.Init(layout).ok());
      std::unique_ptr<ExampleSource> source = make_source(w);
      Trainer trainer(model, backend, TrainerOptions{.epochs = 2, .batch_size = 16});
      auto result = trainer.Run(*source, nullptr);
      ASSERT_TRUE(result.ok()) << result.status();
      EXPECT_EQ(result->steps, 2 * StepsPerEpoch(source->size(), 16));
    });
  }
  for (auto& t : threads) t.join();
  auto reader = *transport.CreateEndpoint("w0");
  KVClient client(reader.get(), KVClientOptions{.rank = 0, .server_ids = {"ps0"}});
  PsBackend backend(&client, absl::Seconds(10));
  EXPECT_TRUE(backend.Init(layout).ok());
  auto result = evaluate(backend);
  stop.store(true);
  serving.join();
  return result;
}

TEST(TrainerTest, AStreamedCriteoFileTrainsExactlyLikeTheSameDataInMemory) {
  const std::string path = WriteCriteoFile(300);
  auto model = *Model::Create("ctr", ModelOptions{.embedding_dim = 2, .hidden = {4}});
  auto test_everything = [&](SyncBackend& backend) {
    auto test = *CriteoReader::Open(path, {});
    auto eval = EvaluateSource(*model, backend, *test, 64);
    EXPECT_TRUE(eval.ok()) << eval.status();
    // Chunked evaluation equals evaluating everything at once.
    Dataset all = *ReadDataset(path, {.format = DataFormat::kCriteo});
    std::vector<uint32_t> examples(all.size());
    for (uint32_t i = 0; i < all.size(); ++i) examples[i] = i;
    std::vector<uint64_t> keys = model->BatchKeys(all, examples);
    std::vector<float> rows(keys.size() * model->row_dim()), bias(model->bias_dim());
    EXPECT_TRUE(backend.Read(-1, keys, rows, bias).ok());
    const Evaluation whole = Evaluate(*model, all, keys, rows, bias);
    EXPECT_EQ(eval->examples, 300u);
    EXPECT_DOUBLE_EQ(eval->auc, whole.auc);
    EXPECT_NEAR(eval->loss, whole.loss, 1e-9);
    rows.insert(rows.end(), bias.begin(), bias.end());
    rows.push_back(static_cast<float>(eval->auc));
    return rows;
  };
  std::vector<Dataset> in_memory;
  for (int w = 0; w < 2; ++w) {
    in_memory.push_back(
        *ReadDataset(path, {.format = DataFormat::kCriteo, .partition = w, .num_partitions = 2}));
  }
  const std::vector<float> memory = TrainOnSources(
      *model, 2,
      [&](int w) -> std::unique_ptr<ExampleSource> {
        return std::make_unique<InMemorySource>(in_memory[w]);
      },
      test_everything);
  const std::vector<float> streamed = TrainOnSources(
      *model, 2,
      [&](int w) -> std::unique_ptr<ExampleSource> {
        return *CriteoReader::Open(path, {.partition = w, .num_partitions = 2});
      },
      test_everything);
  ASSERT_EQ(memory.size(), streamed.size());
  for (size_t i = 0; i < memory.size(); ++i) ASSERT_EQ(memory[i], streamed[i]) << i;
  EXPECT_GT(memory.back(), 0.7) << "test AUC: C1 decides the label";
}

}  // namespace
}  // namespace syncline
