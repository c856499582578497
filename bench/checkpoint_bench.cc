// syncline-bench-checkpoint: how fast checkpoint snapshots (checkpoint/) are written and read,
// beside what the same bytes cost written other ways, measured in the same run.
//
// The data: --mib MiB of entries (8-byte big-endian keys 0, 1, 2, ...; values of 64..1024
// bytes, lengths and contents from a fixed, printed seed). MB/s counts these key + value bytes
// (MB = 10^6 bytes) for every figure, so figures are comparable whatever each format adds.
//
// Write paths, each timed from an empty directory to durable bytes:
//   snapshot: SnapshotWriter::Create, Put of every entry, Finish (SST finish, fsync of file and
//             directory, CRC32C read back);
//   rocksdb:  a fresh RocksDB (same table options: no compression; auto compactions off) with
//             Put of every entry, write-ahead log disabled, then Flush (which syncs its files);
//   raw:      the key and value bytes written sequentially to one file in 1 MiB write() calls,
//             then fsync.
// The turns alternate the three paths (--repeat turns; the best of each is reported) so that
// load from elsewhere falls on all alike.
//
// Read paths, on the snapshot file of the last turn: SnapshotReader::Open (which verifies every
// block checksum) + ForEach over all entries, and DescribeFile (size + CRC32C of the file), each
// with the file in the page cache ("hot") and after dropping it with posix_fadvise ("cold": the
// device, unless another process holds the pages).
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint.h"
#include "core/command_line.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/table.h"

namespace syncline::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kKeySize = 8;
constexpr size_t kPoolSize = size_t{4} << 20;  // random bytes values are cut from
constexpr size_t kRawBuffer = size_t{1} << 20;

struct Settings {
  uint64_t mib = 512;
  uint32_t min_value = 64;
  uint32_t max_value = 1024;
  int repeat = 2;
  uint64_t seed = 20241201;
  std::string dir = "/tmp";
  bool cold = true;
};

void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::cerr << "syncline-bench-checkpoint: " << s << "\n";
    std::exit(1);
  }
}
void Check(const rocksdb::Status& s) {
  if (!s.ok()) {
    std::cerr << "syncline-bench-checkpoint: RocksDB: " << s.ToString() << "\n";
    std::exit(1);
  }
}
void CheckErrno(bool ok, const std::string& what) {
  if (!ok) {
    std::cerr << "syncline-bench-checkpoint: " << what << ": " << std::strerror(errno) << "\n";
    std::exit(1);
  }
}

// The entries: value i is pool[offset[i], offset[i] + length[i]).
struct Data {
  std::string pool;
  std::vector<uint32_t> offset, length;
  uint64_t bytes = 0;  // keys + values

  size_t size() const { return length.size(); }
  std::string_view value(size_t i) const { return {pool.data() + offset[i], length[i]}; }
};

Data MakeData(const Settings& s) {
  Data d;
  std::mt19937_64 rng(s.seed);
  d.pool.resize(kPoolSize + s.max_value);
  for (char& c : d.pool) c = static_cast<char>(rng());
  std::uniform_int_distribution<uint32_t> len(s.min_value, s.max_value);
  std::uniform_int_distribution<uint32_t> off(0, kPoolSize);
  const uint64_t target = s.mib << 20;
  while (d.bytes < target) {
    d.length.push_back(len(rng));
    d.offset.push_back(off(rng));
    d.bytes += kKeySize + d.length.back();
  }
  return d;
}

void EncodeKey(uint64_t i, char* out) {
  for (size_t b = 0; b < kKeySize; ++b) out[b] = static_cast<char>(i >> (56 - 8 * b));
}

double Seconds(const std::function<void()>& f) {
  const Clock::time_point t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double MBps(uint64_t bytes, double seconds) { return bytes / seconds / 1e6; }

// Drops `path` from the page cache (after syncing it, so the pages are clean).
void DropCache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  CheckErrno(fd >= 0, "open " + path);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

struct SnapshotTurn {
  double seconds = 0, finish_seconds = 0;
  FileEntry file;
};

SnapshotTurn WriteSnapshot(const Data& d, const std::string& path) {
  SnapshotTurn turn;
  turn.seconds = Seconds([&] {
    absl::StatusOr<std::unique_ptr<SnapshotWriter>> writer = SnapshotWriter::Create(path);
    Check(writer.status());
    char key[kKeySize];
    for (size_t i = 0; i < d.size(); ++i) {
      EncodeKey(i, key);
      Check((*writer)->Put(std::string_view(key, kKeySize), d.value(i)));
    }
    turn.finish_seconds = Seconds([&] {
      absl::StatusOr<FileEntry> file = (*writer)->Finish();
      Check(file.status());
      turn.file = *file;
    });
  });
  return turn;
}

// Returns seconds; *sst_bytes gets the size of the table files RocksDB wrote.
double WriteRocksDb(const Data& d, const std::string& path, uint64_t* sst_bytes) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.compression = rocksdb::kNoCompression;
  options.disable_auto_compactions = true;
  rocksdb::BlockBasedTableOptions table;
  table.checksum = rocksdb::kXXH3;
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  rocksdb::DB* raw_db = nullptr;
  Check(rocksdb::DB::Open(options, path, &raw_db));
  std::unique_ptr<rocksdb::DB> db(raw_db);
  rocksdb::WriteOptions no_wal;
  no_wal.disableWAL = true;
  const double seconds = Seconds([&] {
    char key[kKeySize];
    for (size_t i = 0; i < d.size(); ++i) {
      EncodeKey(i, key);
      const std::string_view v = d.value(i);
      Check(db->Put(no_wal, rocksdb::Slice(key, kKeySize), rocksdb::Slice(v.data(), v.size())));
    }
    rocksdb::FlushOptions flush;
    flush.wait = true;
    Check(db->Flush(flush));
  });
  Check(db->Close());
  db.reset();
  *sst_bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(path)) {
    if (entry.path().extension() == ".sst") *sst_bytes += entry.file_size();
  }
  return seconds;
}

double WriteRaw(const Data& d, const std::string& path) {
  std::unique_ptr<char[]> buffer(new char[kRawBuffer]);
  return Seconds([&] {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CheckErrno(fd >= 0, "open " + path);
    size_t used = 0;
    auto flush = [&] {
      for (size_t done = 0; done < used;) {
        const ssize_t w = ::write(fd, buffer.get() + done, used - done);
        CheckErrno(w >= 0 || errno == EINTR, "write " + path);
        if (w > 0) done += static_cast<size_t>(w);
      }
      used = 0;
    };
    for (size_t i = 0; i < d.size(); ++i) {
      const std::string_view v = d.value(i);
      if (used + kKeySize + v.size() > kRawBuffer) flush();
      EncodeKey(i, buffer.get() + used);
      std::memcpy(buffer.get() + used + kKeySize, v.data(), v.size());
      used += kKeySize + v.size();
    }
    flush();
    CheckErrno(::fsync(fd) == 0, "fsync " + path);
    ::close(fd);
  });
}

// Open + ForEach; checks every entry's length so that the loop does real work.
double ReadSnapshot(const Data& d, const std::string& path) {
  return Seconds([&] {
    absl::StatusOr<std::unique_ptr<SnapshotReader>> reader = SnapshotReader::Open(path);
    Check(reader.status());
    uint64_t i = 0, checksum = 0;
    Check((*reader)->ForEach([&](std::string_view key, std::string_view value) {
      if (key.size() != kKeySize || i >= d.size() || value.size() != d.length[i]) {
        return absl::InternalError(absl::StrFormat("entry %d read back wrong", i));
      }
      checksum += static_cast<unsigned char>(value[0]);
      ++i;
      return absl::OkStatus();
    }));
    if (i != d.size() || checksum == 0) Check(absl::InternalError("entries missing"));
  });
}

// The command line into *s; an exit code when the program should stop (help, bad flags).
std::optional<int> ParseSettings(int argc, char** argv, Settings* settings) {
  Settings& s = *settings;
  CLI::App app(
      "syncline-bench-checkpoint: SnapshotWriter MB/s beside plain RocksDB (Put without WAL + "
      "Flush) and a raw write + fsync of the same bytes; SnapshotReader and DescribeFile MB/s.");
  bool quick = false;
  bool hot_only = false;
  app.add_flag("--quick", quick, "8 MiB, one turn: a smoke run of seconds");
  app.add_option("--mib", s.mib, "MiB of key + value bytes to write")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--min-value", s.min_value, "shortest value in bytes")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  app.add_option("--max-value", s.max_value, "longest value in bytes")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  app.add_option("--repeat", s.repeat, "turns of the three write paths; the best is reported")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--seed", s.seed, "seed of value lengths and bytes")->capture_default_str();
  app.add_option("--dir", s.dir, "where the files are written (a fresh folder, removed after)")
      ->capture_default_str();
  app.add_flag("--hot-only", hot_only, "skip the cold-cache read figures");
  if (auto exit_code = ParseCommandLine(app, argc, argv, "syncline-bench-checkpoint"))
    return *exit_code;
  if (s.min_value > s.max_value) {
    std::cerr << "syncline-bench-checkpoint: --min-value exceeds --max-value\n"
                 "Run with --help for usage.\n";
    return 2;
  }
  if (quick) {
    s.mib = 8;
    s.repeat = 1;
  }
  s.cold = !hot_only;
  return std::nullopt;
}

// The three write paths, best of s.repeat turns each, as a table; returns the best snapshot
// turn (its file is left at ROOT/snapshot.sst for the reads).
SnapshotTurn ReportWrites(const Settings& s, const Data& d, const std::string& root) {
  const std::string snapshot_path = root + "/snapshot.sst";
  double snapshot = std::numeric_limits<double>::infinity(), finish = snapshot, plain = snapshot,
         raw = snapshot;
  SnapshotTurn last;
  uint64_t rocksdb_bytes = 0;
  for (int turn = 0; turn < s.repeat; ++turn) {
    std::filesystem::remove(snapshot_path);
    last = WriteSnapshot(d, snapshot_path);
    if (last.seconds < snapshot) {
      snapshot = last.seconds;
      finish = last.finish_seconds;
    }
    const std::string db = absl::StrFormat("%s/rocksdb-%d", root, turn);
    plain = std::min(plain, WriteRocksDb(d, db, &rocksdb_bytes));
    std::filesystem::remove_all(db);
    const std::string raw_path = root + "/raw.bin";
    raw = std::min(raw, WriteRaw(d, raw_path));
    std::filesystem::remove(raw_path);
  }
  absl::PrintF("| write path | seconds | MB/s | bytes on disk / data | snapshot / this |\n");
  absl::PrintF("| --- | ---: | ---: | ---: | ---: |\n");
  absl::PrintF("| snapshot (Put + Finish: fsync, CRC32C) | %.3f | %.0f | %.3f | 1.00 |\n", snapshot,
               MBps(d.bytes, snapshot), static_cast<double>(last.file.size) / d.bytes);
  absl::PrintF("| RocksDB Put (no WAL) + Flush | %.3f | %.0f | %.3f | %.2f |\n", plain,
               MBps(d.bytes, plain), static_cast<double>(rocksdb_bytes) / d.bytes,
               plain / snapshot);
  absl::PrintF("| raw write + fsync | %.3f | %.0f | 1.000 | %.2f |\n", raw, MBps(d.bytes, raw),
               raw / snapshot);
  absl::PrintF("\n# of the best snapshot turn, Finish (SST footer, fsync, CRC32C) took %.3f s\n\n",
               finish);
  return last;
}

// Reading ROOT/snapshot.sst back, hot and (unless --hot-only) cold, as a table.
void ReportReads(const Settings& s, const Data& d, const std::string& root,
                 const SnapshotTurn& last) {
  const std::string snapshot_path = root + "/snapshot.sst";
  absl::PrintF("| read path | cache | seconds | MB/s |\n");
  absl::PrintF("| --- | --- | ---: | ---: |\n");
  for (bool cold : {false, true}) {
    if (cold && !s.cold) continue;
    const char* cache = cold ? "cold" : "hot";
    if (cold) DropCache(snapshot_path);
    const double read = ReadSnapshot(d, snapshot_path);
    absl::PrintF("| SnapshotReader Open (VerifyChecksum) + ForEach | %s | %.3f | %.0f |\n", cache,
                 read, MBps(d.bytes, read));
    if (cold) DropCache(snapshot_path);
    FileEntry described;
    const double crc = Seconds([&] {
      absl::StatusOr<FileEntry> file = DescribeFile(root, "snapshot.sst");
      Check(file.status());
      described = *file;
    });
    if (described.crc32c != last.file.crc32c) Check(absl::InternalError("CRC32C differs"));
    absl::PrintF("| DescribeFile (size + CRC32C) | %s | %.3f | %.0f |\n", cache, crc,
                 MBps(d.bytes, crc));
  }
}

int Main(int argc, char** argv) {
  Settings s;
  if (auto exit_code = ParseSettings(argc, argv, &s)) return *exit_code;
  std::string pattern = s.dir + "/syncline_checkpoint_bench_XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    std::cerr << "syncline-bench-checkpoint: cannot make a directory under " << s.dir << "\n";
    return 1;
  }
  const std::string root = pattern;
  const Data d = MakeData(s);
  absl::PrintF(
      "# syncline-bench-checkpoint: %d entries, %d MiB of keys + values (8-byte keys, values "
      "%d..%d bytes, seed %d), dir %s, best of %d; MB = 10^6 bytes of keys + values\n",
      d.size(), s.mib, s.min_value, s.max_value, s.seed, root, s.repeat);

  const SnapshotTurn last = ReportWrites(s, d, root);
  ReportReads(s, d, root, last);
  std::filesystem::remove_all(root);
  return 0;
}

}  // namespace
}  // namespace syncline::bench

int main(int argc, char** argv) { return syncline::bench::Main(argc, argv); }
