// The collectives a Python worker of an all-reduce or hybrid job syncs its dense layers with:
// a PeerConnector (syncline/worker_session.h) over the collective library's communicator,
// on the planes syncline-worker's all-reduce takes (collective/planes.h).
//
// Thread-safety: the connector is stateless; its collectives are thread-compatible.
#ifndef SYNCLINE_PYTHON_NATIVE_PEERS_H_
#define SYNCLINE_PYTHON_NATIVE_PEERS_H_

#include "syncline/worker_session.h"

namespace syncline::python {

PeerConnector CommunicatorPeers();

}  // namespace syncline::python

#endif  // SYNCLINE_PYTHON_NATIVE_PEERS_H_
