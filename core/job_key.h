// JobKey: the keys a process of a job holds, which authenticate it to the others (ZeroMQ CURVE
// on the control plane and the meeting endpoints, the sealed data path and the sealed TCP
// plane, core/seal.h).
//
// Two forms, one interface:
// - The job's key (the authority). The launcher makes one random 32-byte secret per job and
//   keeps it in OUT/job.key (mode 0600). Every endpoint's key pair is derived from it: keyed
//   BLAKE2b of the endpoint's principal (below), then Curve25519. Its holder can compute every
//   key of the job: the launcher and its coordinator hold it, and, with --node-keys off, so
//   does every node (one secret per job, every holder trusted alike).
// - A node's key (per-node keys, the launcher's default): one file per node, OUT/keys/<id>.key,
//   which the launcher writes from the job's key. It holds the secret keys of that node's two
//   principals only (its data key and its control key of one incarnation), and the public keys
//   of its peers and of the coordinator: a node cannot compute another's secret key, so it can
//   neither speak under another node's id nor read the traffic of a pair it is not part of.
//
// Principals. The endpoints "w1", "w1@g2.5" (a meeting after a rollback) and the collective
// plane's share the node's data key, principal "w1"; the control endpoint "w1.ctl" has a key
// of its own per incarnation ("w1.ctl" at incarnation 0, then "w1.ctl#1", ...). A node started
// again in place (--max-restarts) gets the next incarnation's control key, and the coordinator
// accepts only the current one (SetIncarnation): the identity of a live node can be taken over
// only by the replacement the launcher started for it, never by the holder of an old key.
//
// Pair keys (the sealed planes): BLAKE2b over X25519 of one end's secret and the other's public
// key, the two ids and both public keys. Either end computes it, and nobody else can.
//
// Thread-safety: thread-safe; SetIncarnation may run while other threads read keys.
#ifndef SYNCLINE_CORE_JOB_KEY_H_
#define SYNCLINE_CORE_JOB_KEY_H_

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace syncline {

// Initialises libsodium once (thread-safe; later calls return at once), before any of its
// functions run; aborts the process when it cannot (no usable random source).
void InitSodium();

// The principal whose key endpoint `id` uses: "w1.ctl" for a control endpoint, the id before
// its first '@' otherwise ("w1@g2.5" -> "w1").
std::string KeyPrincipal(std::string_view id);

class JobKey {
 public:
  static constexpr size_t kBytes = 32;
  using Bytes = std::array<unsigned char, kBytes>;

  // A fresh random job secret.
  static JobKey Generate();
  // Reads a key file written by Save or SaveNodeKey. `path` may also be a folder of node keys
  // (OUT/keys), from which `node`'s file is read. Refuses a file that others may read (its
  // mode must give nothing to group and others), or one that is not a key file, naming the
  // problem.
  static absl::StatusOr<JobKey> Load(const std::string& path, std::string_view node = "");
  // Writes the job's key file with mode 0600 (replacing an earlier one), through a new file
  // made with O_EXCL|O_NOFOLLOW and renamed over `path`: never through a link planted at either.
  // The job's key only (FailedPrecondition for a node's).
  absl::Status Save(const std::string& path) const;
  // Writes node `node`'s key file (its data id, "w1"), of control incarnation `incarnation`,
  // as Save writes: its own secrets, and the public keys of the coordinator and of `peers`
  // (data ids). The job's key only.
  absl::Status SaveNodeKey(const std::string& path, const std::string& node, int incarnation,
                           const std::vector<std::string>& peers) const;

  // A moved-from key holds nothing: neither the job's key nor a node's.
  JobKey(JobKey&& other) noexcept;
  JobKey& operator=(JobKey&& other) noexcept;
  ~JobKey();

  // Whether this is the job's key (every secret derivable) rather than one node's.
  bool authority() const { return authority_; }
  // The node whose key this is ("" for the job's key), and its control incarnation.
  const std::string& node() const { return node_; }
  int incarnation() const { return incarnation_; }
  // Whether this key can act as endpoint `id` (it holds the secret of its principal).
  bool Holds(std::string_view id) const;

  // The CURVE key pair of endpoint `id`: 32 raw bytes each. SecretKeyFor is empty for an id
  // this key does not hold, PublicKeyFor for a peer it knows no key of.
  std::string SecretKeyFor(const std::string& id) const;
  std::string PublicKeyFor(const std::string& id) const;
  // The name a connection made with `id`'s key goes by now (the ZAP handler's User-Id): its
  // principal, and for a control principal of a later incarnation "#<incarnation>" after it
  // ("w1.ctl#1"). A connection of an earlier incarnation thus no longer goes by the name.
  std::string UserIdFor(const std::string& id) const;
  // The key of sealed connections from `client_id` to `server_id` (core/seal.h), computed by
  // an end that holds either id; nullopt when this key holds neither, or knows no public key
  // of the other end.
  std::optional<Bytes> PairKey(std::string_view context, const std::string& client_id,
                               const std::string& server_id) const;

  // The job's key only: control endpoints of node `node` ("w1") present the key of
  // `incarnation` from now on (the replacement started for it), and no other.
  void SetIncarnation(const std::string& node, int incarnation);
  int IncarnationOfNode(const std::string& node) const;

 private:
  // What changes after construction: the control incarnations (the job's key), and the keys
  // computed so far (a hello costs a hash lookup, not a scalar multiplication, after the
  // first with that peer; at most kMaxCached of each).
  struct State {
    absl::Mutex mu;
    absl::flat_hash_map<std::string, int> incarnations ABSL_GUARDED_BY(mu);
    absl::flat_hash_map<std::string, Bytes> publics ABSL_GUARDED_BY(mu);
    absl::flat_hash_map<std::string, Bytes> pairs ABSL_GUARDED_BY(mu);
  };
  static constexpr size_t kMaxCached = 4096;
  JobKey();
  // The job's key: the secret of `principal` at `incarnation` (control principals only > 0).
  Bytes DeriveSecret(std::string_view principal, int incarnation) const;
  std::optional<Bytes> SecretOf(std::string_view principal) const;
  std::optional<Bytes> PublicOf(std::string_view principal) const;
  int IncarnationOf(std::string_view principal) const;

  bool authority_ = false;
  Bytes secret_{};                // the job's secret (authority only)
  std::unique_ptr<State> state_;  // null in a moved-from key
  // A node's key: its name, control incarnation, the secrets of its data and control
  // principals, and the public keys it knows, by principal.
  std::string node_;
  int incarnation_ = 0;
  Bytes data_secret_{}, control_secret_{};
  absl::flat_hash_map<std::string, Bytes> publics_;
};

}  // namespace syncline

#endif  // SYNCLINE_CORE_JOB_KEY_H_
