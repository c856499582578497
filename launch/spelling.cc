#include "launch/spelling.h"

#include <algorithm>
#include <cstddef>

#include "absl/strings/str_cat.h"

namespace syncline {
namespace {

char Fold(char c) { return c == '_' ? '-' : c; }

// Optimal string alignment distance (Damerau-Levenshtein without repeated edits of a
// substring), so that a swapped pair of letters ("sever" for "serve") costs one edit.
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = Fold(a[i - 1]) == Fold(b[j - 1]) ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && Fold(a[i - 1]) == Fold(b[j - 2]) && Fold(a[i - 2]) == Fold(b[j - 1])) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::optional<std::string> ClosestName(absl::string_view typed,
                                       const std::vector<std::string>& candidates) {
  // Names are short; a long typo is no typo of them (and would cost a big table).
  if (typed.empty() || typed.size() > 64) return std::nullopt;
  // One edit in a name of up to 3 letters; 2, or a third of a longer one, up to 3.
  const size_t most =
      typed.size() <= 3 ? 1 : std::min<size_t>(3, std::max<size_t>(2, typed.size() / 3));
  std::optional<std::string> best;
  size_t best_distance = most + 1;
  for (const std::string& candidate : candidates) {
    if (candidate.size() > 64) continue;
    const size_t distance = EditDistance(typed, candidate);
    if (distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

std::string DidYouMean(absl::string_view typed, const std::vector<std::string>& candidates,
                       absl::string_view prefix) {
  const std::optional<std::string> closest = ClosestName(typed, candidates);
  if (!closest) return "";
  return absl::StrCat(" (did you mean '", prefix, *closest, "'?)");
}

}  // namespace syncline
