#include "checkpoint/snapshot.h"

#include <unistd.h>

#include <filesystem>
#include <utility>

#include "absl/strings/str_format.h"
#include "checkpoint/text_format.h"
#include "core/crc32c.h"
#include "rocksdb/env.h"
#include "rocksdb/file_checksum.h"
#include "rocksdb/iterator.h"
#include "rocksdb/options.h"
#include "rocksdb/sst_file_reader.h"
#include "rocksdb/sst_file_writer.h"
#include "rocksdb/table.h"
#include "rocksdb/table_properties.h"

namespace syncline {
namespace {

// Bytes read ahead by ForEach's iterator: large sequential reads.
constexpr size_t kReadahead = size_t{4} << 20;

constexpr char kCrcName[] = "SynclineCrc32c";

// CRC32C (core/crc32c.h) of every byte the SST writer appends, so that Finish need not read the
// file back; the checksum is 8 lowercase hex digits.
class Crc32cGenerator : public rocksdb::FileChecksumGenerator {
 public:
  void Update(const char* data, size_t n) override { crc_ = Crc32c(data, n, crc_); }
  void Finalize() override {}
  std::string GetChecksum() const override { return absl::StrFormat("%08x", crc_); }
  const char* Name() const override { return kCrcName; }

 private:
  uint32_t crc_ = 0;
};

class Crc32cGeneratorFactory : public rocksdb::FileChecksumGenFactory {
 public:
  std::unique_ptr<rocksdb::FileChecksumGenerator> CreateFileChecksumGenerator(
      const rocksdb::FileChecksumGenContext&) override {
    return std::make_unique<Crc32cGenerator>();
  }
  const char* Name() const override { return "SynclineCrc32cFactory"; }
};

// The options of every snapshot, written and read. Compression is off: a checkpoint is bound by
// how fast it is written, and model rows (floats) compress poorly anyway.
rocksdb::Options SnapshotOptions() {
  rocksdb::Options options;
  options.compression = rocksdb::kNoCompression;
  options.file_checksum_gen_factory = std::make_shared<Crc32cGeneratorFactory>();
  rocksdb::BlockBasedTableOptions table;
  table.checksum = rocksdb::kXXH3;  // per block; explicit, though it is 7.8's default
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return options;
}

// The status of a RocksDB call on `path`; `damage_code` is the code of a failure that means
// the file is not a sound snapshot.
absl::Status FromRocks(const rocksdb::Status& s, const std::string& path, const char* what,
                       absl::StatusCode damage_code = absl::StatusCode::kInternal) {
  if (s.ok()) return absl::OkStatus();
  const std::string message = absl::StrFormat("%s: %s: RocksDB: %s", path, what, s.ToString());
  if (s.IsPathNotFound() || s.IsNotFound()) return absl::NotFoundError(message);
  if (s.IsCorruption()) return absl::DataLossError(message);
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(message);
  return absl::Status(damage_code, message);
}

// The first bytes of `key` in hex, for error messages.
std::string KeyForMessage(std::string_view key) {
  std::string out;
  for (size_t i = 0; i < key.size() && i < 16; ++i) {
    absl::StrAppendFormat(&out, "%02x", static_cast<unsigned char>(key[i]));
  }
  if (key.size() > 16) absl::StrAppendFormat(&out, "... (%d bytes)", key.size());
  return key.empty() ? "(empty)" : out;
}

std::string ParentDir(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

}  // namespace

SnapshotWriter::SnapshotWriter(std::string path, std::unique_ptr<rocksdb::SstFileWriter> writer)
    : path_(std::move(path)), writer_(std::move(writer)) {}

SnapshotWriter::~SnapshotWriter() {
  writer_.reset();
  if (!keep_file_) ::unlink(path_.c_str());
}

absl::StatusOr<std::unique_ptr<SnapshotWriter>> SnapshotWriter::Create(const std::string& path) {
  // invalidate_page_cache=false: should Finish() have to read the file back for its CRC32C,
  // it comes from the page cache.
  auto writer = std::make_unique<rocksdb::SstFileWriter>(rocksdb::EnvOptions(), SnapshotOptions(),
                                                         /*column_family=*/nullptr,
                                                         /*invalidate_page_cache=*/false);
  if (absl::Status s = FromRocks(writer->Open(path), path, "cannot create snapshot"); !s.ok()) {
    return s;
  }
  return std::unique_ptr<SnapshotWriter>(new SnapshotWriter(path, std::move(writer)));
}

absl::Status SnapshotWriter::Put(std::string_view key, std::string_view value) {
  if (finished_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: Put after Finish (snapshot writer)", path_));
  }
  if (entries_ > 0 && !(key > std::string_view(last_key_))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: key %d (%s) is not after key %d (%s): snapshot keys must be strictly ascending "
        "(bytewise)",
        path_, entries_, KeyForMessage(key), entries_ - 1, KeyForMessage(last_key_)));
  }
  absl::Status s = FromRocks(writer_->Put(rocksdb::Slice(key.data(), key.size()),
                                          rocksdb::Slice(value.data(), value.size())),
                             path_, "snapshot write failed");
  if (!s.ok()) return s;
  last_key_.assign(key.data(), key.size());
  ++entries_;
  return absl::OkStatus();
}

absl::StatusOr<FileEntry> SnapshotWriter::Finish() {
  if (finished_) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: Finish called twice (snapshot writer)", path_));
  }
  finished_ = true;
  if (entries_ == 0) {
    writer_.reset();  // abandons the open SST; the empty format replaces the file
    const std::filesystem::path p(path_);
    if (absl::Status s =
            WriteFileAtomically(ParentDir(path_), p.filename().string(), kEmptySnapshotContents);
        !s.ok()) {
      return s;
    }
  } else {
    // SstFileWriter::Finish syncs the file itself; the fsync below makes that explicit and
    // costs nothing when it did.
    rocksdb::ExternalSstFileInfo info;
    absl::Status s = FromRocks(writer_->Finish(&info), path_, "cannot finish snapshot");
    writer_.reset();
    if (!s.ok()) return s;
    if (s = SyncPath(path_); !s.ok()) return s;
    if (s = SyncPath(ParentDir(path_)); !s.ok()) return s;
    // The CRC32C computed while writing, when it covers the whole file (it does unless RocksDB
    // wrote some bytes other than by appending; then the file is read back).
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(path_, ec);
    FileEntry entry;
    entry.path = path_;
    entry.size = info.file_size;
    if (!ec && size == info.file_size && info.file_checksum_func_name == kCrcName &&
        info.file_checksum.size() == 8 && ParseNumber(info.file_checksum, &entry.crc32c, 16)) {
      keep_file_ = true;
      return entry;
    }
  }
  absl::StatusOr<FileEntry> entry = DescribeFile("", path_);
  if (entry.ok()) keep_file_ = true;
  return entry;
}

SnapshotReader::SnapshotReader(std::string path, std::unique_ptr<rocksdb::SstFileReader> reader,
                               uint64_t entries)
    : path_(std::move(path)), reader_(std::move(reader)), entries_(entries) {}

SnapshotReader::~SnapshotReader() = default;

absl::StatusOr<std::unique_ptr<SnapshotReader>> SnapshotReader::Open(const std::string& path) {
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) {
      return absl::NotFoundError(absl::StrFormat("%s: snapshot file missing", path));
    }
    return absl::DataLossError(absl::StrFormat("%s: cannot read snapshot: %s", path, ec.message()));
  }
  // The empty format: small and starting with 's' (an SST file starts with a 0 byte).
  if (size > 0 && size <= 2 * kEmptySnapshotContents.size()) {
    absl::StatusOr<std::string> contents = ReadWholeFile(path);
    if (!contents.ok()) return contents.status();
    if (!contents->empty() && (*contents)[0] == kEmptySnapshotContents[0]) {
      if (*contents != kEmptySnapshotContents) {
        return absl::DataLossError(
            absl::StrFormat("%s: damaged empty snapshot (%d bytes)", path, contents->size()));
      }
      return std::unique_ptr<SnapshotReader>(new SnapshotReader(path, nullptr, 0));
    }
  }
  auto reader = std::make_unique<rocksdb::SstFileReader>(SnapshotOptions());
  constexpr absl::StatusCode kDamaged = absl::StatusCode::kDataLoss;
  if (absl::Status s = FromRocks(reader->Open(path), path, "not a sound snapshot", kDamaged);
      !s.ok()) {
    if (s.code() == absl::StatusCode::kInvalidArgument) return absl::DataLossError(s.message());
    return s;
  }
  if (absl::Status s = FromRocks(reader->VerifyChecksum(), path, "checksum mismatch", kDamaged);
      !s.ok()) {
    return absl::DataLossError(s.message());
  }
  const std::shared_ptr<const rocksdb::TableProperties> props = reader->GetTableProperties();
  if (props == nullptr) {
    return absl::DataLossError(absl::StrFormat("%s: snapshot without table properties", path));
  }
  if (props->num_deletions != 0 || props->num_merge_operands != 0 ||
      props->num_range_deletions != 0) {
    return absl::DataLossError(absl::StrFormat(
        "%s: not a snapshot: the SST file holds %d deletions, %d merges, %d range deletions", path,
        props->num_deletions, props->num_merge_operands, props->num_range_deletions));
  }
  return std::unique_ptr<SnapshotReader>(
      new SnapshotReader(path, std::move(reader), props->num_entries));
}

absl::Status SnapshotReader::ForEach(
    absl::FunctionRef<absl::Status(std::string_view key, std::string_view value)> fn) const {
  if (reader_ == nullptr) return absl::OkStatus();
  rocksdb::ReadOptions options;
  options.verify_checksums = true;
  options.fill_cache = false;
  options.readahead_size = kReadahead;
  std::unique_ptr<rocksdb::Iterator> it(reader_->NewIterator(options));
  uint64_t seen = 0;
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const rocksdb::Slice key = it->key(), value = it->value();
    absl::Status s =
        fn(std::string_view(key.data(), key.size()), std::string_view(value.data(), value.size()));
    if (!s.ok()) return s;
    ++seen;
  }
  if (!it->status().ok()) {
    return absl::DataLossError(absl::StrFormat("%s: reading snapshot entry %d: RocksDB: %s", path_,
                                               seen, it->status().ToString()));
  }
  if (seen != entries_) {
    return absl::DataLossError(absl::StrFormat(
        "%s: snapshot yielded %d entries, its properties say %d", path_, seen, entries_));
  }
  return absl::OkStatus();
}

}  // namespace syncline
