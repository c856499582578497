// RequestObserver: what sees a parameter server's work as it happens, for the server's
// /metrics page and trace (ps/server_metrics.h). The server calls it on its own thread, once
// per request: it must be quick.
//
// Thread-safety: called from the server's thread only.
#ifndef SYNCLINE_PS_REQUEST_OBSERVER_H_
#define SYNCLINE_PS_REQUEST_OBSERVER_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "core/syncline.capnp.h"

namespace syncline {

class RequestObserver {
 public:
  virtual ~RequestObserver() = default;
  // A request of `kind` (INVALID when it did not parse) for iteration `clock`, handled from
  // `begin` to `end`; `refused`: answered with an error. A pull that was parked ends here too
  // (its wait is OnParkedPull's).
  virtual void OnRequest(wire::MsgType kind, int64_t clock, absl::Time begin, absl::Time end,
                         bool refused) = 0;
  // A pull of `peer` for iteration `clock` that waited for slower workers from `parked` until
  // it was answered at `answered`.
  virtual void OnParkedPull(const std::string& peer, int64_t clock, absl::Time parked,
                            absl::Time answered) = 0;
  // The server stopped serving from `begin` to `end` to capture checkpoint `clock` (waiting
  // for the previous write, then copying); the writer thread writes it after.
  virtual void OnCheckpointCapture(int64_t clock, absl::Time begin, absl::Time end) = 0;
};

}  // namespace syncline

#endif  // SYNCLINE_PS_REQUEST_OBSERVER_H_
