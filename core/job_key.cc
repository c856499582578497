#include "core/job_key.h"

#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace syncline {
namespace {

constexpr char kHeader[] = "syncline-job-key v1";
// A key file is two short lines; anything much larger is not one.
constexpr size_t kMaxKeyFileBytes = 4096;
// Keeps the derived keys of this format apart from any other use of the secret.
constexpr char kContext[] = "syncline curve25519 endpoint key v1:";

}  // namespace

void InitSodium() {
  static const bool ok = sodium_init() >= 0;
  if (!ok) {
    std::fprintf(stderr, "libsodium failed to initialize\n");
    std::abort();
  }
}

JobKey JobKey::Generate() {
  InitSodium();
  std::array<unsigned char, kBytes> secret;
  randombytes_buf(secret.data(), secret.size());
  return JobKey(secret);
}

absl::StatusOr<JobKey> JobKey::Load(const std::string& path) {
  // Non-blocking: a FIFO in the key's place must not hang the node.
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot read the job key ", path, ": ", std::strerror(errno)));
  }
  struct stat st = {};
  std::string text(kMaxKeyFileBytes + 1, '\0');
  ssize_t n = -1;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) n = read(fd, text.data(), text.size());
  close(fd);
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("the job key ", path, " is not a regular file"));
  }
  if ((st.st_mode & 077) != 0) {
    return absl::PermissionDeniedError(
        absl::StrFormat("the job key %s may be read by others (mode %04o): run chmod 600 %s", path,
                        st.st_mode & 07777, path));
  }
  if (n < 0 || n > static_cast<ssize_t>(kMaxKeyFileBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, " is not a job key (", n < 0 ? "unreadable" : "larger than a key file", ")"));
  }
  text.resize(static_cast<size_t>(n));
  std::istringstream in(text);
  std::string header, hex;
  if (!std::getline(in, header) || !std::getline(in, hex) || header != kHeader) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a job key (it should start with '", kHeader, "')"));
  }
  hex = std::string(absl::StripAsciiWhitespace(hex));
  if (hex.size() != 2 * kBytes || hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the key must be ", 2 * kBytes, " lowercase hex digits"));
  }
  const std::string bytes = absl::HexStringToBytes(hex);
  std::array<unsigned char, kBytes> secret;
  std::memcpy(secret.data(), bytes.data(), kBytes);
  InitSodium();
  return JobKey(secret);
}

absl::Status JobKey::Save(const std::string& path) const {
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
  const std::string text =
      absl::StrCat(kHeader, "\n",
                   absl::BytesToHexString(absl::string_view(
                       reinterpret_cast<const char*>(secret_.data()), secret_.size())),
                   "\n");
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

std::array<unsigned char, JobKey::kBytes> JobKey::DeriveKey(std::string_view context,
                                                            std::string_view input) const {
  const std::string text = std::string(context) + std::string(input);
  std::array<unsigned char, kBytes> out;
  crypto_generichash(out.data(), out.size(), reinterpret_cast<const unsigned char*>(text.data()),
                     text.size(), secret_.data(), secret_.size());
  return out;
}

std::string JobKey::SecretKeyFor(const std::string& id) const {
  static_assert(crypto_scalarmult_SCALARBYTES == kBytes);
  const std::array<unsigned char, kBytes> key = DeriveKey(kContext, id);
  return std::string(reinterpret_cast<const char*>(key.data()), key.size());
}

std::string JobKey::PublicKeyFor(const std::string& id) const {
  const std::string secret = SecretKeyFor(id);
  std::string out(crypto_scalarmult_BYTES, '\0');
  crypto_scalarmult_base(reinterpret_cast<unsigned char*>(out.data()),
                         reinterpret_cast<const unsigned char*>(secret.data()));
  return out;
}

}  // namespace syncline
