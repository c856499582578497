#include "core/job_key.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace syncline {
namespace {

constexpr char kHeader[] = "syncline-job-key v1";
constexpr char kNodeHeader[] = "syncline-node-key v1";
// A job's key file is two short lines; a node's lists a public key per peer (a line of about
// 75 bytes each), so 1 MiB holds some 13,000 of them.
constexpr size_t kMaxKeyFileBytes = 1 << 20;
// Keeps the derived keys of this format apart from any other use of the secret.
constexpr char kContext[] = "syncline curve25519 endpoint key v1:";
constexpr char kControlSuffix[] = ".ctl";
constexpr char kCoordinator[] = "coordinator";  // core/node_table.h's kCoordinatorId

bool IsControlPrincipal(std::string_view principal) { return principal.ends_with(kControlSuffix); }

// A node's data id as a key file may name it: a principal of its own (no '@'), not a control
// one, and no '#' (which marks a control key's incarnation).
bool IsNodeName(std::string_view node) {
  return !node.empty() && node.size() <= 255 && KeyPrincipal(node) == node &&
         !IsControlPrincipal(node) && node.find('#') == std::string_view::npos &&
         node.find_first_of(" \t\r\n/") == std::string_view::npos;
}

std::string Hex(const JobKey::Bytes& b) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(b.data()), b.size()));
}

std::optional<JobKey::Bytes> FromHex(std::string_view hex) {
  if (hex.size() != 2 * JobKey::kBytes ||
      hex.find_first_not_of("0123456789abcdef") != std::string_view::npos) {
    return std::nullopt;
  }
  const std::string bytes = absl::HexStringToBytes(absl::string_view(hex.data(), hex.size()));
  JobKey::Bytes out;
  std::memcpy(out.data(), bytes.data(), out.size());
  return out;
}

JobKey::Bytes PublicFromSecret(const JobKey::Bytes& secret) {
  static_assert(crypto_scalarmult_SCALARBYTES == JobKey::kBytes);
  static_assert(crypto_scalarmult_BYTES == JobKey::kBytes);
  JobKey::Bytes out;
  crypto_scalarmult_base(out.data(), secret.data());
  return out;
}

std::string AsString(const JobKey::Bytes& b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// Reads a key file of at most kMaxKeyFileBytes that only its owner may read.
absl::StatusOr<std::string> ReadPrivateFile(const std::string& path) {
  // Non-blocking: a FIFO in the key's place must not hang the node.
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot read the key file ", path, ": ", std::strerror(errno)));
  }
  struct stat st = {};
  std::string text(kMaxKeyFileBytes + 1, '\0');
  ssize_t n = -1;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) n = read(fd, text.data(), text.size());
  close(fd);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the key file ", path, " is not a regular file"));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(
        absl::StrFormat("the key file %s may be read by others (mode %04o): run chmod 600 %s", path,
                        st.st_mode & 07777, path));
  }
  if (n < 0 || n > static_cast<ssize_t>(kMaxKeyFileBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is not a job key (", n < 0 ? "unreadable" : "larger than a key file", ")"));
  }
  text.resize(static_cast<size_t>(n));
  return text;
}

// Writes `text` to `path` with mode 0600, through a fresh file renamed over it.
absl::Status WritePrivateFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  // A fresh file, never one reached through a link: what was at tmp goes first (unlink removes
  // a link, not what it points to), and should something appear there again before the open,
  // the open fails rather than write the secret through it.
  if (unlink(tmp.c_str()) != 0 && errno != ENOENT) {
    return absl::UnavailableError(
        absl::StrCat("cannot remove an earlier ", tmp, ": ", std::strerror(errno)));
  }
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
  }
  const bool ok = fchmod(fd, 0600) == 0 &&
                  write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  fsync(fd) == 0;
  const int error = errno;
  close(fd);
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return absl::UnavailableError(
        absl::StrCat("cannot write the job key ", path, ": ", std::strerror(ok ? errno : error)));
  }
  return absl::OkStatus();
}

}  // namespace

void InitSodium() {
  static const bool ok = sodium_init() >= 0;
  if (!ok) {
    std::fprintf(stderr, "libsodium failed to initialize\n");
    std::abort();
  }
}

std::string KeyPrincipal(std::string_view id) {
  if (id.ends_with(kControlSuffix)) return std::string(id);
  return std::string(id.substr(0, id.find('@')));
}

JobKey::JobKey() : state_(std::make_unique<State>()) {}

JobKey::JobKey(JobKey&& other) noexcept { *this = std::move(other); }

JobKey& JobKey::operator=(JobKey&& other) noexcept {
  authority_ = std::exchange(other.authority_, false);
  secret_ = other.secret_;
  sodium_memzero(other.secret_.data(), other.secret_.size());
  state_ = std::move(other.state_);
  node_ = std::move(other.node_);
  other.node_.clear();
  incarnation_ = other.incarnation_;
  data_secret_ = other.data_secret_;
  control_secret_ = other.control_secret_;
  sodium_memzero(other.data_secret_.data(), other.data_secret_.size());
  sodium_memzero(other.control_secret_.data(), other.control_secret_.size());
  publics_ = std::move(other.publics_);
  other.publics_.clear();
  return *this;
}

JobKey::~JobKey() {
  sodium_memzero(secret_.data(), secret_.size());
  sodium_memzero(data_secret_.data(), data_secret_.size());
  sodium_memzero(control_secret_.data(), control_secret_.size());
}

JobKey JobKey::Generate() {
  InitSodium();
  JobKey key;
  key.authority_ = true;
  randombytes_buf(key.secret_.data(), key.secret_.size());
  return key;
}

absl::StatusOr<JobKey> JobKey::Load(const std::string& path, std::string_view node) {
  struct stat st = {};
  if (!node.empty() && stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return Load(absl::StrCat(path, "/", std::string(node), ".key"), node);
  }
  absl::StatusOr<std::string> text = ReadPrivateFile(path);
  if (!text.ok()) return text.status();
  std::istringstream in(*text);
  std::string header, line;
  std::getline(in, header);
  InitSodium();
  if (header == kHeader) {
    std::getline(in, line);
    const std::optional<Bytes> secret = FromHex(std::string(absl::StripAsciiWhitespace(line)));
    if (!secret) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": the key must be ", 2 * kBytes, " lowercase hex digits"));
    }
    JobKey key;
    key.authority_ = true;
    key.secret_ = *secret;
    return key;
  }
  if (header != kNodeHeader) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is not a job key (it should start with '", kHeader, "' or '", kNodeHeader, "')"));
  }
  JobKey key;
  bool data = false, control = false;
  absl::flat_hash_set<std::string> seen;  // each line's key word (and peer) once
  for (int number = 2; std::getline(in, line); ++number) {
    const std::vector<std::string> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    if (words.empty()) continue;
    auto bad = [&](std::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(path, " line ", number, ": ", std::string(why),
                                                     " (is it a node's key file?)"));
    };
    const std::string what = words[0] == "peer" && words.size() > 1 ? "peer " + words[1] : words[0];
    if (!seen.insert(what).second) return bad(absl::StrCat("a second '", what, "' line"));
    if (words[0] == "node" && words.size() == 2) {
      if (!IsNodeName(words[1])) return bad(absl::StrCat("'", words[1], "' is not a node's id"));
      key.node_ = words[1];
    } else if (words[0] == "incarnation" && words.size() == 2) {
      if (!absl::SimpleAtoi(words[1], &key.incarnation_) || key.incarnation_ < 0) {
        return bad("the incarnation must be an integer >= 0");
      }
    } else if ((words[0] == "data" || words[0] == "control") && words.size() == 2) {
      const std::optional<Bytes> secret = FromHex(words[1]);
      if (!secret) return bad("a secret must be 64 lowercase hex digits");
      (words[0] == "data" ? key.data_secret_ : key.control_secret_) = *secret;
      (words[0] == "data" ? data : control) = true;
    } else if (words[0] == "peer" && words.size() == 3) {
      if (words[1] != kCoordinator && !IsNodeName(words[1])) {
        return bad(absl::StrCat("'", words[1], "' is not a node's id"));
      }
      const std::optional<Bytes> pub = FromHex(words[2]);
      if (!pub) return bad("a public key must be 64 lowercase hex digits");
      key.publics_[words[1]] = *pub;
    } else {
      return bad(absl::StrCat("'", absl::CHexEscape(line.substr(0, 40)), "' is not a key line"));
    }
  }
  if (key.node_.empty() || !data || !control || !key.publics_.contains(kCoordinator)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path,
                     ": a node's key file names its node, holds its data and control "
                     "secrets and the coordinator's public key"));
  }
  if (!node.empty() && node != key.node_) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is the key of ", key.node_, ", not of ",
                                                   std::string(node),
                                                   ": give this node its own key file"));
  }
  key.publics_[key.node_] = PublicFromSecret(key.data_secret_);
  key.publics_[key.node_ + kControlSuffix] = PublicFromSecret(key.control_secret_);
  return key;
}

absl::Status JobKey::Save(const std::string& path) const {
  if (!authority()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the key of node ", node_, " is not a job key"));
  }
  return WritePrivateFile(path, absl::StrCat(kHeader, "\n", Hex(secret_), "\n"));
}

absl::Status JobKey::SaveNodeKey(const std::string& path, const std::string& node, int incarnation,
                                 const std::vector<std::string>& peers) const {
  if (!authority()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the key of node ", node_, " cannot make another node's"));
  }
  if (!IsNodeName(node)) {
    return absl::InvalidArgumentError(absl::StrCat("'", node, "' is not a node's data id"));
  }
  if (incarnation < 0) {
    return absl::InvalidArgumentError(absl::StrCat("incarnation ", incarnation, " of ", node));
  }
  std::string text = absl::StrCat(kNodeHeader, "\nnode ", node, "\nincarnation ", incarnation,
                                  "\ndata ", Hex(DeriveSecret(node, 0)), "\ncontrol ",
                                  Hex(DeriveSecret(node + kControlSuffix, incarnation)), "\n");
  absl::StrAppend(&text, "peer ", kCoordinator, " ", Hex(*PublicOf(kCoordinator)), "\n");
  for (const std::string& peer : peers) {
    if (peer == node) continue;
    if (!IsNodeName(peer)) {
      return absl::InvalidArgumentError(absl::StrCat("'", peer, "' is not a node's data id"));
    }
    absl::StrAppend(&text, "peer ", peer, " ", Hex(*PublicOf(peer)), "\n");
  }
  if (text.size() > kMaxKeyFileBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a node's key file for ", peers.size(),
                                                   " peers would pass the ", kMaxKeyFileBytes,
                                                   "-byte limit of key files"));
  }
  return WritePrivateFile(path, text);
}

JobKey::Bytes JobKey::DeriveSecret(std::string_view principal, int incarnation) const {
  std::string text = absl::StrCat(kContext, std::string(principal));
  if (incarnation > 0) absl::StrAppend(&text, "#", incarnation);
  Bytes out;
  crypto_generichash(out.data(), out.size(), reinterpret_cast<const unsigned char*>(text.data()),
                     text.size(), secret_.data(), secret_.size());
  return out;
}

int JobKey::IncarnationOf(std::string_view principal) const {
  if (!IsControlPrincipal(principal) || state_ == nullptr) return 0;
  if (!authority()) return principal == node_ + kControlSuffix ? incarnation_ : 0;
  absl::MutexLock lock(&state_->mu);
  auto it = state_->incarnations.find(
      std::string(principal.substr(0, principal.size() - std::strlen(kControlSuffix))));
  return it == state_->incarnations.end() ? 0 : it->second;
}

std::optional<JobKey::Bytes> JobKey::SecretOf(std::string_view principal) const {
  if (principal.empty() || state_ == nullptr) return std::nullopt;
  if (authority()) return DeriveSecret(principal, IncarnationOf(principal));
  if (principal == node_) return data_secret_;
  if (principal == node_ + kControlSuffix) return control_secret_;
  return std::nullopt;
}

std::optional<JobKey::Bytes> JobKey::PublicOf(std::string_view principal) const {
  if (principal.empty() || state_ == nullptr) return std::nullopt;
  if (!authority()) {
    auto it = publics_.find(std::string(principal));
    if (it == publics_.end()) return std::nullopt;
    return it->second;
  }
  // The job's key: derived once per principal and incarnation.
  const std::string name = UserIdFor(std::string(principal));
  {
    absl::MutexLock lock(&state_->mu);
    if (auto it = state_->publics.find(name); it != state_->publics.end()) return it->second;
  }
  const Bytes pub = PublicFromSecret(*SecretOf(principal));
  absl::MutexLock lock(&state_->mu);
  if (state_->publics.size() >= kMaxCached) state_->publics.clear();
  state_->publics[name] = pub;
  return pub;
}

std::string JobKey::UserIdFor(const std::string& id) const {
  std::string principal = KeyPrincipal(id);
  const int incarnation = IncarnationOf(principal);
  if (incarnation > 0) absl::StrAppend(&principal, "#", incarnation);
  return principal;
}

bool JobKey::Holds(std::string_view id) const { return SecretOf(KeyPrincipal(id)).has_value(); }

std::string JobKey::SecretKeyFor(const std::string& id) const {
  const std::optional<Bytes> secret = SecretOf(KeyPrincipal(id));
  return secret ? AsString(*secret) : std::string();
}

std::string JobKey::PublicKeyFor(const std::string& id) const {
  const std::optional<Bytes> pub = PublicOf(KeyPrincipal(id));
  return pub ? AsString(*pub) : std::string();
}

std::optional<JobKey::Bytes> JobKey::PairKey(std::string_view context, const std::string& client_id,
                                             const std::string& server_id) const {
  if (state_ == nullptr) return std::nullopt;
  // Computed once per pair of ids (and incarnations): a hello then costs a lookup.
  const std::string cache_key =
      absl::StrCat(std::string(context), "\n", UserIdFor(client_id), "\n", client_id, "\n",
                   UserIdFor(server_id), "\n", server_id);
  {
    absl::MutexLock lock(&state_->mu);
    if (auto it = state_->pairs.find(cache_key); it != state_->pairs.end()) return it->second;
  }
  const std::string client = KeyPrincipal(client_id), server = KeyPrincipal(server_id);
  const std::optional<Bytes> client_public = PublicOf(client), server_public = PublicOf(server);
  if (!client_public || !server_public) return std::nullopt;
  // One end's secret, the other's public key: whichever end this key holds.
  std::optional<Bytes> mine = SecretOf(client);
  const Bytes* theirs = &*server_public;
  if (!mine) {
    mine = SecretOf(server);
    theirs = &*client_public;
  }
  if (!mine) return std::nullopt;
  Bytes shared;
  // Refuses a public key of small order (an all-zero result).
  if (crypto_scalarmult(shared.data(), mine->data(), theirs->data()) != 0) return std::nullopt;
  crypto_generichash_state state;
  crypto_generichash_init(&state, nullptr, 0, kBytes);
  crypto_generichash_update(&state, reinterpret_cast<const unsigned char*>(context.data()),
                            context.size());
  crypto_generichash_update(&state, shared.data(), shared.size());
  // Length-prefixed, so that no two pairs of ids give the same input.
  for (const std::string* id : {&client_id, &server_id}) {
    const unsigned char size[2] = {static_cast<unsigned char>(id->size() & 0xff),
                                   static_cast<unsigned char>(id->size() >> 8)};
    crypto_generichash_update(&state, size, sizeof(size));
    crypto_generichash_update(&state, reinterpret_cast<const unsigned char*>(id->data()),
                              id->size());
  }
  crypto_generichash_update(&state, client_public->data(), kBytes);
  crypto_generichash_update(&state, server_public->data(), kBytes);
  Bytes out;
  crypto_generichash_final(&state, out.data(), out.size());
  sodium_memzero(shared.data(), shared.size());
  absl::MutexLock lock(&state_->mu);
  if (state_->pairs.size() >= kMaxCached) state_->pairs.clear();
  state_->pairs[cache_key] = out;
  return out;
}

int JobKey::IncarnationOfNode(const std::string& node) const {
  return IncarnationOf(node + kControlSuffix);
}

void JobKey::SetIncarnation(const std::string& node, int incarnation) {
  if (!authority()) return;
  absl::MutexLock lock(&state_->mu);
  state_->incarnations[node] = incarnation;
}

}  // namespace syncline
