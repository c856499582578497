#include "checkpoint/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/crc32c.h"

namespace syncline {
namespace {

constexpr size_t kChunk = size_t{4} << 20;

absl::Status ErrnoError(int error, const std::string& path, std::string_view what) {
  return absl::ErrnoToStatus(error, absl::StrFormat("%s: %s", path, what));
}

// Closes a descriptor on scope exit unless released.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Closes now and reports close's error (a write error may surface only here).
  int Close() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

int OpenRetrying(const char* path, int flags, mode_t mode = 0) {
  int fd;
  do {
    fd = ::open(path, flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

// Reads up to n bytes; fewer only at the end of the file. -1 with errno on error.
ssize_t ReadFull(int fd, char* buf, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::read(fd, buf + done, n - done);
    if (r < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return static_cast<ssize_t>(done);
}

absl::Status NotRegular(const std::string& path, mode_t mode) {
  const char* what = S_ISDIR(mode)    ? "a folder"
                     : S_ISFIFO(mode) ? "a FIFO"
                     : S_ISCHR(mode)  ? "a character device"
                     : S_ISBLK(mode)  ? "a block device"
                     : S_ISSOCK(mode) ? "a socket"
                                      : "not a regular file";
  return absl::FailedPreconditionError(absl::StrFormat(
      "%s: not a regular file (%s): a checkpoint holds only regular files", path, what));
}

// Opens a checkpoint file to read: never through a link in its own name (a MANIFEST linked to
// /dev/zero), never blocking (a FIFO), and only a regular file.
absl::StatusOr<int> OpenRegularToRead(const std::string& path, struct stat* st) {
  const int fd = OpenRetrying(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ELOOP) {
      return absl::FailedPreconditionError(
          absl::StrFormat("%s: a symbolic link, which a checkpoint never holds (remove it)", path));
    }
    return ErrnoError(errno, path, "cannot open");
  }
  if (::fstat(fd, st) != 0) {
    const absl::Status s = ErrnoError(errno, path, "cannot stat");
    ::close(fd);
    return s;
  }
  if (!S_ISREG(st->st_mode)) {
    ::close(fd);
    return NotRegular(path, st->st_mode);
  }
  return fd;
}

}  // namespace

std::string JoinPath(const std::string& dir, const std::string& relative) {
  if (dir.empty()) return relative;
  if (dir.back() == '/') return dir + relative;
  return absl::StrFormat("%s/%s", dir, relative);
}

absl::StatusOr<FileEntry> DescribeFile(const std::string& checkpoint_dir,
                                       const std::string& relative_path) {
  const std::string path = JoinPath(checkpoint_dir, relative_path);
  struct stat st;
  absl::StatusOr<int> opened = OpenRegularToRead(path, &st);
  if (!opened.ok()) return opened.status();
  Fd fd(*opened);
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  std::unique_ptr<char[]> buf(new char[kChunk]);
  FileEntry entry;
  entry.path = relative_path;
  for (;;) {
    const ssize_t n = ReadFull(fd.get(), buf.get(), kChunk);
    if (n < 0) return ErrnoError(errno, path, "read failed");
    entry.crc32c = Crc32c(buf.get(), static_cast<size_t>(n), entry.crc32c);
    entry.size += static_cast<uint64_t>(n);
    if (static_cast<size_t>(n) < kChunk) break;
  }
  return entry;
}

absl::Status SyncPath(const std::string& path) {
  Fd fd(OpenRetrying(path.c_str(), O_RDONLY));
  if (fd.get() < 0) return ErrnoError(errno, path, "cannot open to fsync");
  if (::fsync(fd.get()) != 0) return ErrnoError(errno, path, "fsync failed");
  return absl::OkStatus();
}

absl::Status CreateDirectoriesDurably(const std::string& dir) {
  std::vector<std::filesystem::path> created;
  std::error_code ec;
  for (std::filesystem::path p = dir; !p.empty() && !std::filesystem::exists(p, ec);
       p = p.parent_path()) {
    created.push_back(p);
    if (p == p.parent_path()) break;
  }
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  // Deepest first: each new folder's entry lives in its parent.
  for (const std::filesystem::path& p : created) {
    const std::filesystem::path parent = p.parent_path().empty() ? "." : p.parent_path();
    if (absl::Status s = SyncPath(parent.string()); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& dir, const std::string& name,
                                 std::string_view contents) {
  const std::string final_path = JoinPath(dir, name);
  const std::string temp_path = JoinPath(dir, absl::StrFormat(".%s.tmp", name));
  absl::Status status = [&]() -> absl::Status {
    // A new file of this user's alone (0600: it holds the model), never one reached through a
    // link: a stale temp (or a link in its place) is removed, and O_EXCL fails rather than
    // follow one that appears again.
    if (::unlink(temp_path.c_str()) != 0 && errno != ENOENT) {
      return ErrnoError(errno, temp_path, "cannot remove a stale temporary file");
    }
    Fd fd(OpenRetrying(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600));
    if (fd.get() < 0) return ErrnoError(errno, temp_path, "cannot create");
    size_t done = 0;
    while (done < contents.size()) {
      const ssize_t w = ::write(fd.get(), contents.data() + done, contents.size() - done);
      if (w < 0) {
        if (errno == EINTR) continue;
        return ErrnoError(errno, temp_path, "write failed");
      }
      done += static_cast<size_t>(w);
    }
    if (::fsync(fd.get()) != 0) return ErrnoError(errno, temp_path, "fsync failed");
    if (fd.Close() != 0) return ErrnoError(errno, temp_path, "close failed");
    if (::rename(temp_path.c_str(), final_path.c_str()) != 0) {
      return ErrnoError(errno, temp_path, absl::StrFormat("cannot rename to %s", final_path));
    }
    return absl::OkStatus();
  }();
  if (!status.ok()) {
    ::unlink(temp_path.c_str());
    return status;
  }
  return SyncPath(dir.empty() ? "." : dir);
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path, uint64_t max_bytes) {
  struct stat st;
  absl::StatusOr<int> opened = OpenRegularToRead(path, &st);
  if (!opened.ok()) return opened.status();
  Fd fd(*opened);
  const auto too_large = [&](uint64_t size) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: %d bytes or more, over the limit of %d bytes for this file: it is not one a "
        "checkpoint writes",
        path, size, max_bytes));
  };
  if (static_cast<uint64_t>(st.st_size) > max_bytes) return too_large(st.st_size);
  std::string contents;
  contents.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ReadFull(fd.get(), buf, sizeof(buf));
    if (n < 0) return ErrnoError(errno, path, "read failed");
    contents.append(buf, static_cast<size_t>(n));
    // A file that grows while it is read is held to the same limit.
    if (contents.size() > max_bytes) return too_large(contents.size());
    if (static_cast<size_t>(n) < sizeof(buf)) break;
  }
  return contents;
}

}  // namespace syncline
