#include "checkpoint/worker_part.h"

#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/file_io.h"
#include "core/crc32c.h"

namespace syncline {
namespace {

constexpr char kMagic[4] = {'S', 'Y', 'W', 'S'};
constexpr uint32_t kVersion = 2;
constexpr size_t kHeader = 4 + 4 + 8 + 8;

std::string FileName(int rank) { return absl::StrCat("w", rank, ".state"); }

// A state file larger than this machine's memory could never be restored: refused by size
// before anything is allocated for it.
uint64_t MostStateBytes() {
  return static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
         static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
}

}  // namespace

absl::Status WriteWorkerCheckpoint(const std::string& root, int rank,
                                   const WorkerCheckpoint& checkpoint) {
  const std::string dir = CheckpointDir(root, checkpoint.clock);
  if (absl::Status s = CreateDirectoriesDurably(dir); !s.ok()) return s;
  std::string bytes(kHeader, '\0');
  std::memcpy(bytes.data(), kMagic, 4);
  std::memcpy(bytes.data() + 4, &kVersion, 4);
  std::memcpy(bytes.data() + 8, &checkpoint.clock, 8);
  const uint64_t length = checkpoint.state.size();
  std::memcpy(bytes.data() + 16, &length, 8);
  bytes += checkpoint.state;
  const uint64_t plan_length = checkpoint.plan.size();
  bytes.append(reinterpret_cast<const char*>(&plan_length), 8);
  bytes += checkpoint.plan;
  const uint32_t crc = Crc32c(bytes.data(), bytes.size());
  bytes.append(reinterpret_cast<const char*>(&crc), 4);
  if (auto s = WriteFileAtomically(dir, FileName(rank), bytes); !s.ok()) return s;
  auto entry = DescribeFile(dir, FileName(rank));
  if (!entry.ok()) return entry.status();
  NodeReceipt receipt;
  receipt.node = absl::StrCat("w", rank);
  receipt.clock = checkpoint.clock;
  receipt.files.push_back(*entry);
  return WriteReceipt(dir, receipt);
}

absl::StatusOr<WorkerCheckpoint> ReadWorkerCheckpoint(const std::string& checkpoint_dir, int rank) {
  const std::string path = JoinPath(checkpoint_dir, FileName(rank));
  auto bytes = ReadWholeFile(path, MostStateBytes());
  if (!bytes.ok()) return bytes.status();
  const auto damaged = [&](const char* why) {
    return absl::DataLossError(absl::StrCat(path, ": ", why));
  };
  if (bytes->size() < kHeader + 4) return damaged("shorter than its header");
  uint32_t crc = 0;
  std::memcpy(&crc, bytes->data() + bytes->size() - 4, 4);
  if (Crc32c(bytes->data(), bytes->size() - 4) != crc) return damaged("checksum mismatch");
  if (std::memcmp(bytes->data(), kMagic, 4) != 0) return damaged("not a worker state file");
  uint32_t version = 0;
  std::memcpy(&version, bytes->data() + 4, 4);
  if (version != 1 && version != kVersion) return damaged("unknown version");
  WorkerCheckpoint out;
  std::memcpy(&out.clock, bytes->data() + 8, 8);
  uint64_t length = 0;
  std::memcpy(&length, bytes->data() + 16, 8);
  const uint64_t body = bytes->size() - kHeader - 4;
  if (version == 1) {
    if (length != body) return damaged("state length mismatch");
    out.state = bytes->substr(kHeader, length);
    return out;
  }
  if (length > body || body - length < 8) return damaged("state length mismatch");
  uint64_t plan_length = 0;
  std::memcpy(&plan_length, bytes->data() + kHeader + length, 8);
  if (plan_length != body - length - 8) return damaged("plan length mismatch");
  out.state = bytes->substr(kHeader, length);
  out.plan = bytes->substr(kHeader + length + 8, plan_length);
  return out;
}

}  // namespace syncline
