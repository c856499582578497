// Requests a test sends a ParameterServer as a worker would (ps/server_test.cc and
// ps/server_zmq_test.cc): a declaration, pushes, pulls, clocks, and the sparse table most
// tests declare.
//
// Thread-safety: stateless functions.
#ifndef SYNCLINE_PS_SERVER_TEST_REQUESTS_H_
#define SYNCLINE_PS_SERVER_TEST_REQUESTS_H_

#include <cstdint>
#include <vector>

#include "core/message.h"
#include "core/table_config.h"

namespace syncline::testing_util {

inline MessageBuilder Request(wire::MsgType type, int worker, uint64_t id, uint32_t table = 1) {
  MessageBuilder b(type);
  b.header().setRole(wire::Role::WORKER);
  b.header().setRank(worker);
  b.header().setRequestId(id);
  b.header().setTable(table);
  return b;
}

inline Message Declare(int worker, const TableConfig& c) {
  auto b = Request(wire::MsgType::DECLARE_TABLE, worker, 1, c.id);
  c.ToWire(b.header().getBody().initTable());
  return b.Finish();
}

inline Message SparsePush(int worker, uint64_t id, std::vector<uint64_t> keys,
                          std::vector<float> grads, int64_t clock, float weight) {
  auto b = Request(wire::MsgType::PUSH, worker, id);
  b.header().setKeyCount(keys.size());
  b.header().setValueCount(grads.size());
  b.header().setClock(clock);
  b.header().setWeight(weight);
  b.AddFrame(Frame::Own(std::move(keys)));
  b.AddFrame(Frame::Own(std::move(grads)));
  return b.Finish();
}

inline Message SparsePull(int worker, uint64_t id, std::vector<uint64_t> keys, int64_t clock) {
  auto b = Request(wire::MsgType::PULL, worker, id);
  b.header().setKeyCount(keys.size());
  b.header().setClock(clock);
  b.AddFrame(Frame::Own(std::move(keys)));
  return b.Finish();
}

inline Message Clock(int worker, int64_t clock, float examples) {
  auto b = Request(wire::MsgType::CLOCK, worker, 0);
  b.header().setClock(clock);
  b.header().setWeight(examples);
  return b.Finish();
}

inline TableConfig SparseTable() {
  TableConfig c;
  c.id = 1;
  c.dense = false;
  c.num_keys = 1000;
  c.dim = 2;
  c.optimizer.learning_rate = 1.0f;
  return c;
}

}  // namespace syncline::testing_util

#endif  // SYNCLINE_PS_SERVER_TEST_REQUESTS_H_
