#include "launch/resume.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <iostream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "checkpoint/checkpoint.h"
#include "job/job_spec.h"

namespace syncline {

namespace fs = std::filesystem;

absl::Status CheckRunFolder(const std::string& folder) {
  struct stat st = {};
  if (lstat(folder.c_str(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot stat ", folder));
  }
  // A link to a folder is followed once, here, and the folder it names is checked.
  if (S_ISLNK(st.st_mode) && stat(folder.c_str(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot stat ", folder));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(folder, " is not a folder"));
  }
  if (st.st_uid != geteuid()) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s belongs to user %d, not to this one (%d): its owner could put links to other files "
        "in it, which the run would write through; choose a folder of your own",
        folder, st.st_uid, geteuid()));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "%s may be written by other users (mode %04o): they could put links to other files in "
        "it, which the run would write through; run chmod go-w %s (docs/SECURITY.md says how to "
        "share a run folder)",
        folder, st.st_mode & 07777, folder));
  }
  // What another user made here while they could write the folder stays theirs: refuse it
  // rather than write through it.
  std::error_code ec;
  for (const fs::path& dir : {fs::path(folder), fs::path(folder) / "logs"}) {
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      struct stat e = {};
      if (lstat(entry.path().c_str(), &e) == 0 && e.st_uid != geteuid()) {
        return absl::PermissionDeniedError(absl::StrFormat(
            "%s belongs to user %d, not to this one: another user could write %s once; remove "
            "what they left",
            entry.path().string(), e.st_uid, dir.string()));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status LockFolder(const std::string& folder) {
  std::error_code ec;
  fs::create_directories(folder, ec);
  if (absl::Status s = CheckRunFolder(folder); !s.ok()) return s;
  const std::string path = (fs::path(folder) / ".syncline-launch.lock").string();
  // 0600: a lock others can open is a lock others can hold (flock needs only a read-only
  // descriptor), and no launch could run.
  const int fd = open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open the lock ", path));
  }
  struct stat st = {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
      ((st.st_mode & 077) != 0 && fchmod(fd, 0600) != 0)) {
    close(fd);
    return absl::PermissionDeniedError(
        absl::StrCat(path, " is not a lock file of this user's (remove it)"));
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat(folder, " is in use by another syncline-launch (", path, " is locked)"));
  }
  return absl::OkStatus();  // the descriptor stays open, and locked, until exit
}

absl::Status LockRunFolders(const JobSpec& spec, const std::string& out, bool resumes) {
  if (auto s = LockFolder(out); !s.ok()) return s;
  std::error_code ec;
  if ((spec.checkpoint.enabled() || resumes) &&
      fs::weakly_canonical(spec.checkpoint.dir, ec) != fs::weakly_canonical(out, ec)) {
    return LockFolder(spec.checkpoint.dir);
  }
  return absl::OkStatus();
}

std::vector<std::string> AbandonNewerCheckpoints(const std::string& root, int64_t clock) {
  std::vector<std::string> moved;
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (entry.path().filename().string().starts_with("abandoned-")) stale.push_back(entry.path());
  }
  for (const fs::path& p : stale) fs::remove_all(p, ec);
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t c = 0;
    if (!name.starts_with("ckpt-") || !absl::SimpleAtoi(name.substr(5), &c) || c <= clock) {
      continue;
    }
    const fs::path to = fs::path(root) / ("abandoned-" + name);
    fs::remove_all(to, ec);
    fs::rename(entry.path(), to, ec);
    if (!ec) moved.push_back(to.string());
  }
  return moved;
}

absl::StatusOr<std::pair<std::string, int>> SetAsideEarlierRun(const std::string& root) {
  std::error_code ec;
  if (!fs::exists(root, ec)) {
    if (ec) return absl::InternalError(absl::StrCat("cannot stat ", root, ": ", ec.message()));
    return std::make_pair(std::string(), 0);
  }
  std::vector<fs::path> earlier;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (entry.path().filename().string().starts_with("ckpt-")) earlier.push_back(entry.path());
  }
  if (ec) return absl::InternalError(absl::StrCat("cannot list ", root, ": ", ec.message()));
  if (earlier.empty()) return std::make_pair(std::string(), 0);
  const std::string stamp = absl::FormatTime("%Y%m%d-%H%M%SZ", absl::Now(), absl::UTCTimeZone());
  fs::path to = fs::path(root) / ("earlier-run-" + stamp);
  // create_directory says whether it made the folder: one that exists is another run's.
  for (int n = 2; !fs::create_directory(to, ec); ++n) {
    if (ec) {
      return absl::InternalError(absl::StrCat("cannot create ", to.string(), ": ", ec.message()));
    }
    to = fs::path(root) / absl::StrCat("earlier-run-", stamp, "-", n);
  }
  for (const fs::path& p : earlier) {
    fs::rename(p, to / p.filename(), ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("cannot move ", p.string(), " to ", to.string(), ": ", ec.message()));
    }
  }
  return std::make_pair(to.string(), static_cast<int>(earlier.size()));
}

bool SameManifestSetting(const std::string& key, const std::string& recorded,
                         const std::string& now) {
  if (recorded == now) return true;
  if (key != "train" || recorded.empty() || now.empty()) return false;
  std::error_code a_error, b_error;
  const fs::path a = fs::weakly_canonical(recorded, a_error);
  const fs::path b = fs::weakly_canonical(now, b_error);
  return !a_error && !b_error && a == b;
}

absl::StatusOr<int64_t> PrepareCheckpoints(JobSpec* spec, bool resume, bool resume_if_any) {
  const std::string& root = spec->checkpoint.dir;
  if (resume_if_any) {
    // Complete checkpoints (damaged ones too: --resume then says what is wrong with them
    // instead of this run quietly starting over); folders without a MANIFEST do not count.
    absl::StatusOr<bool> any = HasCompleteCheckpoint(root);
    if (!any.ok())
      return absl::Status(any.status().code(),
                          absl::StrCat("--resume-if-any: ", any.status().message()));
    resume = *any;
    if (!resume) std::cerr << "no complete checkpoint in " << root << ": starting afresh\n";
  }
  if (!resume) {
    if (spec->checkpoint.enabled()) {
      // A fresh run writes ckpt-<clock> folders: an earlier run's must not mix with them, and
      // must not be lost either (a forgotten --resume).
      absl::StatusOr<std::pair<std::string, int>> moved = SetAsideEarlierRun(root);
      if (!moved.ok()) return moved.status();
      if (moved->second > 0) {
        std::cerr << "syncline-launch: moved " << moved->second
                  << " checkpoint folder(s) of an earlier run to " << moved->first
                  << " (--resume continues a run instead; delete the folder when it is not "
                     "needed)\n";
      }
    }
    return -1;
  }
  auto found = FindNewestCheckpoint(root);
  if (!found.ok()) {
    return absl::Status(found.status().code(),
                        absl::StrCat("--resume: ", found.status().message()));
  }
  for (const std::string& skipped : found->skipped) {
    std::cerr << "syncline-launch: skipping a damaged or partial checkpoint: " << skipped << "\n";
  }
  std::vector<std::pair<std::string, std::string>> expected = ManifestEntries(*spec);
  expected.emplace_back("servers", absl::StrCat(spec->servers));
  expected.emplace_back("workers", absl::StrCat(spec->workers));
  for (const auto& entry : found->manifest.job) {
    const std::string& key = entry.first;
    const std::string& value = entry.second;
    auto it = std::find_if(expected.begin(), expected.end(),
                           [&key](const auto& kv) { return kv.first == key; });
    if (it != expected.end() && !SameManifestSetting(key, value, it->second)) {
      return absl::FailedPreconditionError(
          absl::StrCat("--resume: ", found->dir, " was written by a job with --", key, " ", value,
                       "; this job has ", it->second,
                       " (resume with the same settings, or start afresh with another --out)"));
    }
  }
  if (spec->sync.serverless() || spec->sync.hybrid()) {
    // A serverless (or hybrid) worker missing from the checkpoint (lost, or finished before
    // it) would come back with an empty model (that gossip neighbours average in, or that
    // all-reduce sums gradients against); resume only with every worker.
    for (int w = 0; w < spec->workers; ++w) {
      const std::string node = absl::StrCat("w", w);
      if (std::find(found->manifest.nodes.begin(), found->manifest.nodes.end(), node) ==
          found->manifest.nodes.end()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "--resume: ", found->dir, " holds no state of ", node,
            " (lost or finished before it); serverless workers resume only from a checkpoint of "
            "every peer: move this folder aside to use an older one"));
      }
    }
  }
  spec->checkpoint.restore = found->dir;
  const int64_t clock = found->manifest.clock;
  // Folders newer than the one resumed from belong to the attempt that failed: set them aside,
  // so that neither pruning nor a later --resume mixes them with this run's.
  for (const std::string& dir : AbandonNewerCheckpoints(root, clock)) {
    std::cerr << "syncline-launch: set aside " << dir << "\n";
  }
  std::cerr << "resuming from " << found->dir << " (clock " << clock << ")\n";
  return clock;
}

}  // namespace syncline
