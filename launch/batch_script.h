// The Slurm batch script that `syncline-launch --sbatch` writes (OUT/job.sbatch): it runs the
// launcher itself, with the same arguments and --launcher slurm, inside the allocation.
//
// Everything in it comes from the user's command line and job file, and a script is where
// text becomes commands: every argument is shell-quoted, the #SBATCH directive's path is
// quoted as sbatch reads quotes (with "%" written "%%", which Slurm would expand), and any
// piece with a control character (which could start a line of its own) or, in the directive,
// a quote or backslash, is refused naming it. The file is written fresh (O_EXCL|O_NOFOLLOW),
// mode 0700, never through a link.
//
// Thread-safety: stateless functions; safe from any thread.
#ifndef SYNCLINE_LAUNCH_BATCH_SCRIPT_H_
#define SYNCLINE_LAUNCH_BATCH_SCRIPT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace syncline {

struct BatchScript {
  std::string launcher;           // the launcher's absolute path
  std::vector<std::string> args;  // its arguments (--launcher slurm among them)
  std::string working_dir;        // where the batch step starts it
  std::string output;             // the step's log (#SBATCH --output), an absolute path
  int tasks = 1;                  // #SBATCH --ntasks: the job's nodes
};

// The script's text; InvalidArgument naming the piece that cannot go into it.
absl::StatusOr<std::string> BatchScriptText(const BatchScript& script);

// Writes `text` to `path` as a new file of mode 0700: what was at `path` is removed first (a
// link, not what it points to), and the file is created with O_EXCL|O_NOFOLLOW.
absl::Status WriteBatchScript(const std::string& path, const std::string& text);

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_BATCH_SCRIPT_H_
