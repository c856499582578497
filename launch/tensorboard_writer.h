// TensorBoardWriter: scalars in TensorBoard's event file format, written without TensorFlow or
// protobuf: OUT/tensorboard/events.out.tfevents.<seconds>.<host>, which `tensorboard --logdir
// OUT/tensorboard` reads.
//
// The file is a sequence of TFRecords (each: its length as 8 bytes little-endian, a masked
// CRC32C of those 8 bytes, the payload, a masked CRC32C of the payload), each payload one
// tensorflow.Event protobuf: {wall_time = 1 (double), step = 2 (int64), file_version = 3
// (string) or summary = 5 (Summary: value = 1, each {tag = 1 (string), simple_value = 2
// (float)})}. The first record carries file_version "brain.Event:2". The few fields are
// encoded by hand (EncodeScalarEvent); every record is flushed as it is written, so a reader
// sees the run as it goes.
//
// Thread-safety: thread-safe.
#ifndef SYNCLINE_LAUNCH_TENSORBOARD_WRITER_H_
#define SYNCLINE_LAUNCH_TENSORBOARD_WRITER_H_

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace syncline {

class TensorBoardWriter {
 public:
  // Creates `dir` and a new event file in it.
  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> Create(const std::string& dir);

  // One scalar of series `tag` ("train/loss") at `step`, at `wall_seconds` since the epoch.
  void Scalar(absl::string_view tag, int64_t step, double value, double wall_seconds);

  const std::string& path() const { return path_; }

 private:
  explicit TensorBoardWriter(std::string path) : path_(std::move(path)) {}
  void WriteRecord(const std::string& payload) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  absl::Mutex mu_;
  std::ofstream out_ ABSL_GUARDED_BY(mu_);
};

// The payload of an Event with one scalar (exposed for tests); an empty `tag` gives the
// file_version event instead.
std::string EncodeScalarEvent(double wall_seconds, int64_t step, absl::string_view tag,
                              float value);
// TFRecord's masked CRC32C.
uint32_t MaskedCrc32c(const void* data, size_t n);

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_TENSORBOARD_WRITER_H_
