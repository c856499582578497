// Which of the launcher's flags apply to which sync mode: one table (flag_modes.cc), which the
// launcher checks a job against and docs/FLAGS.md shows. A flag given for a mode that ignores
// it is refused (exit 2) when the mismatch is explicit: the flag and the mode both given on the
// command line, or both in the job file (--servers 3 with --sync allreduce, which has no
// servers); a flag that the job file sets for a mode the command line chose is ignored with a
// warning, as is a flag whose table row says to warn (a limit of servers the mode does not
// have). Flags not in the table apply to every mode.
//
// Thread-safety: pure functions over constant tables.
#ifndef SYNCLINE_LAUNCH_FLAG_MODES_H_
#define SYNCLINE_LAUNCH_FLAG_MODES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "launch/job_config.h"
#include "syncline/options.h"

namespace syncline {

// The sync modes as the table tells them apart (ssp:S of any S is ssp, gossip of any topology
// gossip, ...).
enum class ModeFamily { kBsp, kAsp, kSsp, kGossip, kAllReduce, kHybrid, kFedAvg };
inline constexpr ModeFamily kModeFamilies[] = {
    ModeFamily::kBsp,       ModeFamily::kAsp,    ModeFamily::kSsp,   ModeFamily::kGossip,
    ModeFamily::kAllReduce, ModeFamily::kHybrid, ModeFamily::kFedAvg};
ModeFamily FamilyOf(const SyncMode& sync);
const char* FamilyName(ModeFamily family);  // "bsp", ..., "allreduce", "hybrid", "fedavg"

// What the launcher does with a flag given for a mode that ignores it.
enum class Mismatch {
  kRefuse,  // exit 2 when explicit (see above), else a warning
  kWarn,    // a warning: the flag is ignored
};

// A flag that the job's mode ignores, and the launcher's verdict.
struct IgnoredFlag {
  std::string flag;  // without dashes
  bool refused = false;
  std::string message;  // names the flag (and its file and line), the mode and where it applies
};

// The flags in `config.given` that the job's mode `sync` ignores, in the table's order; then
// the --gen-* flags when no data is generated (--train given, or --external-workers, which
// bring their own).
std::vector<IgnoredFlag> IgnoredFlags(const SyncMode& sync, const JobConfig& config);

// The launcher's check of a job: an InvalidArgument error naming the first refused flag, or
// the warnings for the flags ignored (empty when every flag given applies).
absl::StatusOr<std::vector<std::string>> CheckFlagsApply(const SyncMode& sync,
                                                         const JobConfig& config);

// The table as Markdown, for docs/FLAGS.md: one row per flag that some mode ignores, a column
// per mode family.
std::string FlagModesMarkdown();

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_FLAG_MODES_H_
