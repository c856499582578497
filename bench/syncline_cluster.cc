#include "bench/syncline_cluster.h"

#include <pthread.h>

#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/kv_client.h"
#include "core/node_table.h"

namespace syncline::bench {
namespace {

constexpr absl::Duration kDeclareTimeout = absl::Seconds(10);
// ServeUntil returns this often so that the server thread sees the stop flag.
constexpr absl::Duration kServeSlice = absl::Milliseconds(50);

// A KVClient pushing and pulling whole dense tables, one table per request size.
class SynclineClient : public BenchClient {
 public:
  SynclineClient(Endpoint* endpoint, KVClientOptions options, size_t max_bytes)
      : kv_(endpoint, std::move(options)), grads_(max_bytes / sizeof(float), 1e-3f) {}

  absl::Status DeclareTable(uint32_t id, size_t bytes, OptimizerKind optimizer) {
    TableConfig c;
    c.id = id;
    c.dense = true;
    c.num_keys = bytes / sizeof(float);
    c.dim = 1;
    c.optimizer.kind = optimizer;
    c.optimizer.learning_rate = 1e-3f;
    if (auto s = kv_.DeclareTable(c, absl::Now() + kDeclareTimeout); !s.ok()) return s;
    table_of_[bytes] = id;
    return absl::OkStatus();
  }

  absl::StatusOr<uint64_t> Start(Op op, size_t bytes) override {
    auto it = table_of_.find(bytes);
    if (it == table_of_.end()) {
      return absl::InvalidArgumentError(absl::StrFormat("no table of %d bytes", bytes));
    }
    const size_t n = bytes / sizeof(float);
    const std::span<const float> grads(grads_.data(), n);
    if (op == Op::kPush) return kv_.PushDense(it->second, 0, grads, /*clock=*/0, /*weight=*/1.0f);
    // Pulled values stay in the received frames (no copy), like the raw baseline's; the
    // benchmark never reads them.
    std::unique_ptr<std::vector<Frame>> frames;
    if (spare_frames_.empty()) {
      frames = std::make_unique<std::vector<Frame>>();
    } else {
      frames = std::move(spare_frames_.back());
      spare_frames_.pop_back();
    }
    auto ticket = op == Op::kPull ? kv_.PullDenseFrames(it->second, 0, n, /*clock=*/0, frames.get())
                                  : kv_.PushPullDenseFrames(it->second, 0, grads, /*clock=*/0,
                                                            /*weight=*/1.0f, frames.get());
    if (ticket.ok()) frames_of_[*ticket] = std::move(frames);
    return ticket;
  }

  absl::Status Wait(uint64_t id, absl::Time deadline) override {
    absl::Status status = kv_.Wait(id, deadline);
    // After a failed wait a reply may still come for the frames: keep them where they are.
    if (!status.ok()) return status;
    if (auto node = frames_of_.extract(id)) {
      node.mapped()->clear();  // releases the replies
      spare_frames_.push_back(std::move(node.mapped()));
    }
    return status;
  }

 private:
  KVClient kv_;
  std::vector<float> grads_;
  absl::flat_hash_map<size_t, uint32_t> table_of_;
  // The frames of the pulls in flight, by ticket, and emptied ones for reuse.
  absl::flat_hash_map<uint64_t, std::unique_ptr<std::vector<Frame>>> frames_of_;
  std::vector<std::unique_ptr<std::vector<Frame>>> spare_frames_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SynclineCluster>> SynclineCluster::Create(
    int servers, int workers, const std::vector<size_t>& request_bytes, Options cluster_options) {
  std::unique_ptr<SynclineCluster> cluster(new SynclineCluster());
  size_t max_bytes = 0;
  for (size_t b : request_bytes) max_bytes = std::max(max_bytes, b);

  std::vector<std::string> server_ids, worker_ids;
  for (int s = 0; s < servers; ++s) server_ids.push_back(DataEndpointId(wire::Role::SERVER, s));
  for (int w = 0; w < workers; ++w) worker_ids.push_back(DataEndpointId(wire::Role::WORKER, w));
  // Every node's transport; with a key, told every endpoint id of the cluster before any peer
  // connects, so that no handshake waits in the ZAP handler for an id it does not know yet.
  std::vector<std::string> all_ids = server_ids;
  all_ids.insert(all_ids.end(), worker_ids.begin(), worker_ids.end());
  auto make_transport = [&cluster_options, &all_ids] {
    ZmqOptions options;
    options.key = cluster_options.key;
    options.seal_data = cluster_options.seal_data;
    auto transport = std::make_unique<ZmqTransport>(std::move(options));
    if (cluster_options.key != nullptr) transport->AllowPeers(all_ids);
    return transport;
  };

  std::vector<std::string> addresses;
  cluster->servers_.resize(servers);
  for (int s = 0; s < servers; ++s) {
    ServerNode& node = cluster->servers_[s];
    node.transport = make_transport();
    auto endpoint = node.transport->CreateEndpoint(server_ids[s]);
    if (!endpoint.ok()) return endpoint.status();
    node.endpoint = std::move(*endpoint);
    auto address = node.endpoint->Bind("tcp://127.0.0.1:0");
    if (!address.ok()) return address.status();
    addresses.push_back(*address);
    ServerOptions options{
        .rank = s, .num_servers = servers, .num_workers = workers, .staleness = -1};
    options.update_threads = cluster_options.update_threads;
    node.server = std::make_unique<ParameterServer>(node.endpoint.get(), options);
  }
  for (ServerNode& node : cluster->servers_) {
    node.thread = std::thread([server = node.server.get(), stop = &cluster->stop_,
                               name = absl::StrCat("sl-", node.endpoint->id())] {
      pthread_setname_np(pthread_self(), name.c_str());  // for profilers
      while (!stop->load(std::memory_order_relaxed)) {
        if (auto s = server->ServeUntil(absl::Now() + kServeSlice); !s.ok()) {
          std::fprintf(stderr, "server stopped: %s\n", s.ToString().c_str());
          return;
        }
      }
    });
  }

  cluster->workers_.resize(workers);
  for (int w = 0; w < workers; ++w) {
    WorkerNode& node = cluster->workers_[w];
    node.transport = make_transport();
    auto endpoint = node.transport->CreateEndpoint(worker_ids[w]);
    if (!endpoint.ok()) return endpoint.status();
    node.endpoint = std::move(*endpoint);
    for (int s = 0; s < servers; ++s) {
      if (auto st = node.endpoint->Connect(server_ids[s], addresses[s]); !st.ok()) return st;
    }
    KVClientOptions options;
    options.rank = w;
    options.server_ids = server_ids;
    if (cluster_options.max_piece_bytes > 0) {
      options.max_piece_bytes = cluster_options.max_piece_bytes;
    }
    auto client = std::make_unique<SynclineClient>(node.endpoint.get(), options, max_bytes);
    uint32_t table = 1;
    for (size_t bytes : request_bytes) {
      if (auto st = client->DeclareTable(table++, bytes, cluster_options.optimizer); !st.ok()) {
        return st;
      }
    }
    node.client = std::move(client);
  }
  return cluster;
}

SynclineCluster::~SynclineCluster() {
  stop_.store(true);
  for (ServerNode& node : servers_) {
    if (node.thread.joinable()) node.thread.join();
  }
  workers_.clear();
  servers_.clear();
}

}  // namespace syncline::bench
