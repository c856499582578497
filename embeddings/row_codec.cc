#include "embeddings/row_codec.h"

#include <bit>
#include <cstring>

#include "absl/strings/str_format.h"

namespace syncline {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the row format stores host floats; a big-endian host needs byte swaps here");

constexpr uint32_t kMagic = 0x4d455953;  // "SYEM" read as little-endian
constexpr uint16_t kVersion = 1;

template <typename T>
void Put(char*& p, T v) {
  std::memcpy(p, &v, sizeof(v));
  p += sizeof(v);
}
template <typename T>
T Get(const char*& p) {
  T v;
  std::memcpy(&v, p, sizeof(v));
  p += sizeof(v);
  return v;
}

}  // namespace

void EncodeRowKey(uint32_t table, uint64_t id, char* out) {
  out[0] = 'r';
  for (int i = 0; i < 4; ++i) out[1 + i] = static_cast<char>(table >> (24 - 8 * i));
  for (int i = 0; i < 8; ++i) out[5 + i] = static_cast<char>(id >> (56 - 8 * i));
}

std::string RowKeyPrefix(uint32_t table) {
  char key[kRowKeySize];
  EncodeRowKey(table, 0, key);
  return std::string(key, 5);
}

bool DecodeRowKey(const char* key, size_t size, uint32_t table, uint64_t* id) {
  char prefix[kRowKeySize];
  EncodeRowKey(table, 0, prefix);
  if (size != kRowKeySize || std::memcmp(key, prefix, 5) != 0) return false;
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | static_cast<unsigned char>(key[5 + i]);
  *id = v;
  return true;
}

void EncodeRowValue(const RowShape& shape, int64_t step, int64_t last_touch, const float* floats,
                    std::string* out) {
  out->resize(shape.value_size());
  char* p = out->data();
  Put(p, kMagic);
  Put(p, kVersion);
  Put(p, uint16_t{0});
  Put(p, shape.dim);
  Put(p, shape.state_per_weight);
  Put(p, uint32_t{0});
  Put(p, step);
  Put(p, last_touch);
  std::memcpy(p, floats, shape.floats() * sizeof(float));
  p += shape.floats() * sizeof(float);
  Put(p, Crc32c(out->data(), static_cast<size_t>(p - out->data())));
}

absl::Status DecodeRowValue(const RowShape& shape, uint64_t id, const char* data, size_t size,
                            int64_t* step, int64_t* last_touch, float* floats) {
  if (size < kRowHeaderSize + 4) {
    return absl::DataLossError(
        absl::StrFormat("embedding row %d: value of %d bytes is shorter than a header", id, size));
  }
  uint32_t stored_crc;
  std::memcpy(&stored_crc, data + size - 4, 4);
  if (Crc32c(data, size - 4) != stored_crc) {
    return absl::DataLossError(
        absl::StrFormat("embedding row %d: checksum mismatch (%d bytes)", id, size));
  }
  const char* p = data;
  const uint32_t magic = Get<uint32_t>(p);
  const uint16_t version = Get<uint16_t>(p);
  Get<uint16_t>(p);
  const uint32_t dim = Get<uint32_t>(p);
  const uint32_t state = Get<uint32_t>(p);
  Get<uint32_t>(p);
  if (magic != kMagic || version != kVersion) {
    return absl::DataLossError(absl::StrFormat(
        "embedding row %d: not a row value (magic %#x, version %d)", id, magic, version));
  }
  if (dim != shape.dim || state != shape.state_per_weight) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "embedding row %d was written with dim %d and %d state floats per weight; the table "
        "has dim %d and %d",
        id, dim, state, shape.dim, shape.state_per_weight));
  }
  if (size != shape.value_size()) {
    return absl::DataLossError(absl::StrFormat("embedding row %d: value has %d bytes, expected %d",
                                               id, size, shape.value_size()));
  }
  *step = Get<int64_t>(p);
  *last_touch = Get<int64_t>(p);
  if (floats != nullptr) std::memcpy(floats, p, shape.floats() * sizeof(float));
  return absl::OkStatus();
}

}  // namespace syncline
