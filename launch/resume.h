// The launcher's rules for a run folder and its checkpoints: one launcher per folder, a fresh
// run sets an earlier run's checkpoints aside (never deleting them), and --resume starts from
// the newest complete checkpoint written by the same job.
//
// Thread-safety: functions of the file system; call from one thread.
#ifndef SYNCLINE_LAUNCH_RESUME_H_
#define SYNCLINE_LAUNCH_RESUME_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "syncline/job_spec.h"

namespace syncline {

// Refuses a run or checkpoint folder that another user could have written links into: one
// that is not a folder (a link to one is followed), belongs to another user, or that group or
// others may write; or that holds (directly, or in logs/) an entry of another user's.
// PermissionDenied names the folder and the fix.
absl::Status CheckRunFolder(const std::string& folder);

// Creates `folder` (private to the user under syncline-launch's umask), checks it
// (CheckRunFolder) and takes `folder`/.syncline-launch.lock (mode 0600, never through a link) for
// as long as this process lives (the descriptor is closed on exec, so children do not hold it): two
// launchers writing one run folder or one checkpoint folder would mix their files and move each
// other's checkpoints.
absl::Status LockFolder(const std::string& folder);

// Locks the run folder `out`, and the checkpoint folder when the job checkpoints or resumes
// (unless it is the run folder itself).
absl::Status LockRunFolders(const JobSpec& spec, const std::string& out, bool resumes);

// Moves every ckpt-* folder under `root` into a new folder root/earlier-run-<UTC time> (never
// deleting anything); returns that folder and how many were moved (0: none, and no folder
// made). An error names the path that could not be read, made or moved.
absl::StatusOr<std::pair<std::string, int>> SetAsideEarlierRun(const std::string& root);

// Renames every checkpoint folder newer than `clock` under `root` to abandoned-<name>, after
// deleting what an earlier resume set aside (only the latest failed attempt is kept for a
// post-mortem); returns the new names.
std::vector<std::string> AbandonNewerCheckpoints(const std::string& root, int64_t clock);

// Whether a checkpoint's manifest setting `key` (as it recorded it) is this run's `now`: the
// same text, or for the training file the same file by another path (relative or absolute,
// through links).
bool SameManifestSetting(const std::string& key, const std::string& recorded,
                         const std::string& now);

// Gets the checkpoint folder ready for a run of `spec`: with `resume` (or `resume_if_any` and a
// complete checkpoint there) finds the newest complete checkpoint, checks that the same job
// wrote it (ManifestEntries, servers, workers, and for gossip that every peer is in it), sets
// newer folders aside, and names it in spec->checkpoint.restore; a fresh run that checkpoints
// sets an earlier run's checkpoints aside. Says what it does on stderr. Returns the clock the
// run starts from (-1: a fresh start); an error (exit code 2) says why the run cannot start.
absl::StatusOr<int64_t> PrepareCheckpoints(JobSpec* spec, bool resume, bool resume_if_any);

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_RESUME_H_
