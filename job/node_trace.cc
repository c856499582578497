#include "job/node_trace.h"

#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "core/log.h"

namespace syncline {

std::unique_ptr<TraceRecorder> MakeNodeTrace(const JoinedJob& job, wire::Role role, int rank) {
  if (!job.spec.observe.tracing()) return nullptr;
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  const std::string node = DataEndpointId(role, rank);
  return std::make_unique<TraceRecorder>(node, absl::StrCat(node, " on ", host));
}

void WriteNodeTrace(const TraceRecorder* trace, const JoinedJob& job, wire::Role role, int rank) {
  if (trace == nullptr) return;
  const std::string path = (std::filesystem::path(job.spec.observe.trace_dir) /
                            TraceFileName(DataEndpointId(role, rank)))
                               .string();
  std::error_code ec;
  std::filesystem::create_directories(job.spec.observe.trace_dir, ec);
  const absl::Status s = trace->Write(path, job.control->ClockOffsetMicros(),
                                      job.control->ClockOffsetRoundTripMicros());
  if (!s.ok()) {
    SYNCLINE_LOG(ERROR) << "trace not written: " << s;
  } else if (trace->dropped() > 0) {
    SYNCLINE_LOG(WARNING) << "trace: " << trace->dropped()
                          << " events past its bound were dropped (a narrower --trace-steps "
                             "keeps them)";
  }
}

}  // namespace syncline
