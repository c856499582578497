// syncline-stranger (tests only): a process that is not part of a job and tries to talk to one
// of its servers under a node's id, as a hostile neighbour would. It connects to ADDRESS with
// routing id ID, plaintext or (with KEY_FILE, another job's key, say) CURVE, and for SECONDS
// keeps sending well-formed pushes of NaN that would poison the table if they were accepted.
// SERVER_KEY_FILE (the job's own key) gives it the server's public key, which is not secret:
// then the handshake reaches the server's ZAP handler, which must refuse its client key.
// KEY_FILE may be a node's own key (OUT/keys/w0.key) while ID is another node's: an insider
// then speaks under ID with its own node's key pair, which the server must not take for ID's.
// SERVER_ID (default ps0) is the id of the endpoint at ADDRESS, e.g. "coordinator".
// Usage: syncline-stranger ADDRESS ID SECONDS [KEY_FILE [SERVER_KEY_FILE [SERVER_ID]]]
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <zmq.hpp>

#include "absl/time/clock.h"
#include "core/job_key.h"
#include "core/message.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::cerr << "usage: syncline-stranger ADDRESS ID SECONDS [KEY_FILE [SERVER_KEY_FILE "
                 "[SERVER_ID]]]\n";
    return 2;
  }
  const std::string address = argv[1], id = argv[2];
  const double seconds = std::atof(argv[3]);
  zmq::context_t context;
  zmq::socket_t socket(context, zmq::socket_type::dealer);
  socket.set(zmq::sockopt::routing_id, id);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::sndhwm, 10);
  if (argc > 4) {
    auto key = syncline::JobKey::Load(argv[4]);
    auto server = syncline::JobKey::Load(argc > 5 && *argv[5] != '\0' ? argv[5] : argv[4]);
    const std::string server_id = argc > 6 ? argv[6] : "ps0";
    if (!key.ok() || !server.ok()) {
      std::cerr << "syncline-stranger: " << (key.ok() ? server.status() : key.status()).message()
                << "\n";
      return 2;
    }
    // The key pair of ID, or, for a node's key that does not hold ID, of that node's own
    // endpoint of the same kind.
    const std::string own = key->Holds(id)         ? id
                            : id.ends_with(".ctl") ? key->node() + ".ctl"
                                                   : key->node();
    socket.set(zmq::sockopt::curve_serverkey, server->PublicKeyFor(server_id));
    socket.set(zmq::sockopt::curve_publickey, key->PublicKeyFor(own));
    socket.set(zmq::sockopt::curve_secretkey, key->SecretKeyFor(own));
  }
  socket.connect(address);
  int sent = 0;
  const absl::Time end = absl::Now() + absl::Seconds(seconds);
  while (absl::Now() < end) {
    syncline::MessageBuilder b(syncline::wire::MsgType::PUSH);
    b.header().setTable(0);
    b.header().setClock(0);
    std::vector<uint64_t> keys = {1, 2, 3};
    std::vector<float> values(3, std::numeric_limits<float>::quiet_NaN());
    b.AddFrame(syncline::Frame::Own(std::move(keys)));
    b.AddFrame(syncline::Frame::Own(std::move(values)));
    syncline::Message m = b.Finish();
    bool ok = true;
    for (size_t i = 0; i < m.frames().size() && ok; ++i) {
      zmq::message_t part(m.frames()[i].data(), m.frames()[i].size());
      ok = socket
               .send(part, i + 1 < m.frames().size()
                               ? zmq::send_flags::sndmore | zmq::send_flags::dontwait
                               : zmq::send_flags::dontwait)
               .has_value();
    }
    if (ok) ++sent;
    absl::SleepFor(absl::Milliseconds(10));
  }
  std::cout << "syncline-stranger: queued " << sent << " pushes to " << address << " as " << id
            << "\n";
  return 0;
}
