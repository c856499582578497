// The gossip peer: a WorkerNode (worker/worker_node.h) whose backend is a GossipBackend, so
// that it averages its whole model with its neighbours instead of using servers.
//
// Thread-safety: the factory is stateless.
#ifndef SYNCLINE_GOSSIP_GOSSIP_PEER_H_
#define SYNCLINE_GOSSIP_GOSSIP_PEER_H_

#include "worker/worker_node.h"

namespace syncline {

// Builds a GossipBackend from the job spec and connects it to the peers it talks to.
ServerlessBackendFactory MakeGossipBackendFactory();

}  // namespace syncline

#endif  // SYNCLINE_GOSSIP_GOSSIP_PEER_H_
