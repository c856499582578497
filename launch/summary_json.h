// Reading summary.json (what RunReport writes) back: for experiments that compare runs, for
// tests and for benchmarks.
#ifndef SYNCLINE_LAUNCH_SUMMARY_JSON_H_
#define SYNCLINE_LAUNCH_SUMMARY_JSON_H_

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace syncline {

struct JsonField {
  std::optional<double> number;
  std::optional<std::string> text;
};
using SummaryFields = std::map<std::string, JsonField>;

// The numbers and strings of a JSON object by key; the fields of a nested object under
// "outer.inner". null, booleans and arrays are skipped. InvalidArgument naming the byte
// offset for text that is not one JSON object.
absl::StatusOr<SummaryFields> ParseSummaryJson(std::string_view text);

// The number at `key`, else at the one nested key that ends in "." + key; nullopt when there is
// none, it is not a number, or several nested keys match.
std::optional<double> SummaryNumber(const SummaryFields& fields, std::string_view key);

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_SUMMARY_JSON_H_
