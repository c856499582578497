// ScopedTime: adds the wall time of a scope to a running total.
#ifndef SYNCLINE_CORE_SCOPED_TIME_H_
#define SYNCLINE_CORE_SCOPED_TIME_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace syncline {

// Adds the time from its construction to the end of its scope to *total: how the sync backends
// and the KV client count their codec time. Thread-compatible.
class ScopedTime {
 public:
  explicit ScopedTime(absl::Duration* total) : total_(total), start_(absl::Now()) {}
  ~ScopedTime() { *total_ += absl::Now() - start_; }
  ScopedTime(const ScopedTime&) = delete;
  ScopedTime& operator=(const ScopedTime&) = delete;

 private:
  absl::Duration* const total_;
  const absl::Time start_;
};

}  // namespace syncline

#endif  // SYNCLINE_CORE_SCOPED_TIME_H_
