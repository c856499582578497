#include "ps/server_node.h"

#include <filesystem>
#include <variant>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "core/log.h"
#include "job/node_trace.h"
#include "job/privacy_plan.h"
#include "ps/server.h"
#include "ps/server_metrics.h"

namespace syncline {
namespace {

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
  stats.setRounds(server.stats().rounds);
  stats.setRoundsShort(server.stats().rounds_short);
  stats.setClientsMissing(server.stats().clients_missing);
  stats.setUpdatesLate(server.stats().updates_late);
  stats.setExamplesTrained(server.stats().examples_trained);
  const auto& lost = server.stats().lost_workers;
  auto list = stats.initLostWorkers(static_cast<unsigned>(lost.size()));
  for (size_t i = 0; i < lost.size(); ++i) {
    list[static_cast<unsigned>(i)].setWorker(lost[i].first);
    list[static_cast<unsigned>(i)].setClock(lost[i].second);
  }
  const auto& short_rounds = server.stats().short_rounds;
  auto rounds = stats.initShortRounds(short_rounds.size());
  for (size_t i = 0; i < short_rounds.size(); ++i) rounds.set(i, short_rounds[i]);
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

// The shard's options from the job spec.
ServerOptions ShardOptions(const JobSpec& spec, const NodeTable& table, int rank) {
  ServerOptions options;
  options.rank = rank;
  options.num_servers = table.num_servers;
  options.num_workers = table.num_workers;
  options.max_workers = table.MaxWorkers();
  options.staleness = spec.sync.server_staleness();
  if (!spec.embedding.dir.empty()) {
    EmbeddingStoreOptions& e = options.embedding.emplace();
    e.path = (std::filesystem::path(spec.embedding.dir) / absl::StrCat("ps", rank)).string();
    e.max_memory_rows = spec.embedding.memory_rows;
    e.max_memory_bytes = spec.embedding.memory_bytes;
    e.admit_after = static_cast<uint32_t>(spec.embedding.admit_after);
    e.expire_after_steps = spec.embedding.expire_steps;
    // The folder is scratch space: what matters at exit went into checkpoints.
    e.warn_unflushed = false;
  }
  // Empty: no checkpoints, not even requested ones.
  if (spec.checkpoint.enabled()) options.checkpoint_root = spec.checkpoint.dir;
  options.checkpoint_every = spec.checkpoint.every;
  options.update_threads = spec.update_threads;
  options.max_reply_bytes = spec.limits.reply_bytes;
  options.max_parked_bytes_per_peer = spec.limits.parked_bytes_per_worker;
  options.max_reply_backlog_bytes = spec.limits.reply_backlog_bytes;
  options.max_table_bytes = spec.limits.table_bytes;
  options.max_stores = static_cast<size_t>(spec.limits.stores);
  options.aggregate = spec.aggregate;
  options.pull_codec = spec.training.pull_codec;
  options.pull_copy_rows = spec.training.pull_copy_rows;
  if (spec.sync.fedavg()) {
    options.federated =
        ServerOptions::Federated{.participation = spec.federated.participation,
                                 .round_timeout = absl::Seconds(spec.federated.round_timeout_s),
                                 .seed = spec.seed,
                                 .rounds = spec.federated.rounds};
    if (spec.federated.secure_aggregation) {
      options.federated->secagg = SecureAggregationParams(spec);
      options.federated->secagg_stage_timeout = absl::Seconds(SecAggStageTimeoutSeconds(spec));
    }
    if (spec.privacy.level == DpLevel::kClient) {
      options.federated->dp_key = spec.privacy.key;
      options.federated->dp_noise_stddev = spec.privacy.noise_multiplier * spec.privacy.clip;
      if (UsesDistributedDp(spec)) {
        // The clients' shares carry the noise; the servers add none.
        options.federated->distributed_dp = DistributedDpFor(spec);
        options.federated->dp_noise_stddev = 0;
      }
      options.federated->dp_expected_clients =
          spec.federated.participation * static_cast<double>(spec.workers);
    }
  }
  return options;
}

}  // namespace

NodeExit ServerNode::Run() {
  const int rank = options_.rank;
  auto joined = JoinJob(transport_, wire::Role::SERVER, options_);
  if (!joined.ok()) return {joined.status(), absl::IsInvalidArgument(joined.status())};
  const JobSpec& spec = joined->spec;
  ControlClient* control = joined->control.get();
  Endpoint& endpoint = *joined->data;
  // A DP round must never be applied without its noise.
  if (auto s = CheckPrivacyResolved(spec); !s.ok()) {
    control->ReportAbort(s);
    return {s, /*bad_input=*/true};
  }

  ServerOptions options = ShardOptions(spec, control->table(), rank);
  // The page and the trace (--metrics-port, --trace on); neither: no observer at all.
  std::unique_ptr<TraceRecorder> trace = MakeNodeTrace(*joined, wire::Role::SERVER, rank);
  std::unique_ptr<ServerMetrics> metrics;
  if (joined->metrics || trace) {
    metrics = std::make_unique<ServerMetrics>(
        joined->metrics ? &joined->metrics->registry() : nullptr, trace.get(),
        spec.observe.trace_first, spec.observe.trace_end);
    options.observer = metrics.get();
  }
  absl::Cleanup write_trace = [&] {
    WriteNodeTrace(trace.get(), *joined, wire::Role::SERVER, rank);
  };
  options.on_checkpoint = [control, observer = metrics.get()](int64_t clock,
                                                              const absl::Status& status) {
    if (observer != nullptr) observer->OnCheckpointWritten(clock);
    if (status.ok()) {
      SYNCLINE_LOG(INFO) << "checkpoint " << clock << " written";
    } else {
      SYNCLINE_LOG(ERROR) << "checkpoint " << clock << " failed: " << status;
    }
    control->ReportCheckpointed(clock, status);
  };
  // The shard: made afresh, with the checkpoint restored, at the start of a resumed job, by a
  // replacement of a failed server, and on every rollback (in-place recovery). Workers the job
  // went on without stay out of every one.
  std::unique_ptr<ParameterServer> shard;
  std::vector<int> removed;
  auto make_shard = [&](uint32_t generation, const std::string& restore) -> absl::Status {
    shard.reset();  // closes its embedding stores before the new one opens them
    options.generation = generation;
    shard = std::make_unique<ParameterServer>(&endpoint, options);
    for (int w : removed) shard->RemoveWorker(w);
    if (restore.empty()) return absl::OkStatus();
    if (auto s = shard->Restore(restore); !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("cannot restore from ", restore, ": ", s.message()));
    }
    return absl::OkStatus();
  };
  if (auto s = make_shard(control->generation(), spec.checkpoint.restore); !s.ok()) {
    control->ReportAbort(s);
    return {s};
  }
  control->ReportReady();
  SYNCLINE_LOG(INFO) << "serving shard " << rank << " of " << spec.servers << " at "
                     << joined->data_address;

  absl::Time next_progress = absl::Now() + absl::Seconds(1);
  while (true) {
    if (std::optional<ControlClient::Rollback> back = control->PendingRollback()) {
      // What the undone timeline's checkpoints wrote is reported first (the coordinator
      // ignores it); requests still queued from it carry the old generation and are dropped.
      const absl::Time begin = absl::Now();
      shard->WaitForCheckpoints();
      if (auto s = make_shard(back->generation, back->dir); !s.ok()) {
        control->ReportAbort(s);
        return {s};
      }
      control->ReportRolledBack(back->generation);
      SYNCLINE_LOG(INFO) << "rolled back to checkpoint " << back->clock << " in "
                         << ReadableDuration(absl::Now() - begin);
    }
    ParameterServer& server = *shard;
    if (auto s = server.ServeUntil(absl::Now() + absl::Milliseconds(50)); !s.ok()) {
      return {absl::Status(s.code(), absl::StrCat("endpoint failed: ", s.message()))};
    }
    // Arrivals first: a joiner's departure comes after its arrival, and may be in the same
    // batch. The coordinator gives the joiner its table once every server has taken it in.
    for (ControlClient::PlanEvent& event : control->TakePlanEvents()) {
      const auto* arrived = std::get_if<ControlClient::WorkerArrived>(&event);
      if (arrived == nullptr) continue;
      if (auto s = server.AddWorker(arrived->worker, arrived->first_clock); !s.ok()) {
        control->ReportAbort(s);
        return {s};
      }
      control->ReportArrivalTaken(arrived->worker);
    }
    for (int w : control->TakeDownWorkers()) {
      server.RemoveWorker(w);
      removed.push_back(w);
    }
    for (int64_t clock : control->TakeCheckpointRequests()) server.RequestCheckpoint(clock);
    if (metrics) metrics->Publish(server);
    if (absl::Now() >= next_progress) {
      // Embedding tables' figures while training (OUT/embedding.csv); nothing else needs them.
      if (server.embedding_totals().tables > 0) {
        control->Send(StatsMessage(wire::MsgType::SERVER_PROGRESS, rank, server, endpoint));
      }
      next_progress = absl::Now() + absl::Seconds(1);
    }
    auto command = control->WaitForCommand(absl::Now());
    if (command.ok() && *command == Command::kShutdown) break;
    if (!command.ok() && !absl::IsDeadlineExceeded(command.status())) return {command.status()};
  }

  ParameterServer& server = *shard;
  server.WaitForCheckpoints();
  const auto totals = server.embedding_totals();
  if (totals.tables > 0) {
    SYNCLINE_LOG(INFO) << "embedding tables: " << totals.stats.rows_in_memory << " rows in memory, "
                       << totals.stats.rows_on_disk << " on disk, " << totals.stats.admitted
                       << " admitted, " << totals.stats.expired << " expired, "
                       << totals.stats.evictions << " evictions";
  }
  control->Send(StatsMessage(wire::MsgType::SERVER_STATS, rank, server, endpoint));
  (void)control->Flush(absl::Now() + absl::Seconds(5));
  if (server.stats().aggregates_skipped > 0) {
    SYNCLINE_LOG(INFO) << "robust aggregation left " << server.stats().aggregates_skipped
                       << " keys or ranges unchanged for want of updates";
  }
  if (spec.training.pull_codec.kind != CodecKind::kNone) {
    SYNCLINE_LOG(INFO) << "compressed pulls: " << server.stats().pull_rows_fresh
                       << " rows sent whole (new to a worker's copy), "
                       << server.stats().pull_rows_evicted
                       << " dropped from copies to stay within --pull-copy-rows "
                       << spec.training.pull_copy_rows;
  }
  SYNCLINE_LOG(INFO) << "shut down after " << server.stats().requests << " requests ("
                     << server.stats().rejected << " rejected"
                     << (control->generation() > 0
                             ? absl::StrCat(", ", server.stats().stale_dropped,
                                            " of timelines rolled back dropped; requests counted "
                                            "since the last rollback")
                             : "")
                     << ")";
  return {};
}

}  // namespace syncline
