// syncline-ps: one parameter-server shard. Started by syncline-launch (or mpirun/srun); it
// registers with the job's coordinator, serves its shard until the coordinator shuts the job
// down, and reports its statistics.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>

#include "core/command_line.h"
#include "core/control_client.h"
#include "core/log.h"
#include "core/zmq_transport.h"
#include "embeddings/memory_budget.h"
#include "ps/server.h"

namespace syncline {
namespace {

const char* EnvOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

// The server's statistics so far, as a SERVER_STATS (at shutdown) or SERVER_PROGRESS message.
Message StatsMessage(wire::MsgType type, int rank, const ParameterServer& server,
                     Endpoint& endpoint) {
  MessageBuilder b(type);
  b.header().setRole(wire::Role::SERVER);
  b.header().setRank(rank);
  auto stats = b.header().getBody().initServerStats();
  stats.setBytesIn(endpoint.counters().bytes_received.load());
  stats.setBytesOut(endpoint.counters().bytes_sent.load());
  stats.setRequests(server.stats().requests);
  stats.setRejected(server.stats().rejected);
  stats.setParkedPulls(server.stats().parked);
  stats.setCheckpoints(server.stats().checkpoints);
  stats.setCheckpointPauseSeconds(absl::ToDoubleSeconds(server.stats().checkpoint_pause));
  const auto& counts = server.stats().staleness.counts();
  auto hist = stats.initStalenessHistogram(counts.size());
  for (size_t i = 0; i < counts.size(); ++i) hist.set(i, counts[i]);
  if (const auto totals = server.embedding_totals(); totals.tables > 0) {
    auto e = stats.initEmbedding();
    e.setTables(totals.tables);
    e.setRowsInMemory(totals.stats.rows_in_memory);
    e.setRowsOnDisk(totals.stats.rows_on_disk);
    e.setAdmitted(totals.stats.admitted);
    e.setRejected(totals.stats.rejected);
    e.setExpired(totals.stats.expired);
    e.setMemoryHits(totals.stats.memory_hits);
    e.setDiskHits(totals.stats.disk_hits);
    e.setEvictions(totals.stats.evictions);
    e.setMemoryBytes(totals.stats.memory_bytes);
    e.setMemoryBudgetBytes(totals.budget_bytes);
  }
  return b.Finish();
}

int Main(int argc, char** argv) {
  CLI::App app(
      "syncline-ps: one shard of the Syncline parameter server.\n"
      "Usually started by syncline-launch; every flag may also come from the "
      "environment variable named in brackets.");
  std::string coordinator = EnvOr("SYNCLINE_COORDINATOR", "");
  int rank = std::atoi(EnvOr("SYNCLINE_RANK", "0"));
  std::string bind = EnvOr("SYNCLINE_BIND", "tcp://127.0.0.1:0");
  double startup_timeout_s = 120;
  app.add_option("--coordinator", coordinator,
                 "address of the job's coordinator, e.g. tcp://127.0.0.1:7000 "
                 "[SYNCLINE_COORDINATOR]")
      ->required(coordinator.empty());
  app.add_option("--rank", rank, "this shard's index, 0..servers-1 [SYNCLINE_RANK]")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--bind", bind,
                 "ZeroMQ address to serve on; port 0 picks a free one [SYNCLINE_BIND]")
      ->capture_default_str();
  app.add_option("--startup-timeout", startup_timeout_s,
                 "seconds to wait for every node of the job to register")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  std::string embedding_dir;
  std::string embedding_memory = "1000000rows";
  uint32_t admit_after = 0;
  int64_t expire_steps = 0;
  app.add_option("--embedding-dir", embedding_dir,
                 "keep sparse (embedding) tables in a memory tier over RocksDB in this folder "
                 "(scratch space, cleared per table); empty: sparse rows stay in memory");
  app.add_option("--embedding-memory", embedding_memory,
                 "memory tier budget per table: bytes (2GiB, 512MiB) or rows (1000000rows); "
                 "least recently used rows move to RocksDB beyond it")
      ->capture_default_str();
  app.add_option("--embedding-admit-after", admit_after,
                 "create an embedding row only when its id was seen this many times "
                 "(count-min sketch); 0 or 1: at first sight")
      ->capture_default_str();
  app.add_option("--embedding-expire-steps", expire_steps,
                 "delete embedding rows not touched for this many clocks; 0: never")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  int update_threads = 1;
  app.add_option("--update-threads", update_threads,
                 "threads that share a large dense update, this server's own included; more "
                 "than 1 only on machines with cores to spare beside the network's")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  std::string restore;
  app.add_option("--checkpoint-dir", checkpoint_dir,
                 "folder of the job's checkpoints; with it the coordinator may also ask for "
                 "checkpoints (time-based ones)");
  app.add_option("--checkpoint-every", checkpoint_every,
                 "write this shard's part of a checkpoint whenever every worker has finished a "
                 "multiple of this many clocks; 0: never")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--restore", restore,
                 "start from this checkpoint folder (one validated by the launcher)");
  if (auto exit_code = ParseCommandLine(app, argc, argv, "syncline-ps")) return *exit_code;
  if (checkpoint_every > 0 && checkpoint_dir.empty()) {
    std::cerr << "syncline-ps: --checkpoint-every needs --checkpoint-dir\n";
    return 2;
  }
  SetLogTag("ps" + std::to_string(rank));
  std::optional<EmbeddingStoreOptions> embedding;
  if (!embedding_dir.empty()) {
    auto budget = ParseMemoryBudget(embedding_memory);
    if (!budget.ok()) {
      std::cerr << "syncline-ps: --embedding-memory: " << budget.status().message() << "\n";
      return 2;
    }
    embedding.emplace();
    embedding->path = embedding_dir;
    embedding->max_memory_rows = budget->rows;
    embedding->max_memory_bytes = budget->bytes;
    embedding->admit_after = admit_after;
    embedding->expire_after_steps = expire_steps;
    // The folder is scratch space: what matters at exit went into checkpoints.
    embedding->warn_unflushed = false;
  }

  ZmqTransport transport;
  auto endpoint = transport.CreateEndpoint(DataEndpointId(wire::Role::SERVER, rank));
  if (!endpoint.ok()) {
    SYNCLINE_LOG(ERROR) << endpoint.status();
    return 1;
  }
  auto address = (*endpoint)->Bind(bind);
  if (!address.ok()) {
    SYNCLINE_LOG(ERROR) << address.status();
    return 1;
  }
  ControlOptions control_options;
  control_options.coordinator_address = coordinator;
  control_options.role = wire::Role::SERVER;
  control_options.rank = rank;
  control_options.data_address = *address;
  control_options.startup_timeout = absl::Seconds(startup_timeout_s);
  auto control = ControlClient::Connect(transport, control_options);
  if (!control.ok()) {
    SYNCLINE_LOG(ERROR) << "cannot join the job: " << control.status();
    return 1;
  }
  const NodeTable& table = (*control)->table();
  ServerOptions options;
  options.rank = rank;
  options.num_servers = table.num_servers;
  options.num_workers = table.num_workers;
  options.staleness = table.staleness;
  options.embedding = embedding;
  options.checkpoint_root = checkpoint_dir;  // empty: no checkpoints, not even requested ones
  options.checkpoint_every = checkpoint_every;
  options.update_threads = update_threads;
  ControlClient* client = control->get();
  options.on_checkpoint = [client, rank](int64_t clock, const absl::Status& status) {
    if (status.ok()) {
      SYNCLINE_LOG(INFO) << "checkpoint " << clock << " written";
    } else {
      SYNCLINE_LOG(ERROR) << "checkpoint " << clock << " failed: " << status;
    }
    client->Send(MakeCheckpointed(wire::Role::SERVER, rank, clock, status));
  };
  ParameterServer server(endpoint->get(), options);
  if (!restore.empty()) {
    if (auto s = server.Restore(restore); !s.ok()) {
      SYNCLINE_LOG(ERROR) << "cannot restore from " << restore << ": " << s;
      return 1;
    }
  }
  (*control)->ReportReady();
  SYNCLINE_LOG(INFO) << "serving shard " << rank << " of " << table.num_servers << " at "
                     << *address;

  absl::Time next_progress = absl::Now() + absl::Seconds(1);
  while (true) {
    if (auto s = server.ServeUntil(absl::Now() + absl::Milliseconds(50)); !s.ok()) {
      SYNCLINE_LOG(ERROR) << "endpoint failed: " << s;
      return 1;
    }
    for (int w : (*control)->TakeDownWorkers()) server.RemoveWorker(w);
    for (int64_t clock : (*control)->TakeCheckpointRequests()) server.RequestCheckpoint(clock);
    if (absl::Now() >= next_progress) {
      // Embedding tables' figures while training (OUT/embedding.csv); nothing else needs them.
      if (server.embedding_totals().tables > 0) {
        (*control)->Send(StatsMessage(wire::MsgType::SERVER_PROGRESS, rank, server, **endpoint));
      }
      next_progress = absl::Now() + absl::Seconds(1);
    }
    auto command = (*control)->WaitForCommand(absl::Now());
    if (command.ok() && *command == Command::kShutdown) break;
    if (!command.ok() && !absl::IsDeadlineExceeded(command.status())) {
      SYNCLINE_LOG(ERROR) << command.status();
      return 1;
    }
  }

  server.WaitForCheckpoints();
  const auto totals = server.embedding_totals();
  if (totals.tables > 0) {
    SYNCLINE_LOG(INFO) << "embedding tables: " << totals.stats.rows_in_memory << " rows in memory, "
                       << totals.stats.rows_on_disk << " on disk, " << totals.stats.admitted
                       << " admitted, " << totals.stats.expired << " expired, "
                       << totals.stats.evictions << " evictions";
  }
  Message b = StatsMessage(wire::MsgType::SERVER_STATS, rank, server, **endpoint);
  (*control)->Send(std::move(b));
  (void)(*control)->Flush(absl::Now() + absl::Seconds(5));
  SYNCLINE_LOG(INFO) << "shut down after " << server.stats().requests << " requests ("
                     << server.stats().rejected << " rejected)";
  return 0;
}

}  // namespace
}  // namespace syncline

int main(int argc, char** argv) { return syncline::Main(argc, argv); }
