// syncline-bench-secagg: what one round of secure aggregation costs a client and the server,
// by the number of clients, with Bell et al. 2020's sparse neighbour graph (--neighbours K)
// beside the complete graph of Bonawitz et al. 2017 (every client pairs with every other),
// measured in the same run on the same inputs.
//
// The round runs in process through the real protocol (privacy/secagg_protocol.h: X25519 key
// agreement, sealed Shamir shares, ChaCha20 masks, Ed25519 signatures, Cap'n Proto messages),
// in lock step on one thread, so that each side's CPU time is timed alone. --drop of the
// clients (seeded, printed) vanish after sharing keys, so the server rebuilds their masks, as
// under --client-dropout. Printed per round: a client's CPU milliseconds (mean over clients),
// the server's, a client's bytes sent and received (mean), and each as a ratio to the complete
// graph's. Each figure is the best of --repeat rounds.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "privacy/secagg_protocol.h"

namespace syncline::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Settings {
  std::vector<int> clients = {16, 64, 128, 255};
  int neighbours = 16;
  size_t length = 7851;  // softmax on Fashion-MNIST: 784 x 10 weights, 10 biases, the weight
  double drop = 0.1;
  int repeat = 3;
  uint64_t seed = 20261206;
};

struct Cost {
  double client_ms = 0, server_ms = 0, client_bytes = 0;
  bool unmasked = false;
};

double Since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

size_t Bytes(const SecAggPacket& p) { return p.body.size() + p.values.size() * sizeof(uint32_t); }

// One round among n clients; `lost` share keys and then vanish.
Cost RunRound(const SecAggParams& p, const std::map<int, std::vector<uint32_t>>& inputs,
              const std::set<int>& lost) {
  Cost cost;
  double client_ms = 0, server_ms = 0, bytes = 0;
  absl::Time now = absl::UnixEpoch();
  SecAggRelayOptions o{.params = p, .round = 1};
  for (const auto& [c, x] : inputs) o.clients.push_back(c);
  auto start = Clock::now();
  SecAggRelay relay(o, now);
  server_ms += Since(start);
  std::map<int, SecAggClientRound> rounds;
  std::map<int, SecAggPacket> pending;
  for (const auto& [c, x] : inputs) {
    start = Clock::now();
    auto r = SecAggClientRound::Create(p, c, 1);
    if (!r.ok()) {
      std::cerr << "syncline-bench-secagg: " << r.status() << "\n";
      std::exit(1);
    }
    rounds.emplace(c, std::move(*r));
    pending[c] = rounds.at(c).Advertise();
    client_ms += Since(start);
  }
  for (int stage = 0; stage < kSecAggStages && relay.running(); ++stage) {
    start = Clock::now();
    for (auto& [c, request] : pending) {
      bytes += Bytes(request);
      relay.Handle(c, "peer", 1, request, inputs.begin()->second.size(), now);
    }
    pending.clear();
    if (relay.running() && static_cast<int>(relay.stage()) == stage) {
      relay.OnTime(now + absl::Hours(1));  // the lost clients' stage times out
    }
    std::vector<SecAggRelay::Answer> answers = relay.TakeAnswers();
    server_ms += Since(start);
    now += absl::Hours(2);
    for (SecAggRelay::Answer& a : answers) {
      if (!a.status.ok()) continue;
      bytes += Bytes(a.packet);
      if (stage + 1 == kSecAggStages) continue;
      if (stage == static_cast<int>(SecAggStage::kShareKeys) && lost.contains(a.client)) continue;
      start = Clock::now();
      absl::StatusOr<SecAggPacket> next = rounds.at(a.client).Next(a.packet, inputs.at(a.client));
      client_ms += Since(start);
      if (next.ok()) pending[a.client] = std::move(*next);
    }
  }
  const double n = static_cast<double>(inputs.size());
  cost.client_ms = client_ms / n;
  cost.server_ms = server_ms;
  cost.client_bytes = bytes / n;
  cost.unmasked = relay.outcome().ok();
  if (!cost.unmasked) std::cerr << "syncline-bench-secagg: " << relay.outcome() << "\n";
  return cost;
}

Cost Best(const SecAggParams& p, const std::map<int, std::vector<uint32_t>>& inputs,
          const std::set<int>& lost, int repeat) {
  Cost best;
  for (int i = 0; i < repeat; ++i) {
    const Cost c = RunRound(p, inputs, lost);
    if (i == 0 || c.client_ms < best.client_ms) best.client_ms = c.client_ms;
    if (i == 0 || c.server_ms < best.server_ms) best.server_ms = c.server_ms;
    best.client_bytes = c.client_bytes;
    best.unmasked = c.unmasked;
  }
  return best;
}

int Main(int argc, char** argv) {
  Settings s;
  bool quick = false;
  CLI::App app{
      "One secure-aggregation round's cost to a client and to the server, by clients, with a "
      "sparse neighbour graph (Bell et al. 2020) beside the complete graph (Bonawitz et al. "
      "2017), in the same run."};
  app.add_option("--clients", s.clients, "clients in the round (each at most 255)");
  app.add_option("--neighbours", s.neighbours, "K, even: each client's neighbours");
  app.add_option("--length", s.length, "coordinates of each client's vector");
  app.add_option("--drop", s.drop, "fraction of clients lost after sharing keys");
  app.add_option("--repeat", s.repeat, "rounds per figure (the best is printed)");
  app.add_option("--seed", s.seed, "seed of the inputs and of who is lost");
  app.add_flag("--quick", quick, "a small smoke run");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    s.clients = {10};
    s.neighbours = 4;
    s.length = 64;
    s.repeat = 1;
  }
  std::cout << absl::StrFormat(
      "# secure aggregation, one round: %d coordinates, %.0f%% of clients lost after sharing "
      "keys, seed %d, best of %d\n",
      s.length, 100 * s.drop, s.seed, s.repeat);
  std::cout << "clients  graph      client_ms  server_ms  client_KB  client_x  server_x  bytes_x\n";
  for (int n : s.clients) {
    std::mt19937_64 rng(s.seed + n);
    const int bits = 16;
    std::uniform_int_distribution<uint32_t> value(0, (1u << bits) - 1);
    std::map<int, std::vector<uint32_t>> inputs;
    for (int c = 1; c <= n; ++c) {
      inputs[c].resize(s.length);
      for (uint32_t& v : inputs[c]) v = value(rng);
    }
    std::vector<int> order;
    for (int c = 1; c <= n; ++c) order.push_back(c);
    std::shuffle(order.begin(), order.end(), rng);
    const std::set<int> lost(order.begin(), order.begin() + static_cast<int>(s.drop * n));
    // The jobs' default thresholds: a majority of those who hold a client's shares.
    SecAggParams complete{.clients = n, .threshold = std::max(2, n / 2 + 1), .bits = bits};
    SecAggParams sparse = complete;
    sparse.neighbours = s.neighbours;
    sparse.threshold = std::max(2, std::min(n, s.neighbours + 1) / 2 + 1);
    const Cost base = Best(complete, inputs, lost, s.repeat);
    const Cost graph = Best(sparse, inputs, lost, s.repeat);
    if (!base.unmasked || !graph.unmasked) return 1;
    std::cout << absl::StrFormat("%7d  %-9s  %9.2f  %9.1f  %9.1f\n", n, "complete", base.client_ms,
                                 base.server_ms, base.client_bytes / 1024);
    std::cout << absl::StrFormat("%7d  %-9s  %9.2f  %9.1f  %9.1f  %8.2f  %8.2f  %7.2f\n", n,
                                 absl::StrFormat("k=%d", s.neighbours), graph.client_ms,
                                 graph.server_ms, graph.client_bytes / 1024,
                                 graph.client_ms / base.client_ms, graph.server_ms / base.server_ms,
                                 graph.client_bytes / base.client_bytes);
  }
  return 0;
}

}  // namespace
}  // namespace syncline::bench

int main(int argc, char** argv) { return syncline::bench::Main(argc, argv); }
