#include "checkpoint/checkpoint.h"

#include <sys/stat.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "checkpoint/file_io.h"
#include "checkpoint/text_format.h"
#include "core/crc32c.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "testing/scoped_temp_dir.h"

namespace syncline {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

class CheckpointTest : public ::testing::Test {
 protected:
  static void WriteBytes(const std::string& path, const std::string& bytes) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  }
  static std::string ReadBytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  static void FlipByte(const std::string& path, uint64_t offset) {
    std::string bytes = ReadBytes(path);
    ASSERT_LT(offset, bytes.size());
    bytes[offset] ^= 0x40;
    WriteBytes(path, bytes);
  }

  // A complete checkpoint of `clock` with nodes ps0 (two files, one in a subfolder) and w0
  // (one file); returns its folder.
  std::string MakeCheckpoint(int64_t clock, bool write_manifest = true) {
    const std::string dir = CheckpointDir(root_, clock);
    fs::create_directories(dir);
    const std::vector<std::pair<std::string, std::vector<std::string>>> nodes = {
        {"ps0", {"ps0/table-1.bin", "ps0/table-2.bin"}}, {"w0", {"w0-state.bin"}}};
    Manifest manifest;
    manifest.clock = clock;
    manifest.unix_seconds = 1700000000 + clock;
    for (const auto& [node, files] : nodes) {
      NodeReceipt receipt;
      receipt.node = node;
      receipt.clock = clock;
      for (const std::string& file : files) {
        WriteBytes(JoinPath(dir, file),
                   absl::StrFormat("%s at clock %d %s", file, clock, std::string(1000, 'x')));
        absl::StatusOr<FileEntry> entry = DescribeFile(dir, file);
        EXPECT_TRUE(entry.ok()) << entry.status();
        receipt.files.push_back(*entry);
      }
      EXPECT_TRUE(WriteReceipt(dir, receipt).ok());
      manifest.nodes.push_back(node);
    }
    manifest.job = {{"sync", "bsp"}, {"servers", "1"}};
    if (write_manifest) {
      EXPECT_TRUE(WriteManifest(dir, manifest).ok());
    }
    return dir;
  }

  testing_util::ScopedTempDir tmp_{"checkpoint_test"};
  const std::string root_ = tmp_.path();
};

TEST_F(CheckpointTest, DirNameIsZeroPadded) {
  EXPECT_EQ(CheckpointDir("/data/run", 40), "/data/run/ckpt-000000000040");
  EXPECT_EQ(CheckpointDir("/data/run/", 7), "/data/run/ckpt-000000000007");
}

TEST_F(CheckpointTest, DescribeFileGivesSizeAndCrc) {
  std::string bytes(9 << 20, '\0');  // more than two 4 MiB chunks
  std::mt19937_64 rng(7);
  for (char& c : bytes) c = static_cast<char>(rng());
  WriteBytes(root_ + "/sub/f", bytes);
  absl::StatusOr<FileEntry> entry = DescribeFile(root_, "sub/f");
  ASSERT_TRUE(entry.ok()) << entry.status();
  EXPECT_EQ(entry->path, "sub/f");
  EXPECT_EQ(entry->size, bytes.size());
  EXPECT_EQ(entry->crc32c, Crc32c(bytes.data(), bytes.size()));
  EXPECT_TRUE(absl::IsNotFound(DescribeFile(root_, "nothing").status()));
}

TEST_F(CheckpointTest, ReceiptRoundTrips) {
  NodeReceipt receipt;
  receipt.node = "ps1";
  receipt.clock = 40;
  receipt.files = {{"ps1/table-2.sst", 2097152, 0xdeadbeef},
                   {"ps1/odd name%.sst", 0, 0},
                   {"top.bin", 12, 0x00000001}};
  ASSERT_TRUE(WriteReceipt(root_, receipt).ok());
  EXPECT_FALSE(fs::exists(root_ + "/.ps1.receipt.tmp"));
  absl::StatusOr<NodeReceipt> read = ReadReceipt(root_, "ps1");
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->node, "ps1");
  EXPECT_EQ(read->clock, 40);
  ASSERT_EQ(read->files.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(read->files[i].path, receipt.files[i].path);
    EXPECT_EQ(read->files[i].size, receipt.files[i].size);
    EXPECT_EQ(read->files[i].crc32c, receipt.files[i].crc32c);
  }
  // Human-readable, with the space escaped.
  const std::string text = ReadBytes(root_ + "/ps1.receipt");
  EXPECT_THAT(text, HasSubstr("syncline-receipt version 1\n"));
  EXPECT_THAT(text, HasSubstr("file ps1/table-2.sst 2097152 deadbeef\n"));
  EXPECT_THAT(text, HasSubstr("file ps1/odd%20name%25.sst 0 00000000\n"));
}

TEST_F(CheckpointTest, ReceiptRejectsWhatTheFormatCannotHold) {
  NodeReceipt receipt;
  receipt.node = "ps/0";
  EXPECT_TRUE(absl::IsInvalidArgument(WriteReceipt(root_, receipt)));
  receipt.node = "ps0";
  for (const char* bad : {"/abs", "a/b/c", "../x", "a/..", "", "MANIFEST", "w0.receipt"}) {
    receipt.files = {{bad, 1, 1}};
    EXPECT_TRUE(absl::IsInvalidArgument(WriteReceipt(root_, receipt))) << bad;
  }
  receipt.files = {{"a", 1, 1}, {"a", 1, 1}};
  EXPECT_TRUE(absl::IsInvalidArgument(WriteReceipt(root_, receipt)));
}

TEST_F(CheckpointTest, ManifestRoundTrips) {
  Manifest manifest;
  manifest.clock = 123456789012;
  manifest.unix_seconds = 1764000000;
  manifest.nodes = {"ps0", "ps1", "w0", "w3.ctl"};
  manifest.job = {{"sync", "ssp:3"}, {"model", "logreg dim=10\twith tab"}, {"empty", ""}};
  ASSERT_TRUE(WriteManifest(root_, manifest).ok());
  absl::StatusOr<Manifest> read = ReadManifest(root_);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->clock, manifest.clock);
  EXPECT_EQ(read->unix_seconds, manifest.unix_seconds);
  EXPECT_EQ(read->nodes, manifest.nodes);
  EXPECT_THAT(read->job, ElementsAre(Pair("sync", "ssp:3"),
                                     Pair("model", "logreg dim=10\twith tab"), Pair("empty", "")));
  manifest.nodes = {"ps0", "ps0"};
  EXPECT_TRUE(absl::IsInvalidArgument(WriteManifest(root_, manifest)));
}

TEST_F(CheckpointTest, ValidCheckpointValidates) {
  const std::string dir = MakeCheckpoint(40);
  absl::StatusOr<Manifest> manifest = ValidateCheckpoint(dir);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->clock, 40);
  EXPECT_THAT(manifest->nodes, ElementsAre("ps0", "w0"));
}

// The audit's hostile files: a MANIFEST linked to /dev/zero grew --resume to 533 MB and an
// abort; one that is a FIFO hung it. Each is refused at once, naming the file, and the newest
// checkpoint that validates is found behind it.
TEST_F(CheckpointTest, HostileManifestsAreRefusedNamingTheFileWithoutReadingThem) {
  MakeCheckpoint(10);
  const std::string dir = MakeCheckpoint(20, /*write_manifest=*/false);
  const std::string manifest = dir + "/MANIFEST";
  struct Case {
    const char* what;
    std::function<void()> make;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"a link to /dev/zero", [&] { fs::create_symlink("/dev/zero", manifest); }, "symbolic link"},
      {"a FIFO", [&] { ASSERT_EQ(mkfifo(manifest.c_str(), 0600), 0); }, "a FIFO"},
      {"a folder", [&] { fs::create_directory(manifest); }, "a folder"},
      {"a huge sparse file",
       [&] {
         WriteBytes(manifest, "");
         fs::resize_file(manifest, kMaxTextFileBytes + 1);
       },
       "over the limit of 67108864 bytes"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    fs::remove_all(manifest);
    c.make();
    const absl::Status s = ReadManifest(dir).status();
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr(manifest));
    EXPECT_THAT(s.message(), HasSubstr(c.says));
    absl::StatusOr<FoundCheckpoint> found = FindNewestCheckpoint(root_);
    ASSERT_TRUE(found.ok()) << found.status();
    EXPECT_EQ(found->manifest.clock, 10);
    ASSERT_EQ(found->skipped.size(), 1u);
    EXPECT_THAT(found->skipped[0], HasSubstr(c.says));
  }
  // A listed file of the same kinds is refused too, without blocking on a FIFO.
  const std::string listed = CheckpointDir(root_, 10) + "/w0-state.bin";
  fs::remove(listed);
  ASSERT_EQ(mkfifo(listed.c_str(), 0600), 0);
  const absl::Status s = ValidateCheckpoint(CheckpointDir(root_, 10)).status();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr(listed));
}

// Checkpoint files hold the model: 0600, and never written through a link left in a
// temporary's place.
TEST_F(CheckpointTest, FilesAreWrittenPrivateAndNeverThroughALink) {
  const std::string victim = root_ + "/victim";
  WriteBytes(victim, "precious");
  fs::create_symlink(victim, root_ + "/.MANIFEST.tmp");
  Manifest manifest;
  manifest.clock = 3;
  manifest.nodes = {"ps0"};
  ASSERT_TRUE(WriteManifest(root_, manifest).ok());
  EXPECT_EQ(ReadBytes(victim), "precious");
  struct stat st = {};
  ASSERT_EQ(lstat((root_ + "/MANIFEST").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(CheckpointTest, MissingManifest) {
  const std::string dir = MakeCheckpoint(40, /*write_manifest=*/false);
  absl::Status s = ValidateCheckpoint(dir).status();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(dir + "/MANIFEST"));
}

TEST_F(CheckpointTest, OnlyAFolderWithAManifestCountsAsComplete) {
  auto has = [](const std::string& root) {
    absl::StatusOr<bool> r = HasCompleteCheckpoint(root);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() && *r;
  };
  EXPECT_FALSE(has(root_ + "/absent"));
  EXPECT_FALSE(has(root_));
  MakeCheckpoint(40, /*write_manifest=*/false);
  EXPECT_FALSE(has(root_));
  const std::string dir = MakeCheckpoint(20);
  FlipByte(dir + "/ps0/table-1.bin", 5);  // damaged, but complete: --resume says what is wrong
  EXPECT_TRUE(has(root_));
  // "Cannot tell" is an error, never "none": a file where the root should be.
  WriteBytes(root_ + "/file", "x");
  EXPECT_FALSE(HasCompleteCheckpoint(root_ + "/file").ok());
}

TEST_F(CheckpointTest, MissingReceipt) {
  const std::string dir = MakeCheckpoint(40);
  fs::remove(dir + "/w0.receipt");
  absl::Status s = ValidateCheckpoint(dir).status();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(dir + "/w0.receipt"));
}

TEST_F(CheckpointTest, MissingFile) {
  const std::string dir = MakeCheckpoint(40);
  fs::remove(dir + "/ps0/table-2.bin");
  absl::Status s = ValidateCheckpoint(dir).status();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(dir + "/ps0/table-2.bin: missing"));
}

TEST_F(CheckpointTest, TruncatedFile) {
  const std::string dir = MakeCheckpoint(40);
  const std::string path = dir + "/ps0/table-2.bin";
  const uint64_t size = fs::file_size(path);
  fs::resize_file(path, 100);
  absl::Status s = ValidateCheckpoint(dir).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(absl::StrFormat(
                               "%s: 100 bytes, the receipt says %d (truncated)", path, size)));
}

TEST_F(CheckpointTest, SameSizeBitFlip) {
  const std::string dir = MakeCheckpoint(40);
  const std::string path = dir + "/w0-state.bin";
  FlipByte(path, 500);
  absl::Status s = ValidateCheckpoint(dir).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(path + ": CRC32C"));
  EXPECT_THAT(s.message(), HasSubstr("(damaged)"));
}

TEST_F(CheckpointTest, CorruptedManifestText) {
  const std::string dir = MakeCheckpoint(40);
  std::string text = ReadBytes(dir + "/MANIFEST");
  text.replace(text.find("clock 40"), 8, "clock 41");  // a plausible edit: only the CRC sees it
  WriteBytes(dir + "/MANIFEST", text);
  absl::Status s = ValidateCheckpoint(dir).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(dir + "/MANIFEST: CRC32C"));
}

TEST_F(CheckpointTest, CorruptedReceiptText) {
  const std::string dir = MakeCheckpoint(40);
  const std::string path = dir + "/ps0.receipt";
  std::string text = ReadBytes(path);
  const size_t at = text.find("table-1.bin ") + 12;
  text[at] = text[at] == '9' ? '8' : '9';  // a different size, same length
  WriteBytes(path, text);
  absl::Status s = ValidateCheckpoint(dir).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(path + ": CRC32C"));

  // Truncated: the crc32c line is gone.
  WriteBytes(path, text.substr(0, text.rfind("crc32c")));
  s = ValidateCheckpoint(dir).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(path + ":"));
}

TEST_F(CheckpointTest, ParseErrorsNameFileAndLine) {
  // A well-sealed receipt with a malformed line 4.
  SealedTextBuilder text("receipt", 1);
  text.AddLine("node", {"ps0"});
  text.AddLine("clock", {"40"});
  text.AddLine("file", {"a.bin", "12x", "00000000"});
  WriteBytes(root_ + "/ps0.receipt", text.Seal());
  absl::Status s = ReadReceipt(root_, "ps0").status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(root_ + "/ps0.receipt:4: malformed file size"));

  // A receipt of another node under this node's name.
  SealedTextBuilder other("receipt", 1);
  other.AddLine("node", {"ps1"});
  other.AddLine("clock", {"40"});
  WriteBytes(root_ + "/ps0.receipt", other.Seal());
  s = ReadReceipt(root_, "ps0").status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(root_ + "/ps0.receipt:2:"));
}

TEST_F(CheckpointTest, WrongVersion) {
  const std::string dir = MakeCheckpoint(40);
  SealedTextBuilder text("manifest", 2);  // sealed correctly, but by a newer format
  text.AddLine("clock", {"40"});
  text.AddLine("unix_seconds", {"1"});
  WriteBytes(dir + "/MANIFEST", text.Seal());
  absl::Status s = ValidateCheckpoint(dir).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(dir + "/MANIFEST:1: manifest format version 2"));
}

TEST_F(CheckpointTest, ReceiptOfAnotherClock) {
  const std::string dir = MakeCheckpoint(40);
  NodeReceipt receipt = *ReadReceipt(dir, "w0");
  receipt.clock = 39;
  ASSERT_TRUE(WriteReceipt(dir, receipt).ok());
  absl::Status s = ValidateCheckpoint(dir).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("receipt for clock 39"));
}

TEST_F(CheckpointTest, FindNewestSkipsBrokenNewerOnes) {
  MakeCheckpoint(10);
  const std::string good = MakeCheckpoint(20);
  const std::string corrupt = MakeCheckpoint(30);
  FlipByte(corrupt + "/ps0/table-1.bin", 3);
  const std::string partial = MakeCheckpoint(40, /*write_manifest=*/false);
  fs::create_directories(root_ + "/not-a-checkpoint");
  absl::StatusOr<FoundCheckpoint> found = FindNewestCheckpoint(root_);
  ASSERT_TRUE(found.ok()) << found.status();
  EXPECT_EQ(found->dir, good);
  EXPECT_EQ(found->manifest.clock, 20);
  ASSERT_EQ(found->skipped.size(), 2u);
  EXPECT_THAT(found->skipped[0], HasSubstr(partial + ": "));
  EXPECT_THAT(found->skipped[0], HasSubstr("MANIFEST: missing"));
  EXPECT_THAT(found->skipped[1], HasSubstr(corrupt + ": "));
  EXPECT_THAT(found->skipped[1], HasSubstr("table-1.bin: CRC32C"));
}

TEST_F(CheckpointTest, FindNewestNotFound) {
  absl::Status s = FindNewestCheckpoint(root_ + "/absent").status();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(root_ + "/absent"));
  s = FindNewestCheckpoint(root_).status();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  const std::string partial = MakeCheckpoint(5, /*write_manifest=*/false);
  s = FindNewestCheckpoint(root_).status();
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(partial));
}

TEST_F(CheckpointTest, PruneKeepsNewestAndInProgress) {
  for (int64_t clock : {10, 20, 30, 40}) MakeCheckpoint(clock);
  const std::string abandoned = MakeCheckpoint(25, /*write_manifest=*/false);
  const std::string in_progress = MakeCheckpoint(50, /*write_manifest=*/false);
  absl::StatusOr<std::vector<std::string>> removed = PruneCheckpoints(root_, 2);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(*removed, ElementsAre(CheckpointDir(root_, 10), CheckpointDir(root_, 20), abandoned));
  EXPECT_TRUE(fs::exists(CheckpointDir(root_, 30)));
  EXPECT_TRUE(fs::exists(CheckpointDir(root_, 40)));
  EXPECT_TRUE(fs::exists(in_progress));
  EXPECT_FALSE(fs::exists(abandoned));
  EXPECT_TRUE(ValidateCheckpoint(CheckpointDir(root_, 30)).ok());

  // keep = 1 removes 30, still not the in-progress 50.
  removed = PruneCheckpoints(root_, 1);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(*removed, ElementsAre(CheckpointDir(root_, 30)));
  EXPECT_TRUE(fs::exists(in_progress));
  EXPECT_TRUE(absl::IsInvalidArgument(PruneCheckpoints(root_, 0).status()));
}

TEST_F(CheckpointTest, PruneDeletesNothingOlderWhenTheNewestFailsValidation) {
  for (int64_t clock : {10, 20}) MakeCheckpoint(clock);
  // The newest's MANIFEST is there, but one of its files was cut short.
  fs::resize_file(JoinPath(CheckpointDir(root_, 20), "ps0/table-2.bin"), 10);
  absl::StatusOr<std::vector<std::string>> removed = PruneCheckpoints(root_, 1);
  ASSERT_FALSE(removed.ok());
  EXPECT_THAT(removed.status().message(), HasSubstr("kept every older checkpoint"));
  EXPECT_THAT(removed.status().message(), HasSubstr("table-2.bin"));
  EXPECT_TRUE(ValidateCheckpoint(CheckpointDir(root_, 10)).ok()) << "the sound one was deleted";
}

TEST_F(CheckpointTest, PruneWithoutCompleteCheckpointRemovesNothing) {
  const std::string a = MakeCheckpoint(10, false);
  const std::string b = MakeCheckpoint(20, false);
  absl::StatusOr<std::vector<std::string>> removed = PruneCheckpoints(root_, 1);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_TRUE(removed->empty());
  EXPECT_TRUE(fs::exists(a) && fs::exists(b));
}

// --- Snapshots ---

std::string BigEndianKey(uint64_t i) {
  std::string key(8, '\0');
  for (int b = 0; b < 8; ++b) key[b] = static_cast<char>(i >> (56 - 8 * b));
  return key;
}

std::string ValueOf(uint64_t i) {
  return std::string(16 + i % 200, static_cast<char>('a' + i % 26)) + std::to_string(i);
}

TEST_F(CheckpointTest, SnapshotRoundTrips100kEntries) {
  const std::string path = root_ + "/table.sst";
  constexpr uint64_t kEntries = 100000;
  {
    absl::StatusOr<std::unique_ptr<SnapshotWriter>> writer = SnapshotWriter::Create(path);
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (uint64_t i = 0; i < kEntries; ++i) {
      ASSERT_TRUE((*writer)->Put(BigEndianKey(i * 3), ValueOf(i)).ok());
    }
    EXPECT_EQ((*writer)->entries(), kEntries);
    absl::StatusOr<FileEntry> entry = (*writer)->Finish();
    ASSERT_TRUE(entry.ok()) << entry.status();
    EXPECT_EQ(entry->path, path);
    EXPECT_EQ(entry->size, fs::file_size(path));
    const std::string bytes = ReadBytes(path);
    EXPECT_EQ(entry->crc32c, Crc32c(bytes.data(), bytes.size()));
  }
  ASSERT_TRUE(fs::exists(path));  // a finished file stays
  absl::StatusOr<std::unique_ptr<SnapshotReader>> reader = SnapshotReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->entries(), kEntries);
  uint64_t i = 0;
  absl::Status s = (*reader)->ForEach([&](std::string_view key, std::string_view value) {
    if (key != BigEndianKey(i * 3) || value != ValueOf(i)) {
      return absl::InternalError(absl::StrFormat("entry %d differs", i));
    }
    ++i;
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(i, kEntries);

  // ForEach stops at the callback's first error.
  int calls = 0;
  s = (*reader)->ForEach([&](std::string_view, std::string_view) {
    return ++calls == 5 ? absl::CancelledError("enough") : absl::OkStatus();
  });
  EXPECT_TRUE(absl::IsCancelled(s));
  EXPECT_EQ(calls, 5);
}

TEST_F(CheckpointTest, RocksDbIngestsSnapshot) {
  const std::string path = root_ + "/ingest.sst";
  absl::StatusOr<std::unique_ptr<SnapshotWriter>> writer = SnapshotWriter::Create(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (uint64_t i = 0; i < 1000; ++i) ASSERT_TRUE((*writer)->Put(BigEndianKey(i), ValueOf(i)).ok());
  ASSERT_TRUE((*writer)->Finish().ok());
  rocksdb::Options options;
  options.create_if_missing = true;
  rocksdb::DB* raw = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(options, root_ + "/db", &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  rocksdb::IngestExternalFileOptions ingest;
  ingest.move_files = false;
  rocksdb::Status s = db->IngestExternalFile({path}, ingest);
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::string value;
  ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), BigEndianKey(777), &value).ok());
  EXPECT_EQ(value, ValueOf(777));
}

TEST_F(CheckpointTest, SnapshotRejectsNonAscendingKeys) {
  const std::string path = root_ + "/t.sst";
  absl::StatusOr<std::unique_ptr<SnapshotWriter>> writer = SnapshotWriter::Create(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->Put("b", "1").ok());
  absl::Status s = (*writer)->Put("a", "2");
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("key 1"));
  s = (*writer)->Put("b", "3");  // equal is not ascending either
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  // Bytewise means unsigned: 0x80 sorts after 'b'.
  EXPECT_TRUE((*writer)->Put(std::string(1, '\x80'), "4").ok());
  EXPECT_EQ((*writer)->entries(), 2u);
  ASSERT_TRUE((*writer)->Finish().ok());
  EXPECT_TRUE(absl::IsFailedPrecondition((*writer)->Put("z", "")));
  EXPECT_TRUE(absl::IsFailedPrecondition((*writer)->Finish().status()));
}

TEST_F(CheckpointTest, UnfinishedSnapshotIsRemoved) {
  const std::string path = root_ + "/t.sst";
  {
    absl::StatusOr<std::unique_ptr<SnapshotWriter>> writer = SnapshotWriter::Create(path);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)->Put("a", "1").ok());
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(SnapshotWriter::Create(root_ + "/no/such/dir/t.sst").ok());
}

TEST_F(CheckpointTest, EmptySnapshot) {
  const std::string path = root_ + "/empty.sst";
  absl::StatusOr<std::unique_ptr<SnapshotWriter>> writer = SnapshotWriter::Create(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  absl::StatusOr<FileEntry> entry = (*writer)->Finish();
  ASSERT_TRUE(entry.ok()) << entry.status();
  EXPECT_EQ(entry->size, kEmptySnapshotContents.size());
  EXPECT_EQ(ReadBytes(path), std::string(kEmptySnapshotContents));
  absl::StatusOr<std::unique_ptr<SnapshotReader>> reader = SnapshotReader::Open(path);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->entries(), 0u);
  int calls = 0;
  EXPECT_TRUE((*reader)
                  ->ForEach([&](std::string_view, std::string_view) {
                    ++calls;
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_EQ(calls, 0);

  // A damaged empty snapshot is DataLoss, not an empty table.
  WriteBytes(path, std::string(kEmptySnapshotContents.substr(0, 20)));
  absl::Status s = SnapshotReader::Open(path).status();
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr(path));
}

class DamagedSnapshotTest : public CheckpointTest {
 protected:
  void SetUp() override {
    CheckpointTest::SetUp();
    path_ = root_ + "/table.sst";
    absl::StatusOr<std::unique_ptr<SnapshotWriter>> writer = SnapshotWriter::Create(path_);
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (uint64_t i = 0; i < 20000; ++i) {
      ASSERT_TRUE((*writer)->Put(BigEndianKey(i), ValueOf(i)).ok());
    }
    ASSERT_TRUE((*writer)->Finish().ok());
  }
  std::string path_;
};

TEST_F(DamagedSnapshotTest, Truncated) {
  for (uint64_t size : {fs::file_size(path_) - 1, fs::file_size(path_) / 2, uint64_t{0}}) {
    fs::resize_file(path_, size);
    absl::Status s = SnapshotReader::Open(path_).status();
    EXPECT_TRUE(absl::IsDataLoss(s)) << size << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(path_));
  }
}

TEST_F(DamagedSnapshotTest, FlippedByteInDataBlock) {
  // The data blocks come first; byte 1000 is inside the first ones, in a value.
  const std::string original = ReadBytes(path_);
  for (uint64_t offset : {uint64_t{1000}, uint64_t{original.size() / 3}}) {
    WriteBytes(path_, original);
    FlipByte(path_, offset);
    absl::Status s = SnapshotReader::Open(path_).status();
    EXPECT_TRUE(absl::IsDataLoss(s)) << offset << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(path_));
  }
}

TEST_F(CheckpointTest, SnapshotMissing) {
  EXPECT_TRUE(absl::IsNotFound(SnapshotReader::Open(root_ + "/none.sst").status()));
}

// Snapshots inside a checkpoint: the receipt's CRC covers the SST bytes.
TEST_F(CheckpointTest, SnapshotInCheckpoint) {
  const std::string dir = CheckpointDir(root_, 8);
  fs::create_directories(dir + "/ps0");
  absl::StatusOr<std::unique_ptr<SnapshotWriter>> writer =
      SnapshotWriter::Create(dir + "/ps0/table-1.sst");
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (uint64_t i = 0; i < 1000; ++i) ASSERT_TRUE((*writer)->Put(BigEndianKey(i), "v").ok());
  absl::StatusOr<FileEntry> entry = (*writer)->Finish();
  ASSERT_TRUE(entry.ok()) << entry.status();
  entry->path = "ps0/table-1.sst";
  ASSERT_TRUE(WriteReceipt(dir, {"ps0", 8, {*entry}}).ok());
  ASSERT_TRUE(WriteManifest(dir, {8, 0, {"ps0"}, {}}).ok());
  EXPECT_TRUE(ValidateCheckpoint(dir).ok());
}

}  // namespace
}  // namespace syncline

namespace syncline {
namespace {

// Runs only as the subject of the test below, which starts this binary again under strace.
TEST(FileIoTest, FsyncSubject) {
  const char* dir = std::getenv("SYNCLINE_FSYNC_SUBJECT");
  if (dir == nullptr) GTEST_SKIP() << "the subject of CreatedFoldersAreFsyncedIntoTheirParents";
  ASSERT_TRUE(CreateDirectoriesDurably(std::string(dir) + "/a/b").ok());
}

// A new checkpoint folder must survive a crash of the machine: CreateDirectoriesDurably fsyncs
// the parent of every folder it creates. Watched with strace: every parent is opened and that
// descriptor fsynced.
TEST(FileIoTest, CreatedFoldersAreFsyncedIntoTheirParents) {
  if (!std::filesystem::exists("/usr/bin/strace")) {
    GTEST_SKIP() << "needs /usr/bin/strace (scripts/install-deps.sh --for-tests installs it)";
  }
  testing_util::ScopedTempDir dir("fsync");
  const std::string log = dir.Sub("strace.log");
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string command = absl::StrFormat(
      // LeakSanitizer's exit check ptraces the process, which strace already does.
      "SYNCLINE_FSYNC_SUBJECT='%s' ASAN_OPTIONS=detect_leaks=0 "
      "/usr/bin/strace -f -qq -e trace=openat,fsync -o '%s' '%s' "
      "--gtest_filter=FileIoTest.FsyncSubject >/dev/null 2>&1",
      dir.path(), log, self);
  const int rc = std::system(command.c_str());
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  if (rc != 0 && text.str().find("ptrace") != std::string::npos) {
    GTEST_SKIP() << "strace cannot trace here: " << text.str().substr(0, 200);
  }
  ASSERT_EQ(rc, 0) << text.str();
  // "PID openat(AT_FDCWD, "PATH", FLAGS) = FD" and "PID fsync(FD) = 0", in order.
  std::map<int, std::string> open_fds;
  std::set<std::string> synced;
  std::string line;
  while (std::getline(text, line)) {
    const size_t open = line.find("openat(AT_FDCWD, \"");
    const size_t eq = line.rfind(" = ");
    if (eq == std::string::npos) continue;
    const int result = std::atoi(line.c_str() + eq + 3);
    if (open != std::string::npos) {
      const size_t begin = open + std::strlen("openat(AT_FDCWD, \"");
      open_fds[result] = line.substr(begin, line.find('"', begin) - begin);
    } else if (const size_t f = line.find("fsync("); f != std::string::npos && result == 0) {
      const int fd = std::atoi(line.c_str() + f + std::strlen("fsync("));
      if (open_fds.contains(fd)) synced.insert(open_fds[fd]);
    }
  }
  EXPECT_TRUE(std::filesystem::is_directory(dir.Sub("a/b")));
  EXPECT_TRUE(synced.contains(dir.path())) << text.str();
  EXPECT_TRUE(synced.contains(dir.Sub("a"))) << text.str();
}

}  // namespace
}  // namespace syncline
