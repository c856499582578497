#include "privacy/secagg_protocol.h"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <sodium.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/syncline.capnp.h"

namespace syncline {
namespace {

constexpr size_t kKeyBytes = 32;
constexpr size_t kSignatureBytes = crypto_sign_BYTES;
// The largest sealed share a client may send: the core's fixed ciphertext length.
constexpr size_t kMaxCiphertextBytes = 256;

std::string Serialise(capnp::MessageBuilder& message) {
  kj::Array<capnp::word> words = capnp::messageToFlatArray(message);
  kj::ArrayPtr<const kj::byte> bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

// A parsed SecAggMessage, with its own aligned copy of the bytes.
class Parsed {
 public:
  static absl::StatusOr<std::unique_ptr<Parsed>> Of(const std::string& body) {
    if (body.empty() || body.size() % sizeof(capnp::word) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("a secure-aggregation message of ", body.size(), " bytes is malformed"));
    }
    auto p = std::unique_ptr<Parsed>(new Parsed);
    p->words_ = kj::heapArray<capnp::word>(body.size() / sizeof(capnp::word));
    std::memcpy(p->words_.begin(), body.data(), body.size());
    capnp::ReaderOptions limits;
    limits.traversalLimitInWords = 1 << 24;
    limits.nestingLimit = 16;
    try {
      p->reader_.emplace(p->words_.asPtr(), limits);
      p->root_ = p->reader_->getRoot<wire::SecAggMessage>();
      // Walks every list once, under the traversal limit, so that later reads cannot throw.
      (void)p->root_.totalSize();
    } catch (const kj::Exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("a secure-aggregation message is malformed: ", e.getDescription().cStr()));
    }
    return p;
  }
  wire::SecAggMessage::Reader root() const { return root_; }

 private:
  Parsed() = default;
  kj::Array<capnp::word> words_;
  std::optional<capnp::FlatArrayMessageReader> reader_;
  wire::SecAggMessage::Reader root_;
};

bool ToKey(capnp::Data::Reader data, SecAggKey* key) {
  if (data.size() != kKeyBytes) return false;
  std::memcpy(key->data(), data.begin(), kKeyBytes);
  return true;
}

// What a consistency signature covers: the round, the seed of its neighbour graph (so every
// signer derived the same graph from the same key list) and the survivor list, in order.
std::vector<uint8_t> SignedSurvivors(int64_t round, const SecAggKey& graph_seed,
                                     const std::set<int>& survivors) {
  static constexpr char kLabel[] = "syncline secagg survivors";
  std::vector<uint8_t> m(kLabel, kLabel + sizeof(kLabel));
  for (int i = 0; i < 8; ++i)
    m.push_back(static_cast<uint8_t>(static_cast<uint64_t>(round) >> (8 * i)));
  m.insert(m.end(), graph_seed.begin(), graph_seed.end());
  for (int s : survivors) {
    for (int i = 0; i < 4; ++i)
      m.push_back(static_cast<uint8_t>(static_cast<uint32_t>(s) >> (8 * i)));
  }
  return m;
}

// The round's neighbour graph over the advertisers in `masking` (SecAggHararyGraph), with its
// seed in *seed: what every client and the relay derive from the same advertise answer.
SecAggGraph RoundGraph(int64_t round, const std::map<int, SecAggKey>& masking, int neighbours,
                       SecAggKey* seed) {
  *seed = SecAggGraphSeed(round, masking);
  std::set<int> advertisers;
  for (const auto& [c, key] : masking) advertisers.insert(c);
  return SecAggHararyGraph(advertisers, neighbours, *seed);
}

void WriteShares(const std::map<int, ShamirShare>& shares,
                 capnp::List<wire::SecAggShare>::Builder out) {
  unsigned i = 0;
  for (const auto& [peer, share] : shares) {
    out[i].setPeer(peer);
    out[i].setX(share.x);
    out[i].setY(capnp::Data::Reader(share.y.data(), share.y.size()));
    ++i;
  }
}

absl::StatusOr<std::map<int, ShamirShare>> ReadShares(int from,
                                                      capnp::List<wire::SecAggShare>::Reader in) {
  std::map<int, ShamirShare> out;
  for (auto s : in) {
    ShamirShare share{.x = s.getX()};
    if (!ToKey(s.getY(), &share.y) || !out.emplace(s.getPeer(), share).second) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "secure aggregation: client %d revealed a malformed or repeated share of client %d", from,
          s.getPeer()));
    }
  }
  return out;
}

}  // namespace

const char* SecAggStageName(SecAggStage stage) {
  switch (stage) {
    case SecAggStage::kAdvertise:
      return "advertise";
    case SecAggStage::kShareKeys:
      return "share keys";
    case SecAggStage::kMaskedInput:
      return "masked input";
    case SecAggStage::kConsistency:
      return "consistency";
    case SecAggStage::kUnmask:
      return "unmask";
  }
  return "unknown";
}

// ---- client ----

absl::StatusOr<SecAggClientRound> SecAggClientRound::Create(const SecAggParams& p, int client,
                                                            int64_t round) {
  absl::StatusOr<SecAggClient> c = SecAggClient::Create(p, client);
  if (!c.ok()) return c.status();
  SecAggClientRound r(std::move(*c), round);
  r.params_ = p;
  crypto_sign_keypair(r.sign_public_.data(), r.sign_secret_.data());
  return r;
}

SecAggPacket SecAggClientRound::Advertise() const {
  capnp::MallocMessageBuilder m;
  auto root = m.initRoot<wire::SecAggMessage>();
  root.setRound(round_);
  auto k = root.initKeys(1)[0];
  k.setClient(client_.index());
  k.setEncryption(capnp::Data::Reader(client_.encryption_public_key().data(), kKeyBytes));
  k.setMasking(capnp::Data::Reader(client_.masking_public_key().data(), kKeyBytes));
  k.setSigning(capnp::Data::Reader(sign_public_.data(), kKeyBytes));
  const SecAggKey commitment = client_.self_mask_commitment();
  k.setSelfMaskCommitment(capnp::Data::Reader(commitment.data(), kKeyBytes));
  return SecAggPacket{.stage = SecAggStage::kAdvertise, .body = Serialise(m)};
}

absl::Status SecAggClientRound::CheckRound(const SecAggPacket& answer, SecAggStage stage,
                                           int64_t round) const {
  if (answer.stage != stage || round != round_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "client %d: the server answered the %s stage of round %d with its %s stage of round %d",
        client_.index(), SecAggStageName(stage), round_, SecAggStageName(answer.stage), round));
  }
  return absl::OkStatus();
}

absl::StatusOr<SecAggPacket> SecAggClientRound::OnKeys(const SecAggPacket& answer) {
  auto parsed = Parsed::Of(answer.body);
  if (!parsed.ok()) return parsed.status();
  auto root = (*parsed)->root();
  if (auto s = CheckRound(answer, SecAggStage::kAdvertise, root.getRound()); !s.ok()) return s;
  std::map<int, SecAggKey> encryption, masking;
  for (auto k : root.getKeys()) {
    SecAggKey e, m, s;
    const int c = k.getClient();
    if (c < 1 || c > params_.clients || !ToKey(k.getEncryption(), &e) ||
        !ToKey(k.getMasking(), &m) || !ToKey(k.getSigning(), &s) || encryption.contains(c)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("client %d: the advertised keys of client %d are malformed or repeated",
                          client_.index(), c));
    }
    encryption[c] = e;
    masking[c] = m;
    signing_keys_[c] = s;
  }
  if (!encryption.contains(client_.index()) ||
      encryption.at(client_.index()) != client_.encryption_public_key() ||
      signing_keys_.at(client_.index()) != sign_public_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "client %d: the server's key list does not hold this client's own keys", client_.index()));
  }
  graph_ = RoundGraph(round_, masking, params_.neighbours, &graph_seed_);
  absl::StatusOr<std::vector<SecAggSealedShares>> sealed =
      client_.ShareKeys(encryption, masking, graph_);
  if (!sealed.ok()) return sealed.status();
  capnp::MallocMessageBuilder m;
  auto out = m.initRoot<wire::SecAggMessage>();
  out.setRound(round_);
  auto list = out.initSealed(static_cast<unsigned>(sealed->size()));
  for (size_t i = 0; i < sealed->size(); ++i) {
    const SecAggSealedShares& s = (*sealed)[i];
    list[i].setFrom(s.from);
    list[i].setTo(s.to);
    list[i].setCiphertext(capnp::Data::Reader(s.ciphertext.data(), s.ciphertext.size()));
  }
  return SecAggPacket{.stage = SecAggStage::kShareKeys, .body = Serialise(m)};
}

absl::StatusOr<SecAggPacket> SecAggClientRound::OnShares(const SecAggPacket& answer,
                                                         std::span<const uint32_t> input) {
  auto parsed = Parsed::Of(answer.body);
  if (!parsed.ok()) return parsed.status();
  auto root = (*parsed)->root();
  if (auto s = CheckRound(answer, SecAggStage::kShareKeys, root.getRound()); !s.ok()) return s;
  std::vector<SecAggSealedShares> sealed;
  for (auto s : root.getSealed()) {
    SecAggSealedShares x{.from = s.getFrom(), .to = s.getTo()};
    x.ciphertext.assign(s.getCiphertext().begin(), s.getCiphertext().end());
    if (!sharers_.insert(x.from).second) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "client %d: the server relayed client %d's shares twice", client_.index(), x.from));
    }
    sealed.push_back(std::move(x));
  }
  if (!sharers_.contains(client_.index())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("client %d: the server did not relay its own shares", client_.index()));
  }
  if (static_cast<int>(sharers_.size()) < params_.threshold) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "client %d: %d clients of its neighbourhood shared keys, fewer than the threshold %d",
        client_.index(), sharers_.size(), params_.threshold));
  }
  if (auto s = client_.ReceiveShares(sealed); !s.ok()) return s;
  absl::StatusOr<std::vector<uint32_t>> masked = client_.MaskInput(input);
  if (!masked.ok()) return masked.status();
  capnp::MallocMessageBuilder m;
  auto out = m.initRoot<wire::SecAggMessage>();
  out.setRound(round_);
  out.setModulusBits(32);
  out.setQuantBits(static_cast<uint8_t>(params_.bits));
  return SecAggPacket{
      .stage = SecAggStage::kMaskedInput, .body = Serialise(m), .values = std::move(*masked)};
}

absl::StatusOr<SecAggPacket> SecAggClientRound::OnSurvivors(const SecAggPacket& answer) {
  auto parsed = Parsed::Of(answer.body);
  if (!parsed.ok()) return parsed.status();
  auto root = (*parsed)->root();
  if (auto s = CheckRound(answer, SecAggStage::kMaskedInput, root.getRound()); !s.ok()) return s;
  survivors_.clear();
  for (int c : root.getSurvivors()) {
    // A neighbour must have shared keys with this client; any other survivor must have
    // advertised (whether it shared keys with its own neighbours, only they can tell).
    const bool known = SecAggNeighbours(graph_, client_.index(), c) ? sharers_.contains(c)
                                                                    : signing_keys_.contains(c);
    if (!known || !survivors_.insert(c).second) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "client %d: the survivor list names client %d, which did not share keys (or twice)",
          client_.index(), c));
    }
  }
  if (static_cast<int>(survivors_.size()) < params_.threshold ||
      !survivors_.contains(client_.index())) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "client %d: %d survivors (threshold %d)%s", client_.index(), survivors_.size(),
        params_.threshold, survivors_.contains(client_.index()) ? "" : ", without this client"));
  }
  const std::vector<uint8_t> text = SignedSurvivors(round_, graph_seed_, survivors_);
  std::array<uint8_t, kSignatureBytes> signature;
  crypto_sign_detached(signature.data(), nullptr, text.data(), text.size(), sign_secret_.data());
  capnp::MallocMessageBuilder m;
  auto out = m.initRoot<wire::SecAggMessage>();
  out.setRound(round_);
  auto sig = out.initSignatures(1)[0];
  sig.setClient(client_.index());
  sig.setSignature(capnp::Data::Reader(signature.data(), signature.size()));
  return SecAggPacket{.stage = SecAggStage::kConsistency, .body = Serialise(m)};
}

absl::StatusOr<SecAggPacket> SecAggClientRound::OnSignatures(const SecAggPacket& answer) {
  auto parsed = Parsed::Of(answer.body);
  if (!parsed.ok()) return parsed.status();
  auto root = (*parsed)->root();
  if (auto s = CheckRound(answer, SecAggStage::kConsistency, root.getRound()); !s.ok()) return s;
  const std::vector<uint8_t> text = SignedSurvivors(round_, graph_seed_, survivors_);
  std::set<int> signers;
  for (auto sig : root.getSignatures()) {
    const int c = sig.getClient();
    const auto key = signing_keys_.find(c);
    if (!survivors_.contains(c) || key == signing_keys_.end() ||
        sig.getSignature().size() != kSignatureBytes ||
        crypto_sign_verify_detached(sig.getSignature().begin(), text.data(), text.size(),
                                    key->second.data()) != 0) {
      // Another survivor list was signed (the server told clients different lists), or the
      // signature is forged: nothing is revealed.
      return absl::InvalidArgumentError(absl::StrFormat(
          "client %d: client %d's signature of the survivor list does not verify: it refuses to "
          "reveal",
          client_.index(), c));
    }
    signers.insert(c);
  }
  if (static_cast<int>(signers.size()) < params_.threshold) {
    return absl::FailedPreconditionError(
        absl::StrFormat("client %d: %d clients signed the survivor list (threshold %d)",
                        client_.index(), signers.size(), params_.threshold));
  }
  absl::StatusOr<SecAggReveal> reveal = client_.Reveal(survivors_, graph_);
  if (!reveal.ok()) return reveal.status();
  capnp::MallocMessageBuilder m;
  auto out = m.initRoot<wire::SecAggMessage>();
  out.setRound(round_);
  WriteShares(reveal->self_mask_shares,
              out.initSelfMaskShares(static_cast<unsigned>(reveal->self_mask_shares.size())));
  WriteShares(reveal->key_shares,
              out.initKeyShares(static_cast<unsigned>(reveal->key_shares.size())));
  return SecAggPacket{.stage = SecAggStage::kUnmask, .body = Serialise(m)};
}

absl::StatusOr<SecAggPacket> SecAggClientRound::Next(const SecAggPacket& answer,
                                                     std::span<const uint32_t> input) {
  if (answer.stage != awaiting_ || awaiting_ == SecAggStage::kUnmask) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "client %d: an answer to the %s stage, while it waits on the %s stage%s", client_.index(),
        SecAggStageName(answer.stage), SecAggStageName(awaiting_),
        awaiting_ == SecAggStage::kUnmask ? " (the last: nothing follows it)" : ""));
  }
  absl::StatusOr<SecAggPacket> next;
  switch (answer.stage) {
    case SecAggStage::kAdvertise:
      next = OnKeys(answer);
      break;
    case SecAggStage::kShareKeys:
      next = OnShares(answer, input);
      break;
    case SecAggStage::kMaskedInput:
      next = OnSurvivors(answer);
      break;
    case SecAggStage::kConsistency:
      next = OnSignatures(answer);
      break;
    case SecAggStage::kUnmask:
      break;
  }
  if (next.ok()) awaiting_ = static_cast<SecAggStage>(static_cast<int>(awaiting_) + 1);
  return next;
}

absl::Status RunSecAggClientRound(const SecAggParams& p, int client, int64_t round,
                                  std::span<const uint32_t> input, SecAggChannel& channel,
                                  absl::Time first_deadline, absl::Duration stage_wait,
                                  int silent_after) {
  if (silent_after <= 0) return absl::OkStatus();
  absl::StatusOr<SecAggClientRound> r = SecAggClientRound::Create(p, client, round);
  if (!r.ok()) return r.status();
  absl::StatusOr<SecAggPacket> request = r->Advertise();
  for (int stage = 0; stage < kSecAggStages; ++stage) {
    const absl::Time deadline = stage == 0 ? first_deadline : absl::Now() + stage_wait;
    absl::StatusOr<SecAggPacket> answer = channel.Exchange(round, *request, deadline);
    if (!answer.ok()) return answer.status();
    if (stage + 1 == kSecAggStages) return absl::OkStatus();
    if (stage + 1 >= silent_after) return absl::OkStatus();
    request = r->Next(*answer, input);
    if (!request.ok()) return request.status();
  }
  return absl::OkStatus();
}

// ---- server ----

SecAggRelay::SecAggRelay(SecAggRelayOptions options, absl::Time now)
    : options_(std::move(options)),
      // A round that picked fewer than t clients (Poisson picks under --dp client) cannot be
      // unmasked: its first stage closes, and aborts, at once instead of at the timeout.
      deadline_(static_cast<int>(options_.clients.size()) < options_.params.threshold
                    ? now
                    : now + options_.first_stage_timeout) {}

std::set<int> SecAggRelay::Expected() const {
  switch (stage_) {
    case SecAggStage::kAdvertise:
      return std::set<int>(options_.clients.begin(), options_.clients.end());
    case SecAggStage::kShareKeys: {
      std::set<int> u1;
      for (const auto& [c, key] : encryption_keys_) u1.insert(c);
      return u1;
    }
    case SecAggStage::kMaskedInput:
      return sharers_;
    case SecAggStage::kConsistency:
      return contributors_;
    case SecAggStage::kUnmask: {
      std::set<int> u4;
      for (const auto& [c, sig] : signatures_) u4.insert(c);
      return u4;
    }
  }
  return {};
}

void SecAggRelay::Handle(int client, std::string peer, uint64_t request_id,
                         const SecAggPacket& request, size_t length, absl::Time now) {
  auto refuse = [&](absl::Status status) {
    answers_.push_back(Answer{.peer = std::move(peer),
                              .request_id = request_id,
                              .client = client,
                              .status = std::move(status)});
  };
  length_ = length;
  if (done_ || request.stage != stage_) {
    refuse(absl::FailedPreconditionError(absl::StrFormat(
        "secure aggregation: client %d's %s request came while round %d is %s", client,
        SecAggStageName(request.stage), options_.round,
        done_ ? "over" : absl::StrCat("in its ", SecAggStageName(stage_), " stage"))));
    return;
  }
  if (!Expected().contains(client)) {
    refuse(absl::FailedPreconditionError(
        absl::StrFormat("secure aggregation: client %d is not in the %s stage of round %d", client,
                        SecAggStageName(stage_), options_.round)));
    return;
  }
  if (parked_.contains(client)) {
    refuse(absl::InvalidArgumentError(absl::StrFormat(
        "secure aggregation: client %d sent its %s request of round %d twice (a replay)", client,
        SecAggStageName(stage_), options_.round)));
    return;
  }
  if (auto s = Accept(client, request, length); !s.ok()) {
    refuse(std::move(s));
    return;
  }
  parked_[client] = Parked{std::move(peer), request_id};
  if (parked_.size() == Expected().size()) CloseStage(now);
}

absl::Status SecAggRelay::Accept(int client, const SecAggPacket& request, size_t length) {
  auto parsed = Parsed::Of(request.body);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("secure aggregation: client ", client, ": ", parsed.status().message()));
  }
  auto root = (*parsed)->root();
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrFormat("secure aggregation: client %d's %s request of round %d %s", client,
                        SecAggStageName(stage_), options_.round, what));
  };
  if (root.getRound() != options_.round) return bad(absl::StrCat("names round ", root.getRound()));
  switch (stage_) {
    case SecAggStage::kAdvertise: {
      if (root.getKeys().size() != 1) return bad("must hold exactly its own keys");
      auto k = root.getKeys()[0];
      SecAggKey e, m, s, b;
      if (k.getClient() != client || !ToKey(k.getEncryption(), &e) || !ToKey(k.getMasking(), &m) ||
          !ToKey(k.getSigning(), &s) || !ToKey(k.getSelfMaskCommitment(), &b)) {
        return bad("has malformed keys or self-mask commitment, or another client's");
      }
      encryption_keys_[client] = e;
      masking_keys_[client] = m;
      signing_keys_[client] = s;
      commitments_[client] = b;
      return absl::OkStatus();
    }
    case SecAggStage::kShareKeys: {
      std::vector<std::pair<int, SecAggSealedShares>> mine;
      std::set<int> to;
      for (auto s : root.getSealed()) {
        if (s.getFrom() != client || !encryption_keys_.contains(s.getTo()) ||
            !to.insert(s.getTo()).second || s.getCiphertext().size() > kMaxCiphertextBytes) {
          return bad(
              absl::StrCat("holds a share for client ", s.getTo(), " that is not its to send"));
        }
        SecAggSealedShares x{.from = client, .to = s.getTo()};
        x.ciphertext.assign(s.getCiphertext().begin(), s.getCiphertext().end());
        mine.emplace_back(s.getTo(), std::move(x));
      }
      for (auto& [recipient, sealed] : mine) {
        if (!SecAggNeighbours(graph_, client, recipient)) {
          return bad(
              absl::StrCat("holds a share for client ", recipient, ", which is not its neighbour"));
        }
      }
      const size_t neighbours =
          std::count_if(encryption_keys_.begin(), encryption_keys_.end(),
                        [&](const auto& k) { return SecAggNeighbours(graph_, client, k.first); });
      if (to.size() != neighbours) return bad("misses some of its neighbours' shares");
      for (auto& [recipient, sealed] : mine) inbox_[recipient].push_back(std::move(sealed));
      return absl::OkStatus();
    }
    case SecAggStage::kMaskedInput: {
      if (root.getModulusBits() != 32) {
        return bad(absl::StrCat("is reduced modulo 2^", static_cast<int>(root.getModulusBits()),
                                "; the round's modulus is 2^32"));
      }
      if (root.getQuantBits() != options_.params.bits) {
        return bad(absl::StrCat("is quantised to ", static_cast<int>(root.getQuantBits()),
                                " bits; the round's are ", options_.params.bits));
      }
      if (request.values.size() != length) {
        return bad(absl::StrFormat("holds %d values; the model and weight are %d",
                                   request.values.size(), length));
      }
      return server_->AddMaskedInput(client, request.values);
    }
    case SecAggStage::kConsistency: {
      if (root.getSignatures().size() != 1) return bad("must hold exactly its own signature");
      auto sig = root.getSignatures()[0];
      const std::vector<uint8_t> text = SignedSurvivors(options_.round, graph_seed_, contributors_);
      if (sig.getClient() != client || sig.getSignature().size() != kSignatureBytes ||
          crypto_sign_verify_detached(sig.getSignature().begin(), text.data(), text.size(),
                                      signing_keys_.at(client).data()) != 0) {
        return bad("has a signature that does not verify against its advertised key");
      }
      signatures_[client] =
          std::string(reinterpret_cast<const char*>(sig.getSignature().begin()), kSignatureBytes);
      return absl::OkStatus();
    }
    case SecAggStage::kUnmask: {
      SecAggReveal reveal{.from = client};
      auto b = ReadShares(client, root.getSelfMaskShares());
      if (!b.ok()) return b.status();
      auto s = ReadShares(client, root.getKeyShares());
      if (!s.ok()) return s.status();
      reveal.self_mask_shares = std::move(*b);
      reveal.key_shares = std::move(*s);
      for (const auto& [peer, share] : reveal.self_mask_shares) {
        if (reveal.key_shares.contains(peer)) {
          return bad(absl::StrCat("reveals both shares of client ", peer));
        }
      }
      reveals_.push_back(std::move(reveal));
      return absl::OkStatus();
    }
  }
  return bad("has an unknown stage");
}

void SecAggRelay::OnTime(absl::Time now) {
  if (!done_ && now >= deadline_) CloseStage(now);
}

void SecAggRelay::AnswerAll(const std::function<SecAggPacket(int client)>& make) {
  for (auto& [client, p] : parked_) {
    answers_.push_back(Answer{.peer = std::move(p.peer),
                              .request_id = p.request_id,
                              .client = client,
                              .status = absl::OkStatus(),
                              .packet = make(client)});
  }
}

void SecAggRelay::Abort(const absl::Status& why) {
  for (auto& [client, p] : parked_) {
    answers_.push_back(Answer{
        .peer = std::move(p.peer), .request_id = p.request_id, .client = client, .status = why});
    answered_.insert(client);
  }
  parked_.clear();
  done_ = true;
  outcome_ = why;
  deadline_ = absl::InfiniteFuture();
}

void SecAggRelay::CloseStage(absl::Time now) {
  const int t = options_.params.threshold;
  std::set<int> senders;
  for (const auto& [c, p] : parked_) senders.insert(c);
  if (static_cast<int>(senders.size()) < t) {
    Abort(absl::FailedPreconditionError(absl::StrFormat(
        "secure aggregation: round %d aborted in its %s stage: %d clients (%s) of the threshold "
        "%d; nothing is revealed",
        options_.round, SecAggStageName(stage_), senders.size(), absl::StrJoin(senders, ", "), t)));
    return;
  }
  auto message = [&](auto fill) {
    capnp::MallocMessageBuilder m;
    auto root = m.initRoot<wire::SecAggMessage>();
    root.setRound(options_.round);
    fill(root);
    return Serialise(m);
  };
  SecAggStage next = stage_;
  switch (stage_) {
    case SecAggStage::kAdvertise: {
      // Only the senders' keys: a key advertised by a client that was refused is not here.
      const std::string body = message([&](wire::SecAggMessage::Builder root) {
        auto keys = root.initKeys(static_cast<unsigned>(senders.size()));
        unsigned i = 0;
        for (int c : senders) {
          keys[i].setClient(c);
          keys[i].setEncryption(capnp::Data::Reader(encryption_keys_.at(c).data(), kKeyBytes));
          keys[i].setMasking(capnp::Data::Reader(masking_keys_.at(c).data(), kKeyBytes));
          keys[i].setSigning(capnp::Data::Reader(signing_keys_.at(c).data(), kKeyBytes));
          ++i;
        }
      });
      AnswerAll([&](int) { return SecAggPacket{.stage = stage_, .body = body}; });
      // The neighbour graph the clients derive from the keys in that answer.
      std::map<int, SecAggKey> advertised;
      for (int c : senders) advertised[c] = masking_keys_.at(c);
      graph_ = RoundGraph(options_.round, advertised, options_.params.neighbours, &graph_seed_);
      next = SecAggStage::kShareKeys;
      break;
    }
    case SecAggStage::kShareKeys: {
      sharers_ = senders;
      std::map<int, SecAggKey> masking, commitments;
      for (int c : senders) {
        masking[c] = masking_keys_.at(c);
        commitments[c] = commitments_.at(c);
      }
      server_.emplace(options_.params, length_, std::move(masking), std::move(commitments), graph_);
      AnswerAll([&](int client) {
        return SecAggPacket{.stage = stage_,
                            .body = message([&](wire::SecAggMessage::Builder root) {
                              std::vector<const SecAggSealedShares*> mine;
                              for (const SecAggSealedShares& s : inbox_[client]) {
                                if (senders.contains(s.from)) mine.push_back(&s);
                              }
                              auto list = root.initSealed(static_cast<unsigned>(mine.size()));
                              for (size_t i = 0; i < mine.size(); ++i) {
                                list[i].setFrom(mine[i]->from);
                                list[i].setTo(mine[i]->to);
                                list[i].setCiphertext(capnp::Data::Reader(
                                    mine[i]->ciphertext.data(), mine[i]->ciphertext.size()));
                              }
                            })};
      });
      inbox_.clear();
      next = SecAggStage::kMaskedInput;
      break;
    }
    case SecAggStage::kMaskedInput: {
      contributors_ = server_->survivors();
      if (const int pieces = SecAggPieces(graph_, contributors_); pieces > 1) {
        Abort(absl::FailedPreconditionError(absl::StrFormat(
            "secure aggregation: round %d aborted in its masked input stage: the %d uploaders "
            "fall into %d pieces of the neighbour graph, whose sums would each be unmasked; "
            "nothing is revealed",
            options_.round, contributors_.size(), pieces)));
        return;
      }
      const std::string body = message([&](wire::SecAggMessage::Builder root) {
        auto list = root.initSurvivors(static_cast<unsigned>(contributors_.size()));
        unsigned i = 0;
        for (int c : contributors_) list.set(i++, c);
      });
      AnswerAll([&](int) { return SecAggPacket{.stage = stage_, .body = body}; });
      next = SecAggStage::kConsistency;
      break;
    }
    case SecAggStage::kConsistency: {
      const std::string body = message([&](wire::SecAggMessage::Builder root) {
        auto list = root.initSignatures(static_cast<unsigned>(signatures_.size()));
        unsigned i = 0;
        for (const auto& [c, sig] : signatures_) {
          list[i].setClient(c);
          list[i].setSignature(
              capnp::Data::Reader(reinterpret_cast<const kj::byte*>(sig.data()), sig.size()));
          ++i;
        }
      });
      AnswerAll([&](int) { return SecAggPacket{.stage = stage_, .body = body}; });
      next = SecAggStage::kUnmask;
      break;
    }
    case SecAggStage::kUnmask: {
      absl::StatusOr<std::vector<uint32_t>> sum = server_->Unmask(reveals_, &corrupt_shares_);
      if (!sum.ok()) {
        Abort(sum.status());
        return;
      }
      sum_ = std::move(*sum);
      const std::string body = message([](wire::SecAggMessage::Builder) {});
      AnswerAll([&](int) { return SecAggPacket{.stage = stage_, .body = body}; });
      answered_ = senders;
      parked_.clear();
      reveals_.clear();
      done_ = true;
      outcome_ = absl::OkStatus();
      deadline_ = absl::InfiniteFuture();
      return;
    }
  }
  parked_.clear();
  stage_ = next;
  deadline_ = now + options_.stage_timeout;
}

}  // namespace syncline
