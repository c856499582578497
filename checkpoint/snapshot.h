// Snapshot files: one sorted key/value run per file (a table, a shard's rows), written once and
// read back in key order at restore.
//
// A snapshot with entries is a RocksDB SST file (block-based table, default bytewise
// comparator, no compression, XXH3 block checksums, every entry a Put with sequence number 0),
// so RocksDB can also ingest it with DB::IngestExternalFile. RocksDB cannot write an SST file
// without entries, so a snapshot with none is instead the 34-byte text file
//   "syncline-empty-snapshot version 1\n"
// which SnapshotReader reads as zero entries (do not ingest it; check entries() first). An
// SST file can never be mistaken for it: the first byte of an SST file is the shared-prefix
// length of its first key, 0.
//
// Thread-safety: a writer or reader is thread-compatible; distinct objects are independent.
#ifndef SYNCLINE_CHECKPOINT_SNAPSHOT_H_
#define SYNCLINE_CHECKPOINT_SNAPSHOT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/file_io.h"

namespace rocksdb {
class SstFileReader;
class SstFileWriter;
}  // namespace rocksdb

namespace syncline {

// The whole content of an empty snapshot file.
inline constexpr std::string_view kEmptySnapshotContents = "syncline-empty-snapshot version 1\n";

class SnapshotWriter {
 public:
  // Creates (or truncates) the file at `path`; its directory must exist.
  static absl::StatusOr<std::unique_ptr<SnapshotWriter>> Create(const std::string& path);
  // A writer destroyed without a successful Finish() removes its partial file.
  ~SnapshotWriter();
  SnapshotWriter(const SnapshotWriter&) = delete;
  SnapshotWriter& operator=(const SnapshotWriter&) = delete;

  // Adds one entry. Keys must be strictly ascending in bytewise (unsigned memcmp) order:
  // InvalidArgument naming the entry's index otherwise, and the entry is not added.
  // FailedPrecondition after Finish().
  absl::Status Put(std::string_view key, std::string_view value);
  // Finishes the file, fsyncs it and its directory, and returns its size and CRC32C (computed
  // as the bytes are written); the entry's path is the path given to Create. Once only.
  absl::StatusOr<FileEntry> Finish();
  // Entries added so far.
  uint64_t entries() const { return entries_; }

 private:
  SnapshotWriter(std::string path, std::unique_ptr<rocksdb::SstFileWriter> writer);

  std::string path_;
  std::unique_ptr<rocksdb::SstFileWriter> writer_;  // null once finished
  std::string last_key_;
  uint64_t entries_ = 0;
  bool finished_ = false;
  bool keep_file_ = false;  // Finish() succeeded
};

class SnapshotReader {
 public:
  // Opens the snapshot at `path` and verifies every block checksum (the whole file is read).
  // NotFound when the file is missing; DataLoss naming the path for a damaged, truncated or
  // foreign file (including an SST file holding deletions or merges).
  static absl::StatusOr<std::unique_ptr<SnapshotReader>> Open(const std::string& path);
  ~SnapshotReader();
  SnapshotReader(const SnapshotReader&) = delete;
  SnapshotReader& operator=(const SnapshotReader&) = delete;

  // Calls fn for every entry in ascending key order; the views are valid during the call only.
  // Stops at and returns fn's first error; DataLoss naming the path when a block fails its
  // checksum or the file yields another number of entries than its properties say.
  absl::Status ForEach(
      absl::FunctionRef<absl::Status(std::string_view key, std::string_view value)> fn) const;
  // Entries in the file (from the SST properties).
  uint64_t entries() const { return entries_; }

 private:
  SnapshotReader(std::string path, std::unique_ptr<rocksdb::SstFileReader> reader,
                 uint64_t entries);

  std::string path_;
  std::unique_ptr<rocksdb::SstFileReader> reader_;  // null for an empty snapshot
  uint64_t entries_ = 0;
};

}  // namespace syncline

#endif  // SYNCLINE_CHECKPOINT_SNAPSHOT_H_
