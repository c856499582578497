#include "privacy/secure_aggregation.h"

#include <sodium.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace syncline {
namespace {

bool SodiumReady() {
  static const bool ok = sodium_init() >= 0;
  return ok;
}

// GF(2^8) with the AES polynomial x^8 + x^4 + x^3 + x + 1, through logarithms to the base 3.
struct Gf256 {
  std::array<uint8_t, 512> exp{};
  std::array<uint8_t, 256> log{};
  Gf256() {
    uint8_t v = 1;
    for (int i = 0; i < 255; ++i) {
      exp[i] = exp[i + 255] = v;
      log[v] = static_cast<uint8_t>(i);
      // v *= 3: v ^ (v * 2), reducing by the polynomial.
      const uint8_t doubled = static_cast<uint8_t>((v << 1) ^ ((v & 0x80) ? 0x1b : 0));
      v = static_cast<uint8_t>(v ^ doubled);
    }
  }
  uint8_t Mul(uint8_t a, uint8_t b) const {
    if (a == 0 || b == 0) return 0;
    return exp[log[a] + log[b]];
  }
  uint8_t Div(uint8_t a, uint8_t b) const {  // b != 0
    if (a == 0) return 0;
    return exp[log[a] + 255 - log[b]];
  }
};
const Gf256& Field() {
  static const Gf256 field;
  return field;
}

// BLAKE2b-256 of a label and then of what is added, in order: each use names its own label.
class LabelledHash {
 public:
  explicit LabelledHash(std::string_view label) {
    crypto_generichash_init(&state_, nullptr, 0, 32);
    Add(reinterpret_cast<const uint8_t*>(label.data()), label.size());
  }
  LabelledHash& Add(const uint8_t* data, size_t n) {
    crypto_generichash_update(&state_, data, n);
    return *this;
  }
  LabelledHash& Add(const SecAggKey& key) { return Add(key.data(), key.size()); }
  // `bytes` bytes of v, least significant first.
  LabelledHash& AddLittleEndian(uint64_t v, int bytes) {
    uint8_t number[8];
    for (int i = 0; i < bytes; ++i) number[i] = static_cast<uint8_t>(v >> (8 * i));
    return Add(number, static_cast<size_t>(bytes));
  }
  SecAggKey Final() {
    SecAggKey out;
    crypto_generichash_final(&state_, out.data(), out.size());
    return out;
  }

 private:
  crypto_generichash_state state_;
};

// BLAKE2b of a label, an agreed secret and the two public keys in a fixed order: the same
// 32 bytes at both ends.
SecAggKey DeriveKey(std::string_view label, const uint8_t* shared, const SecAggKey& a,
                    const SecAggKey& b) {
  return LabelledHash(label)
      .Add(shared, crypto_scalarmult_BYTES)
      .Add(std::min(a, b))
      .Add(std::max(a, b))
      .Final();
}

// The agreed key of `label` between secret key `mine` and public key `theirs`.
absl::StatusOr<SecAggKey> Agree(std::string_view label, const SecAggKey& mine,
                                const SecAggKey& my_public, const SecAggKey& theirs) {
  uint8_t shared[crypto_scalarmult_BYTES];
  if (crypto_scalarmult(shared, mine.data(), theirs.data()) != 0) {
    return absl::InvalidArgumentError("a public key is a low-order point");
  }
  SecAggKey key = DeriveKey(label, shared, my_public, theirs);
  sodium_memzero(shared, sizeof(shared));
  return key;
}

// Adds (sign +1) or subtracts (-1) the ChaCha20 keystream of `seed` to `v`, mod 2^32.
void AddMask(const SecAggKey& seed, int sign, std::span<uint32_t> v) {
  std::vector<uint8_t> stream(v.size() * 4);
  const uint8_t nonce[crypto_stream_chacha20_NONCEBYTES] = {};
  crypto_stream_chacha20(stream.data(), stream.size(), nonce, seed.data());
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t m;
    std::memcpy(&m, stream.data() + 4 * i, 4);
    v[i] = sign > 0 ? v[i] + m : v[i] - m;
  }
}

constexpr std::string_view kMaskLabel = "syncline secagg mask";
constexpr std::string_view kSealLabel = "syncline secagg seal";

}  // namespace

absl::Status CheckSecAggParams(const SecAggParams& p) {
  if (p.clients < 2 || p.clients > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("secure aggregation: ", p.clients, " clients; must be in [2, 255]"));
  }
  if (p.threshold < 2 || p.threshold > p.clients) {
    return absl::InvalidArgumentError(absl::StrCat("secure aggregation: threshold ", p.threshold,
                                                   " must be in [2, ", p.clients, "]"));
  }
  if (p.bits < 1 || p.bits > 31) {
    return absl::InvalidArgumentError(
        absl::StrCat("secure aggregation: ", p.bits, " bits; must be in [1, 31]"));
  }
  const double top = static_cast<double>(p.clients) * (std::ldexp(1.0, p.bits) - 1);
  if (top >= std::ldexp(1.0, 32)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "secure aggregation: %d clients of %d bits sum to up to %.0f, which does not fit the "
        "modulus 2^32; use fewer bits",
        p.clients, p.bits, top));
  }
  if (!(p.clip > 0 && std::isfinite(p.clip))) {
    return absl::InvalidArgumentError(
        absl::StrCat("secure aggregation: clip ", p.clip, " must be a positive number"));
  }
  if (p.neighbours < 0 || p.neighbours > 254 || p.neighbours % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("secure aggregation: ", p.neighbours,
                     " neighbours; must be 0 (every other client) or an "
                     "even number in [2, 254] (a Harary graph is k-regular for even k)"));
  }
  if (p.neighbours > 0 && p.threshold > p.neighbours + 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "secure aggregation: threshold %d is more than a neighbourhood of %d neighbours and the "
        "client itself can reveal; use a threshold in [2, %d] or more neighbours",
        p.threshold, p.neighbours, p.neighbours + 1));
  }
  return absl::OkStatus();
}

SecAggKey SecAggGraphSeed(int64_t round, const std::map<int, SecAggKey>& masking_keys) {
  (void)SodiumReady();
  LabelledHash hash("syncline secagg neighbour graph");
  hash.AddLittleEndian(static_cast<uint64_t>(round), 8);
  for (const auto& [client, key] : masking_keys) {
    hash.AddLittleEndian(static_cast<uint32_t>(client), 4).Add(key);
  }
  return hash.Final();
}

SecAggGraph SecAggHararyGraph(const std::set<int>& clients, int k, const SecAggKey& seed) {
  const int n = static_cast<int>(clients.size());
  if (k <= 0 || k >= n - 1) return {};
  (void)SodiumReady();
  std::vector<int> circle(clients.begin(), clients.end());
  // Fisher-Yates over a ChaCha20 stream; rejection keeps each draw uniform. A draw is rejected
  // with probability below n / 2^32, so the stream of 4 (n + 64) bytes is ample; it is extended
  // if not.
  std::vector<uint8_t> stream;
  size_t used = 0;
  uint64_t block = 0;
  auto next = [&]() -> uint32_t {
    if (used + 4 > stream.size()) {
      // Whole 64-byte blocks, so that the next refill starts where this one ended.
      stream.assign(64 * ((4 * (static_cast<size_t>(n) + 64) + 63) / 64), 0);
      crypto_stream_chacha20_xor_ic(stream.data(), stream.data(), stream.size(),
                                    std::array<uint8_t, crypto_stream_chacha20_NONCEBYTES>{}.data(),
                                    block, seed.data());
      block += stream.size() / 64;
      used = 0;
    }
    uint32_t v;
    std::memcpy(&v, stream.data() + used, 4);
    used += 4;
    return v;
  };
  for (int i = n - 1; i > 0; --i) {
    const uint32_t bound = static_cast<uint32_t>(i + 1);
    const uint32_t limit = UINT32_MAX - (UINT32_MAX % bound + 1) % bound;  // accept v <= limit
    uint32_t v = next();
    while (v > limit) v = next();
    std::swap(circle[i], circle[v % bound]);
  }
  SecAggGraph graph;
  for (int i = 0; i < n; ++i) {
    std::set<int>& closed = graph[circle[i]];
    closed.insert(circle[i]);
    for (int j = 1; j <= k / 2; ++j) {
      closed.insert(circle[(i + j) % n]);
      closed.insert(circle[(i - j + n) % n]);
    }
  }
  return graph;
}

bool SecAggNeighbours(const SecAggGraph& graph, int u, int v) {
  if (graph.empty()) return true;
  const auto it = graph.find(u);
  return it != graph.end() && it->second.contains(v);
}

int SecAggPieces(const SecAggGraph& graph, const std::set<int>& clients) {
  if (clients.empty()) return 0;
  if (graph.empty()) return 1;
  std::set<int> unseen = clients;
  int pieces = 0;
  while (!unseen.empty()) {
    ++pieces;
    std::vector<int> stack = {*unseen.begin()};
    unseen.erase(unseen.begin());
    while (!stack.empty()) {
      const int u = stack.back();
      stack.pop_back();
      const auto it = graph.find(u);
      if (it == graph.end()) continue;
      for (int v : it->second) {
        if (unseen.erase(v) > 0) stack.push_back(v);
      }
    }
  }
  return pieces;
}

std::vector<uint32_t> SecAggQuantise(std::span<const float> x, const SecAggParams& p,
                                     DpRandom& rounding) {
  const double levels = std::ldexp(1.0, p.bits) - 1;
  std::vector<uint32_t> q(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = std::clamp(static_cast<double>(x[i]), -p.clip, p.clip);
    const double level = std::clamp((v + p.clip) / (2 * p.clip) * levels, 0.0, levels);
    q[i] = static_cast<uint32_t>(
        std::min<int64_t>(rounding.StochasticRound(level), static_cast<int64_t>(levels)));
  }
  return q;
}

std::vector<float> SecAggDecodeSum(std::span<const uint32_t> sum, int count,
                                   const SecAggParams& p) {
  const double levels = std::ldexp(1.0, p.bits) - 1;
  std::vector<float> out(sum.size());
  for (size_t i = 0; i < sum.size(); ++i) {
    out[i] = static_cast<float>(sum[i] / levels * 2 * p.clip - count * p.clip);
  }
  return out;
}

std::vector<ShamirShare> ShamirSplit(const SecAggKey& secret, int n, int t) {
  (void)SodiumReady();
  const Gf256& f = Field();
  std::vector<ShamirShare> shares(n);
  for (int i = 0; i < n; ++i) shares[i].x = static_cast<uint8_t>(i + 1);
  std::vector<uint8_t> coefficients(static_cast<size_t>(std::max(t - 1, 0)));
  for (size_t byte = 0; byte < secret.size(); ++byte) {
    randombytes_buf(coefficients.data(), coefficients.size());
    for (ShamirShare& share : shares) {
      // Horner: ((a_{t-1} x + a_{t-2}) x + ...) x + secret.
      uint8_t y = 0;
      for (size_t k = coefficients.size(); k-- > 0;) y = f.Mul(y, share.x) ^ coefficients[k];
      share.y[byte] = f.Mul(y, share.x) ^ secret[byte];
    }
  }
  sodium_memzero(coefficients.data(), coefficients.size());
  return shares;
}

absl::StatusOr<SecAggKey> ShamirEvaluate(std::span<const ShamirShare> shares, int t, uint8_t x) {
  if (t < 1 || static_cast<int>(shares.size()) < t) {
    return absl::FailedPreconditionError(
        absl::StrCat("Shamir: ", shares.size(), " shares, ", t, " needed"));
  }
  const Gf256& f = Field();
  std::span<const ShamirShare> used = shares.first(t);
  std::set<uint8_t> xs;
  for (const ShamirShare& s : used) {
    if (s.x == 0 || !xs.insert(s.x).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("Shamir: share x ", static_cast<int>(s.x), " is zero or repeated"));
    }
  }
  SecAggKey value{};
  for (const ShamirShare& i : used) {
    if (i.x == x) return i.y;  // the polynomial passes through its own shares
    // The Lagrange basis polynomial of x_i at x: prod_{j != i} (x - x_j) / (x_i - x_j); in
    // GF(2^8) subtraction is xor.
    uint8_t basis = 1;
    for (const ShamirShare& j : used) {
      if (j.x != i.x) basis = f.Mul(basis, f.Div(x ^ j.x, i.x ^ j.x));
    }
    for (size_t byte = 0; byte < value.size(); ++byte) value[byte] ^= f.Mul(i.y[byte], basis);
  }
  return value;
}

absl::StatusOr<SecAggKey> ShamirCombine(std::span<const ShamirShare> shares, int t) {
  return ShamirEvaluate(shares, t, 0);
}

SecAggKey SelfMaskCommitment(const SecAggKey& seed) {
  (void)SodiumReady();
  return LabelledHash("syncline secagg self-mask commitment").Add(seed).Final();
}

absl::StatusOr<SecAggClient> SecAggClient::Create(const SecAggParams& p, int index) {
  if (auto s = CheckSecAggParams(p); !s.ok()) return s;
  if (!SodiumReady()) return absl::InternalError("libsodium failed to initialise");
  if (index < 1 || index > p.clients) {
    return absl::InvalidArgumentError(
        absl::StrCat("secure aggregation: client ", index, " is not in [1, ", p.clients, "]"));
  }
  SecAggClient c;
  c.params_ = p;
  c.index_ = index;
  crypto_box_keypair(c.c_public_.data(), c.c_secret_.data());
  crypto_box_keypair(c.s_public_.data(), c.s_secret_.data());
  randombytes_buf(c.self_seed_.data(), c.self_seed_.size());
  return c;
}

absl::StatusOr<std::vector<SecAggSealedShares>> SecAggClient::ShareKeys(
    const std::map<int, SecAggKey>& encryption_keys, const std::map<int, SecAggKey>& masking_keys,
    const SecAggGraph& graph) {
  c_peers_.clear();
  s_peers_.clear();
  for (const auto& [peer, key] : encryption_keys) {
    if (!SecAggNeighbours(graph, index_, peer)) continue;
    c_peers_[peer] = key;
    if (const auto m = masking_keys.find(peer); m != masking_keys.end()) s_peers_[peer] = m->second;
  }
  if (static_cast<int>(c_peers_.size()) < params_.threshold ||
      encryption_keys.size() != masking_keys.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "client %d: %d clients of its neighbourhood advertised keys, the threshold is %d", index_,
        c_peers_.size(), params_.threshold));
  }
  const std::vector<ShamirShare> b = ShamirSplit(self_seed_, params_.clients, params_.threshold);
  const std::vector<ShamirShare> s = ShamirSplit(s_secret_, params_.clients, params_.threshold);
  std::vector<SecAggSealedShares> out;
  for (const auto& [to, key] : c_peers_) {
    if (to < 1 || to > params_.clients || !masking_keys.contains(to)) {
      return absl::InvalidArgumentError(
          absl::StrCat("client ", index_, ": client ", to, " advertised an incomplete key set"));
    }
    absl::StatusOr<SecAggKey> seal = Agree(kSealLabel, c_secret_, c_public_, key);
    if (!seal.ok())
      return absl::InvalidArgumentError(absl::StrCat("client ", to, ": ", seal.status().message()));
    // plaintext: from, to, b share (x, y), s share (x, y)
    std::vector<uint8_t> plain = {static_cast<uint8_t>(index_), static_cast<uint8_t>(to),
                                  b[to - 1].x};
    plain.insert(plain.end(), b[to - 1].y.begin(), b[to - 1].y.end());
    plain.push_back(s[to - 1].x);
    plain.insert(plain.end(), s[to - 1].y.begin(), s[to - 1].y.end());
    SecAggSealedShares sealed{.from = index_, .to = to};
    sealed.ciphertext.resize(crypto_aead_xchacha20poly1305_ietf_NPUBBYTES + plain.size() +
                             crypto_aead_xchacha20poly1305_ietf_ABYTES);
    uint8_t* nonce = sealed.ciphertext.data();
    randombytes_buf(nonce, crypto_aead_xchacha20poly1305_ietf_NPUBBYTES);
    unsigned long long length = 0;
    crypto_aead_xchacha20poly1305_ietf_encrypt(nonce + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES,
                                               &length, plain.data(), plain.size(), nullptr, 0,
                                               nullptr, nonce, seal->data());
    sodium_memzero(plain.data(), plain.size());
    out.push_back(std::move(sealed));
  }
  return out;
}

absl::Status SecAggClient::ReceiveShares(std::span<const SecAggSealedShares> sealed) {
  constexpr size_t kPlain = 3 + 32 + 1 + 32;
  for (const SecAggSealedShares& m : sealed) {
    auto refuse = [&](absl::string_view why) {
      return absl::InvalidArgumentError(
          absl::StrCat("client ", index_, ": the shares from client ", m.from, " ", why));
    };
    const auto key = c_peers_.find(m.from);
    if (m.to != index_ || key == c_peers_.end()) {
      return refuse("are not for this client, or come from outside its neighbourhood");
    }
    if (m.ciphertext.size() != crypto_aead_xchacha20poly1305_ietf_NPUBBYTES + kPlain +
                                   crypto_aead_xchacha20poly1305_ietf_ABYTES) {
      return refuse("have the wrong length");
    }
    absl::StatusOr<SecAggKey> seal = Agree(kSealLabel, c_secret_, c_public_, key->second);
    if (!seal.ok()) return refuse(seal.status().message());
    std::array<uint8_t, kPlain> plain;
    unsigned long long length = 0;
    const uint8_t* nonce = m.ciphertext.data();
    if (crypto_aead_xchacha20poly1305_ietf_decrypt(
            plain.data(), &length, nullptr, nonce + crypto_aead_xchacha20poly1305_ietf_NPUBBYTES,
            m.ciphertext.size() - crypto_aead_xchacha20poly1305_ietf_NPUBBYTES, nullptr, 0, nonce,
            seal->data()) != 0 ||
        length != kPlain) {
      return refuse("do not decrypt (corrupted, or sealed for another client)");
    }
    if (plain[0] != m.from || plain[1] != index_ || plain[2] != index_ || plain[35] != index_) {
      return refuse("name other clients than their envelope");
    }
    ShamirShare b{.x = plain[2]}, s{.x = plain[35]};
    std::memcpy(b.y.data(), plain.data() + 3, 32);
    std::memcpy(s.y.data(), plain.data() + 36, 32);
    sodium_memzero(plain.data(), plain.size());
    held_b_[m.from] = b;
    held_s_[m.from] = s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint32_t>> SecAggClient::MaskInput(
    std::span<const uint32_t> quantised) const {
  std::vector<uint32_t> y(quantised.begin(), quantised.end());
  AddMask(self_seed_, +1, y);
  for (const auto& [peer, unused] : held_s_) {
    if (peer == index_) continue;
    absl::StatusOr<SecAggKey> seed = Agree(kMaskLabel, s_secret_, s_public_, s_peers_.at(peer));
    if (!seed.ok()) return seed.status();
    AddMask(*seed, peer > index_ ? +1 : -1, y);
  }
  return y;
}

absl::StatusOr<SecAggReveal> SecAggClient::Reveal(const std::set<int>& survivors,
                                                  const SecAggGraph& graph) {
  if (static_cast<int>(survivors.size()) < params_.threshold) {
    return absl::FailedPreconditionError(
        absl::StrFormat("client %d: %d clients survive the round, fewer than the threshold %d: "
                        "nothing is revealed",
                        index_, survivors.size(), params_.threshold));
  }
  // Its neighbourhood's survivors (itself included): the inputs its reveal helps unmask with
  // its own. Every survivor, for the complete graph.
  const int near =
      static_cast<int>(std::count_if(held_b_.begin(), held_b_.end(), [&](const auto& held) {
        return survivors.contains(held.first);
      }));
  if (near < params_.threshold) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "client %d: %d clients of its neighbourhood survive the round, fewer than the threshold "
        "%d: nothing is revealed",
        index_, near, params_.threshold));
  }
  if (const int pieces = SecAggPieces(graph, survivors); pieces > 1) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "client %d: the survivors fall into %d pieces of the neighbour graph, whose sums would "
        "each be unmasked: nothing is revealed",
        index_, pieces));
  }
  SecAggReveal reveal{.from = index_};
  for (const auto& [peer, b] : held_b_) {
    const bool survived = survivors.contains(peer);
    if (survived ? revealed_s_.contains(peer) : revealed_b_.contains(peer)) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "client %d: refuses to reveal a share of client %d's %s: it revealed one of its %s "
          "already, and both would unmask its input",
          index_, peer, survived ? "self-mask" : "masking key",
          survived ? "masking key" : "self-mask"));
    }
  }
  for (const auto& [peer, b] : held_b_) {
    if (survivors.contains(peer)) {
      reveal.self_mask_shares[peer] = b;
      revealed_b_.insert(peer);
    } else {
      reveal.key_shares[peer] = held_s_.at(peer);
      revealed_s_.insert(peer);
    }
  }
  return reveal;
}

SecAggServer::SecAggServer(const SecAggParams& p, size_t length,
                           std::map<int, SecAggKey> masking_keys,
                           std::map<int, SecAggKey> commitments, SecAggGraph graph)
    : params_(p),
      length_(length),
      masking_keys_(std::move(masking_keys)),
      commitments_(std::move(commitments)),
      graph_(std::move(graph)),
      sum_(length, 0) {}

absl::Status SecAggServer::AddMaskedInput(int from, std::span<const uint32_t> masked) {
  if (!masking_keys_.contains(from)) {
    return absl::InvalidArgumentError(
        absl::StrCat("secure aggregation: client ", from, " did not share keys this round"));
  }
  if (survivors_.contains(from)) {
    return absl::InvalidArgumentError(absl::StrCat("secure aggregation: client ", from,
                                                   " uploaded a masked input twice (a replay)"));
  }
  if (masked.size() != length_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("secure aggregation: client %d uploaded %d values, the round has %d", from,
                        masked.size(), length_));
  }
  for (size_t i = 0; i < length_; ++i) sum_[i] += masked[i];
  survivors_.insert(from);
  return absl::OkStatus();
}

namespace {

// Survivor v's self-mask seed from `shares` (one per revealer, in `revealers`' order), checked
// against its commitment: the first t shares, else the first t-subset (of at most
// kMaxSubsets tried) whose seed matches; the revealers whose shares disagree with that seed go
// to `corrupt`.
constexpr int kMaxSubsets = 20000;
absl::StatusOr<SecAggKey> RebuildCommittedSeed(int v, const std::vector<ShamirShare>& shares,
                                               const std::vector<int>& revealers, int t,
                                               const SecAggKey* commitment,
                                               std::set<int>* corrupt) {
  absl::StatusOr<SecAggKey> first = ShamirCombine(shares, t);
  if (!first.ok() || commitment == nullptr || SelfMaskCommitment(*first) == *commitment) {
    return first;
  }
  const int m = static_cast<int>(shares.size());
  std::vector<int> pick(t);
  for (int i = 0; i < t; ++i) pick[i] = i;
  std::vector<ShamirShare> subset(t);
  for (int tried = 0; tried < kMaxSubsets; ++tried) {
    for (int i = 0; i < t; ++i) subset[i] = shares[pick[i]];
    absl::StatusOr<SecAggKey> seed = ShamirCombine(subset, t);
    if (seed.ok() && SelfMaskCommitment(*seed) == *commitment) {
      for (int i = 0; i < m; ++i) {
        absl::StatusOr<SecAggKey> want = ShamirEvaluate(subset, t, shares[i].x);
        if (want.ok() && *want != shares[i].y && corrupt != nullptr) corrupt->insert(revealers[i]);
      }
      return seed;
    }
    // The next t-subset in lexicographic order.
    int i = t - 1;
    while (i >= 0 && pick[i] == m - t + i) --i;
    if (i < 0) break;
    ++pick[i];
    for (int j = i + 1; j < t; ++j) pick[j] = pick[j - 1] + 1;
  }
  std::vector<std::string> names;
  for (int r : revealers) names.push_back(absl::StrCat(r));
  return absl::InvalidArgumentError(absl::StrFormat(
      "secure aggregation: the self-mask shares of client %d revealed by clients %s do not "
      "rebuild the seed it committed to, and no %d of them do: a share is corrupt",
      v, absl::StrJoin(names, ", "), t));
}

}  // namespace

absl::StatusOr<std::vector<uint32_t>> SecAggServer::Unmask(std::span<const SecAggReveal> reveals,
                                                           std::set<int>* corrupt) const {
  const int t = params_.threshold;
  std::vector<const SecAggReveal*> usable;
  for (const SecAggReveal& r : reveals) {
    if (survivors_.contains(r.from)) usable.push_back(&r);
  }
  if (static_cast<int>(survivors_.size()) < t || static_cast<int>(usable.size()) < t) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "secure aggregation: %d survivors and %d reveals, the threshold is %d: the round is "
        "aborted and its sum stays masked",
        survivors_.size(), usable.size(), t));
  }
  if (const int pieces = SecAggPieces(graph_, survivors_); pieces > 1) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "secure aggregation: the survivors fall into %d pieces of the neighbour graph: the "
        "round is aborted and its sum stays masked",
        pieces));
  }
  for (const SecAggReveal* r : usable) {
    for (const auto& [peer, share] : r->self_mask_shares) {
      if (r->key_shares.contains(peer)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "secure aggregation: client %d revealed both shares of client %d", r->from, peer));
      }
    }
  }
  std::vector<uint32_t> sum = sum_;
  // The shares of `peer`'s b (self_mask) or s key held by the revealers of its neighbourhood,
  // and those revealers, in order. Each of them holds one (it received peer's shares: both
  // shared keys); fewer than t of them leave the round masked.
  auto shares_of = [&](int peer, bool self_mask,
                       std::vector<int>* revealers) -> absl::StatusOr<std::vector<ShamirShare>> {
    std::vector<ShamirShare> shares;
    for (const SecAggReveal* r : usable) {
      if (!SecAggNeighbours(graph_, peer, r->from)) continue;
      const auto& m = self_mask ? r->self_mask_shares : r->key_shares;
      const auto it = m.find(peer);
      if (it == m.end()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("secure aggregation: client %d's reveal has no %s share of client %d",
                            r->from, self_mask ? "self-mask" : "masking-key", peer));
      }
      shares.push_back(it->second);
      revealers->push_back(r->from);
    }
    if (static_cast<int>(shares.size()) < t) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "secure aggregation: %d clients of %s client %d's neighbourhood revealed, the "
          "threshold is %d: the round is aborted and its sum stays masked",
          shares.size(), self_mask ? "surviving" : "lost", peer, t));
    }
    return shares;
  };
  for (int v : survivors_) {
    std::vector<int> revealers;
    absl::StatusOr<std::vector<ShamirShare>> shares = shares_of(v, true, &revealers);
    if (!shares.ok()) return shares.status();
    const auto commitment = commitments_.find(v);
    absl::StatusOr<SecAggKey> b = RebuildCommittedSeed(
        v, *shares, revealers, t, commitment == commitments_.end() ? nullptr : &commitment->second,
        corrupt);
    if (!b.ok()) return b.status();
    AddMask(*b, -1, sum);
  }
  for (const auto& [u, public_key] : masking_keys_) {
    if (survivors_.contains(u)) continue;
    // A lost client with no surviving neighbour left no mask in the sum.
    const int lost = u;  // a structured binding cannot be captured before C++20's P1091
    if (std::none_of(survivors_.begin(), survivors_.end(),
                     [&](int v) { return SecAggNeighbours(graph_, lost, v); })) {
      continue;
    }
    std::vector<int> revealers;
    absl::StatusOr<std::vector<ShamirShare>> shares = shares_of(u, false, &revealers);
    if (!shares.ok()) return shares.status();
    absl::StatusOr<SecAggKey> secret = ShamirCombine(*shares, t);
    if (!secret.ok()) return secret.status();
    // A corrupted share rebuilds another key: its public key tells.
    SecAggKey rebuilt_public;
    crypto_scalarmult_base(rebuilt_public.data(), secret->data());
    if (rebuilt_public != public_key) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "secure aggregation: the shares of dropped client %d's masking key do not rebuild it "
          "(a corrupted share)",
          u));
    }
    for (int v : survivors_) {
      if (v == u || !SecAggNeighbours(graph_, u, v)) continue;
      absl::StatusOr<SecAggKey> seed = Agree(kMaskLabel, *secret, public_key, masking_keys_.at(v));
      if (!seed.ok()) return seed.status();
      // Survivor v added +PRG(s_vu) when u > v, -PRG(s_vu) when u < v: take it back out.
      AddMask(*seed, u > v ? -1 : +1, sum);
    }
  }
  return sum;
}

}  // namespace syncline
