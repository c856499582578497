#include "compression/sparse_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "compression/wire.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "job/options.h"

namespace syncline {
namespace {

using ::testing::HasSubstr;

std::vector<std::byte> Bytes(std::initializer_list<int> v) {
  std::vector<std::byte> out;
  for (int b : v) out.push_back(static_cast<std::byte>(b));
  return out;
}

TEST(CompactKeysTest, RoundTripsAscendingKeys) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<uint64_t> keys;
    uint64_t k = trial % 2 == 0 ? 0 : rng() >> 1;
    const int n = 1 + static_cast<int>(rng() % 300);
    for (int i = 0; i < n && k < UINT64_MAX; ++i) {
      keys.push_back(k);
      const uint64_t gap = 1 + (trial % 3 == 0 ? rng() % 100 : rng() >> 40);
      if (UINT64_MAX - k < gap) break;
      k += gap;
    }
    std::vector<std::byte> block;
    EncodeKeys(keys, &block);
    EXPECT_EQ(block.size(), EncodedKeysSize(keys));
    std::vector<uint64_t> back;
    ASSERT_TRUE(DecodeKeys(block, keys.size(), &back).ok());
    EXPECT_EQ(back, keys);
  }
  const std::vector<uint64_t> extremes = {0, 1, UINT64_MAX - 1, UINT64_MAX};
  std::vector<std::byte> block;
  EncodeKeys(extremes, &block);
  std::vector<uint64_t> back;
  ASSERT_TRUE(DecodeKeys(block, extremes.size(), &back).ok());
  EXPECT_EQ(back, extremes);
}

TEST(CompactKeysTest, SmallGapsTakeOneByte) {
  std::vector<uint64_t> keys;
  for (uint64_t k = 1000; k < 1000 + 20 * 100; k += 20) keys.push_back(k);
  // 1000 takes two bytes; every gap of 20 one.
  EXPECT_EQ(EncodedKeysSize(keys), keys.size() + 1);
}

TEST(CompactKeysTest, RefusesMalformedBlocks) {
  std::vector<uint64_t> out;
  // Ends inside a varint.
  EXPECT_THAT(DecodeKeys(Bytes({0x80}), 1, &out).message(), HasSubstr("ends inside key 0"));
  // Fewer keys than claimed.
  EXPECT_THAT(DecodeKeys(Bytes({0x01, 0x02}), 3, &out).message(), HasSubstr("cannot hold 3"));
  EXPECT_THAT(DecodeKeys(Bytes({0x01, 0x82}), 2, &out).message(), HasSubstr("ends inside key 1"));
  // Bytes left over.
  EXPECT_THAT(DecodeKeys(Bytes({0x01, 0x02, 0x03}), 2, &out).message(),
              HasSubstr("1 bytes follow"));
  // A varint of more than 64 bits.
  EXPECT_THAT(
      DecodeKeys(Bytes({0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}), 1, &out)
          .message(),
      HasSubstr("does not fit 64 bits"));
  // A gap that passes 2^64 - 1.
  std::vector<std::byte> block;
  EncodeKeys(std::vector<uint64_t>{UINT64_MAX - 1}, &block);
  block.push_back(std::byte{0x01});  // + 1 + 1
  EXPECT_THAT(DecodeKeys(block, 2, &out).message(), HasSubstr("passes 2^64 - 1"));
  // A huge claimed count allocates nothing before failing.
  EXPECT_FALSE(DecodeKeys(Bytes({0x01}), size_t{1} << 40, &out).ok());
}

TEST(RowTableTest, KeepsRecencyOrderAndReusesSlots) {
  RowTable t(2, 3);
  t.Touch(5, 1)[0] = 5;
  t.Touch(6, 2)[0] = 6;
  t.Touch(7, 3)[0] = 7;
  EXPECT_FALSE(t.over_capacity());
  EXPECT_EQ(t.Touch(5, 4)[0], 5);  // now the newest
  bool inserted = false;
  t.Touch(8, 5, &inserted);
  EXPECT_TRUE(inserted);
  EXPECT_TRUE(t.over_capacity());
  uint64_t key = 0, stamp = 0;
  ASSERT_TRUE(t.Oldest(&key, &stamp));
  EXPECT_EQ(key, 6u);
  EXPECT_EQ(stamp, 2u);
  EXPECT_TRUE(t.Erase(6));
  EXPECT_FALSE(t.Erase(6));
  EXPECT_EQ(t.Find(6), nullptr);
  // The freed slot comes back zeroed.
  float* row = t.Touch(9, 6, &inserted);
  EXPECT_TRUE(inserted);
  EXPECT_EQ(row[0], 0.0f);
  EXPECT_EQ(row[1], 0.0f);
  std::vector<uint64_t> order;
  t.ForEach([&](uint64_t k, uint64_t, const RowMeta&, const float*) { order.push_back(k); });
  EXPECT_EQ(order, (std::vector<uint64_t>{7, 5, 8, 9}));
}

// Touches only stamp rows until the oldest is first asked for; the recency order (ForEach's,
// and Oldest's after the list is built) must be the one relinking at every touch keeps. Checked
// against a plain list through random touches and erases, before and after the switch.
TEST(RowTableTest, RecencyFromTouchCountsIsTheRelinkedListsOrder) {
  const uint64_t seed = 77;  // replay: the failing case is this seed's
  std::mt19937_64 rng(seed);
  RowTable t(1, 0);
  std::vector<uint64_t> want;  // keys, least recently touched first
  auto check = [&](int op) {
    std::vector<uint64_t> got;
    t.ForEach([&](uint64_t k, uint64_t stamp, const RowMeta&, const float* row) {
      got.push_back(k);
      EXPECT_EQ(row[0], static_cast<float>(k));
      EXPECT_EQ(stamp, k * 10);
    });
    ASSERT_EQ(got, want) << "seed " << seed << ", op " << op;
  };
  for (int op = 0; op < 4000; ++op) {
    const uint64_t key = rng() % 50;
    if (rng() % 4 == 0) {
      const auto at = std::find(want.begin(), want.end(), key);
      EXPECT_EQ(t.Erase(key), at != want.end());
      if (at != want.end()) want.erase(at);
    } else {
      t.Touch(key, key * 10)[0] = static_cast<float>(key);
      std::erase(want, key);
      want.push_back(key);
    }
    if (op % 97 == 0) check(op);
    if (op == 2000) {  // from here on the list is kept at every touch
      uint64_t oldest = 0, stamp = 0;
      ASSERT_EQ(t.Oldest(&oldest, &stamp), !want.empty());
      if (!want.empty()) {
        EXPECT_EQ(oldest, want.front());
      }
    }
    if (op > 2000 && op % 13 == 0 && !want.empty()) {
      uint64_t oldest = 0, stamp = 0;
      ASSERT_TRUE(t.Oldest(&oldest, &stamp));
      EXPECT_EQ(oldest, want.front()) << "seed " << seed << ", op " << op;
    }
  }
  check(4000);
}

// A run of random sparse pushes: for every row, what was sent (blocks and flushes) plus the
// residual still held equals the sum of its gradients.
void CheckResidualIdentity(const CodecSpec& spec, uint32_t dim, size_t max_rows,
                           bool integer_gradients, uint64_t seed) {
  SCOPED_TRACE(testing::Message() << CodecName(spec) << " dim " << dim << " max_rows " << max_rows
                                  << " seed " << seed);
  auto codec = Codec::Create(spec);
  SparseErrorFeedback feedback(dim, max_rows);
  std::mt19937_64 rng(seed);
  std::map<uint64_t, std::vector<double>> gradients, sent;
  uint64_t flushed = 0;
  for (int step = 0; step < 200; ++step) {
    std::vector<uint64_t> keys;
    for (uint64_t k = 0; k < 300; ++k) {
      if (rng() % 10 == 0) keys.push_back(k * 7 + 3);
    }
    if (keys.empty()) continue;
    std::vector<float> g(keys.size() * dim);
    for (float& x : g) {
      x = integer_gradients ? static_cast<float>(static_cast<int>(rng() % 17) - 8)
                            : std::normal_distribution<float>(0, 1)(rng);
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      auto& sum = gradients[keys[i]];
      sum.resize(dim);
      for (uint32_t j = 0; j < dim; ++j) sum[j] += g[i * dim + j];
    }
    SparsePush push;
    feedback.Compress(*codec, keys, g, &push);
    ASSERT_TRUE(std::is_sorted(push.keys.begin(), push.keys.end()));
    ASSERT_TRUE(std::is_sorted(push.flushed_keys.begin(), push.flushed_keys.end()));
    std::vector<float> decoded;
    ASSERT_TRUE(DecodeRows(push.kind, push.block, push.keys.size(), dim, &decoded).ok());
    for (size_t i = 0; i < push.keys.size(); ++i) {
      auto& s = sent[push.keys[i]];
      s.resize(dim);
      for (uint32_t j = 0; j < dim; ++j) s[j] += decoded[i * dim + j];
    }
    for (size_t i = 0; i < push.flushed_keys.size(); ++i) {
      // A flushed row is never one of this push's rows.
      ASSERT_FALSE(std::binary_search(keys.begin(), keys.end(), push.flushed_keys[i]));
      auto& s = sent[push.flushed_keys[i]];
      s.resize(dim);
      for (uint32_t j = 0; j < dim; ++j) s[j] += push.flushed_values[i * dim + j];
    }
    flushed += push.flushed_keys.size();
    if (max_rows != 0) {
      EXPECT_LE(feedback.residuals().size(), std::max(max_rows, keys.size()));
    }
  }
  EXPECT_EQ(feedback.rows_flushed(), flushed);
  if (max_rows != 0 && max_rows < 100) {
    EXPECT_GT(flushed, 0u);
  }
  double worst = 0;
  for (const auto& [key, g] : gradients) {
    const float* r = feedback.residuals().Find(key);
    const auto it = sent.find(key);
    for (uint32_t j = 0; j < dim; ++j) {
      const double s = it == sent.end() || it->second.empty() ? 0 : it->second[j];
      const double held = r == nullptr ? 0 : r[j];
      worst = std::max(worst, std::abs(s + held - g[j]) / (1 + std::abs(g[j])));
    }
  }
  if (integer_gradients && spec.kind == CodecKind::kTopK) {
    EXPECT_EQ(worst, 0) << "top-K sends entries as they are: the identity is exact";
  } else {
    EXPECT_LT(worst, 1e-4);
  }
}

TEST(SparseErrorFeedbackTest, SentPlusResidualIsTheGradientSum) {
  for (uint32_t dim : {1u, 4u}) {
    for (size_t max_rows : {size_t{0}, size_t{40}, size_t{1000}}) {
      CheckResidualIdentity(CodecSpec{.kind = CodecKind::kTopK, .ratio = 0.05}, dim, max_rows,
                            /*integer_gradients=*/true, 11);
      CheckResidualIdentity(CodecSpec{.kind = CodecKind::kTopK, .ratio = 0.2}, dim, max_rows, false,
                            12);
      CheckResidualIdentity(CodecSpec{.kind = CodecKind::kSign1, .chunk = 64}, dim, max_rows, false,
                            13);
    }
  }
}

TEST(SparseErrorFeedbackTest, FullTableFlushesItsOldestRowsAndLosesNothing) {
  auto codec = Codec::Create(CodecSpec{.kind = CodecKind::kTopK, .ratio = 0.01});
  SparseErrorFeedback feedback(1, 3);
  SparsePush push;
  // Three rows, each kept (top-K sends one entry of each push).
  feedback.Compress(*codec, std::vector<uint64_t>{1, 2}, std::vector<float>{5, 1}, &push);
  EXPECT_EQ(push.keys, (std::vector<uint64_t>{1}));
  EXPECT_TRUE(push.flushed_keys.empty());
  feedback.Compress(*codec, std::vector<uint64_t>{3, 4}, std::vector<float>{2, 9}, &push);
  EXPECT_EQ(push.keys, (std::vector<uint64_t>{4}));
  EXPECT_EQ(feedback.residuals().size(), 2u);  // rows 2 and 3
  feedback.Compress(*codec, std::vector<uint64_t>{5, 6}, std::vector<float>{7, 3}, &push);
  // Rows 2, 3 and 6 would be four with row 5's... no: 5 was sent, 6 is kept: 2, 3, 6 fit.
  EXPECT_TRUE(push.flushed_keys.empty());
  feedback.Compress(*codec, std::vector<uint64_t>{7, 8}, std::vector<float>{-8, 4}, &push);
  // 2, 3, 6, 8: one too many, so the oldest, row 2, is flushed whole.
  EXPECT_EQ(push.keys, (std::vector<uint64_t>{7}));
  EXPECT_EQ(push.flushed_keys, (std::vector<uint64_t>{2}));
  EXPECT_EQ(push.flushed_values, (std::vector<float>{1}));
  EXPECT_EQ(feedback.residuals().Find(2), nullptr);
  EXPECT_EQ(feedback.residuals().size(), 3u);
}

TEST(SparseErrorFeedbackTest, TopKSendsOnlyTheRowsItSelects) {
  auto codec = Codec::Create(CodecSpec{.kind = CodecKind::kTopK, .ratio = 0.1});
  const uint32_t dim = 8;
  SparseErrorFeedback feedback(dim, 0);
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 100; ++k) keys.push_back(k * 3);
  std::vector<float> g(keys.size() * dim, 0.01f);
  // One entry of each row a little larger: the 64 small entries K takes lie in 64 rows.
  for (size_t r = 0; r < keys.size(); ++r) g[r * dim + r % dim] = 0.02f;
  for (uint32_t j = 0; j < dim; ++j) g[10 * dim + j] = 5 + j;   // row 30 dominates
  for (uint32_t j = 0; j < dim; ++j) g[50 * dim + j] = -4 - j;  // and row 150
  SparsePush push;
  feedback.Compress(*codec, keys, g, &push);
  // K = 80 entries: rows 30 and 150 in full, then one entry of 64 other rows: a top-K block
  // (644 bytes) is smaller than 66 float32 rows (2112).
  EXPECT_EQ(push.kind, CodecKind::kTopK);
  EXPECT_EQ(push.keys.size(), 66u);
  EXPECT_EQ(push.block.size(), 4u + 80 * 8);
  std::vector<float> decoded;
  ASSERT_TRUE(DecodeRows(push.kind, push.block, push.keys.size(), dim, &decoded).ok());
  const size_t row30 = std::find(push.keys.begin(), push.keys.end(), 30) - push.keys.begin();
  ASSERT_LT(row30, push.keys.size());
  for (uint32_t j = 0; j < dim; ++j) EXPECT_EQ(decoded[row30 * dim + j], 5.0f + j);
  // dim 1: float32 rows are always smaller than a top-K block.
  SparseErrorFeedback narrow(1, 0);
  narrow.Compress(*codec, keys, std::vector<float>(keys.size(), 1.0f), &push);
  EXPECT_EQ(push.kind, CodecKind::kNone);
  EXPECT_EQ(push.keys.size(), 10u);
  EXPECT_EQ(push.block.size(), 10 * sizeof(float));
}

// Over any run of top-K on rows of one value, each row's sends (blocks, flushes and the final
// drain) carry held counts that add up to the pushes that touched it, and spreads that make
// the server's accumulated squares those of the pushes' gradients: sum over sends of
// spread * sent^2 / held = sum of g^2.
TEST(SparseErrorFeedbackTest, HeldCountsAndSpreadsAccountForEveryPushAndSquare) {
  for (size_t max_rows : {size_t{0}, size_t{30}}) {
    SCOPED_TRACE(max_rows);
    auto codec = Codec::Create(CodecSpec{.kind = CodecKind::kTopK, .ratio = 0.05});
    SparseErrorFeedback feedback(1, max_rows);
    std::mt19937_64 rng(21);
    std::map<uint64_t, double> pushes, squares, sent, sent_pushes, sent_squares;
    std::set<uint64_t> clamped;
    const auto account = [&](std::span<const uint64_t> keys, std::span<const float> values,
                             std::span<const uint16_t> held, std::span<const float> spread) {
      ASSERT_EQ(held.size(), keys.size());
      ASSERT_EQ(spread.size(), keys.size());
      for (size_t i = 0; i < keys.size(); ++i) {
        ASSERT_GE(held[i], 1);
        ASSERT_GE(spread[i], 1.0f);
        sent[keys[i]] += values[i];
        sent_pushes[keys[i]] += held[i];
        sent_squares[keys[i]] += double{spread[i]} * values[i] * values[i] / held[i];
        // A sum near zero of gradients that cancel has a spread past the bound: its squares
        // are then undercounted.
        if (spread[i] >= kMaxHeldSpread) clamped.insert(keys[i]);
      }
    };
    SparsePush push;
    for (int step = 0; step < 150; ++step) {
      std::vector<uint64_t> keys;
      for (uint64_t k = 0; k < 200; ++k) {
        if (rng() % 5 == 0) keys.push_back(k);
      }
      std::vector<float> g(keys.size());
      for (size_t i = 0; i < keys.size(); ++i) {
        g[i] = std::normal_distribution<float>(0.1f, 1)(rng);
        pushes[keys[i]] += 1;
        squares[keys[i]] += double{g[i]} * g[i];
      }
      feedback.Compress(*codec, keys, g, &push);
      std::vector<float> decoded;
      ASSERT_TRUE(DecodeRows(push.kind, push.block, push.keys.size(), 1, &decoded).ok());
      account(push.keys, decoded, push.held, push.spread);
      account(push.flushed_keys, push.flushed_values, push.flushed_held, push.flushed_spread);
    }
    // Rows wait: some were sent after many pushes.
    EXPECT_GT(*std::max_element(push.held.begin(), push.held.end()), 1);
    const size_t left = feedback.residuals().size();
    EXPECT_GT(left, 0u);
    push = SparsePush{};
    feedback.Drain(&push);
    EXPECT_EQ(push.flushed_keys.size(), left);
    EXPECT_TRUE(std::is_sorted(push.flushed_keys.begin(), push.flushed_keys.end()));
    EXPECT_EQ(feedback.residuals().size(), 0u);
    EXPECT_EQ(feedback.rows_drained(), left);
    account(push.flushed_keys, push.flushed_values, push.flushed_held, push.flushed_spread);
    double sum_gradients_error = 0;
    for (const auto& [key, n] : pushes) {
      SCOPED_TRACE(key);
      EXPECT_EQ(sent_pushes[key], n);
      if (!clamped.contains(key)) {
        EXPECT_NEAR(sent_squares[key], squares[key], 1e-3 * squares[key]);
      }
      sum_gradients_error = std::max(sum_gradients_error, std::abs(sent[key]));
    }
    EXPECT_LT(clamped.size(), pushes.size() / 20);
    EXPECT_GT(sum_gradients_error, 0);
  }
}

// A row held over pushes of different sizes is sent scaled to the push it leaves with: the
// receiver, which divides by that push's examples, then applies each push's gradient over its
// own examples (an epoch's short last batch does not inflate what waited since full ones).
TEST(SparseErrorFeedbackTest, HeldRowsKeepTheirPushesWeights) {
  auto codec = Codec::Create(CodecSpec{.kind = CodecKind::kTopK, .ratio = 0.5});
  SparseErrorFeedback feedback(1, 0);
  SparsePush push;
  // Push 1 (100 examples): row 2's 30 waits (row 1's 90 is larger and is sent).
  feedback.Compress(*codec, std::vector<uint64_t>{1, 2}, std::vector<float>{90, 30}, &push, 100);
  EXPECT_EQ(push.keys, (std::vector<uint64_t>{1}));
  std::vector<float> values;
  ASSERT_TRUE(DecodeRows(push.kind, push.block, 1, 1, &values).ok());
  EXPECT_FLOAT_EQ(values[0], 90);
  // Push 2 (4 examples): row 2 gets 2 more and leaves: 30 / 100 + 2 / 4 per example, sent as
  // 4 examples' worth.
  feedback.Compress(*codec, std::vector<uint64_t>{2, 3}, std::vector<float>{2, 0.5f}, &push, 4);
  EXPECT_EQ(push.keys, (std::vector<uint64_t>{2}));
  ASSERT_TRUE(DecodeRows(push.kind, push.block, 1, 1, &values).ok());
  EXPECT_FLOAT_EQ(values[0], (0.3f + 0.5f) * 4);
  // The final drain, at 10 examples: row 3's 0.5 / 4 per example.
  push = SparsePush{};
  feedback.Drain(&push, 10);
  EXPECT_EQ(push.flushed_keys, (std::vector<uint64_t>{3}));
  EXPECT_FLOAT_EQ(push.flushed_values[0], 0.125f * 10);
}

TEST(HeldCountsTest, RoundTripAndRefuseMalformedBlocks) {
  std::vector<std::byte> block;
  EXPECT_FALSE(EncodeHeld(std::vector<uint16_t>{1, 1, 1}, {}, &block));  // all one push: no frame
  EXPECT_TRUE(block.empty());
  const std::vector<uint16_t> held = {1, 3, 200, 1024};
  const std::vector<float> spread = {1.0f, 1.0f, 7.3f, 40000.0f};
  ASSERT_TRUE(EncodeHeld(held, spread, &block));
  // 1: one byte; 3: two (count, spread); 200: three (199 takes two bytes); 1024: three.
  EXPECT_EQ(block.size(), 1u + 2 + 3 + 3);
  std::vector<uint16_t> held_out;
  std::vector<float> spread_out;
  ASSERT_TRUE(DecodeHeld(block, 4, &held_out, &spread_out).ok());
  EXPECT_EQ(held_out, held);
  for (size_t i = 0; i < held.size(); ++i) {
    EXPECT_NEAR(spread_out[i], spread[i], 0.022 * spread[i]);  // half a 2^(1/16) step
  }
  const auto refused = [&](std::vector<std::byte> b, size_t count, const char* what) {
    auto s = DecodeHeld(b, count, &held_out, &spread_out);
    EXPECT_FALSE(s.ok()) << what;
    EXPECT_THAT(std::string(s.message()), HasSubstr(what));
  };
  refused(block, 10, "cannot hold");
  refused(block, 5, "cut off");
  refused(block, 3, "follow");
  refused(Bytes({0, 2}), 2, "spread is cut off");  // held 3 without its spread byte
  refused(Bytes({0x80, 0x80, 0x80, 0x01}), 1, "too long");
  refused(Bytes({0x80, 0x08, 0}), 1, "more than");  // held 1025
}

TEST(DecodeRowsTest, RefusesMalformedBlocks) {
  std::vector<float> out;
  EXPECT_FALSE(DecodeRows(CodecKind::kNone, Bytes({0, 0, 0}), 1, 1, &out).ok());
  // topk: index out of the rows' range, and unsorted indices.
  std::vector<std::byte> block(4 + 8);
  compression_internal::StoreU32(block.data(), 1);
  compression_internal::StoreU32(block.data() + 4, 8);
  EXPECT_THAT(DecodeRows(CodecKind::kTopK, block, 2, 4, &out).message(), HasSubstr("index"));
  // sign1 of the wrong length.
  auto sign1 = Codec::Create(CodecSpec{.kind = CodecKind::kSign1});
  std::vector<std::byte> b;
  sign1->Encode(std::vector<float>(16, 1.0f), &b);
  EXPECT_FALSE(DecodeRows(CodecKind::kSign1, b, 3, 4, &out).ok());
  EXPECT_TRUE(DecodeRows(CodecKind::kSign1, b, 4, 4, &out).ok());
  // A huge row count with a small block fails before allocating.
  EXPECT_FALSE(DecodeRows(CodecKind::kSign1, b, size_t{1} << 40, 4, &out).ok());
}

// The server's copy of what a worker holds and the worker's own stay equal to the bit, through
// new rows, deltas and evictions, and repeated pulls of fixed rows converge to them.
TEST(CompressedPullTest, CopiesStayEqualAndConverge) {
  for (const CodecSpec& spec :
       {CodecSpec{.kind = CodecKind::kTopK, .ratio = 0.1}, CodecSpec{.kind = CodecKind::kSign1},
        CodecSpec{.kind = CodecKind::kFp16}}) {
    SCOPED_TRACE(CodecName(spec));
    auto codec = Codec::Create(spec);
    const uint32_t dim = 3;
    RowTable server(dim, 50), worker(dim, 0);
    std::mt19937_64 rng(21);
    std::vector<float> model(200 * dim);
    for (float& x : model) x = std::normal_distribution<float>(0, 1)(rng);
    uint64_t evictions = 0;
    for (uint64_t stamp = 1; stamp <= 300; ++stamp) {
      // Later pulls come back to rows 0..39 alone, which fit the copy.
      std::vector<uint64_t> keys;
      for (uint64_t k = 0; k < (stamp < 100 ? 200u : 40u); ++k) {
        if (rng() % 4 == 0 || stamp >= 100) keys.push_back(k);
      }
      std::vector<float> values;
      for (uint64_t k : keys) values.insert(values.end(), &model[k * dim], &model[k * dim + dim]);
      PulledRows reply;
      EncodePull(*codec, keys, values, stamp, &server, &reply);
      evictions += reply.evicted.size();
      std::vector<float> out(keys.size() * dim);
      const std::span<const std::byte> fresh(reinterpret_cast<const std::byte*>(reply.fresh.data()),
                                             reply.fresh.size() * sizeof(float));
      ASSERT_TRUE(
          DecodePull(spec.kind, keys, fresh, reply.block, reply.evicted, &worker, out).ok());
      ASSERT_EQ(server.size(), worker.size());
      for (size_t i = 0; i < keys.size(); ++i) {
        const float* s = server.Find(keys[i]);
        ASSERT_NE(s, nullptr);
        ASSERT_EQ(std::memcmp(s, worker.Find(keys[i]), dim * sizeof(float)), 0);
        ASSERT_EQ(std::memcmp(s, &out[i * dim], dim * sizeof(float)), 0);
      }
      if (stamp < 100) {
        // The model keeps moving while it is pulled.
        for (float& x : model) x += 0.01f * std::normal_distribution<float>(0, 1)(rng);
      }
    }
    EXPECT_GT(evictions, 0u);
    double worst = 0;
    for (uint64_t k = 0; k < 40; ++k) {
      for (uint32_t j = 0; j < dim; ++j) {
        worst = std::max(worst, double{std::abs(worker.Find(k)[j] - model[k * dim + j])});
      }
    }
    EXPECT_LT(worst, 1e-3) << "error feedback closes the gap once the rows stop changing";
  }
}

TEST(CompressedPullTest, RefusesRepliesThatDoNotFitTheCopy) {
  auto codec = Codec::Create(CodecSpec{.kind = CodecKind::kTopK, .ratio = 0.5});
  RowTable server(1, 0), worker(1, 0);
  const std::vector<uint64_t> keys = {1, 2};
  PulledRows reply;
  EncodePull(*codec, keys, std::vector<float>{1, 2}, 1, &server, &reply);
  std::vector<float> out(2);
  const auto fresh = [](const PulledRows& r) {
    return std::span<const std::byte>(reinterpret_cast<const std::byte*>(r.fresh.data()),
                                      r.fresh.size() * sizeof(float));
  };
  // Fresh rows of the wrong size.
  EXPECT_THAT(
      DecodePull(CodecKind::kTopK, keys, fresh(reply).subspan(4), reply.block, {}, &worker, out)
          .message(),
      HasSubstr("new rows"));
  EXPECT_EQ(worker.size(), 0u);
  ASSERT_TRUE(DecodePull(CodecKind::kTopK, keys, fresh(reply), reply.block, {}, &worker, out).ok());
  EncodePull(*codec, keys, std::vector<float>{3, 5}, 2, &server, &reply);
  // A delta block with a bad index; an evicted row the worker does not hold.
  std::vector<std::byte> bad = reply.block;
  compression_internal::StoreU32(bad.data() + 4, 7);
  EXPECT_THAT(DecodePull(CodecKind::kTopK, keys, fresh(reply), bad, {}, &worker, out).message(),
              HasSubstr("index"));
  EXPECT_THAT(DecodePull(CodecKind::kTopK, keys, fresh(reply), reply.block,
                         std::vector<uint64_t>{9}, &worker, out)
                  .message(),
              HasSubstr("does not hold"));
  EXPECT_EQ(worker.Find(1)[0], 1.0f);  // nothing changed
  ASSERT_TRUE(DecodePull(CodecKind::kTopK, keys, fresh(reply), reply.block, {}, &worker, out).ok());
  EXPECT_EQ(out, (std::vector<float>{1, 5}));  // top-1 of the deltas (2, 3)
}

// Karimireddy et al. (2019), counterexample 1: on f(x) = eps |x1 + x2| + |x1 - x2| every
// (sub)gradient away from x1 = x2 has the sign pattern +-(1, -1), so sign compression never
// moves x1 + x2. A worker and a server, both compressing with sign1 (the worker its gradients,
// the server the model it sends back), reach the minimum with error feedback on both sides and
// stay where x1 + x2 started without it.
double Counterexample(bool feedback) {
  const CodecSpec spec{.kind = CodecKind::kSign1};
  auto codec = Codec::Create(spec);
  const float eps = 0.5f, lr = 0.01f;
  const std::vector<uint64_t> keys = {0, 1};
  std::vector<float> server_x = {1.0f, 2.0f}, worker_x = server_x, last_sent = server_x;
  SparseErrorFeedback push_feedback(1, 0);
  RowTable server_copy(1, 0), worker_copy(1, 0);
  // Both copies start from the model (the first pull sends it whole).
  for (uint64_t k : keys) {
    *server_copy.Touch(k, 0) = server_x[k];
    *worker_copy.Touch(k, 0) = server_x[k];
  }
  const auto sign = [](float v) { return v > 0 ? 1.0f : (v < 0 ? -1.0f : 0.0f); };
  for (uint64_t step = 1; step <= 3000; ++step) {
    const float s = sign(worker_x[0] + worker_x[1]), t = sign(worker_x[0] - worker_x[1]);
    const std::vector<float> g = {eps * s + t, eps * s - t};
    std::vector<float> sent;
    if (feedback) {
      SparsePush push;
      push_feedback.Compress(*codec, keys, g, &push);
      std::vector<float> rows;
      EXPECT_TRUE(DecodeRows(push.kind, push.block, push.keys.size(), 1, &rows).ok());
      sent.assign(2, 0.0f);
      for (size_t i = 0; i < push.keys.size(); ++i) sent[push.keys[i]] = rows[i];
    } else {
      std::vector<std::byte> block;
      codec->Encode(g, &block);
      EXPECT_TRUE(DecodeRows(CodecKind::kSign1, block, 2, 1, &sent).ok());
    }
    for (int i = 0; i < 2; ++i) server_x[i] -= lr * sent[i];
    if (feedback) {
      PulledRows reply;
      EncodePull(*codec, keys, server_x, step, &server_copy, &reply);
      EXPECT_TRUE(DecodePull(CodecKind::kSign1, keys, {}, reply.block, reply.evicted, &worker_copy,
                             worker_x)
                      .ok());
    } else {
      // The change since the last pull, compressed alone.
      const std::vector<float> delta = {server_x[0] - last_sent[0], server_x[1] - last_sent[1]};
      last_sent = server_x;
      std::vector<std::byte> block;
      codec->Encode(delta, &block);
      std::vector<float> d;
      EXPECT_TRUE(DecodeRows(CodecKind::kSign1, block, 2, 1, &d).ok());
      for (int i = 0; i < 2; ++i) worker_x[i] += d[i];
    }
  }
  return eps * std::abs(server_x[0] + server_x[1]) + std::abs(server_x[0] - server_x[1]);
}

TEST(CompressedPullTest, BidirectionalSign1NeedsErrorFeedbackOnTheCounterexample) {
  const double with = Counterexample(true), without = Counterexample(false);
  SCOPED_TRACE(testing::Message() << "f with feedback " << with << ", without " << without);
  EXPECT_LT(with, 0.1);
  EXPECT_GT(without, 1.0);  // f(1, 2) = 2.5; x1 + x2 = 3 never moves
}

}  // namespace
}  // namespace syncline
