// File primitives of the checkpoint format: the size and CRC32C of a file, and durable writes
// (fsync of files and of the directories that name them), as absl::Status values naming paths.
//
// Thread-safety: stateless functions; concurrent calls on different files are safe.
#ifndef SYNCLINE_CHECKPOINT_FILE_IO_H_
#define SYNCLINE_CHECKPOINT_FILE_IO_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace syncline {

// One file of a checkpoint, as a receipt lists it.
struct FileEntry {
  std::string path;  // relative to the checkpoint dir (DescribeFile and Finish: as given)
  uint64_t size = 0;
  uint32_t crc32c = 0;  // core/crc32c.h over the whole file
};

// Size and CRC32C of checkpoint_dir/relative_path, read sequentially in 4 MiB chunks. The
// returned entry's path is `relative_path`; an empty `checkpoint_dir` reads `relative_path` as
// it is. NotFound when the file is missing; FailedPrecondition when it is a link or not a
// regular file (never blocking on a FIFO); the errno text naming the path otherwise.
absl::StatusOr<FileEntry> DescribeFile(const std::string& checkpoint_dir,
                                       const std::string& relative_path);

// fsync of a file or directory that exists.
absl::Status SyncPath(const std::string& path);

// Creates `dir` and its missing parents, and fsyncs the parent of each folder it created, so
// that a new ckpt-<clock>/ survives a crash of the machine along with the files in it.
absl::Status CreateDirectoriesDurably(const std::string& dir);

// Replaces dir/name with `contents` so that a crash leaves either the old file or the new one:
// writes dir/.name.tmp (a new file of mode 0600, made with O_EXCL|O_NOFOLLOW), fsyncs it,
// renames it over dir/name and fsyncs dir.
absl::Status WriteFileAtomically(const std::string& dir, const std::string& name,
                                 std::string_view contents);

// The largest checkpoint text file (a manifest, a receipt) a reader takes.
inline constexpr uint64_t kMaxTextFileBytes = uint64_t{64} << 20;

// The whole file at `path`. NotFound when it is missing; FailedPrecondition naming the file
// when it is a link, not a regular file (a FIFO, a device: opened without blocking), or
// larger than `max_bytes`.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path,
                                          uint64_t max_bytes = kMaxTextFileBytes);

// dir/relative as one path string ("dir/relative"; `relative` alone when dir is empty).
std::string JoinPath(const std::string& dir, const std::string& relative);

}  // namespace syncline

#endif  // SYNCLINE_CHECKPOINT_FILE_IO_H_
