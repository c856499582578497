// InprocRanks: `n` endpoints named "<prefix>0" .. "<prefix><n-1>" on one in-process transport,
// bound, each connected to every rank above it (one connection per pair, as ConnectWorkers
// opens them): what a collective's ranks need in a test. For tests only.
//
// Thread-safety: built on one thread; afterwards each endpoint belongs to its rank's thread.
#ifndef SYNCLINE_TESTING_INPROC_RANKS_H_
#define SYNCLINE_TESTING_INPROC_RANKS_H_

#include <memory>
#include <string>
#include <vector>

#include "core/inproc_transport.h"

namespace syncline {

struct InprocRanks {
  explicit InprocRanks(int n, const std::string& prefix = "w") {
    std::vector<std::string> addresses;
    for (int r = 0; r < n; ++r) {
      ids.push_back(prefix + std::to_string(r));
      endpoints.push_back(*transport.CreateEndpoint(ids.back()));
      addresses.push_back(*endpoints.back()->Bind("inproc://" + ids.back()));
    }
    for (int r = 0; r < n; ++r) {
      for (int q = r + 1; q < n; ++q) connected &= endpoints[r]->Connect(ids[q], addresses[q]).ok();
    }
  }

  InprocTransport transport;  // destroyed after the endpoints
  std::vector<std::unique_ptr<Endpoint>> endpoints;
  std::vector<std::string> ids;
  bool connected = true;  // every connection was made
};

}  // namespace syncline

#endif  // SYNCLINE_TESTING_INPROC_RANKS_H_
