// The on-disk format of Syncline checkpoints: which files make a checkpoint, how each node
// vouches for its files, and how a restart finds the newest sound checkpoint.
//
// A checkpoint of clock C is the folder ROOT/ckpt-<C as 12 zero-padded digits>:
//
//   ROOT/ckpt-000000000040/
//     ps0/table-1.sst   ...       files each node writes (relative paths, at most one subfolder;
//                                 snapshot files come from SnapshotWriter, snapshot.h)
//     ps0.receipt  w0.receipt     one per node: its clock and each file's size and CRC32C
//     MANIFEST                    written last by the launcher: clock, time, nodes, job
//
// A checkpoint exists once its MANIFEST does; a folder without one is in progress or abandoned.
// Receipts and manifests are sealed text files (text_format.h: a "syncline-receipt version 1"
// or "syncline-manifest version 1" line first, a "crc32c" line last), replaced atomically.
//
// Receipt body lines:  node <name> | clock <C> | file <path> <size> <crc32c as 8 hex digits>
// Manifest body lines: clock <C> | unix_seconds <T> | node <name> (one per node, in order) |
//                      job <key> <value> (in order)
// Tokens are percent-escaped (a space is %20). Node names are [A-Za-z0-9_.-]+, not starting
// with '.'; file paths are relative, "name" or "folder/name", without "." or ".." parts.
//
// Errors name the file: NotFound for a missing manifest, receipt or file; DataLoss for damage
// (bad checksum, truncation, a malformed line, a receipt of another node or clock);
// FailedPrecondition for a sound file of another format version; InvalidArgument for writes
// of things the format cannot hold.
//
// Thread-safety: stateless functions. Concurrent writers must write different files (one
// receipt per node; the MANIFEST by the launcher (CheckpointTracker) only).
#ifndef SYNCLINE_CHECKPOINT_CHECKPOINT_H_
#define SYNCLINE_CHECKPOINT_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/file_io.h"
#include "checkpoint/snapshot.h"

namespace syncline {

// ROOT/ckpt-<clock, 12 zero-padded digits>. `clock` must be in [0, 10^12).
std::string CheckpointDir(const std::string& root, int64_t clock);

// What one node wrote for a checkpoint.
struct NodeReceipt {
  std::string node;  // "ps0", "w1"
  int64_t clock = 0;
  std::vector<FileEntry> files;  // paths relative to the checkpoint dir
};

// Writes <dir>/<node>.receipt atomically (temp file, fsync, rename, fsync of the directory).
// InvalidArgument for a bad node name or file path, or a file listed twice.
absl::Status WriteReceipt(const std::string& checkpoint_dir, const NodeReceipt& receipt);
// Reads and checks <dir>/<node>.receipt (its node line must name `node`).
absl::StatusOr<NodeReceipt> ReadReceipt(const std::string& checkpoint_dir, const std::string& node);

struct Manifest {
  int64_t clock = 0;
  int64_t unix_seconds = 0;
  std::vector<std::string> nodes;  // every node whose receipt belongs to the checkpoint
  std::vector<std::pair<std::string, std::string>> job;  // free key/value description
};

// Writes <dir>/MANIFEST atomically; call it after every node's receipt is written, since it
// makes the checkpoint visible. InvalidArgument for a bad or repeated node name or an empty
// job key.
absl::Status WriteManifest(const std::string& checkpoint_dir, const Manifest& manifest);
absl::StatusOr<Manifest> ReadManifest(const std::string& checkpoint_dir);

// Full validation: the manifest (its clock must match the folder name when that is
// "ckpt-<12 digits>"), every node's receipt (same clock), and every listed file's size and
// CRC32C, e.g. DataLoss "ROOT/ckpt-000000000040/ps1/table-2.sst: 1048576 bytes, the receipt
// of ps1 says 2097152 (truncated)". Returns the manifest.
absl::StatusOr<Manifest> ValidateCheckpoint(const std::string& checkpoint_dir);

struct FoundCheckpoint {
  std::string dir;
  Manifest manifest;
  std::vector<std::string> skipped;  // "dir: reason" for every newer folder, newest first
};

// The newest checkpoint under root that validates; every newer ckpt-* folder that does not is
// listed in `skipped` with its reason. NotFound (naming root and what was skipped) when none
// validates or root does not exist. Other entries of root are ignored.
absl::StatusOr<FoundCheckpoint> FindNewestCheckpoint(const std::string& root);

// Whether root holds a checkpoint folder with a MANIFEST, valid or not; false when root does
// not exist. Any other error reading root (permissions, I/O) is returned, naming the path:
// a caller must not take "cannot tell" for "none".
absl::StatusOr<bool> HasCompleteCheckpoint(const std::string& root);

// Keeps the newest `keep` (>= 1) checkpoints that have a MANIFEST, deletes older ones and
// folders without a manifest older than the newest complete one; never deletes anything newer
// than the newest complete one (it may be in progress). A checkpoint's MANIFEST is removed
// first, so a deletion cut short leaves a folder without one. Returns the folders removed,
// oldest first. InvalidArgument for keep < 1.
absl::StatusOr<std::vector<std::string>> PruneCheckpoints(const std::string& root, int keep);

}  // namespace syncline

#endif  // SYNCLINE_CHECKPOINT_CHECKPOINT_H_
