// Fuzz target: a request to a parameter server. The input is up to three frames (a header
// and payloads) sent from worker 0 to a server that holds a dense and a sparse table, under
// SSP(1); the server must answer (reply or error) and go on serving, and a header that Parse
// accepts must read without throwing.
#include <cstdint>
#include <memory>

#include "core/inproc_transport.h"
#include "core/table_config.h"
#include "fuzz/fuzz_util.h"
#include "kj/string.h"
#include "ps/server.h"

namespace syncline {
namespace {

struct Server {
  Server() {
    server_endpoint = *transport.CreateEndpoint("ps0");
    worker = *transport.CreateEndpoint("w0");
    ServerOptions options{.rank = 0, .num_servers = 1, .num_workers = 2, .staleness = 1};
    options.max_reply_bytes = 1 << 20;
    options.max_dense_table_bytes = 16 << 20;  // declarations the fuzzer makes stay quick
    // Compressed pulls answer when asked (and keep copies per worker, bounded).
    options.pull_codec = CodecSpec{.kind = CodecKind::kTopK, .ratio = 0.1};
    options.pull_copy_rows = 1000;
    server = std::make_unique<ParameterServer>(server_endpoint.get(), options);
    for (bool dense : {true, false}) {
      TableConfig c;
      c.id = dense ? 1 : 2;
      c.dense = dense;
      c.num_keys = dense ? 1000 : 0;
      c.dim = dense ? 1 : 4;
      c.optimizer.kind = dense ? OptimizerKind::kAdam : OptimizerKind::kAdagrad;
      MessageBuilder b(wire::MsgType::DECLARE_TABLE);
      b.header().setRole(wire::Role::WORKER);
      b.header().setTable(c.id);
      c.ToWire(b.header().getBody().initTable());
      (void)worker->Send("ps0", b.Finish(), absl::InfiniteFuture());
    }
    Serve();
  }
  void Serve() {
    (void)server->ServeUntil(absl::Now());
    while (worker->Receive(absl::Now()).ok()) {
    }
  }
  InprocTransport transport;
  std::unique_ptr<Endpoint> server_endpoint, worker;
  std::unique_ptr<ParameterServer> server;
};

}  // namespace
}  // namespace syncline

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static syncline::Server* const s = new syncline::Server();
  syncline::fuzz::Input in(data, size);
  syncline::Message m;
  const int frames = 1 + in.Byte() % 3;
  for (int i = 0; i < frames; ++i) {
    const std::string_view piece = in.Piece(1 << 16);
    m.frames().push_back(syncline::Frame::Copy(piece.data(), piece.size()));
  }
  {
    syncline::Message copy;
    for (const syncline::Frame& f : m.frames()) {
      copy.frames().push_back(syncline::Frame::Copy(f.data(), f.size()));
    }
    if (copy.Parse().ok()) (void)kj::str(copy.header());  // must not throw
  }
  (void)s->worker->Send("ps0", std::move(m), absl::InfiniteFuture());
  s->Serve();
  return 0;
}
