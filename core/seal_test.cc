#include "core/seal.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

namespace syncline {
namespace {

std::vector<std::byte> Bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

class SealTest : public ::testing::TestWithParam<SealCipher> {
 protected:
  void SetUp() override {
    if (!(LocalSealCiphers() & static_cast<uint8_t>(GetParam()))) {
      GTEST_SKIP() << SealCipherName(GetParam()) << " does not run on this CPU";
    }
  }
  const JobKey key_ = JobKey::Generate();
  const SealNonce nc_ = FreshSealNonce(), ns_ = FreshSealNonce();
  const SealKey pair_ = PairKey(key_, "w0", "w1");
};

// Sealed segments open to their plaintext, in order, in place, at every size up to the bound.
TEST_P(SealTest, SegmentsRoundTripInPlace) {
  SealedChannel client(GetParam(), pair_, nc_, ns_, /*client=*/true);
  SealedChannel server(GetParam(), pair_, nc_, ns_, /*client=*/false);
  for (size_t n :
       {size_t{1}, size_t{15}, size_t{4096}, size_t{65535}, SealedChannel::kMaxSegment}) {
    const std::vector<std::byte> plain = Bytes(n, static_cast<uint32_t>(n));
    std::vector<std::byte> record(n + SealedChannel::kOverhead);
    client.Seal(plain.data(), n, record.data());
    // Ciphertext that equals the plaintext: a chance of 2^-128 over 16 bytes (one byte of a
    // 1-byte segment would match once in 256 fresh sessions, so short segments are not asked).
    if (n >= 16) {
      EXPECT_NE(std::memcmp(record.data() + 4, plain.data(), 16), 0);
    }
    ASSERT_TRUE(server.Open(record.data(), n)) << n;
    EXPECT_EQ(std::memcmp(record.data() + 4, plain.data(), n), 0) << n;
  }
  // Out of place, straight into a destination of the caller's.
  const std::vector<std::byte> plain = Bytes(5000, 5);
  std::vector<std::byte> record(5000 + SealedChannel::kOverhead), into(5000);
  client.Seal(plain.data(), 5000, record.data());
  ASSERT_TRUE(server.Open(record.data(), 5000, into.data()));
  EXPECT_EQ(into, plain);
  // And the other direction, under its own key.
  const std::vector<std::byte> back = Bytes(100, 7);
  record.assign(100 + SealedChannel::kOverhead, std::byte{0});
  server.Seal(back.data(), 100, record.data());
  std::vector<std::byte> copy = record;
  EXPECT_FALSE(server.Open(copy.data(), 100)) << "a segment opened with its own direction's key";
  ASSERT_TRUE(client.Open(record.data(), 100));
}

// A flipped bit, a replayed or reordered segment and another session's segment fail the tag.
TEST_P(SealTest, RefusesAlteredReplayedAndReorderedSegments) {
  SealedChannel client(GetParam(), pair_, nc_, ns_, true);
  SealedChannel server(GetParam(), pair_, nc_, ns_, false);
  SealedChannel other(GetParam(), pair_, nc_, FreshSealNonce(), false);
  std::vector<std::vector<std::byte>> records;
  for (uint32_t i = 0; i < 3; ++i) {
    const std::vector<std::byte> plain = Bytes(1000, i);
    records.emplace_back(1000 + SealedChannel::kOverhead);
    client.Seal(plain.data(), 1000, records.back().data());
  }
  for (size_t bit : {size_t{0}, size_t{8 * 4 + 3}, size_t{8 * 500}, size_t{8 * 1019 + 7}}) {
    std::vector<std::byte> flipped = records[0];
    flipped[bit / 8] ^= std::byte{static_cast<unsigned char>(1u << (bit % 8))};
    EXPECT_FALSE(server.Open(flipped.data(), 1000)) << "bit " << bit;
  }
  std::vector<std::byte> copy = records[0];
  EXPECT_FALSE(other.Open(copy.data(), 1000)) << "opened under another session's key";
  copy = records[1];
  EXPECT_FALSE(server.Open(copy.data(), 1000)) << "segment 1 opened in place of segment 0";
  copy = records[0];
  ASSERT_TRUE(server.Open(copy.data(), 1000));
  copy = records[0];
  EXPECT_FALSE(server.Open(copy.data(), 1000)) << "a replayed segment opened";
  copy = records[1];
  EXPECT_TRUE(server.Open(copy.data(), 1000));
  EXPECT_EQ(server.opened(), 2u);
}

INSTANTIATE_TEST_SUITE_P(Ciphers, SealTest,
                         ::testing::Values(SealCipher::kAes256Gcm, SealCipher::kXChaCha20Poly1305),
                         [](const auto& info) {
                           return info.param == SealCipher::kAes256Gcm ? "Aes256Gcm"
                                                                       : "XChaCha20Poly1305";
                         });

// The wire's bytes are pinned: segments sealed from a fixed key and fixed nonces give the same
// bytes with every AES-256-GCM implementation this build may use (OpenSSL's, or Intel's
// ipsec-mb where it is installed), so that ends built either way open each other's segments.
// The expected values were taken with OpenSSL's EVP.
TEST(SealWireTest, AesGcmSegmentsAreTheStandardOnes) {
  if (!(LocalSealCiphers() & static_cast<uint8_t>(SealCipher::kAes256Gcm))) {
    GTEST_SKIP() << "AES-256-GCM does not run on this CPU";
  }
  SealKey pair;
  SealNonce nc, ns;
  for (size_t i = 0; i < pair.size(); ++i) {
    pair[i] = static_cast<unsigned char>(i);
    nc[i] = static_cast<unsigned char>(0x40 + i);
    ns[i] = static_cast<unsigned char>(0x80 + i);
  }
  SealedChannel client(SealCipher::kAes256Gcm, pair, nc, ns, /*client=*/true);
  SealedChannel server(SealCipher::kAes256Gcm, pair, nc, ns, /*client=*/false);
  // FNV-1a over a whole record: header, ciphertext and tag.
  auto digest = [](const std::vector<std::byte>& v) {
    uint64_t h = 14695981039346656037ull;
    for (std::byte b : v) h = (h ^ static_cast<uint64_t>(b)) * 1099511628211ull;
    return h;
  };
  std::vector<uint64_t> digests;
  for (size_t n : {size_t{1}, size_t{100}, size_t{4096}, SealedChannel::kMaxSegment}) {
    std::vector<std::byte> plain(n);
    for (size_t i = 0; i < n; ++i) plain[i] = static_cast<std::byte>(i * 7 + n);
    std::vector<std::byte> record(n + SealedChannel::kOverhead);
    client.Seal(plain.data(), n, record.data());
    digests.push_back(digest(record));
    ASSERT_TRUE(server.Open(record.data(), n));
    EXPECT_EQ(std::memcmp(record.data() + 4, plain.data(), n), 0);
  }
  EXPECT_EQ(digests, (std::vector<uint64_t>{9912049758641860632ull, 3613295492845465573ull,
                                            9406807524547420839ull, 3870742625858831412ull}));
}

// Proofs depend on the pair, the nonces and the offer; a key of another job gives others.
TEST(SealHandshakeTest, ProofsBindKeyPairNoncesAndOffer) {
  const JobKey key = JobKey::Generate();
  const SealNonce nc = FreshSealNonce(), ns = FreshSealNonce();
  const SealKey pair = PairKey(key, "w0", "w1");
  const SealProof proof = ServerProof(pair, 3, 1, nc, ns);
  EXPECT_TRUE(SameProof(proof, ServerProof(pair, 3, 1, nc, ns).data()));
  EXPECT_FALSE(SameProof(proof, ClientProof(pair, 3, 1, nc, ns).data()));
  EXPECT_FALSE(SameProof(proof, ServerProof(PairKey(key, "w1", "w0"), 3, 1, nc, ns).data()));
  EXPECT_FALSE(SameProof(proof, ServerProof(PairKey(key, "w0", "w2"), 3, 1, nc, ns).data()));
  EXPECT_FALSE(
      SameProof(proof, ServerProof(PairKey(JobKey::Generate(), "w0", "w1"), 3, 1, nc, ns).data()));
  EXPECT_FALSE(SameProof(proof, ServerProof(pair, 3, 1, nc, FreshSealNonce()).data()));
  EXPECT_FALSE(SameProof(proof, ServerProof(pair, 2, 2, nc, ns).data()));
  // Length-prefixed ids: "w0"+"1w" is not "w01"+"w".
  EXPECT_NE(PairKey(key, "w0", "1w"), PairKey(key, "w01", "w"));
  EXPECT_EQ(ChooseSealCipher(3, 3), 1);
  EXPECT_EQ(ChooseSealCipher(2, 3), 2);
  EXPECT_EQ(ChooseSealCipher(1, 2), 0);
}

}  // namespace
}  // namespace syncline
