// The choice between NCCL and the CPU collective (ChooseDenseCollective), the exchange of the
// ranks' devices, the fallback of ranks that share a GPU, and the all-reduce backend's use of
// a DenseCollective of its own. All on the CPU: no test here needs a GPU.
#include "collective/dense_collective.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "collective/allreduce_backend.h"
#include "collective/communicator.h"
#include "collective/planes.h"
#include "testing/inproc_ranks.h"

namespace syncline {
namespace {

using ::testing::HasSubstr;

RankDevice Cpu(std::string host) { return RankDevice{.host = std::move(host)}; }
RankDevice Gpu(std::string host, std::string bus, std::string uuid) {
  return RankDevice{.host = std::move(host), .pci_bus_id = std::move(bus), .uuid = std::move(uuid)};
}

TEST(ChooseDenseCollectiveTest, AllCpuRanksStayOnTheCpu) {
  const std::vector<RankDevice> ranks = {Cpu("a"), Cpu("a"), Cpu("b")};
  DenseChoice c = ChooseDenseCollective(ranks);
  EXPECT_FALSE(c.nccl);
  EXPECT_THAT(c.reason, HasSubstr("every rank computes on the CPU"));
  EXPECT_FALSE(ChooseDenseCollective({}).nccl);
  // Ranks that asked for a GPU and could not have one: said, not folded into "the CPU".
  RankDevice asked = Cpu("a");
  asked.note = "cuda:0 could not be probed: no CUDA device 0";
  c = ChooseDenseCollective(std::vector<RankDevice>{asked, Cpu("b")});
  EXPECT_FALSE(c.nccl);
  EXPECT_THAT(c.reason, HasSubstr("w0 (host a) cpu: cuda:0 could not be probed"));
}

TEST(ChooseDenseCollectiveTest, DistinctGpusTakeNccl) {
  const std::vector<RankDevice> ranks = {Gpu("a", "0000:3b:00.0", "GPU-1"),
                                         Gpu("a", "0000:5e:00.0", "GPU-2"),
                                         Gpu("b", "0000:3b:00.0", "GPU-3")};
  DenseChoice c = ChooseDenseCollective(ranks);
  EXPECT_TRUE(c.nccl) << c.reason;
  EXPECT_TRUE(ChooseDenseCollective(std::vector<RankDevice>{ranks[0]}).nccl);
}

TEST(ChooseDenseCollectiveTest, TwoRanksOnOneGpuFallBackSayingWhich) {
  const std::vector<RankDevice> ranks = {Gpu("a", "0000:3b:00.0", "GPU-1"),
                                         Gpu("a", "0000:5e:00.0", "GPU-2"),
                                         Gpu("a", "0000:3b:00.0", "GPU-1")};
  DenseChoice c = ChooseDenseCollective(ranks);
  EXPECT_FALSE(c.nccl);
  EXPECT_THAT(c.reason, HasSubstr("two ranks share GPU 0000:3b:00.0 (GPU-1) on host a"));
  EXPECT_THAT(c.reason, HasSubstr("w0 and w2"));
  EXPECT_THAT(c.reason, HasSubstr("NCCL refuses that, so"));
  EXPECT_THAT(c.reason, HasSubstr("on the CPU with host staging"));
}

TEST(ChooseDenseCollectiveTest, OneGpuIsFoundByBusIdOrByUuid) {
  // The same bus id on two hosts is two GPUs.
  EXPECT_TRUE(ChooseDenseCollective(std::vector<RankDevice>{Gpu("a", "0000:3b:00.0", "GPU-1"),
                                                            Gpu("b", "0000:3b:00.0", "GPU-2")})
                  .nccl);
  // The same bus id on one host is one GPU, whatever the UUIDs (one unknown, say).
  EXPECT_FALSE(ChooseDenseCollective(std::vector<RankDevice>{Gpu("a", "0000:3b:00.0", ""),
                                                             Gpu("a", "0000:3b:00.0", "GPU-1")})
                   .nccl);
  // The same UUID is one GPU even under two host labels (containers on one machine).
  EXPECT_FALSE(ChooseDenseCollective(std::vector<RankDevice>{Gpu("a", "0000:3b:00.0", "GPU-1"),
                                                             Gpu("b", "0000:5e:00.0", "GPU-1")})
                   .nccl);
}

TEST(ChooseDenseCollectiveTest, MixedCpuAndGpuRanksStayOnTheCpu) {
  RankDevice no_nccl = Cpu("b");
  no_nccl.note = "cuda:1, but this build has no NCCL";
  const std::vector<RankDevice> ranks = {Gpu("a", "0000:3b:00.0", "GPU-1"), no_nccl};
  DenseChoice c = ChooseDenseCollective(ranks);
  EXPECT_FALSE(c.nccl);
  EXPECT_THAT(c.reason, HasSubstr("w1 (host b) cpu: cuda:1, but this build has no NCCL"));
  EXPECT_THAT(c.reason, HasSubstr("on the CPU with host staging"));
}

TEST(RankDeviceTest, BlocksRoundTripAndGarbageIsRefused) {
  RankDevice d = Gpu("node-7", "0000:3b:00.0", "GPU-0a1b");
  d.note = std::string(2000, 'x');  // cut to fit
  auto block = EncodeRankDevice(d);
  ASSERT_TRUE(block.ok()) << block.status();
  ASSERT_EQ(block->size(), kRankDeviceBytes);
  auto back = DecodeRankDevice(*block);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->host, "node-7");
  EXPECT_EQ(back->pci_bus_id, "0000:3b:00.0");
  EXPECT_EQ(back->uuid, "GPU-0a1b");
  EXPECT_FALSE(back->note.empty());

  std::vector<std::byte> zeros(kRankDeviceBytes, std::byte{0});
  EXPECT_EQ(DecodeRankDevice(zeros).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<std::byte> tail = *block;
  tail.back() = std::byte{'x'};  // bytes after the end
  EXPECT_EQ(DecodeRankDevice(tail).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeRankDevice(std::span<const std::byte>(block->data(), 10)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeRankDevice(Cpu(std::string(600, 'h'))).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeRankDevice(Cpu("a\nb")).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ProbeRankDeviceTest, CpuAndMalformedDevicesAreCpuRanks) {
  int ordinal = 7;
  RankDevice cpu = ProbeRankDevice("cpu", "h", &ordinal);
  EXPECT_FALSE(cpu.gpu());
  EXPECT_EQ(cpu.host, "h");
  EXPECT_EQ(ordinal, -1);
  RankDevice bad = ProbeRankDevice("cuda:x", "h", &ordinal);
  EXPECT_FALSE(bad.gpu());
  EXPECT_THAT(bad.note, HasSubstr("not cpu or cuda:N"));
  // A GPU that this machine does not have: a CPU rank saying why (no GPU here, or no NCCL).
  RankDevice missing = ProbeRankDevice("cuda:999", "h", &ordinal);
  EXPECT_FALSE(missing.gpu());
  EXPECT_EQ(ordinal, -1);
  EXPECT_FALSE(missing.note.empty());
}

// `n` ranks as threads over the in-process transport: each connects its dense collective with
// devices[r], then all-reduces a buffer of its own through what was chosen.
struct RankResult {
  DenseChoice choice;
  bool has_nccl = false;
  std::vector<float> sum;
  absl::Status status;
};

std::vector<RankResult> ConnectAndSum(const std::vector<RankDevice>& devices) {
  const int n = static_cast<int>(devices.size());
  InprocRanks ranks(n);
  EXPECT_TRUE(ranks.connected);
  std::vector<std::unique_ptr<Communicator>> cpus;
  for (int r = 0; r < n; ++r) {
    cpus.push_back(std::make_unique<Communicator>(
        ranks.endpoints[r].get(), r, ranks.ids, CommunicatorOptions{.timeout = absl::Seconds(20)}));
  }
  std::vector<RankResult> out(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      // Ordinal 0 on every rank: on a machine with a GPU, two ranks that claim distinct GPUs
      // but both use device 0 are refused by NCCL and must fall back alike.
      auto plane = ConnectDenseCollective(*cpus[r], devices[r], 0, absl::Seconds(10));
      if (!plane.ok()) {
        out[r].status = plane.status();
        return;
      }
      out[r].choice = plane->choice;
      out[r].has_nccl = plane->nccl != nullptr;
      DenseCollective& dense =
          plane->nccl != nullptr ? *plane->nccl : static_cast<DenseCollective&>(*cpus[r]);
      std::vector<float> data(1000);
      for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(r * 1000 + i);
      out[r].status = dense.AllReduce(std::span<float>(data), Algorithm::kAuto, WireType::kFloat32);
      out[r].sum = std::move(data);
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

void ExpectSums(const std::vector<RankResult>& results) {
  const int n = static_cast<int>(results.size());
  for (int r = 0; r < n; ++r) {
    ASSERT_TRUE(results[r].status.ok()) << "w" << r << ": " << results[r].status;
    ASSERT_EQ(results[r].sum.size(), 1000u);
    for (size_t i = 0; i < 1000; ++i) {
      float want = 0;
      for (int q = 0; q < n; ++q) want += static_cast<float>(q * 1000 + i);
      ASSERT_EQ(results[r].sum[i], want) << "w" << r << " element " << i;
    }
  }
}

TEST(ConnectDenseCollectiveTest, RanksOnOneGpuFallBackToTheCpuAndStillSum) {
  const RankDevice same = Gpu("host-a", "0000:3b:00.0", "GPU-same");
  std::vector<RankResult> results = ConnectAndSum({same, same});
  for (const RankResult& r : results) {
    EXPECT_FALSE(r.choice.nccl);
    EXPECT_FALSE(r.has_nccl);
    EXPECT_THAT(r.choice.reason, HasSubstr("two ranks share GPU"));
    EXPECT_THAT(r.choice.reason, HasSubstr("on host host-a"));
  }
  ExpectSums(results);
}

TEST(ConnectDenseCollectiveTest, MixedRanksFallBackAlike) {
  std::vector<RankResult> results = ConnectAndSum(
      {Gpu("a", "0000:3b:00.0", "GPU-1"), Cpu("a"), Gpu("b", "0000:3b:00.0", "GPU-2")});
  for (const RankResult& r : results) {
    EXPECT_FALSE(r.has_nccl);
    EXPECT_THAT(r.choice.reason, HasSubstr("w1 (host a) cpu"));
  }
  ExpectSums(results);
}

// Distinct (made-up) GPUs choose NCCL, which cannot start here (no GPU, no NCCL in the build,
// or one real GPU that both ranks would share): every rank falls back alike, saying so.
TEST(ConnectDenseCollectiveTest, NcclThatCannotStartFallsBackOnEveryRank) {
  std::vector<RankResult> results =
      ConnectAndSum({Gpu("a", "0000:3b:00.0", "GPU-1"), Gpu("a", "0000:5e:00.0", "GPU-2")});
  for (const RankResult& r : results) {
    EXPECT_FALSE(r.has_nccl);
    EXPECT_FALSE(r.choice.nccl);
    EXPECT_THAT(r.choice.reason, HasSubstr("on the CPU with host staging"));
  }
  EXPECT_EQ(results[0].choice.reason, results[1].choice.reason);
  ExpectSums(results);
}

// A DenseCollective that counts what it is handed and sums over a CPU communicator.
class CountingCollective : public DenseCollective {
 public:
  explicit CountingCollective(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  absl::Status AllReduce(std::span<float> data, Algorithm a, WireType w) override {
    ++calls_;
    floats_ += data.size();
    return inner_->AllReduce(data, a, w);
  }
  const CollectiveCounters& counters() const override { return inner_->counters(); }
  const char* name() const override { return "counting"; }
  uint64_t calls() const { return calls_; }
  uint64_t floats() const { return floats_; }

 private:
  std::unique_ptr<Communicator> inner_;
  uint64_t calls_ = 0, floats_ = 0;
};

// The all-reduce backend hands its whole buffer (rows dense) to its DenseCollective, and
// trains the same model as over the CPU communicator alone.
TEST(AllReduceBackendDenseTest, TheWholeBufferGoesToTheDenseCollective) {
  constexpr int kRanks = 2;
  constexpr uint32_t kDim = 4;
  constexpr uint64_t kFeatures = 50;
  auto train = [&](bool with_dense, std::vector<uint64_t>* calls, std::vector<uint64_t>* floats) {
    // Two planes: the backend's communicator's, and the dense collective's.
    InprocRanks plane(kRanks, "w"), dense_plane(kRanks, "d");
    EXPECT_TRUE(plane.connected && dense_plane.connected);
    std::vector<std::unique_ptr<AllReduceBackend>> backends;
    std::vector<CountingCollective*> counting;
    for (int r = 0; r < kRanks; ++r) {
      AllReduceOptions o;
      o.rows = AllReduceOptions::Rows::kDense;
      o.optimizer.kind = OptimizerKind::kSgd;
      o.optimizer.learning_rate = 0.1f;
      std::unique_ptr<CountingCollective> dense;
      if (with_dense) {
        dense = std::make_unique<CountingCollective>(
            std::make_unique<Communicator>(dense_plane.endpoints[r].get(), r, dense_plane.ids));
        counting.push_back(dense.get());
      }
      backends.push_back(std::make_unique<AllReduceBackend>(
          std::make_unique<Communicator>(plane.endpoints[r].get(), r, plane.ids), o,
          std::move(dense)));
    }
    std::vector<std::vector<float>> params(kRanks);
    std::vector<std::thread> threads;
    for (int r = 0; r < kRanks; ++r) {
      threads.emplace_back([&, r] {
        AllReduceBackend& b = *backends[r];
        ParameterLayout layout;
        layout.row_dim = kDim;
        layout.num_features = kFeatures;
        layout.bias_dim = 2;
        ASSERT_TRUE(b.Init(layout).ok());
        for (int step = 0; step < 5; ++step) {
          std::mt19937_64 rng(100 * r + step);
          std::vector<uint64_t> keys = {rng() % kFeatures};
          std::vector<float> grads(kDim), bias = {0.5f, -0.25f};
          for (float& g : grads) g = static_cast<float>(rng() % 100) / 50.0f - 1.0f;
          ASSERT_TRUE(b.Update(step, keys, grads, bias, 3.0f).ok());
          ASSERT_TRUE(b.EndIteration(step, 3.0f).ok());
        }
        ASSERT_TRUE(b.Finish().ok());
        params[r].assign(b.parameters().begin(), b.parameters().end());
      });
    }
    for (auto& t : threads) t.join();
    for (CountingCollective* c : counting) {
      calls->push_back(c->calls());
      floats->push_back(c->floats());
    }
    return params;
  };
  std::vector<uint64_t> calls, floats, unused;
  const auto cpu = train(false, &unused, &unused);
  const auto dense = train(true, &calls, &floats);
  ASSERT_EQ(calls.size(), 2u);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_GE(calls[r], 5u) << "w" << r << ": every step all-reduces its buffer there";
    // The buffer: rows, bias, examples, touched counts, the still-training flag.
    EXPECT_EQ(floats[r] % (kFeatures * kDim + 2 + 1 + kFeatures + 1), 0u);
    EXPECT_EQ(dense[r], cpu[r]) << "w" << r;
    EXPECT_EQ(dense[r], dense[0]);
  }
}

}  // namespace
}  // namespace syncline
