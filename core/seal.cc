#include "core/seal.h"

#include <openssl/evp.h>
#include <sodium.h>

#ifdef SYNCLINE_HAVE_IPSEC_MB
#include <intel-ipsec-mb.h>
#endif

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "absl/strings/escaping.h"
#include "core/log.h"

namespace syncline {
namespace {

constexpr char kPairContext[] = "syncline sealed pair key v2:";

// BLAKE2b-256 keyed with `key` over a label, the offer, the choice and both nonces.
std::array<unsigned char, 32> Keyed(const SealKey& key, const char* label, uint8_t offered,
                                    uint8_t chosen, const SealNonce& nc, const SealNonce& ns) {
  crypto_generichash_state state;
  crypto_generichash_init(&state, key.data(), key.size(), 32);
  crypto_generichash_update(&state, reinterpret_cast<const unsigned char*>(label),
                            std::strlen(label) + 1);
  const unsigned char choice[2] = {offered, chosen};
  crypto_generichash_update(&state, choice, sizeof(choice));
  crypto_generichash_update(&state, nc.data(), nc.size());
  crypto_generichash_update(&state, ns.data(), ns.size());
  std::array<unsigned char, 32> out;
  crypto_generichash_final(&state, out.data(), out.size());
  return out;
}

// The nonce of segment `counter`: the counter, little-endian, then zeros.
template <size_t N>
std::array<unsigned char, N> CounterNonce(uint64_t counter) {
  std::array<unsigned char, N> nonce{};
  for (int i = 0; i < 8; ++i) nonce[i] = static_cast<unsigned char>(counter >> (8 * i));
  return nonce;
}

#ifdef SYNCLINE_HAVE_IPSEC_MB
// Intel's ipsec-mb, set up once for the CPU it runs on (its VAES/AVX-512 code where the CPU has
// it). Only the manager's function pointers are used: the direct GCM calls keep their state in
// the caller's key and context structures, so one manager serves every thread. Null when the
// library cannot run here; OpenSSL seals then.
IMB_MGR* IpsecMb() {
  static IMB_MGR* const manager = [] {
    IMB_MGR* m = alloc_mb_mgr(0);
    if (m == nullptr) return m;
    init_mb_mgr_auto(m, nullptr);
    if (imb_get_errno(m) != 0 || m->gcm256_enc == nullptr || m->gcm256_dec == nullptr) {
      free_mb_mgr(m);
      return static_cast<IMB_MGR*>(nullptr);
    }
    return m;
  }();
  return manager;
}
#endif

}  // namespace

const char* SealAesImplementation() {
#ifdef SYNCLINE_HAVE_IPSEC_MB
  if (IpsecMb() != nullptr) return "ipsec-mb";
#endif
  return "OpenSSL";
}

const char* SealCipherName(SealCipher cipher) {
  return cipher == SealCipher::kAes256Gcm ? "AES-256-GCM" : "XChaCha20-Poly1305";
}

uint8_t LocalSealCiphers(bool allow_aes) {
  InitSodium();
  uint8_t mask = static_cast<uint8_t>(SealCipher::kXChaCha20Poly1305);
  if (allow_aes && crypto_aead_aes256gcm_is_available()) {
    mask |= static_cast<uint8_t>(SealCipher::kAes256Gcm);
  }
  return mask;
}

uint8_t ChooseSealCipher(uint8_t offered, uint8_t mine) {
  const uint8_t both = offered & mine;
  // AES-GCM runs at several GB/s with AES-NI; XChaCha20-Poly1305 is the portable fallback.
  for (SealCipher c : {SealCipher::kAes256Gcm, SealCipher::kXChaCha20Poly1305}) {
    if (both & static_cast<uint8_t>(c)) return static_cast<uint8_t>(c);
  }
  return 0;
}

SealNonce FreshSealNonce() {
  InitSodium();
  SealNonce n;
  randombytes_buf(n.data(), n.size());
  return n;
}

SealKey PairKey(const JobKey& key, const std::string& client_id, const std::string& server_id) {
  if (std::optional<SealKey> pair = key.PairKey(kPairContext, client_id, server_id)) return *pair;
  // Neither end's secret, or no public key of the other end: a random key, which no proof of
  // the other end matches, so the handshake is refused and names the peer. Said here too (a
  // few times: a stranger may try many ids).
  static std::atomic<int> said{0};
  if (said.fetch_add(1) < 10) {
    SYNCLINE_LOG(WARNING) << "sealed plane: no key of the pair " << absl::CHexEscape(client_id)
                          << " -> " << absl::CHexEscape(server_id) << " here ("
                          << (key.authority() ? std::string("the job's key")
                                              : "the key of node " + key.node())
                          << "): its handshake will fail";
  }
  InitSodium();
  SealKey random;
  randombytes_buf(random.data(), random.size());
  return random;
}

SealProof ServerProof(const SealKey& pair, uint8_t offered, uint8_t chosen, const SealNonce& nc,
                      const SealNonce& ns) {
  return Keyed(pair, "server proof", offered, chosen, nc, ns);
}

SealProof ClientProof(const SealKey& pair, uint8_t offered, uint8_t chosen, const SealNonce& nc,
                      const SealNonce& ns) {
  return Keyed(pair, "client proof", offered, chosen, nc, ns);
}

bool SameProof(const SealProof& a, const unsigned char* b) {
  return sodium_memcmp(a.data(), b, a.size()) == 0;
}

// AES-256-GCM runs through Intel's ipsec-mb where the build found it, else OpenSSL's EVP, not
// libsodium's: the cipher bounds the plane's speed, and on this project's machines (AES-NI,
// PCLMUL, VAES, AVX-512) ipsec-mb 1.3 seals 64 KiB segments at 10.5 GB/s, OpenSSL 3.0 at
// 3.4-4.6 GB/s (it has no VAES code) and libsodium 1.0.18 at 0.96 GB/s (docs/COLLECTIVES.md).
// Both give the standard AES-GCM's bytes (seal_test pins them), so ends built either way meet.
struct SealedChannel::Keys {
  SealKey send, receive;
  // AES-GCM's contexts, keyed once per session rather than per segment.
  EVP_CIPHER_CTX* aes_send = nullptr;
  EVP_CIPHER_CTX* aes_receive = nullptr;
#ifdef SYNCLINE_HAVE_IPSEC_MB
  // With ipsec-mb instead: the expanded keys and GHASH tables of each direction, made once
  // (its AVX-512 code stores them with 64-byte aligned moves).
  IMB_MGR* imb = nullptr;
  alignas(64) gcm_key_data imb_send;
  alignas(64) gcm_key_data imb_receive;
#endif
};

SealedChannel::SealedChannel(SealCipher cipher, const SealKey& pair, const SealNonce& nc,
                             const SealNonce& ns, bool client)
    : cipher_(cipher), keys_(std::make_unique<Keys>()) {
  InitSodium();
  const uint8_t c = static_cast<uint8_t>(cipher);
  const SealKey to_server = Keyed(pair, "client to server", c, c, nc, ns);
  const SealKey to_client = Keyed(pair, "server to client", c, c, nc, ns);
  keys_->send = client ? to_server : to_client;
  keys_->receive = client ? to_client : to_server;
#ifdef SYNCLINE_HAVE_IPSEC_MB
  if (cipher_ == SealCipher::kAes256Gcm && (keys_->imb = IpsecMb()) != nullptr) {
    IMB_AES256_GCM_PRE(keys_->imb, keys_->send.data(), &keys_->imb_send);
    IMB_AES256_GCM_PRE(keys_->imb, keys_->receive.data(), &keys_->imb_receive);
    return;
  }
#endif
  if (cipher_ == SealCipher::kAes256Gcm) {
    keys_->aes_send = EVP_CIPHER_CTX_new();
    keys_->aes_receive = EVP_CIPHER_CTX_new();
    if (keys_->aes_send == nullptr || keys_->aes_receive == nullptr ||
        EVP_EncryptInit_ex(keys_->aes_send, EVP_aes_256_gcm(), nullptr, keys_->send.data(),
                           nullptr) != 1 ||
        EVP_DecryptInit_ex(keys_->aes_receive, EVP_aes_256_gcm(), nullptr, keys_->receive.data(),
                           nullptr) != 1) {
      std::fprintf(stderr, "OpenSSL could not set up AES-256-GCM\n");
      std::abort();
    }
  }
}

SealedChannel::~SealedChannel() {
  EVP_CIPHER_CTX_free(keys_->aes_send);  // clears the expanded keys
  EVP_CIPHER_CTX_free(keys_->aes_receive);
  sodium_memzero(keys_->send.data(), keys_->send.size());
  sodium_memzero(keys_->receive.data(), keys_->receive.size());
#ifdef SYNCLINE_HAVE_IPSEC_MB
  sodium_memzero(&keys_->imb_send, sizeof(keys_->imb_send));
  sodium_memzero(&keys_->imb_receive, sizeof(keys_->imb_receive));
#endif
}

void SealedChannel::Seal(const std::byte* plain, size_t n, std::byte* out) {
  unsigned char* header = reinterpret_cast<unsigned char*>(out);
  for (int i = 0; i < 4; ++i) header[i] = static_cast<unsigned char>(n >> (8 * i));
  unsigned char* cipher = header + kHeaderBytes;
  unsigned char* tag = cipher + n;
  const auto* m = reinterpret_cast<const unsigned char*>(plain);
  const uint64_t counter = send_counter_++;
#ifdef SYNCLINE_HAVE_IPSEC_MB
  if (keys_->imb != nullptr) {
    const auto nonce = CounterNonce<crypto_aead_aes256gcm_NPUBBYTES>(counter);
    gcm_context_data context;
    IMB_AES256_GCM_ENC(keys_->imb, &keys_->imb_send, &context, cipher, m, n, nonce.data(), header,
                       kHeaderBytes, tag, kTagBytes);
    return;
  }
#endif
  if (cipher_ == SealCipher::kAes256Gcm) {
    const auto nonce = CounterNonce<crypto_aead_aes256gcm_NPUBBYTES>(counter);
    EVP_CIPHER_CTX* ctx = keys_->aes_send;
    int len = 0;
    // With a valid context and sizes these cannot fail; a failure would be a broken library.
    if (EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, nonce.data()) != 1 ||
        EVP_EncryptUpdate(ctx, nullptr, &len, header, kHeaderBytes) != 1 ||
        EVP_EncryptUpdate(ctx, cipher, &len, m, static_cast<int>(n)) != 1 ||
        EVP_EncryptFinal_ex(ctx, cipher + len, &len) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, kTagBytes, tag) != 1) {
      std::fprintf(stderr, "OpenSSL failed to seal a segment\n");
      std::abort();
    }
  } else {
    const auto nonce = CounterNonce<crypto_aead_xchacha20poly1305_ietf_NPUBBYTES>(counter);
    crypto_aead_xchacha20poly1305_ietf_encrypt_detached(cipher, tag, nullptr, m, n, header,
                                                        kHeaderBytes, nullptr, nonce.data(),
                                                        keys_->send.data());
  }
}

bool SealedChannel::Open(std::byte* record, size_t n, std::byte* plain) {
  unsigned char* header = reinterpret_cast<unsigned char*>(record);
  unsigned char* cipher = header + kHeaderBytes;
  unsigned char* out = plain == nullptr ? cipher : reinterpret_cast<unsigned char*>(plain);
  const unsigned char* tag = cipher + n;
  const uint64_t counter = receive_counter_;
  int rc;
#ifdef SYNCLINE_HAVE_IPSEC_MB
  if (keys_->imb != nullptr) {
    const auto nonce = CounterNonce<crypto_aead_aes256gcm_NPUBBYTES>(counter);
    gcm_context_data context;
    unsigned char expected[kTagBytes];
    // As with OpenSSL, the plaintext is written before the tag is checked.
    IMB_AES256_GCM_DEC(keys_->imb, &keys_->imb_receive, &context, out, cipher, n, nonce.data(),
                       header, kHeaderBytes, expected, kTagBytes);
    if (sodium_memcmp(expected, tag, kTagBytes) != 0) return false;
    ++receive_counter_;
    return true;
  }
#endif
  if (cipher_ == SealCipher::kAes256Gcm) {
    const auto nonce = CounterNonce<crypto_aead_aes256gcm_NPUBBYTES>(counter);
    EVP_CIPHER_CTX* ctx = keys_->aes_receive;
    int len = 0;
    // The plaintext is written before the tag is checked: the caller uses it only after.
    const bool ok = EVP_DecryptInit_ex(ctx, nullptr, nullptr, nullptr, nonce.data()) == 1 &&
                    EVP_DecryptUpdate(ctx, nullptr, &len, header, kHeaderBytes) == 1 &&
                    EVP_DecryptUpdate(ctx, out, &len, cipher, static_cast<int>(n)) == 1 &&
                    EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, kTagBytes,
                                        const_cast<unsigned char*>(tag)) == 1 &&
                    EVP_DecryptFinal_ex(ctx, out + len, &len) == 1;
    rc = ok ? 0 : -1;
  } else {
    const auto nonce = CounterNonce<crypto_aead_xchacha20poly1305_ietf_NPUBBYTES>(counter);
    rc = crypto_aead_xchacha20poly1305_ietf_decrypt_detached(
        out, nullptr, cipher, n, tag, header, kHeaderBytes, nonce.data(), keys_->receive.data());
  }
  if (rc != 0) return false;
  ++receive_counter_;
  return true;
}

}  // namespace syncline
