// The nearest of a few known names to a mistyped one, for "did you mean ...?" in the messages
// about unknown flags, job-file keys and subcommands.
//
// Thread-safety: pure functions.
#ifndef SYNCLINE_LAUNCH_SPELLING_H_
#define SYNCLINE_LAUNCH_SPELLING_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace syncline {

// The candidate closest to `typed` by edit distance (insertions, deletions, substitutions and
// swaps of two neighbouring letters; '_' and '-' count as the same), when it is close enough to
// be the one meant: one edit away for a name of up to 3 letters, else 2 or a third of its
// length, at most 3. The first of equally close candidates wins; nullopt when none is close.
std::optional<std::string> ClosestName(absl::string_view typed,
                                       const std::vector<std::string>& candidates);

// " (did you mean 'PREFIXNAME'?)" for the closest candidate NAME, or "" when none is close.
std::string DidYouMean(absl::string_view typed, const std::vector<std::string>& candidates,
                       absl::string_view prefix = "");

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_SPELLING_H_
