// ServerNode: one parameter-server shard as a node of a job. It joins the job (the coordinator
// hands it the JobSpec), restores its shard when the spec names a checkpoint, serves until the
// coordinator shuts the job down, and reports its statistics: what syncline-ps runs, and what a
// test runs on a thread over any Transport.
//
// Thread-safety: Run() is called once, from one thread.
#ifndef SYNCLINE_PS_SERVER_NODE_H_
#define SYNCLINE_PS_SERVER_NODE_H_

#include "core/transport.h"
#include "job/node_join.h"

namespace syncline {

class ServerNode {
 public:
  ServerNode(Transport& transport, NodeOptions options)
      : transport_(transport), options_(std::move(options)) {}

  NodeExit Run();

 private:
  Transport& transport_;
  const NodeOptions options_;
};

}  // namespace syncline

#endif  // SYNCLINE_PS_SERVER_NODE_H_
