#include "embeddings/memory_budget.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "embeddings/row_index.h"

namespace syncline {

absl::StatusOr<MemoryBudget> ParseMemoryBudget(const std::string& text) {
  const auto bad = [&](const char* why) {
    return absl::InvalidArgumentError(
        absl::StrFormat("memory budget '%s': %s (examples: 2GiB, 512MiB, 1000000rows)", text, why));
  };
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    ++i;
  }
  if (i == 0) return bad("expected a number first");
  const std::string number = text.substr(0, i);
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(value) || value <= 0) {
    return bad("the number must be positive");
  }
  std::string unit = absl::AsciiStrToLower(text.substr(i));
  if (!unit.empty() && unit.front() == ' ') unit.erase(0, 1);
  MemoryBudget budget;
  if (unit == "rows" || unit == "row") {
    if (value != std::floor(value)) return bad("a row count must be a whole number");
    if (value > static_cast<double>(RowIndex::kMostRows)) {
      return bad(absl::StrFormat("at most %d rows", RowIndex::kMostRows).c_str());
    }
    budget.rows = static_cast<uint64_t>(value);
    return budget;
  }
  double scale = 0;
  if (unit == "b") scale = 1;
  if (unit == "kib") scale = 1024.0;
  if (unit == "mib") scale = 1024.0 * 1024;
  if (unit == "gib") scale = 1024.0 * 1024 * 1024;
  if (unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  if (unit == "kb") scale = 1e3;
  if (unit == "mb") scale = 1e6;
  if (unit == "gb") scale = 1e9;
  if (unit == "tb") scale = 1e12;
  if (scale == 0) {
    return bad(unit.empty() ? "give a unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB or rows)"
                            : "unknown unit");
  }
  const double bytes = value * scale;
  if (bytes < 1 || bytes > 9.0e18) return bad("out of range");
  budget.bytes = static_cast<uint64_t>(bytes);
  return budget;
}

}  // namespace syncline
