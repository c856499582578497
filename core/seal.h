// The sealed TCP plane's cryptography (core/tcp_transport.h with TcpOptions::key): the
// handshake that authenticates both ends of a connection with keys derived from the job key,
// and SealedChannel, the AEAD that seals every segment after it.
//
// Handshake (client = the end that connects, server = the one that accepts):
//   client -> server  hello: its id, the server id it wants, the ciphers it offers, nonce Nc
//   server -> client  the chosen cipher, nonce Ns, ServerProof(K, ...)
//   client -> server  ClientProof(K, ...)
// K, the pair key, is BLAKE2b over X25519 of one end's secret and the other's public key, both
// ids and both public keys (JobKey::PairKey): either end computes it, from the job's key or from
// its own node's key, and no other node can (core/job_key.h); endpoint ids carry the job's
// generation after a rollback (core/node_table.h's PeerEndpointId), so a generation's keys are its
// own. Each proof is BLAKE2b keyed with K over its role, the offer, the choice and both fresh
// 32-byte nonces: only an end of the pair (or the job key's holder) can make one, and a recorded
// handshake fails against the other end's fresh nonce. The two directions' session keys come from K
// and both nonces (SessionKeys), so no two sessions share a key and a segment of one session means
// nothing in another.
//
// Segments: [u32 plaintext length n][n bytes of ciphertext][16-byte tag], the length as
// associated data, the nonce a per-direction counter that is never sent: a segment that was
// replayed, reordered, dropped, cut or altered fails its tag, and the connection is closed.
// AES-256-GCM (Intel's ipsec-mb where installed, else OpenSSL's EVP: 11x and 4.7x libsodium's
// here) where both CPUs have AES-NI and PCLMUL (libsodium's crypto_aead_aes256gcm_is_available),
// else libsodium's XChaCha20-Poly1305 (IETF).
//
// Thread-safety: a SealedChannel belongs to one connection, used by one thread at a time.
#ifndef SYNCLINE_CORE_SEAL_H_
#define SYNCLINE_CORE_SEAL_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/job_key.h"

namespace syncline {

enum class SealCipher : uint8_t { kAes256Gcm = 1, kXChaCha20Poly1305 = 2 };
const char* SealCipherName(SealCipher cipher);
// Which library runs AES-256-GCM here: "ipsec-mb" (Intel's, with VAES/AVX-512 code) where the
// build found it and it runs on this CPU, else "OpenSSL". Both give the same bytes.
const char* SealAesImplementation();

// The ciphers this machine can run, as a mask of SealCipher values; without `allow_aes` only
// XChaCha20-Poly1305 (tests and benchmarks of the fallback).
uint8_t LocalSealCiphers(bool allow_aes = true);
// The cipher a server picks from a client's offer, or 0 when they share none.
uint8_t ChooseSealCipher(uint8_t offered, uint8_t mine);

using SealNonce = std::array<unsigned char, 32>;
using SealKey = std::array<unsigned char, 32>;
using SealProof = std::array<unsigned char, 32>;

SealNonce FreshSealNonce();
// The key of connections from `client_id` to `server_id`; a random one (which no proof of the
// other end matches) when `key` holds neither end's secret or knows no key of the other.
SealKey PairKey(const JobKey& key, const std::string& client_id, const std::string& server_id);
// The proofs of the two ends, over the offer, the choice and both nonces.
SealProof ServerProof(const SealKey& pair, uint8_t offered, uint8_t chosen, const SealNonce& nc,
                      const SealNonce& ns);
SealProof ClientProof(const SealKey& pair, uint8_t offered, uint8_t chosen, const SealNonce& nc,
                      const SealNonce& ns);
// Compares proofs in constant time.
bool SameProof(const SealProof& a, const unsigned char* b);

// One connection's sealing and opening, after the handshake.
class SealedChannel {
 public:
  static constexpr size_t kHeaderBytes = 4;
  static constexpr size_t kTagBytes = 16;
  static constexpr size_t kOverhead = kHeaderBytes + kTagBytes;
  // The most plaintext one segment carries: one segment sits in the reader's staging buffer,
  // decrypted in place while it is hot in cache.
  static constexpr size_t kMaxSegment = 64 * 1024;

  // `client`: this end connected (its sending key is the client's).
  SealedChannel(SealCipher cipher, const SealKey& pair, const SealNonce& nc, const SealNonce& ns,
                bool client);
  ~SealedChannel();
  SealedChannel(const SealedChannel&) = delete;
  SealedChannel& operator=(const SealedChannel&) = delete;

  SealCipher cipher() const { return cipher_; }
  // Writes the segment of `plain` (n <= kMaxSegment bytes) to out[0, n + kOverhead).
  void Seal(const std::byte* plain, size_t n, std::byte* out);
  // Opens the segment whose header says `n` bytes: its plaintext goes to plain[0, n), or with
  // plain null in place to record[kHeaderBytes, +n). False when the tag does not verify
  // (nothing written may be used then).
  bool Open(std::byte* record, size_t n, std::byte* plain = nullptr);
  // Segments sealed and opened so far (the next nonces).
  uint64_t sealed() const { return send_counter_; }
  uint64_t opened() const { return receive_counter_; }

 private:
  struct Keys;
  const SealCipher cipher_;
  std::unique_ptr<Keys> keys_;
  uint64_t send_counter_ = 0;
  uint64_t receive_counter_ = 0;
};

}  // namespace syncline

#endif  // SYNCLINE_CORE_SEAL_H_
