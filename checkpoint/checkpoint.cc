#include "checkpoint/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "checkpoint/text_format.h"

namespace syncline {
namespace {

namespace fs = std::filesystem;

constexpr int kReceiptVersion = 1;
constexpr int kManifestVersion = 1;
constexpr const char kManifestName[] = "MANIFEST";
constexpr const char kReceiptSuffix[] = ".receipt";
constexpr const char kDirPrefix[] = "ckpt-";
constexpr size_t kClockDigits = 12;

bool ValidNodeName(const std::string& node) {
  if (node.empty() || node[0] == '.') return false;
  return std::all_of(node.begin(), node.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  });
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Empty when `path` may name a checkpoint file, else why not.
std::string BadFilePath(const std::string& path) {
  if (path.empty()) return "empty path";
  if (path.find('\0') != std::string::npos) return "NUL byte in path";
  if (path[0] == '/') return "absolute path";
  const size_t slash = path.find('/');
  std::vector<std::string> parts = {path.substr(0, slash)};
  if (slash != std::string::npos) {
    const std::string rest = path.substr(slash + 1);
    if (rest.find('/') != std::string::npos) return "more than one subfolder";
    parts.push_back(rest);
  }
  for (const std::string& part : parts) {
    if (part.empty() || part == "." || part == "..") return "empty, \".\" or \"..\" part";
  }
  if (parts.size() == 1 &&
      (path == kManifestName || EndsWith(path, kReceiptSuffix) || path[0] == '.')) {
    return "name reserved for checkpoint metadata";
  }
  return "";
}

// The folder name of `dir` (trailing slashes ignored).
std::string FolderName(const std::string& dir) {
  std::string trimmed = dir;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  return fs::path(trimmed).filename().string();
}

// The clock of a folder named ckpt-<12 digits>; false for any other name.
bool ParseCheckpointName(const std::string& name, int64_t* clock) {
  const std::string prefix = kDirPrefix;
  if (name.size() != prefix.size() + kClockDigits || name.compare(0, prefix.size(), prefix) != 0) {
    return false;
  }
  const std::string digits = name.substr(prefix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return false;
  }
  return ParseNumber(digits, clock);
}

absl::Status FsError(const std::error_code& ec, const std::string& path, const char* what) {
  return absl::ErrnoToStatus(ec.value(), absl::StrFormat("%s: %s", path, what));
}

struct CheckpointFolder {
  int64_t clock = 0;
  std::string dir;
};

// The ckpt-* folders under root, oldest first.
absl::StatusOr<std::vector<CheckpointFolder>> ListCheckpointFolders(const std::string& root) {
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    return absl::NotFoundError(absl::StrFormat("%s: no such checkpoint root directory%s", root,
                                               ec && ec != std::errc::no_such_file_or_directory
                                                   ? absl::StrFormat(" (%s)", ec.message())
                                                   : ""));
  }
  std::vector<CheckpointFolder> folders;
  fs::directory_iterator it(root, ec), end;
  if (ec) return FsError(ec, root, "cannot list");
  for (; it != end; it.increment(ec)) {
    if (ec) return FsError(ec, root, "cannot list");
    CheckpointFolder folder;
    const std::string name = it->path().filename().string();
    std::error_code type_ec;
    if (!ParseCheckpointName(name, &folder.clock) || !it->is_directory(type_ec)) continue;
    folder.dir = JoinPath(root, name);
    folders.push_back(std::move(folder));
  }
  if (ec) return FsError(ec, root, "cannot list");
  std::sort(folders.begin(), folders.end(),
            [](const CheckpointFolder& a, const CheckpointFolder& b) { return a.clock < b.clock; });
  return folders;
}

// The sealed text of the file at `path`, body lines parsed; `what` names the file's role in a
// NotFound message.
absl::StatusOr<std::vector<SealedTextLine>> ReadSealed(const std::string& path, const char* kind,
                                                       int version, const std::string& missing) {
  absl::StatusOr<std::string> contents = ReadWholeFile(path);
  if (!contents.ok()) {
    if (absl::IsNotFound(contents.status())) {
      return absl::NotFoundError(absl::StrFormat("%s: missing (%s)", path, missing));
    }
    return contents.status();
  }
  return ParseSealedText(path, *contents, kind, version);
}

absl::Status WantTokens(const std::string& path, const SealedTextLine& line, size_t n) {
  if (line.tokens.size() == n) return absl::OkStatus();
  return LineError(
      path, line.number,
      absl::StrFormat("\"%s\" takes %d values, found %d", line.key, n, line.tokens.size()));
}

}  // namespace

std::string CheckpointDir(const std::string& root, int64_t clock) {
  return JoinPath(root, absl::StrFormat("%s%012d", kDirPrefix, clock));
}

absl::Status WriteReceipt(const std::string& checkpoint_dir, const NodeReceipt& receipt) {
  if (!ValidNodeName(receipt.node)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "receipt for %s: bad node name \"%s\" (want [A-Za-z0-9_.-]+, not starting with '.')",
        checkpoint_dir, receipt.node));
  }
  SealedTextBuilder text("receipt", kReceiptVersion);
  text.AddLine("node", {receipt.node});
  text.AddLine("clock", {absl::StrFormat("%d", receipt.clock)});
  std::set<std::string> paths;
  for (const FileEntry& file : receipt.files) {
    if (std::string why = BadFilePath(file.path); !why.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "receipt of %s in %s: file \"%s\": %s", receipt.node, checkpoint_dir, file.path, why));
    }
    if (!paths.insert(file.path).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("receipt of %s in %s: file \"%s\" listed twice", receipt.node,
                          checkpoint_dir, file.path));
    }
    text.AddLine("file", {file.path, absl::StrFormat("%d", file.size),
                          absl::StrFormat("%08x", file.crc32c)});
  }
  return WriteFileAtomically(checkpoint_dir, receipt.node + kReceiptSuffix, text.Seal());
}

absl::StatusOr<NodeReceipt> ReadReceipt(const std::string& checkpoint_dir,
                                        const std::string& node) {
  if (!ValidNodeName(node)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: bad node name \"%s\"", checkpoint_dir, node));
  }
  const std::string path = JoinPath(checkpoint_dir, node + kReceiptSuffix);
  absl::StatusOr<std::vector<SealedTextLine>> lines =
      ReadSealed(path, "receipt", kReceiptVersion, "node " + node + " wrote no receipt");
  if (!lines.ok()) return lines.status();
  NodeReceipt receipt;
  bool have_node = false, have_clock = false;
  std::set<std::string> paths;
  for (const SealedTextLine& line : *lines) {
    if (line.key == "node") {
      if (absl::Status s = WantTokens(path, line, 1); !s.ok()) return s;
      if (have_node) return LineError(path, line.number, "second node line");
      if (line.tokens[0] != node) {
        return LineError(
            path, line.number,
            absl::StrFormat("receipt of node \"%s\", expected \"%s\"", line.tokens[0], node));
      }
      receipt.node = line.tokens[0];
      have_node = true;
    } else if (line.key == "clock") {
      if (absl::Status s = WantTokens(path, line, 1); !s.ok()) return s;
      if (have_clock) return LineError(path, line.number, "second clock line");
      if (!ParseNumber(line.tokens[0], &receipt.clock) || receipt.clock < 0) {
        return LineError(path, line.number, "malformed clock");
      }
      have_clock = true;
    } else if (line.key == "file") {
      if (absl::Status s = WantTokens(path, line, 3); !s.ok()) return s;
      FileEntry file;
      file.path = line.tokens[0];
      if (std::string why = BadFilePath(file.path); !why.empty()) {
        return LineError(path, line.number, absl::StrFormat("file \"%s\": %s", file.path, why));
      }
      if (!paths.insert(file.path).second) {
        return LineError(path, line.number, absl::StrFormat("file \"%s\" listed twice", file.path));
      }
      if (!ParseNumber(line.tokens[1], &file.size)) {
        return LineError(path, line.number, "malformed file size");
      }
      if (line.tokens[2].size() != 8 || !ParseNumber(line.tokens[2], &file.crc32c, 16)) {
        return LineError(path, line.number, "malformed file crc32c");
      }
      receipt.files.push_back(std::move(file));
    } else {
      return LineError(path, line.number, absl::StrFormat("unknown key \"%s\"", line.key));
    }
  }
  if (!have_node || !have_clock) {
    return absl::DataLossError(
        absl::StrFormat("%s: no %s line", path, have_node ? "clock" : "node"));
  }
  return receipt;
}

absl::Status WriteManifest(const std::string& checkpoint_dir, const Manifest& manifest) {
  const std::string path = JoinPath(checkpoint_dir, kManifestName);
  SealedTextBuilder text("manifest", kManifestVersion);
  text.AddLine("clock", {absl::StrFormat("%d", manifest.clock)});
  text.AddLine("unix_seconds", {absl::StrFormat("%d", manifest.unix_seconds)});
  std::set<std::string> nodes;
  for (const std::string& node : manifest.nodes) {
    if (!ValidNodeName(node)) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: bad node name \"%s\"", path, node));
    }
    if (!nodes.insert(node).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: node \"%s\" listed twice", path, node));
    }
    text.AddLine("node", {node});
  }
  for (const auto& [key, value] : manifest.job) {
    if (key.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: empty job key", path));
    }
    text.AddLine("job", {key, value});
  }
  return WriteFileAtomically(checkpoint_dir, kManifestName, text.Seal());
}

absl::StatusOr<Manifest> ReadManifest(const std::string& checkpoint_dir) {
  const std::string path = JoinPath(checkpoint_dir, kManifestName);
  absl::StatusOr<std::vector<SealedTextLine>> lines =
      ReadSealed(path, "manifest", kManifestVersion, "checkpoint in progress or abandoned");
  if (!lines.ok()) return lines.status();
  Manifest manifest;
  bool have_clock = false, have_time = false;
  std::set<std::string> nodes;
  for (const SealedTextLine& line : *lines) {
    if (line.key == "clock" || line.key == "unix_seconds") {
      if (absl::Status s = WantTokens(path, line, 1); !s.ok()) return s;
      const bool is_clock = line.key == "clock";
      bool& have = is_clock ? have_clock : have_time;
      int64_t& value = is_clock ? manifest.clock : manifest.unix_seconds;
      if (have) return LineError(path, line.number, absl::StrFormat("second %s line", line.key));
      if (!ParseNumber(line.tokens[0], &value) || (is_clock && value < 0)) {
        return LineError(path, line.number, absl::StrFormat("malformed %s", line.key));
      }
      have = true;
    } else if (line.key == "node") {
      if (absl::Status s = WantTokens(path, line, 1); !s.ok()) return s;
      if (!ValidNodeName(line.tokens[0])) {
        return LineError(path, line.number,
                         absl::StrFormat("bad node name \"%s\"", line.tokens[0]));
      }
      if (!nodes.insert(line.tokens[0]).second) {
        return LineError(path, line.number,
                         absl::StrFormat("node \"%s\" listed twice", line.tokens[0]));
      }
      manifest.nodes.push_back(line.tokens[0]);
    } else if (line.key == "job") {
      if (absl::Status s = WantTokens(path, line, 2); !s.ok()) return s;
      if (line.tokens[0].empty()) return LineError(path, line.number, "empty job key");
      manifest.job.emplace_back(line.tokens[0], line.tokens[1]);
    } else {
      return LineError(path, line.number, absl::StrFormat("unknown key \"%s\"", line.key));
    }
  }
  if (!have_clock || !have_time) {
    return absl::DataLossError(
        absl::StrFormat("%s: no %s line", path, have_clock ? "unix_seconds" : "clock"));
  }
  return manifest;
}

absl::StatusOr<Manifest> ValidateCheckpoint(const std::string& checkpoint_dir) {
  absl::StatusOr<Manifest> manifest = ReadManifest(checkpoint_dir);
  if (!manifest.ok()) return manifest.status();
  int64_t folder_clock = 0;
  if (ParseCheckpointName(FolderName(checkpoint_dir), &folder_clock) &&
      folder_clock != manifest->clock) {
    return absl::DataLossError(absl::StrFormat("%s: clock %d, but the folder is for clock %d",
                                               JoinPath(checkpoint_dir, kManifestName),
                                               manifest->clock, folder_clock));
  }
  std::set<std::string> paths;
  for (const std::string& node : manifest->nodes) {
    absl::StatusOr<NodeReceipt> receipt = ReadReceipt(checkpoint_dir, node);
    if (!receipt.ok()) return receipt.status();
    const std::string receipt_path = JoinPath(checkpoint_dir, node + kReceiptSuffix);
    if (receipt->clock != manifest->clock) {
      return absl::DataLossError(
          absl::StrFormat("%s: receipt for clock %d, the manifest is for clock %d", receipt_path,
                          receipt->clock, manifest->clock));
    }
    for (const FileEntry& file : receipt->files) {
      const std::string path = JoinPath(checkpoint_dir, file.path);
      if (!paths.insert(file.path).second) {
        return absl::DataLossError(
            absl::StrFormat("%s: listed by two receipts (the second: %s)", path, receipt_path));
      }
      std::error_code ec;
      const uintmax_t size = fs::file_size(path, ec);
      if (ec == std::errc::no_such_file_or_directory) {
        return absl::NotFoundError(
            absl::StrFormat("%s: missing (listed in %s, %d bytes)", path, receipt_path, file.size));
      }
      if (ec) return FsError(ec, path, "cannot stat");
      if (size != file.size) {
        return absl::DataLossError(
            absl::StrFormat("%s: %d bytes, the receipt says %d (%s)", path, size, file.size,
                            size < file.size ? "truncated" : "longer than written"));
      }
      absl::StatusOr<FileEntry> actual = DescribeFile(checkpoint_dir, file.path);
      if (!actual.ok()) return actual.status();
      if (actual->size != file.size || actual->crc32c != file.crc32c) {
        return absl::DataLossError(absl::StrFormat(
            "%s: CRC32C %08x over %d bytes, the receipt says %08x over %d (damaged)", path,
            actual->crc32c, actual->size, file.crc32c, file.size));
      }
    }
  }
  return manifest;
}

absl::StatusOr<FoundCheckpoint> FindNewestCheckpoint(const std::string& root) {
  absl::StatusOr<std::vector<CheckpointFolder>> folders = ListCheckpointFolders(root);
  if (!folders.ok()) return folders.status();
  FoundCheckpoint found;
  for (auto it = folders->rbegin(); it != folders->rend(); ++it) {
    absl::StatusOr<Manifest> manifest = ValidateCheckpoint(it->dir);
    if (manifest.ok()) {
      found.dir = it->dir;
      found.manifest = *std::move(manifest);
      return found;
    }
    found.skipped.push_back(absl::StrFormat("%s: %s", it->dir, manifest.status().message()));
  }
  if (found.skipped.empty()) {
    return absl::NotFoundError(absl::StrFormat("%s: no checkpoint (no ckpt-* folder)", root));
  }
  return absl::NotFoundError(absl::StrFormat("%s: no valid checkpoint; skipped %d: %s", root,
                                             found.skipped.size(),
                                             absl::StrJoin(found.skipped, "; ")));
}

absl::StatusOr<bool> HasCompleteCheckpoint(const std::string& root) {
  std::error_code ec;
  const bool exists = fs::exists(root, ec);  // ENOENT is no error here
  if (ec) return FsError(ec, root, "cannot stat");
  if (!exists) return false;
  absl::StatusOr<std::vector<CheckpointFolder>> folders = ListCheckpointFolders(root);
  if (!folders.ok()) return folders.status();
  for (const CheckpointFolder& folder : *folders) {
    const std::string manifest = JoinPath(folder.dir, kManifestName);
    if (fs::is_regular_file(manifest, ec)) return true;
    if (ec && ec != std::errc::no_such_file_or_directory) {
      return FsError(ec, manifest, "cannot stat");
    }
  }
  return false;
}

absl::StatusOr<std::vector<std::string>> PruneCheckpoints(const std::string& root, int keep) {
  if (keep < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("PruneCheckpoints(%s): keep must be at least 1, got %d", root, keep));
  }
  absl::StatusOr<std::vector<CheckpointFolder>> folders = ListCheckpointFolders(root);
  if (!folders.ok()) return folders.status();
  std::vector<bool> complete(folders->size());
  for (size_t i = 0; i < folders->size(); ++i) {
    const std::string manifest = JoinPath((*folders)[i].dir, kManifestName);
    std::error_code ec;
    const fs::file_status st = fs::status(manifest, ec);
    if (ec && ec != std::errc::no_such_file_or_directory) {
      return FsError(ec, manifest, "cannot stat");
    }
    complete[i] = fs::is_regular_file(st);
  }
  // Indices of complete checkpoints, newest first; the first `keep` stay.
  std::vector<size_t> kept;
  for (size_t i = folders->size(); i-- > 0 && kept.size() < static_cast<size_t>(keep);) {
    if (complete[i]) kept.push_back(i);
  }
  std::vector<std::string> removed;
  if (kept.empty()) return removed;  // no complete checkpoint: everything may be in progress
  const size_t newest_complete = kept.front();
  // A MANIFEST alone does not make a checkpoint sound: delete nothing older unless the newest
  // validates (every file's size and CRC32C), or a resume could find nothing to start from.
  if (absl::StatusOr<Manifest> sound = ValidateCheckpoint((*folders)[newest_complete].dir);
      !sound.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("kept every older checkpoint, since the newest fails validation: ",
                     sound.status().message()));
  }
  for (size_t i = 0; i < newest_complete; ++i) {
    if (std::find(kept.begin(), kept.end(), i) != kept.end()) continue;
    const std::string& dir = (*folders)[i].dir;
    std::error_code ec;
    if (complete[i]) {
      const std::string manifest = JoinPath(dir, kManifestName);
      if (!fs::remove(manifest, ec) && ec) return FsError(ec, manifest, "cannot remove");
      if (absl::Status s = SyncPath(dir); !s.ok()) return s;
    }
    fs::remove_all(dir, ec);
    if (ec) return FsError(ec, dir, "cannot remove checkpoint folder");
    removed.push_back(dir);
  }
  return removed;
}

}  // namespace syncline
