// KvSecAggChannel: secure aggregation's stages (privacy/secagg_protocol.h) over a worker's
// KVClient, to server 0 (a secure-aggregation job has one server): each stage is one secAgg
// request (core/syncline.capnp) whose reply is the stage's answer.
//
// Thread-safety: thread-compatible, like the KVClient it uses.
#ifndef SYNCLINE_WORKER_SECAGG_CHANNEL_H_
#define SYNCLINE_WORKER_SECAGG_CHANNEL_H_

#include "client/kv_client.h"
#include "privacy/secagg_protocol.h"

namespace syncline {

class KvSecAggChannel : public SecAggChannel {
 public:
  // `client` must outlive the channel.
  explicit KvSecAggChannel(KVClient* client) : client_(client) {}

  absl::StatusOr<SecAggPacket> Exchange(int64_t round, const SecAggPacket& request,
                                        absl::Time deadline) override;

 private:
  KVClient* const client_;
};

}  // namespace syncline

#endif  // SYNCLINE_WORKER_SECAGG_CHANNEL_H_
