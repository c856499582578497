// PeerContext: what a session's PeerConnector (syncline/worker_session.h) is given to connect
// the workers' collectives: the joined job, its node table, this worker's rank and the side of
// its data endpoint that hears the other workers (all of it, in a job without servers). Internal
// to Syncline: the installed API only names the type.
//
// Thread-safety: a view, valid during the connector's call; the endpoint outlives the session.
#ifndef SYNCLINE_CLIENT_PEER_CONTEXT_H_
#define SYNCLINE_CLIENT_PEER_CONTEXT_H_

#include "core/net.h"
#include "core/node_table.h"
#include "core/transport.h"
#include "syncline/job_spec.h"

namespace syncline {

struct PeerContext {
  const JobSpec& spec;
  const NodeTable& table;
  int rank;
  Endpoint& endpoint;
  // Whether the job's connections are encrypted (a job key): then the collectives stay on the
  // CURVE endpoint; else they may take a TCP plane of their own, within `ports`.
  bool encrypted = false;
  PortRange ports;
};

}  // namespace syncline

#endif  // SYNCLINE_CLIENT_PEER_CONTEXT_H_
