#include "launch/tensorboard_writer.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/crc32c.h"

namespace syncline {
namespace {

void Varint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

template <typename T>
void LittleEndian(T v, std::string* out) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &v, sizeof(T));  // x86 and ARM Linux are little-endian
  out->append(bytes, sizeof(T));
}

// A length-delimited field: its key, its length, its bytes.
void Bytes(int field, absl::string_view bytes, std::string* out) {
  Varint(static_cast<uint64_t>(field) << 3 | 2, out);
  Varint(bytes.size(), out);
  out->append(bytes.data(), bytes.size());
}

}  // namespace

uint32_t MaskedCrc32c(const void* data, size_t n) {
  const uint32_t crc = Crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string EncodeScalarEvent(double wall_seconds, int64_t step, absl::string_view tag,
                              float value) {
  std::string event;
  Varint(1 << 3 | 1, &event);  // wall_time: fixed64
  LittleEndian(wall_seconds, &event);
  Varint(2 << 3 | 0, &event);  // step: varint (two's complement for a negative one)
  Varint(static_cast<uint64_t>(step), &event);
  if (tag.empty()) {
    Bytes(3, "brain.Event:2", &event);
    return event;
  }
  std::string v;
  Bytes(1, tag, &v);       // Summary.Value.tag
  Varint(2 << 3 | 5, &v);  // Summary.Value.simple_value: fixed32
  LittleEndian(value, &v);
  std::string summary;
  Bytes(1, v, &summary);      // Summary.value
  Bytes(5, summary, &event);  // Event.summary
  return event;
}

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Create(
    const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return absl::PermissionDeniedError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const double now = absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch());
  const std::string path =
      (std::filesystem::path(dir) /
       absl::StrFormat("events.out.tfevents.%d.%s", static_cast<int64_t>(now), host))
          .string();
  std::unique_ptr<TensorBoardWriter> writer(new TensorBoardWriter(path));
  absl::MutexLock lock(&writer->mu_);
  writer->out_.open(path, std::ios::binary | std::ios::trunc);
  if (!writer->out_) return absl::PermissionDeniedError(absl::StrCat("cannot write ", path));
  writer->WriteRecord(EncodeScalarEvent(now, 0, "", 0));
  return writer;
}

void TensorBoardWriter::Scalar(absl::string_view tag, int64_t step, double value,
                               double wall_seconds) {
  absl::MutexLock lock(&mu_);
  WriteRecord(EncodeScalarEvent(wall_seconds, step, tag, static_cast<float>(value)));
}

void TensorBoardWriter::WriteRecord(const std::string& payload) {
  std::string record;
  LittleEndian(static_cast<uint64_t>(payload.size()), &record);
  LittleEndian(MaskedCrc32c(record.data(), 8), &record);
  record += payload;
  LittleEndian(MaskedCrc32c(payload.data(), payload.size()), &record);
  out_.write(record.data(), static_cast<std::streamsize>(record.size()));
  out_.flush();
}

}  // namespace syncline
