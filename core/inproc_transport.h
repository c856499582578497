// InprocTransport: a Transport between threads of one process, for unit tests of the layers
// above the transport (servers, clients, clocks) without sockets. Messages move by pointer:
// frames are not copied, exactly like the zero-copy path of ZmqTransport. Addresses are
// "inproc://ID".
//
// Thread-safety: thread-safe; each endpoint is thread-compatible like every Endpoint.
#ifndef SYNCLINE_CORE_INPROC_TRANSPORT_H_
#define SYNCLINE_CORE_INPROC_TRANSPORT_H_

#include <memory>
#include <mutex>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "core/transport.h"

namespace syncline {

class InprocTransport : public Transport {
 public:
  // Messages a mailbox holds before senders wait (and then fail at their deadline).
  explicit InprocTransport(size_t mailbox_capacity = 100000);
  ~InprocTransport() override;
  absl::StatusOr<std::unique_ptr<Endpoint>> CreateEndpoint(std::string id) override;

  struct Mailbox;

 private:
  friend class InprocEndpoint;
  std::shared_ptr<Mailbox> Find(const std::string& id);
  void Remove(const std::string& id);

  const size_t capacity_;
  std::mutex mu_;
  absl::flat_hash_map<std::string, std::shared_ptr<Mailbox>> mailboxes_;  // guarded by mu_
};

}  // namespace syncline

#endif  // SYNCLINE_CORE_INPROC_TRANSPORT_H_
