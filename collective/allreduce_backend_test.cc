#include "collective/allreduce_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compression/codec.h"
#include "core/inproc_transport.h"
#include "core/node_table.h"
#include "job/options.h"
#include "testing/inproc_ranks.h"

namespace syncline {
namespace {

// N all-reduce workers as threads over the in-process transport, each training `steps` steps
// of random sparse gradients (seeded by rank and step; some ranks stop early); returns every
// rank's final parameters.
// *sparse_rounds: rank 0's rounds that all-gathered pairs.
std::vector<std::vector<float>> Train(int n, AllReduceOptions::Rows rows, WireType wire,
                                      uint32_t dim, uint64_t features, int keys_per_step,
                                      uint64_t* sparse_rounds = nullptr) {
  InprocRanks ranks(n);
  EXPECT_TRUE(ranks.connected);
  std::vector<std::unique_ptr<AllReduceBackend>> backends;
  for (int r = 0; r < n; ++r) {
    AllReduceOptions o;
    o.rows = rows;
    o.wire = wire;
    o.optimizer.kind = OptimizerKind::kAdagrad;
    o.optimizer.learning_rate = 0.1f;
    o.optimizer.l2 = 1e-3f;
    backends.push_back(std::make_unique<AllReduceBackend>(
        std::make_unique<Communicator>(ranks.endpoints[r].get(), r, ranks.ids), o));
  }
  std::vector<std::vector<float>> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      AllReduceBackend& b = *backends[r];
      ParameterLayout layout;
      layout.row_dim = dim;
      layout.num_features = features;
      layout.bias_dim = 3;
      layout.optimizer.kind = OptimizerKind::kAdagrad;
      ASSERT_TRUE(b.Init(layout).ok());
      const int steps = 12 - r;  // partitions of unequal size
      for (int step = 0; step < steps; ++step) {
        std::mt19937_64 rng(1000 * r + step);
        std::vector<uint64_t> keys;
        for (int i = 0; i < keys_per_step; ++i) keys.push_back(rng() % features);
        std::sort(keys.begin(), keys.end());
        keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
        std::vector<float> rows(keys.size() * dim), bias(3), grads(keys.size() * dim), bias_grad(3);
        ASSERT_TRUE(b.Read(step, keys, rows, bias).ok());
        for (float& g : grads) g = std::normal_distribution<float>(0, 1)(rng);
        for (float& g : bias_grad) g = std::normal_distribution<float>(0, 1)(rng);
        ASSERT_TRUE(b.Update(step, keys, grads, bias_grad, 8).ok());
        ASSERT_TRUE(b.EndIteration(step, 8).ok());
      }
      ASSERT_TRUE(b.Finish().ok());
      out[r].assign(b.parameters().begin(), b.parameters().end());
      if (r == 0 && sparse_rounds != nullptr) *sparse_rounds = b.sparse_rounds();
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// The rows a step touched all-gathered as (key, gradient) pairs train the model that
// all-reducing every row trains (to float rounding: the additions come in another order),
// every rank with the same bits; with few rows touched, kAuto takes the pairs.
TEST(AllReduceBackendTest, SparseGathersTrainTheModelOfDenseAllReduces) {
  for (int n : {1, 2, 3, 5}) {
    for (uint32_t dim : {1u, 4u}) {
      SCOPED_TRACE(absl::StrCat("n ", n, " dim ", dim));
      const auto dense = Train(n, AllReduceOptions::Rows::kDense, WireType::kFloat32, dim, 500, 20);
      const auto sparse =
          Train(n, AllReduceOptions::Rows::kSparse, WireType::kFloat32, dim, 500, 20);
      uint64_t gathered = 0;
      const auto automatic =
          Train(n, AllReduceOptions::Rows::kAuto, WireType::kFloat32, dim, 500, 20, &gathered);
      EXPECT_EQ(gathered, 13u) << "rank 0's 12 steps, and the round that ends the job";
      for (int r = 0; r < n; ++r) {
        ASSERT_EQ(sparse[r], sparse[0]) << "rank " << r << " differs";
        ASSERT_EQ(dense[r], dense[0]);
        EXPECT_EQ(automatic[r], sparse[0]) << "auto took the pairs";
      }
      double worst = 0;
      size_t moved = 0;
      for (size_t i = 0; i < dense[0].size(); ++i) {
        worst = std::max(worst, std::abs(double{dense[0][i]} - sparse[0][i]) /
                                    (1e-3 + std::abs(double{dense[0][i]})));
        moved += dense[0][i] != 0;
      }
      EXPECT_LT(worst, 1e-5);
      EXPECT_GT(moved, 50u);
    }
  }
}

// Nearly every row touched: the pairs would cost more than the rows, and kAuto all-reduces.
// Under fp16 the pairs carry half floats, and still agree with the fp16 all-reduce to half
// precision.
TEST(AllReduceBackendTest, DenseBatchesAreAllReducedAndHalvesTravelAsHalves) {
  const auto dense = Train(3, AllReduceOptions::Rows::kDense, WireType::kFloat32, 2, 40, 400);
  uint64_t gathered = 0;
  const auto automatic =
      Train(3, AllReduceOptions::Rows::kAuto, WireType::kFloat32, 2, 40, 400, &gathered);
  // Every training step all-reduced; only the round that ends the job (nothing touched)
  // gathers.
  EXPECT_EQ(gathered, 1u);
  // The same rows all-reduced (the bias sums may come by another algorithm's order).
  for (size_t i = 0; i < dense[0].size(); ++i) {
    ASSERT_NEAR(automatic[0][i], dense[0][i], 1e-6 * (1 + std::abs(dense[0][i]))) << i;
  }
  const auto half_dense = Train(3, AllReduceOptions::Rows::kDense, WireType::kFloat16, 2, 300, 20);
  const auto half_sparse =
      Train(3, AllReduceOptions::Rows::kSparse, WireType::kFloat16, 2, 300, 20);
  for (int r = 0; r < 3; ++r) ASSERT_EQ(half_sparse[r], half_sparse[0]);
  double worst = 0;
  for (size_t i = 0; i < half_dense[0].size(); ++i) {
    worst = std::max(worst, std::abs(double{half_dense[0][i]} - half_sparse[0][i]));
  }
  EXPECT_LT(worst, 0.02);
}

// A row encoder on the CPU that keeps the row gradients as a GPU model does (worker/
// device_model.h): scattered by key into a dense gradient, encoded with error feedback when the
// backend asks.
class CpuRowEncoder final : public GradientEncoder {
 public:
  CpuRowEncoder(const GradientCompression& want, uint32_t dim)
      : codec_(Codec::Create(want.codec)), dim_(dim), gradient_(want.floats, 0.0f) {}
  void Keep(std::span<const uint64_t> keys, std::span<const float> grads) {
    for (size_t i = 0; i < keys.size(); ++i) {
      for (uint32_t j = 0; j < dim_; ++j) gradient_[keys[i] * dim_ + j] += grads[i * dim_ + j];
    }
  }
  absl::Status Compress(size_t part, std::vector<std::byte>* block) override {
    feedback_.Compress(*codec_, gradient_, block);
    std::fill(gradient_.begin(), gradient_.end(), 0.0f);
    return absl::OkStatus();
  }
  absl::Status Drain(size_t part, std::vector<float>* values) override {
    return absl::UnimplementedError("an all-reduce drains nothing");
  }
  absl::StatusOr<std::vector<float>> Residual(size_t part) const override {
    return std::vector<float>(feedback_.residual().begin(), feedback_.residual().end());
  }
  absl::Status SetResidual(size_t part, std::span<const float> residual) override {
    feedback_.SetResidual(residual);
    return absl::OkStatus();
  }

 private:
  std::unique_ptr<Codec> codec_;
  const uint32_t dim_;
  std::vector<float> gradient_;
  ErrorFeedback feedback_;
};

// Compressed all-reduce among n ranks for a few steps of random gradients, the row gradients
// handed to Update or (with_encoders) kept by a CpuRowEncoder; returns every rank's final
// parameters and saved state.
struct Trained {
  std::vector<std::vector<float>> params;
  std::vector<std::string> states;
};
Trained TrainCompressed(int n, const CodecSpec& codec, bool with_encoders) {
  constexpr uint32_t kDim = 2;
  constexpr uint64_t kFeatures = 120;
  InprocRanks ranks(n);
  EXPECT_TRUE(ranks.connected);
  Trained out{std::vector<std::vector<float>>(n), std::vector<std::string>(n)};
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      AllReduceOptions o;
      o.codec = codec;
      o.optimizer.learning_rate = 0.1f;
      AllReduceBackend b(std::make_unique<Communicator>(ranks.endpoints[r].get(), r, ranks.ids), o);
      ParameterLayout layout;
      layout.row_dim = kDim;
      layout.num_features = kFeatures;
      layout.bias_dim = 3;
      ASSERT_TRUE(b.Init(layout).ok());
      const std::vector<GradientCompression> wanted = b.CompressionWanted();
      ASSERT_EQ(wanted.size(), 1u);
      const GradientCompression* want = &wanted[0];
      EXPECT_EQ(want->table, GradientTable::kRows);
      EXPECT_EQ(want->floats, kFeatures * kDim);
      ASSERT_EQ(want->parts.size(), 1u);
      EXPECT_EQ(want->parts[0].size(), kFeatures * kDim);
      std::unique_ptr<CpuRowEncoder> encoder;
      if (with_encoders) {
        encoder = std::make_unique<CpuRowEncoder>(*want, kDim);
        b.SetEncoder(GradientTable::kRows, encoder.get());
      }
      const int steps = 8 - r;
      for (int step = 0; step < steps; ++step) {
        std::mt19937_64 rng(1000 * r + step);
        std::vector<uint64_t> keys;
        for (int i = 0; i < 30; ++i) keys.push_back(rng() % kFeatures);
        std::sort(keys.begin(), keys.end());
        keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
        std::vector<float> rows(keys.size() * kDim), bias(3), grads(keys.size() * kDim),
            bias_grad(3);
        ASSERT_TRUE(b.Read(step, keys, rows, bias).ok());
        for (float& g : grads) g = std::normal_distribution<float>(0, 1)(rng);
        for (float& g : bias_grad) g = std::normal_distribution<float>(0, 1)(rng);
        if (encoder != nullptr) {
          encoder->Keep(keys, grads);
          std::fill(grads.begin(), grads.end(), 0.0f);  // what the model hands back
        }
        ASSERT_TRUE(b.Update(step, keys, grads, bias_grad, 8).ok());
        ASSERT_TRUE(b.EndIteration(step, 8).ok());
      }
      ASSERT_TRUE(b.Finish().ok());
      out.params[r].assign(b.parameters().begin(), b.parameters().end());
      out.states[r] = *b.SaveState();
      if (encoder != nullptr) {
        // A restore goes to the encoder: saving again gives the same state.
        CpuRowEncoder fresh(*want, kDim);
        b.SetEncoder(GradientTable::kRows, &fresh);
        ASSERT_TRUE(b.RestoreState(out.states[r]).ok());
        EXPECT_EQ(*b.SaveState(), out.states[r]);
      }
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// A GPU model's row encoder in the backend's place: the same blocks, so the same bits in every
// rank's parameters and checkpointed residual.
TEST(AllReduceBackendTest, BlocksFromTheModelsEncoderTrainTheSameBits) {
  for (const std::string name : {"topk:0.1", "sign1:16"}) {
    SCOPED_TRACE(name);
    const CodecSpec codec = *ParseCodec(name);
    const Trained own = TrainCompressed(3, codec, false);
    const Trained kept = TrainCompressed(3, codec, true);
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(kept.params[r], own.params[r]) << "w" << r;
      EXPECT_EQ(kept.states[r], own.states[r]) << "w" << r;
    }
  }
  // Uncompressed rounds ask for no encoder.
  AllReduceBackend plain(nullptr, AllReduceOptions{});
  EXPECT_TRUE(plain.CompressionWanted().empty());
}

// Workers meet over their data endpoints and move to the TCP plane only when every one of them
// offers it: each all-reduce then gives the sum, and the megabyte it moves travels over the
// plane, not the data endpoint; when one worker offers none (a keyed job), all of them stay.
TEST(AllReduceBackendTest, TheTcpPlaneIsTakenOnlyWhenEveryWorkerOffersOne) {
  constexpr int kN = 3;
  constexpr size_t kFloats = 256 * 1024;  // 1 MiB
  for (int refuser : {-1, 1}) {
    SCOPED_TRACE(refuser < 0 ? "every worker offers a plane" : "w1 offers none");
    InprocTransport transport;
    NodeTable table;
    table.num_workers = kN;
    std::vector<std::unique_ptr<Endpoint>> endpoints;
    for (int r = 0; r < kN; ++r) {
      const std::string id = DataEndpointId(wire::Role::WORKER, r);
      endpoints.push_back(*transport.CreateEndpoint(id));
      table.nodes.push_back({wire::Role::WORKER, r, id, *endpoints.back()->Bind("inproc://" + id)});
    }
    JobSpec spec;
    spec.timeouts.request_s = spec.timeouts.peer_s = 10;
    std::vector<std::vector<float>> results(kN);
    std::vector<absl::Status> statuses(kN);
    std::vector<std::thread> threads;
    for (int r = 0; r < kN; ++r) {
      threads.emplace_back([&, r] {
        CollectivePlane plane;
        plane.tcp = r != refuser;
        auto communicator = ConnectWorkersOverTcp(spec, table, r, *endpoints[r], plane);
        if (!communicator.ok()) {
          statuses[r] = communicator.status();
          return;
        }
        results[r].assign(kFloats, static_cast<float>(r + 1));
        statuses[r] = (*communicator)->AllReduce(results[r], Algorithm::kRing);
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < kN; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << statuses[r];
      ASSERT_EQ(results[r], std::vector<float>(kFloats, 6.0f)) << "rank " << r;
      const uint64_t on_data_endpoint = endpoints[r]->counters().bytes_sent;
      if (refuser < 0) {
        EXPECT_LT(on_data_endpoint, 16 * 1024u) << "rank " << r << ": only the address trade";
      } else {
        EXPECT_GT(on_data_endpoint, kFloats * sizeof(float)) << "rank " << r;
      }
    }
  }
}

}  // namespace
}  // namespace syncline
