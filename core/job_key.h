// JobKey: the secret that authenticates a job's processes to each other over ZeroMQ CURVE.
//
// The launcher makes one random 32-byte secret per job and writes it to a key file of mode
// 0600 that it hands every node (SYNCLINE_KEY_FILE). Each endpoint's CURVE key pair is
// derived from the secret and the endpoint's routing id (keyed BLAKE2b, then Curve25519), so
// every holder of the file can compute the public key of any peer it connects to, and a
// server's ZAP handler (core/zmq_transport.h) knows which id each client key belongs to: a
// connection is accepted only with a key of the job, and its messages only under the id that
// key was made for. A process without the file can neither connect nor read the traffic.
// Holders of the file are trusted alike (one secret per job, not one per node).
//
// Thread-safety: immutable after construction; thread-safe.
#ifndef SYNCLINE_CORE_JOB_KEY_H_
#define SYNCLINE_CORE_JOB_KEY_H_

#include <array>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace syncline {

// Initialises libsodium once (thread-safe; later calls return at once), before any of its
// functions run; aborts the process when it cannot (no usable random source).
void InitSodium();

class JobKey {
 public:
  static constexpr size_t kBytes = 32;

  // A fresh random secret.
  static JobKey Generate();
  // Reads a key file written by Save. Refuses a file that others may read (its mode must
  // give nothing to group and others), or one that is not a key file, naming the problem.
  static absl::StatusOr<JobKey> Load(const std::string& path);
  // Writes the key file with mode 0600 (replacing an earlier one), through a new file made
  // with O_EXCL|O_NOFOLLOW and renamed over `path`: never through a link planted at either.
  absl::Status Save(const std::string& path) const;

  // The CURVE key pair of the endpoint with routing id `id`: 32 raw bytes each.
  std::string SecretKeyFor(const std::string& id) const;
  std::string PublicKeyFor(const std::string& id) const;
  // A 32-byte key for one purpose: keyed BLAKE2b of `context` then `input` under the secret.
  // Each use names its own context, so that keys of different uses never coincide.
  std::array<unsigned char, kBytes> DeriveKey(std::string_view context,
                                              std::string_view input) const;

 private:
  explicit JobKey(const std::array<unsigned char, kBytes>& secret) : secret_(secret) {}
  std::array<unsigned char, kBytes> secret_;
};

}  // namespace syncline

#endif  // SYNCLINE_CORE_JOB_KEY_H_
