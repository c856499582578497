// The RocksDB tier's byte formats: keys that sort by (table, id), and row values with a small
// header and a CRC32C, so that a damaged or foreign value is reported, never trusted.
//
// Key:   'r' | table id (4 bytes, big-endian) | row id (8 bytes, big-endian); big-endian so a
//        RocksDB iterator walks one table's rows in ascending id order.
// Value: magic "SYEM" | version (2) | reserved (2) | dim (4) | state floats per weight (4) |
//        reserved (4) | step (8) | last touched step (8) | dim * (1 + state) floats |
//        CRC32C of everything before it (4). Integers and floats are little-endian.
//
// Thread-safety: stateless functions.
#ifndef SYNCLINE_EMBEDDINGS_ROW_CODEC_H_
#define SYNCLINE_EMBEDDINGS_ROW_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "core/crc32c.h"

namespace syncline {

inline constexpr size_t kRowKeySize = 13;
inline constexpr size_t kRowHeaderSize = 36;

// The key of row `id` of table `table`; `out` holds kRowKeySize bytes.
void EncodeRowKey(uint32_t table, uint64_t id, char* out);
// The first key of table `table` (every row key of the table starts with it); 5 bytes.
std::string RowKeyPrefix(uint32_t table);
// Parses a row key of `table`; false when `key` is not one.
bool DecodeRowKey(const char* key, size_t size, uint32_t table, uint64_t* id);

// The fixed layout of one row.
struct RowShape {
  uint32_t dim = 0;
  uint32_t state_per_weight = 0;
  size_t floats() const { return static_cast<size_t>(dim) * (1 + state_per_weight); }
  size_t value_size() const { return kRowHeaderSize + floats() * sizeof(float) + 4; }
};

// Writes the value of a row into `out` (resized to shape.value_size()). `floats` holds the
// weights then the optimizer state, shape.floats() in all.
void EncodeRowValue(const RowShape& shape, int64_t step, int64_t last_touch, const float* floats,
                    std::string* out);

// Validates and decodes a value written by EncodeRowValue for a row of `shape`. A value with a
// wrong size, magic or checksum is DataLoss naming `id`; a sound value written for another
// shape (dim or optimizer changed) is FailedPrecondition. `floats` may be null (header only).
absl::Status DecodeRowValue(const RowShape& shape, uint64_t id, const char* data, size_t size,
                            int64_t* step, int64_t* last_touch, float* floats);

}  // namespace syncline

#endif  // SYNCLINE_EMBEDDINGS_ROW_CODEC_H_
