// Parsing a memory budget for embedding tables, as users write it: "2GiB", "512MiB", "1.5GB",
// "64KiB", "4096B" (bytes) or "1000000rows" (rows).
//
// Thread-safety: stateless.
#ifndef SYNCLINE_EMBEDDINGS_MEMORY_BUDGET_H_
#define SYNCLINE_EMBEDDINGS_MEMORY_BUDGET_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace syncline {

struct MemoryBudget {
  uint64_t rows = 0;   // 0: no row limit
  uint64_t bytes = 0;  // 0: no byte limit
};

// KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB powers of 1000; units are case-insensitive
// and may follow a space. A number without a unit, zero, a negative or fractional row count
// and an unknown unit are InvalidArgument naming the text.
absl::StatusOr<MemoryBudget> ParseMemoryBudget(const std::string& text);

}  // namespace syncline

#endif  // SYNCLINE_EMBEDDINGS_MEMORY_BUDGET_H_
