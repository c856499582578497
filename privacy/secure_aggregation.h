// The cryptographic core of secure aggregation (Bonawitz et al. 2017, "Practical Secure
// Aggregation for Privacy-Preserving Machine Learning"), in process: what each client computes
// and what the server computes, without the messages that carry them between nodes (those are
// secagg_protocol.h's); docs/PRIVACY.md says what is missing.
//
// Each client u holds two X25519 key pairs: c_u, to encrypt the shares it sends other clients
// through the server (XChaCha20-Poly1305 under a key both ends derive from their c keys), and
// s_u, whose agreement s_uv with every other client v seeds a pairwise mask; and a random
// self-mask seed b_u. It splits b_u and s_u's secret key into t-of-n Shamir shares (byte-wise
// over GF(2^8)), one for every client. Its masked input is
//     y_u = x_u + PRG(b_u) + sum_{v > u} PRG(s_uv) - sum_{v < u} PRG(s_uv)   (mod 2^32)
// over the clients v that shared keys (ChaCha20 keystreams as the PRG). The pairwise masks
// cancel in the sum of every client's y; for a client that dropped after sharing keys, the
// server rebuilds its s key from t shares and removes its pairwise masks; for each survivor, it
// rebuilds b from t shares and removes its self-mask. A client answers, for each peer, with a
// share of b (the peer survived) or of s (it dropped), never both: with both the server could
// unmask that peer's input alone. The server keeps only the running sum of masked inputs.
//
// With a neighbour graph (Bell et al. 2020, "Secure Single-Server Aggregation with
// (Poly)Logarithmic Overhead"), each client pairs its masks with, and splits its secrets among,
// its k neighbours only (a random k-regular Harary graph that every party derives from the
// advertised keys, SecAggHararyGraph), instead of every other client: a client's work and
// bytes grow with k, not n, and the server's with n k. Every t-of-(k+1) share set then lives in
// one neighbourhood, so the round is unmasked only if each survivor, and each client lost after
// sharing keys, has t of its neighbourhood (itself included) left to reveal.
//
// The inputs are quantised: each coordinate clipped to [-clip, clip] and mapped to an integer
// in [0, 2^bits - 1] with stochastic rounding; n clients' sum fits the modulus 2^32 when n (2^bits
// - 1) < 2^32, which CheckSecAggParams checks.
//
// Thread-safety: SecAggClient and SecAggServer are thread-compatible values; the free functions
// are thread-safe.
#ifndef SYNCLINE_PRIVACY_SECURE_AGGREGATION_H_
#define SYNCLINE_PRIVACY_SECURE_AGGREGATION_H_

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "privacy/dp_random.h"

namespace syncline {

using SecAggKey = std::array<uint8_t, 32>;

// Each client's closed neighbourhood (itself and the clients it pairs with and shares its
// secrets among), by client number. Empty: every client is every other's neighbour.
using SecAggGraph = std::map<int, std::set<int>>;

struct SecAggParams {
  int clients = 0;    // n; clients are numbered 1 .. n (a Shamir share's x)
  int threshold = 0;  // t: shares that rebuild a secret, and the fewest survivors of a round
  int bits = 16;      // quantisation bits per coordinate
  double clip = 1;    // each coordinate is clipped to [-clip, clip]
  // k, even: each client's neighbours in a Harary graph (Bell et al. 2020); 0, or k at least
  // the round's clients - 1: every other client (Bonawitz et al. 2017). t <= k + 1.
  int neighbours = 0;
};
// InvalidArgument naming the value: 2 <= t <= n <= 255, 1 <= bits <= 31, n (2^bits - 1) below
// the modulus 2^32, clip > 0, k even in [0, 254] with t <= k + 1 when k > 0. (A job also
// wants t a majority of those who hold a client's shares, job/privacy_plan.cc: with fewer, two
// groups shown different survivor lists could each rebuild one kind of a client's secrets.)
absl::Status CheckSecAggParams(const SecAggParams& p);

// The seed of a round's neighbour graph: BLAKE2b of a label, the round and every advertised
// (client, masking public key) in client order. Clients and server compute it from the same
// advertised keys; the keys are fresh random points, so nobody picks the graph (the server can
// only choose whom to leave out of the key list, and docs/PRIVACY.md says what that buys).
SecAggKey SecAggGraphSeed(int64_t round, const std::map<int, SecAggKey>& masking_keys);
// The closed neighbourhoods of a random k-regular Harary graph over `clients`: the clients in
// an order drawn from `seed` (Fisher-Yates over a ChaCha20 stream), each joined to the k/2
// before and the k/2 after it on that circle. k = 0, or k >= clients.size() - 1: the complete
// graph, returned empty (every client is every other's neighbour).
SecAggGraph SecAggHararyGraph(const std::set<int>& clients, int k, const SecAggKey& seed);
// Whether v is in u's closed neighbourhood (every client is, for the empty complete graph).
bool SecAggNeighbours(const SecAggGraph& graph, int u, int v);
// The connected pieces of the graph among `clients` only (edges between two of them). The
// masks inside a piece cancel in its own sum, so a server that unmasks a round whose
// survivors fall into several pieces learns each piece's sum: a round goes on only when its
// survivors are one piece (always, for the complete graph).
int SecAggPieces(const SecAggGraph& graph, const std::set<int>& clients);

// x clipped to [-clip, clip] and mapped linearly onto [0, 2^bits - 1], rounded stochastically
// (up with probability the fraction, so that the quantised value's expectation is the clipped
// value: the errors of many clients and rounds average out instead of adding up in one
// direction). `rounding` is the client's own stream (the caller draws it from the operating
// system, or from the job's key for a run that must repeat).
std::vector<uint32_t> SecAggQuantise(std::span<const float> x, const SecAggParams& p,
                                     DpRandom& rounding);
// The sum of `count` clients' quantised inputs back to the sum of their (clipped) values.
std::vector<float> SecAggDecodeSum(std::span<const uint32_t> sum, int count, const SecAggParams& p);

// One Shamir share of a 32-byte secret: the polynomial's value at x (1 .. 255), byte-wise.
struct ShamirShare {
  uint8_t x = 0;
  SecAggKey y{};
};
// n shares of which any t rebuild `secret` and fewer tell nothing of it.
std::vector<ShamirShare> ShamirSplit(const SecAggKey& secret, int n, int t);
// The secret from t or more shares (the first t are used). FailedPrecondition with fewer than
// t; InvalidArgument for a repeated or zero x.
absl::StatusOr<SecAggKey> ShamirCombine(std::span<const ShamirShare> shares, int t);
// The polynomial through the first t shares, at x (ShamirCombine is x = 0): what the share of
// holder x must be, to check another share against t trusted ones.
absl::StatusOr<SecAggKey> ShamirEvaluate(std::span<const ShamirShare> shares, int t, uint8_t x);

// A client's commitment to its self-mask seed, sent when it advertises: BLAKE2b of a label and
// the seed. Binding (the server checks the seed it rebuilds from shares against it, so a
// corrupt share is caught, not turned into a wrong sum) and hiding (the seed is 256 random
// bits).
SecAggKey SelfMaskCommitment(const SecAggKey& seed);

// What client `from` sends client `to` through the server in the share round: the shares of
// from's b and s secret key that `to` holds, encrypted to `to`.
struct SecAggSealedShares {
  int from = 0;
  int to = 0;
  std::vector<uint8_t> ciphertext;  // nonce, then XChaCha20-Poly1305 of the two shares
};

// A client's answer in the unmasking round: for each peer, a share of its b (the peer sent a
// masked input) or of its s secret key (it did not).
struct SecAggReveal {
  int from = 0;
  std::map<int, ShamirShare> self_mask_shares;  // peer -> share of b_peer
  std::map<int, ShamirShare> key_shares;        // peer -> share of s_peer's secret key
};

class SecAggClient {
 public:
  // Client `index` (1 .. n) with fresh keys and self-mask seed from the operating system.
  static absl::StatusOr<SecAggClient> Create(const SecAggParams& p, int index);

  int index() const { return index_; }
  // Advertised in the first round: the encryption and the masking public keys.
  const SecAggKey& encryption_public_key() const { return c_public_; }
  const SecAggKey& masking_public_key() const { return s_public_; }
  SecAggKey self_mask_commitment() const { return SelfMaskCommitment(self_seed_); }

  // Share round: given every client's public keys (index -> key; these are the clients that
  // advertised) and the round's neighbour graph, the sealed shares for each of its neighbours
  // (itself included; every advertiser with the empty complete graph). InvalidArgument when
  // fewer than t of its neighbourhood advertised.
  absl::StatusOr<std::vector<SecAggSealedShares>> ShareKeys(
      const std::map<int, SecAggKey>& encryption_keys, const std::map<int, SecAggKey>& masking_keys,
      const SecAggGraph& graph = {});
  // Receives the sealed shares addressed to it; InvalidArgument naming the sender for a share
  // that does not decrypt (corrupted, or sealed for someone else) or that comes from a client
  // outside its neighbourhood.
  absl::Status ReceiveShares(std::span<const SecAggSealedShares> sealed);

  // Masked-input round: y = x + masks (mod 2^32), over the clients whose shares it received.
  absl::StatusOr<std::vector<uint32_t>> MaskInput(std::span<const uint32_t> quantised) const;

  // Unmasking round: the server names the clients whose masked input it has (`survivors`,
  // at least t, including this one). The answer holds a b share for each surviving neighbour
  // and an s share for each other neighbour that shared keys. FailedPrecondition when fewer
  // than t survive, or fewer than t of its own neighbourhood (itself included): a server that
  // declares a client's neighbours lost would otherwise unmask a sum of few inputs; and when
  // `graph` (the round's) falls apart among the survivors (SecAggPieces), whose pieces' sums
  // would each be unmasked. A client
  // never reveals both kinds for one peer: a second request naming a different survivor set
  // is refused (FailedPrecondition naming the peer).
  absl::StatusOr<SecAggReveal> Reveal(const std::set<int>& survivors,
                                      const SecAggGraph& graph = {});

 private:
  SecAggClient() = default;
  SecAggParams params_;
  int index_ = 0;
  SecAggKey c_public_{}, c_secret_{}, s_public_{}, s_secret_{}, self_seed_{};
  std::map<int, SecAggKey> c_peers_, s_peers_;  // from ShareKeys
  std::map<int, ShamirShare> held_b_, held_s_;  // shares others sent it, by sender
  std::set<int> revealed_b_, revealed_s_;       // what it has answered so far
};

// The server's side: the running sum of masked inputs, and the unmasking.
class SecAggServer {
 public:
  // `commitments`: each client's SelfMaskCommitment, checked against the seed its shares
  // rebuild (a client with none is not checked). `graph`: the round's neighbour graph (empty:
  // complete).
  SecAggServer(const SecAggParams& p, size_t length, std::map<int, SecAggKey> masking_keys,
               std::map<int, SecAggKey> commitments = {}, SecAggGraph graph = {});

  // Adds client `from`'s masked input to the running sum. InvalidArgument naming the client for
  // an unknown client, a wrong length or a second upload (a replay).
  absl::Status AddMaskedInput(int from, std::span<const uint32_t> masked);
  // The clients whose input is in the sum.
  const std::set<int>& survivors() const { return survivors_; }

  // The sum of the survivors' quantised inputs, from the reveals of at least t survivors.
  // FailedPrecondition (the round aborts) with fewer than t survivors or reveals, or a
  // survivor or lost sharer with fewer than t revealers in its neighbourhood; InvalidArgument
  // naming the client whose reveal holds both kinds of share for one peer or misses a share.
  // A survivor's self-mask seed must match its commitment: when the first t shares do not
  // rebuild it, other t-subsets of the reveals are tried; found, the revealers whose shares
  // disagree with it are added to `corrupt` (when given) and the sum is still exact; not found
  // (exactly t reveals, or too many bad ones), InvalidArgument naming the survivor and the
  // revealers.
  absl::StatusOr<std::vector<uint32_t>> Unmask(std::span<const SecAggReveal> reveals,
                                               std::set<int>* corrupt = nullptr) const;

 private:
  SecAggParams params_;
  size_t length_;
  std::map<int, SecAggKey> masking_keys_;  // the clients that shared keys
  std::map<int, SecAggKey> commitments_;   // their self-mask commitments
  SecAggGraph graph_;
  std::vector<uint32_t> sum_;
  std::set<int> survivors_;
};

}  // namespace syncline

#endif  // SYNCLINE_PRIVACY_SECURE_AGGREGATION_H_
