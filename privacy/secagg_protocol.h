// Secure aggregation between processes: the five stages of Bonawitz et al. 2017's round
// ("Practical Secure Aggregation for Privacy-Preserving Machine Learning", §4) as Cap'n Proto
// messages (core/syncline.capnp's SecAggMessage), over the cryptographic core of
// secure_aggregation.h. Transport-free: SecAggClientRound turns each answer of the server into
// the client's next request, and SecAggRelay is the server's side, which parks each stage's
// requests and answers them all when the stage closes. The parameter server and the federated
// client carry these packets (ps/server.cc, worker/federated_client.cc).
//
// The stages of round r, with U1 ⊇ U2 ⊇ U3 ⊇ U4 the clients still in it:
//   advertise    each client sends its encryption, masking and (Ed25519) signing public keys;
//                the server answers every advertiser (U1) with all of U1's keys. From them
//                every party derives the round's neighbour graph (SecAggHararyGraph; with
//                --secagg-neighbours 0 it is complete).
//   shareKeys    each client sends its Shamir shares of b_u and s_u, sealed to each of its
//                neighbours in U1; the server relays to each sender (U2) the shares sealed
//                for it.
//   maskedInput  each client of U2 sends y_u; the server adds it to its running sum (the only
//                thing it keeps) and answers the uploaders (U3) with U3.
//   consistency  each client of U3 signs (r, the graph's seed, U3), so that every signer
//                derived the same graph from the same keys; the server answers the signers (U4)
//                with all signatures, which each client checks against U1's signing keys before it
//                reveals anything (a server that told clients different survivor lists, to
//                get both kinds of share of one client, is caught here).
//   unmask       each client of U4 reveals b shares of its neighbours in U3 and s shares of
//                its neighbours in U2 \ U3 (if t of its neighbourhood survive and U3 is one
//                piece of the graph: else each piece's sum could be unmasked); with t of
//                each neighbourhood the server removes the masks and holds the sum of U3's
//                inputs. Each b
//                it rebuilds must match the commitment its owner advertised; a corrupt share
//                is found from another t of them (when more than t revealed) and named.
// A stage closes when every client expected in it has sent, or at its deadline; fewer than t
// clients at a close abort the round: the parked requests are answered FAILED_PRECONDITION and
// nothing is revealed.
//
// Thread-safety: thread-compatible values.
#ifndef SYNCLINE_PRIVACY_SECAGG_PROTOCOL_H_
#define SYNCLINE_PRIVACY_SECAGG_PROTOCOL_H_

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "privacy/secure_aggregation.h"

namespace syncline {

enum class SecAggStage { kAdvertise = 0, kShareKeys, kMaskedInput, kConsistency, kUnmask };
inline constexpr int kSecAggStages = 5;
const char* SecAggStageName(SecAggStage stage);

// One request of a client, or one answer of the server: a SecAggMessage as a flat Cap'n Proto
// array, and the masked vector of a maskedInput request.
struct SecAggPacket {
  SecAggStage stage = SecAggStage::kAdvertise;
  std::string body;
  std::vector<uint32_t> values;
};

// A client's side of one round. Client numbers are worker ranks + 1.
class SecAggClientRound {
 public:
  // Fresh X25519 and Ed25519 keys for round `round` of client `client` (1 .. p.clients).
  static absl::StatusOr<SecAggClientRound> Create(const SecAggParams& p, int client, int64_t round);

  SecAggPacket Advertise() const;
  // Each returns the next request, or an error naming what the answer got wrong (another
  // round, a peer's bad key, a share that does not decrypt, a bad signature).
  absl::StatusOr<SecAggPacket> OnKeys(const SecAggPacket& answer);
  // `input`: the client's quantised update (SecAggQuantise, plus any exact coordinates).
  absl::StatusOr<SecAggPacket> OnShares(const SecAggPacket& answer,
                                        std::span<const uint32_t> input);
  absl::StatusOr<SecAggPacket> OnSurvivors(const SecAggPacket& answer);
  absl::StatusOr<SecAggPacket> OnSignatures(const SecAggPacket& answer);
  // The next of the four above, in order (`input` is OnShares'): InvalidArgument for an answer
  // to another stage than the one this client is waiting on, or to the unmask stage (the
  // last, which has no next request).
  absl::StatusOr<SecAggPacket> Next(const SecAggPacket& answer, std::span<const uint32_t> input);

 private:
  SecAggClientRound(SecAggClient client, int64_t round)
      : client_(std::move(client)), round_(round) {}
  absl::Status CheckRound(const SecAggPacket& answer, SecAggStage stage, int64_t round) const;

  SecAggClient client_;
  int64_t round_;
  SecAggParams params_;
  SecAggKey sign_public_{};
  std::array<uint8_t, 64> sign_secret_{};
  std::map<int, SecAggKey> signing_keys_;  // U1's, from the advertise answer
  SecAggKey graph_seed_{};                 // its seed, covered by the consistency signature
  SecAggGraph graph_;                      // the round's neighbour graph over U1
  SecAggStage awaiting_ = SecAggStage::kAdvertise;  // the answer Next expects
  std::set<int> sharers_;    // U2 in its neighbourhood: whose shares it received
  std::set<int> survivors_;  // U3
};

// Carries a client's request to the server and returns the server's answer: the network
// (worker/secagg_channel.h), or a test's relay. An answer that is an error comes back as that
// status (FailedPrecondition: the round aborted or went on without this client).
class SecAggChannel {
 public:
  virtual ~SecAggChannel() = default;
  virtual absl::StatusOr<SecAggPacket> Exchange(int64_t round, const SecAggPacket& request,
                                                absl::Time deadline) = 0;
};

// Runs client `client`'s side of round `round` through `channel`, with `input` (quantised,
// and any exact coordinates) as its update. Each stage's answer is awaited until
// `first_deadline` (the advertise stage, which waits for the other clients' training) or
// `stage_wait` after the request. `silent_after` < kSecAggStages makes the client vanish after
// sending that many stages' requests (--client-dropout's simulated loss; 0: it sends nothing).
// OK once the server has unmasked the sum; FailedPrecondition when the round aborted or went
// on without this client; another error for a refused or malformed exchange.
absl::Status RunSecAggClientRound(const SecAggParams& p, int client, int64_t round,
                                  std::span<const uint32_t> input, SecAggChannel& channel,
                                  absl::Time first_deadline, absl::Duration stage_wait,
                                  int silent_after = kSecAggStages);

struct SecAggRelayOptions {
  SecAggParams params;
  int64_t round = 0;
  std::vector<int> clients;  // the round's picked clients (numbers, rank + 1)
  // The advertise stage covers the clients' local training; the later ones are exchanges.
  absl::Duration first_stage_timeout = absl::Seconds(60);
  absl::Duration stage_timeout = absl::Seconds(15);
};

// The server's side of one round.
class SecAggRelay {
 public:
  SecAggRelay(SecAggRelayOptions options, absl::Time now);

  struct Answer {
    std::string peer;
    uint64_t request_id = 0;
    int client = 0;
    absl::Status status;  // not OK: answered as an error
    SecAggPacket packet;
  };

  // A request from `client` (the sender's authenticated rank + 1) at `now`; `length` is the
  // vector every masked input must have (the model's floats and the weight). Bad requests
  // are answered at once with InvalidArgument naming the client; a request for a stage that
  // has closed with FailedPrecondition.
  void Handle(int client, std::string peer, uint64_t request_id, const SecAggPacket& request,
              size_t length, absl::Time now);
  // Closes the stage when its deadline has passed.
  void OnTime(absl::Time now);
  absl::Time deadline() const { return deadline_; }
  std::vector<Answer> TakeAnswers() { return std::exchange(answers_, {}); }

  bool running() const { return !done_; }
  // After the round: whether the sum was unmasked, and if not why.
  const absl::Status& outcome() const { return outcome_; }
  // The unmasked sum of U3's inputs (mod 2^32), when outcome() is OK.
  const std::vector<uint32_t>& sum() const { return sum_; }
  const std::set<int>& contributors() const { return contributors_; }
  // The clients answered at the end (the last stage's senders): those still in the round.
  const std::set<int>& answered() const { return answered_; }
  // The round's neighbour graph (empty: every client paired with every other).
  const SecAggGraph& graph() const { return graph_; }
  SecAggStage stage() const { return stage_; }
  // The clients whose revealed self-mask shares disagreed with a survivor's committed seed
  // (the sum was rebuilt from others' shares): to be named, and distrusted.
  const std::set<int>& corrupt_shares() const { return corrupt_shares_; }

 private:
  struct Parked {
    std::string peer;
    uint64_t request_id = 0;
  };
  absl::Status Accept(int client, const SecAggPacket& request, size_t length);
  void CloseStage(absl::Time now);
  void Abort(const absl::Status& why);
  std::set<int> Expected() const;
  void AnswerAll(const std::function<SecAggPacket(int client)>& make);

  const SecAggRelayOptions options_;
  SecAggStage stage_ = SecAggStage::kAdvertise;
  absl::Time deadline_;
  bool done_ = false;
  absl::Status outcome_ = absl::UnknownError("the round is still running");
  std::map<int, Parked> parked_;  // this stage's senders
  std::vector<Answer> answers_;
  // What the stages gathered.
  std::map<int, SecAggKey> encryption_keys_, masking_keys_, signing_keys_;
  std::map<int, SecAggKey> commitments_;  // self-mask commitments, from the advertise stage
  SecAggKey graph_seed_{};                // its seed (SecAggGraphSeed)
  SecAggGraph graph_;                     // the neighbour graph over U1 (empty: complete)
  std::string keys_body_;                 // the advertise answer, once
  std::map<int, std::vector<SecAggSealedShares>> inbox_;  // by recipient
  std::set<int> sharers_;
  std::optional<SecAggServer> server_;
  size_t length_ = 0;
  std::set<int> contributors_;
  std::map<int, std::string> signatures_;
  std::vector<SecAggReveal> reveals_;
  std::vector<uint32_t> sum_;
  std::set<int> answered_;
  std::set<int> corrupt_shares_;
};

}  // namespace syncline

#endif  // SYNCLINE_PRIVACY_SECAGG_PROTOCOL_H_
