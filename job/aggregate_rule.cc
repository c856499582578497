#include "job/aggregate_rule.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "job/options.h"

namespace syncline {
namespace {

constexpr char kAllowed[] =
    "expected mean, median, trimmed-mean:B with 0 <= B < 0.5, krum:F or bulyan:F with an "
    "integer F >= 0, or multi-krum:F:M with integers F >= 0 and M >= 1";

absl::Status BadText(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("bad aggregate rule \"", text, "\": ", why, " (", kAllowed, ")"));
}

// A plain decimal integer >= 0 that fits an int (SimpleAtoi alone would take " 3" and "+3").
bool ParseCount(absl::string_view text, int* out) {
  return !text.empty() && std::all_of(text.begin(), text.end(), absl::ascii_isdigit) &&
         absl::SimpleAtoi(text, out);
}

const char* KindName(AggregateKind kind) {
  switch (kind) {
    case AggregateKind::kMean:
      return "mean";
    case AggregateKind::kMedian:
      return "median";
    case AggregateKind::kTrimmedMean:
      return "trimmed-mean";
    case AggregateKind::kKrum:
      return "krum";
    case AggregateKind::kMultiKrum:
      return "multi-krum";
    case AggregateKind::kBulyan:
      return "bulyan";
  }
  return nullptr;
}

// The rule's own parameters, whatever n is.
absl::Status CheckParameters(const AggregateRule& rule) {
  switch (rule.kind) {
    case AggregateKind::kMean:
    case AggregateKind::kMedian:
      return absl::OkStatus();
    case AggregateKind::kTrimmedMean:
      if (!(rule.trim >= 0 && rule.trim < 0.5)) {  // also NaN
        return absl::InvalidArgumentError(
            absl::StrCat("aggregate rule ", AggregateRuleName(rule), ": trim is not in [0, 0.5)"));
      }
      return absl::OkStatus();
    case AggregateKind::kMultiKrum:
      if (rule.m < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("aggregate rule ", AggregateRuleName(rule), ": m = ", rule.m, " < 1"));
      }
      [[fallthrough]];
    case AggregateKind::kKrum:
    case AggregateKind::kBulyan:
      if (rule.f < 0) {
        return absl::InvalidArgumentError(absl::StrCat("aggregate rule ", AggregateRuleName(rule),
                                                       ": f = ", rule.f, " is negative"));
      }
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown aggregate rule kind ", static_cast<int>(rule.kind)));
}

// The bound on n of a rule whose parameters are valid: n >= min_n, with its text ("2f+3").
struct Bound {
  int64_t min_n;
  const char* text;
};

Bound LowerBound(const AggregateRule& rule) {
  const int64_t f = rule.f;
  switch (rule.kind) {
    case AggregateKind::kKrum:
      return {2 * f + 3, "2f+3"};
    case AggregateKind::kMultiKrum:
      // 2f+3 first: the Krum scores need it whatever m is.
      return 2 * f + 3 >= rule.m + f ? Bound{2 * f + 3, "2f+3"} : Bound{rule.m + f, "m+f"};
    case AggregateKind::kBulyan:
      return {4 * f + 3, "4f+3"};
    case AggregateKind::kMean:
    case AggregateKind::kMedian:
    case AggregateKind::kTrimmedMean:
      break;
  }
  return {1, nullptr};
}

}  // namespace

absl::StatusOr<AggregateRule> ParseAggregateRule(std::string_view std_text) {
  // This abseil's string_view may be its own type rather than std::string_view.
  const absl::string_view text(std_text.data(), std_text.size());
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  const absl::string_view name = parts[0];
  const size_t args = parts.size() - 1;
  AggregateRule rule;
  if (name == "mean" || name == "median") {
    if (args != 0) return BadText(text, absl::StrCat(name, " takes no parameter"));
    rule.kind = name == "mean" ? AggregateKind::kMean : AggregateKind::kMedian;
    return rule;
  }
  if (name == "trimmed-mean") {
    if (args != 1) return BadText(text, "trimmed-mean takes one parameter, the fraction B");
    const absl::string_view arg = parts[1];
    double trim = 0;
    // SimpleAtod would skip surrounding whitespace.
    if (arg.empty() || std::any_of(arg.begin(), arg.end(), absl::ascii_isspace) ||
        !absl::SimpleAtod(arg, &trim) || !(trim >= 0 && trim < 0.5)) {
      return BadText(text, absl::StrCat("B \"", arg, "\" is not a number in [0, 0.5)"));
    }
    rule.kind = AggregateKind::kTrimmedMean;
    rule.trim = trim;
    return rule;
  }
  if (name == "krum" || name == "bulyan" || name == "multi-krum") {
    const bool multi = name == "multi-krum";
    if (args != (multi ? 2u : 1u)) {
      return BadText(text, multi ? "multi-krum takes two parameters, F and M"
                                 : absl::StrCat(name, " takes one parameter, F"));
    }
    if (!ParseCount(parts[1], &rule.f)) {
      return BadText(text, absl::StrCat("F \"", parts[1], "\" is not an integer >= 0"));
    }
    if (multi && (!ParseCount(parts[2], &rule.m) || rule.m < 1)) {
      return BadText(text, absl::StrCat("M \"", parts[2], "\" is not an integer >= 1"));
    }
    rule.kind = name == "krum"     ? AggregateKind::kKrum
                : name == "bulyan" ? AggregateKind::kBulyan
                                   : AggregateKind::kMultiKrum;
    return rule;
  }
  return BadText(text, "unknown rule");
}

std::string AggregateRuleName(const AggregateRule& rule) {
  switch (rule.kind) {
    case AggregateKind::kMean:
    case AggregateKind::kMedian:
      return KindName(rule.kind);
    case AggregateKind::kTrimmedMean:
      return absl::StrCat("trimmed-mean:", ShortestDouble(rule.trim));
    case AggregateKind::kKrum:
    case AggregateKind::kBulyan:
      return absl::StrCat(KindName(rule.kind), ":", rule.f);
    case AggregateKind::kMultiKrum:
      return absl::StrCat("multi-krum:", rule.f, ":", rule.m);
  }
  return absl::StrCat("unknown(", static_cast<int>(rule.kind), ")");
}

absl::Status CheckAggregateRule(const AggregateRule& rule, int n) {
  if (absl::Status status = CheckParameters(rule); !status.ok()) return status;
  const Bound bound = LowerBound(rule);
  if (n < bound.min_n) {
    if (bound.text == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(AggregateRuleName(rule), " needs at least 1 update, has ", n));
    }
    return absl::InvalidArgumentError(absl::StrCat(AggregateRuleName(rule), " needs at least ",
                                                   bound.text, " = ", bound.min_n, " updates, has ",
                                                   n));
  }
  if (rule.kind == AggregateKind::kTrimmedMean) {
    const int64_t dropped = 2 * static_cast<int64_t>(std::floor(rule.trim * n));
    if (dropped >= n) {
      return absl::InvalidArgumentError(absl::StrCat(AggregateRuleName(rule),
                                                     " drops 2 floor(B n) = ", dropped, " of ", n,
                                                     " updates, leaving none"));
    }
  }
  return absl::OkStatus();
}

int MinUpdatesFor(const AggregateRule& rule) {
  if (!CheckParameters(rule).ok()) return std::numeric_limits<int>::max();
  // trimmed-mean: 2 floor(B n) <= 2 B n < n for every n >= 1 when B < 0.5.
  const int64_t min_n = LowerBound(rule).min_n;
  return static_cast<int>(std::min<int64_t>(min_n, std::numeric_limits<int>::max()));
}

}  // namespace syncline
