#include "ps/server.h"

#include <kj/exception.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compression/codec.h"
#include "compression/wire.h"
#include "core/descriptor_limit.h"
#include "core/log.h"
#include "core/node_table.h"
#include "core/sharding.h"
#include "job/federated.h"
#include "job/options.h"
#include "optim/optimizer.h"
#include "privacy/dp_random.h"
#include "ps/robust_aggregate.h"

namespace syncline {
namespace {

// Logs the first rejections in full, then one in a thousand: a flood of garbage must not
// turn into a flood of log lines.
bool ShouldLogRejection(uint64_t rejected) { return rejected <= 20 || rejected % 1000 == 0; }

}  // namespace

ParameterServer::ParameterServer(Endpoint* endpoint, ServerOptions options)
    : endpoint_(endpoint),
      options_(options),
      gate_(options.staleness),
      clocks_(options.num_workers, std::max(0, options.max_workers - options.num_workers)) {
  for (int w = 0; w < clocks_.num_workers(); ++w) {
    worker_ids_.push_back(DataEndpointId(wire::Role::WORKER, w));
  }
  if (!options_.checkpoint_root.empty()) {
    checkpoint_writer_ = std::make_unique<CheckpointWriter>(options_.on_checkpoint);
  }
  if (const char* audit = std::getenv("SYNCLINE_AUDIT_RECEIVED_FRAMES");
      audit != nullptr && *audit != '\0') {
    received_audit_.reset(std::fopen(audit, "ab"));
    if (received_audit_ == nullptr) {
      SYNCLINE_LOG(ERROR) << "SYNCLINE_AUDIT_RECEIVED_FRAMES: cannot open " << audit
                          << " to append: " << std::strerror(errno);
    } else {
      SYNCLINE_LOG(WARNING) << "audit aid on: every frame this server receives is appended to "
                            << audit << " (SYNCLINE_AUDIT_RECEIVED_FRAMES)";
    }
  }
  if (options_.update_threads > 1) {
    update_pool_ = std::make_unique<UpdatePool>(options_.update_threads);
  }
  if (options_.pull_codec.kind != CodecKind::kNone)
    pull_codec_ = Codec::Create(options_.pull_codec);
}

absl::Status ParameterServer::ReserveForTable(const TableConfig& config, bool opens_store,
                                              uint64_t* dense_bytes) {
  const uint64_t memory = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                          static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
  *dense_bytes = 0;
  if (config.dense) {
    const uint64_t floats_per_value = 1 + StateFloatsPerWeight(config.optimizer.kind);
    *dense_bytes = DenseShardRange(config.num_keys, options_.rank, options_.num_servers).size() *
                   config.dim * floats_per_value * sizeof(float);
    const uint64_t limit = options_.max_table_bytes > 0 ? options_.max_table_bytes : memory / 2;
    if (table_bytes_ + *dense_bytes > limit) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "table %d: this shard's part of the dense table needs %d MiB, and the tables declared "
          "before hold %d MiB: over the server's limit of %d MiB for all its tables "
          "(--max-table-memory, ServerOptions::max_table_bytes; by default half of this "
          "machine's memory)",
          config.id, *dense_bytes >> 20, table_bytes_ >> 20, limit >> 20));
    }
  }
  if (opens_store) {
    if (stores_ >= options_.max_stores) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "table %d: this server has %d embedding stores open (a RocksDB each, with its memory "
          "and files), its limit (--max-stores, ServerOptions::max_stores)",
          config.id, stores_));
    }
    // A store's files come out of the descriptors that the connection guard keeps for files:
    // it opens only while they are there.
    const int open = OpenDescriptorCount();
    const int limit = DescriptorLimit();
    if (open >= 0 && open + kStoreDescriptors > limit) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "table %d: an embedding store needs about %d file descriptors, and %d of this "
          "process's %d are open (RLIMIT_NOFILE, ulimit -n)",
          config.id, kStoreDescriptors, open, limit));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ShardTable>> ParameterServer::MakeTable(
    const TableConfig& config, const std::string& restore_from) {
  const bool opens_store = options_.embedding && !config.dense;
  uint64_t dense_bytes = 0;
  if (absl::Status s = ReserveForTable(config, opens_store, &dense_bytes); !s.ok()) return s;
  auto made = MakeTableUnchecked(config, restore_from);
  if (made.ok()) {
    table_bytes_ += dense_bytes;
    stores_ += opens_store ? 1 : 0;
  }
  return made;
}

absl::StatusOr<std::unique_ptr<ShardTable>> ParameterServer::MakeTableUnchecked(
    const TableConfig& config, const std::string& restore_from) {
  std::optional<EmbeddingStoreOptions> store;
  if (options_.embedding && !config.dense) {
    store = *options_.embedding;
    store->path = absl::StrFormat("%s/table-%d", options_.embedding->path, config.id);
    store->create_if_missing = true;
    // The folder is this run's scratch space: rows left by an earlier run must not leak in.
    std::error_code ec;
    std::filesystem::remove_all(store->path, ec);
    if (!ec) std::filesystem::create_directories(options_.embedding->path, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrFormat("cannot clear the embedding folder %s: %s", store->path, ec.message()));
    }
    // An empty snapshot file is not an SST file; there is nothing to ingest from it.
    if (!restore_from.empty() &&
        std::filesystem::file_size(restore_from, ec) != kEmptySnapshotContents.size()) {
      store->restore_from = restore_from;
    }
  }
  auto table =
      ShardTable::Create(config, options_.rank, options_.num_servers, store ? &*store : nullptr);
  if (table.ok()) (*table)->set_update_pool(update_pool_.get());
  return table;
}

absl::Status ParameterServer::Restore(const std::string& checkpoint_dir) {
  if (!tables_.empty()) return absl::FailedPreconditionError("restore before serving");
  auto shard = ReadShardCheckpoint(checkpoint_dir, options_.rank,
                                   [this](const TableConfig& config, const std::string& file) {
                                     return MakeTable(config, file);
                                   });
  if (!shard.ok()) return shard.status();
  for (auto& table : shard->tables) {
    const uint32_t id = table->config().id;
    tables_.emplace(id, std::move(table));
  }
  for (int w = 0; w < options_.num_workers; ++w) {
    if (auto s = clocks_.Advance(w, shard->clock); !s.ok()) return s;
  }
  stepped_clock_ = shard->clock;
  last_checkpoint_clock_ = shard->clock;
  // What the job had trained by the checkpoint: resumed and rolled-back runs count on from it.
  stats_.examples_trained = shard->examples_trained;
  SYNCLINE_LOG(INFO) << "restored " << tables_.size() << " tables at clock " << shard->clock
                     << " from " << checkpoint_dir;
  return absl::OkStatus();
}

void ParameterServer::StartCheckpoint(int64_t clock) {
  const absl::Time start = absl::Now();
  checkpoint_requests_.Taken(clock);
  // One capture at a time: wait for the previous write before copying anything, so that memory
  // holds at most one copy and RocksDB at most one pinned snapshot.
  checkpoint_writer_->WaitIdle();
  if (const absl::Duration waited = absl::Now() - start; waited > absl::Seconds(1)) {
    SYNCLINE_LOG(WARNING) << "checkpoint " << clock << " waited "
                          << absl::FormatDuration(absl::Trunc(waited, absl::Milliseconds(10)))
                          << " for the previous one to be written: checkpoints come faster than "
                             "the disk takes them (raise --checkpoint-every)";
  }
  ShardCapture capture;
  capture.clock = clock;
  capture.examples_trained = stats_.examples_trained;
  std::vector<uint32_t> ids;
  for (const auto& [id, table] : tables_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (uint32_t id : ids) capture.tables.push_back(tables_[id]->Capture());
  checkpoint_writer_->Write(CheckpointDir(options_.checkpoint_root, clock), options_.rank,
                            std::move(capture));
  last_checkpoint_clock_ = clock;
  ++stats_.checkpoints;
  const absl::Time end = absl::Now();
  stats_.checkpoint_pause += end - start;
  if (options_.observer) options_.observer->OnCheckpointCapture(clock, start, end);
}

void ParameterServer::RequestCheckpoint(int64_t clock) {
  if (!checkpoint_writer_) {
    if (options_.on_checkpoint) {
      options_.on_checkpoint(clock, absl::FailedPreconditionError("checkpoints are not enabled"));
    }
    return;
  }
  const int64_t min_clock = clocks_.MinClock();
  if (checkpoint_requests_.WasTaken(clock)) return;  // already written (a periodic one)
  if (clock == min_clock && clock > last_checkpoint_clock_) {
    // Nothing of clock `clock` has been applied yet (under BSP the tables change only when
    // the min clock moves): the shard is at that clock now.
    StartCheckpoint(clock);
  } else if (clock < min_clock || min_clock == kAllFinished) {
    MissCheckpoint(clock);
  } else if (clock > min_clock) {
    checkpoint_requests_.Request(clock);
  }
}

void ParameterServer::MissCheckpoint(int64_t clock) {
  if (!options_.on_checkpoint) return;
  options_.on_checkpoint(
      clock, absl::FailedPreconditionError(absl::StrFormat(
                 "every worker had finished clock %d before the request for it arrived (or the "
                 "job ended first)",
                 clock)));
}

void ParameterServer::WaitForCheckpoints() {
  if (checkpoint_writer_) checkpoint_writer_->WaitIdle();
}

absl::Status ParameterServer::ServeUntil(absl::Time deadline) {
  // While replies wait in a backlog, look at the peers' queues again every millisecond.
  constexpr absl::Duration kBacklogRetry = absl::Milliseconds(1);
  while (true) {
    if (!backlogs_.empty()) FlushBacklogs();
    if (secagg_ != nullptr) SecAggOnTime();
    if (options_.federated && absl::Now() >= round_deadline_) {
      if (auto s = AdvanceRounds(); !s.ok()) SYNCLINE_LOG(ERROR) << s;
    }
    absl::Time wait_until =
        backlogs_.empty() ? deadline : std::min(deadline, absl::Now() + kBacklogRetry);
    if (options_.federated) wait_until = std::min(wait_until, round_deadline_);
    if (secagg_ != nullptr) wait_until = std::min(wait_until, secagg_->deadline());
    auto message = endpoint_->Receive(wait_until);
    if (!message.ok()) {
      if (!absl::IsDeadlineExceeded(message.status())) return message.status();
      if (absl::Now() >= deadline) return absl::OkStatus();
      continue;
    }
    if (received_audit_ != nullptr) AuditReceived(*message);
    Handle(std::move(*message));
  }
}

void ParameterServer::AuditReceived(const Message& message) {
  for (const Frame& frame : message.frames()) {
    std::fwrite(frame.data(), 1, frame.size(), received_audit_.get());
  }
  // Flushed per message: the file is complete whenever the process ends.
  std::fflush(received_audit_.get());
}

void ParameterServer::Reply(const std::string& peer, Message reply) {
  auto it = backlogs_.find(peer);
  // What the transport still holds for the peer counts against the limit too: ZeroMQ queues
  // up to its high-water mark of messages, far more than the limit's bytes, before TrySend
  // reports the queue full. One reply goes out whatever its size when nothing is queued.
  const uint64_t queued = endpoint_->QueuedBytes(peer);
  if (it == backlogs_.end() && queued > 0 &&
      queued + reply.ByteSize() > options_.max_reply_backlog_bytes) {
    ++stats_.replies_dropped;
    LogUnreadReplies(peer, queued, reply.ByteSize());
    return;
  }
  if (it == backlogs_.end()) {
    absl::Status s = endpoint_->TrySend(peer, &reply);
    if (s.ok()) return;
    if (!absl::IsResourceExhausted(s)) {
      SYNCLINE_LOG(WARNING) << "reply to " << peer << " not sent: " << s;
      return;
    }
    it = backlogs_.try_emplace(peer).first;
  }
  // Behind the replies already waiting, so that a peer gets its replies in order.
  Backlog& backlog = it->second;
  backlog.bytes += reply.ByteSize();
  backlog.replies.push_back(std::move(reply));
  ++stats_.replies_backlogged;
  if (backlog.bytes + queued > options_.max_reply_backlog_bytes) {
    SYNCLINE_LOG(ERROR) << absl::StrFormat(
        "%s is not reading its replies: %d of them (%d bytes) are past the backlog limit of %d "
        "bytes (--reply-backlog, ServerOptions::max_reply_backlog_bytes) and are dropped; its "
        "requests will time out",
        peer, backlog.replies.size(), backlog.bytes, options_.max_reply_backlog_bytes);
    stats_.replies_dropped += backlog.replies.size();
    backlogs_.erase(it);
  }
}

void ParameterServer::LogUnreadReplies(const std::string& peer, uint64_t queued,
                                       uint64_t reply_bytes) {
  // Once per peer (a bounded set: strangers may use many ids); the count goes on in the stats.
  if (unread_logged_.size() >= kMaxUnreadLogged || !unread_logged_.insert(peer).second) return;
  SYNCLINE_LOG(ERROR) << absl::StrFormat(
      "%s is not reading its replies: %d bytes wait for it, and a reply of %d bytes would pass "
      "the limit of %d bytes (--reply-backlog, ServerOptions::max_reply_backlog_bytes); replies "
      "past it are dropped (ServerStats::replies_dropped) and its requests will time out (said "
      "once per peer)",
      peer, queued, reply_bytes, options_.max_reply_backlog_bytes);
}

void ParameterServer::FlushBacklogs() {
  for (auto it = backlogs_.begin(); it != backlogs_.end();) {
    Backlog& backlog = it->second;
    while (!backlog.replies.empty()) {
      Message& front = backlog.replies.front();
      const uint64_t bytes = front.ByteSize();
      // Held back while what the transport holds for the peer would pass the limit.
      const uint64_t queued = endpoint_->QueuedBytes(it->first);
      if (queued > 0 && queued + bytes > options_.max_reply_backlog_bytes) break;
      absl::Status s = endpoint_->TrySend(it->first, &front);
      if (absl::IsResourceExhausted(s)) break;
      if (!s.ok()) SYNCLINE_LOG(WARNING) << "reply to " << it->first << " not sent: " << s;
      backlog.bytes -= bytes;
      backlog.replies.pop_front();
    }
    if (backlog.replies.empty()) {
      backlogs_.erase(it++);
    } else {
      ++it;
    }
  }
}

void ParameterServer::ReplyError(const std::string& peer, const wire::Header::Reader& request,
                                 const absl::Status& status) {
  Reply(peer, MakeErrorReply(request, status));
}

void ParameterServer::Handle(Message message) {
  ++stats_.requests;
  const std::string peer = message.peer();
  const absl::Time begin = options_.observer ? absl::Now() : absl::InfinitePast();
  absl::Status status = message.Parse();
  // The kind and clock are read before the handler moves the message (into a parked pull).
  const wire::MsgType kind = status.ok() ? message.header().getType() : wire::MsgType::INVALID;
  const int64_t clock = status.ok() ? message.header().getClock() : 0;
  // Parse has read every field, so nothing below should throw; should a reader or an
  // allocation still fail, the request is refused and the server goes on serving.
  try {
    if (status.ok()) status = HandleRequest(message);
  } catch (const kj::Exception& e) {
    status =
        absl::InvalidArgumentError(absl::StrCat("malformed request: ", e.getDescription().cStr()));
  } catch (const std::bad_alloc&) {
    status = absl::ResourceExhaustedError(
        "out of memory for this request: it was refused and the server goes on");
  }
  if (options_.observer)
    options_.observer->OnRequest(kind, clock, begin, absl::Now(), !status.ok());
  if (status.ok()) return;
  ++stats_.rejected;
  if (ShouldLogRejection(stats_.rejected)) {
    SYNCLINE_LOG(WARNING) << "rejected a request from " << peer << " (" << stats_.rejected
                          << " so far): " << status;
  }
  if (message.parsed()) {
    ReplyError(peer, message.header(), status);
  } else {
    MessageBuilder b(wire::MsgType::ERROR);
    b.header().setStatusCode(static_cast<int32_t>(status.code()));
    b.header().setMessage(std::string(status.message()));
    Reply(peer, b.Finish());
  }
}

absl::StatusOr<ShardTable*> ParameterServer::FindTable(uint32_t id) {
  auto it = tables_.find(id);
  if (it == tables_.end()) {
    return absl::NotFoundError(absl::StrFormat("unknown table %d (declare it first)", id));
  }
  return it->second.get();
}

absl::Status ParameterServer::HandleRequest(Message& message) {
  auto h = message.header();
  const int worker = h.getRank();
  if (h.getRole() != wire::Role::WORKER || worker < 0 || worker >= clocks_.num_workers()) {
    return absl::PermissionDeniedError(
        absl::StrFormat("sender claims %s rank %d; only workers 0..%d may use a server",
                        RoleName(h.getRole()), worker, clocks_.num_workers() - 1));
  }
  if (message.peer() != worker_ids_[worker]) {
    return absl::PermissionDeniedError(
        absl::StrFormat("sender id '%s' does not match worker rank %d", message.peer(), worker));
  }
  if (h.getGeneration() != options_.generation) {
    // Sent before a rollback this server has made (the sender has rolled back too, and sends
    // again), or, newer, before this server has: either way not for the model it holds.
    if (h.getGeneration() > options_.generation) {
      SYNCLINE_LOG(WARNING) << "dropped a request of generation " << h.getGeneration() << " from "
                            << message.peer() << ": this server is at " << options_.generation;
    }
    ++stats_.stale_dropped;
    return absl::OkStatus();
  }
  // Round 0's time starts with the job's first request: the clients have all started by then.
  if (options_.federated && !round_started_) OpenRound(clocks_.MinClock());
  switch (h.getType()) {
    case wire::MsgType::DECLARE_TABLE:
      return DeclareTable(message);
    case wire::MsgType::PUSH:
    case wire::MsgType::PUSH_PULL: {
      auto table = FindTable(h.getTable());
      if (!table.ok()) return table.status();
      const bool push_only = h.getType() == wire::MsgType::PUSH;
      bool acked = false;
      if (auto s = Push(message, **table, push_only ? &acked : nullptr); !s.ok()) return s;
      if (!push_only) return PullOrPark(message, **table);
      if (!acked) AckPush(message);
      return absl::OkStatus();
    }
    case wire::MsgType::PULL: {
      auto table = FindTable(h.getTable());
      if (!table.ok()) return table.status();
      return PullOrPark(message, **table);
    }
    case wire::MsgType::CLOCK:
      return AdvanceClock(worker, h.getClock(), h.getWeight());
    case wire::MsgType::SEC_AGG:
      return HandleSecAgg(message);
    case wire::MsgType::FINISH: {
      if (auto s = clocks_.Finish(worker); !s.ok()) return s;
      if (auto s = options_.federated ? AdvanceRounds() : OnMinClockChanged(); !s.ok()) return s;
      MessageBuilder b(wire::MsgType::REPLY);
      b.header().setRequestId(h.getRequestId());
      Reply(message.peer(), b.Finish());
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrFormat("a server does not handle %s messages", MsgTypeName(h.getType())));
  }
}

absl::Status ParameterServer::DeclareTable(Message& message) {
  auto h = message.header();
  if (!h.getBody().isTable()) return absl::InvalidArgumentError("declareTable without a spec");
  auto config = TableConfig::FromWire(h.getBody().getTable());
  if (!config.ok()) return config.status();
  const wire::TableInit initial = h.getBody().getTable().getInitial();
  if (initial != wire::TableInit::DEFAULT && !config->dense) {
    return absl::InvalidArgumentError(
        absl::StrFormat("table %d: only a dense table takes initial values", config->id));
  }
  auto it = tables_.find(config->id);
  if (it != tables_.end()) {
    // Made already (or restored from a checkpoint): initial values do not apply.
    if (!(it->second->config() == *config)) {
      return absl::FailedPreconditionError(
          absl::StrFormat("table %d is already declared with a different spec", config->id));
    }
  } else if (initial == wire::TableInit::AWAIT_VALUES) {
    if (awaiting_count_ >= kMaxAwaitingDeclarations) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("table %d: %d declarations wait for tables' initial values already",
                          config->id, awaiting_count_));
    }
    awaiting_declarations_[config->id].push_back(
        AwaitingDeclaration{message.peer(), h.getRequestId(), *config});
    ++awaiting_count_;
    return absl::OkStatus();  // answered when the table is made
  } else {
    if (tables_.size() >= options_.max_tables) {
      return absl::ResourceExhaustedError("too many tables");
    }
    if (config->dense) {
      // A declaration is one small message that makes the server allocate and fill the
      // whole shard: bound it before any of that happens.
      const uint64_t floats_per_value = 1 + StateFloatsPerWeight(config->optimizer.kind);
      const uint64_t bytes =
          DenseShardRange(config->num_keys, options_.rank, options_.num_servers).size() *
          config->dim * floats_per_value * sizeof(float);
      const uint64_t limit = options_.max_dense_table_bytes > 0
                                 ? options_.max_dense_table_bytes
                                 : static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
                                       static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE)) / 2;
      if (bytes > limit) {
        return absl::ResourceExhaustedError(absl::StrFormat(
            "table %d: this shard's part of the dense table needs %d MiB (values and optimizer "
            "state), over the server's limit of %d MiB (ServerOptions::max_dense_table_bytes; "
            "by default half of this machine's memory)",
            config->id, bytes >> 20, limit >> 20));
      }
    }
    auto table = MakeTable(*config, "");
    if (!table.ok()) return table.status();
    if (initial == wire::TableInit::VALUES) {
      if (auto s = LoadInitialValues(**table, message); !s.ok()) return s;
    }
    it = tables_.emplace(config->id, std::move(*table)).first;
    AnswerAwaitingDeclarations(*it->second);
  }
  MessageBuilder b(wire::MsgType::REPLY);
  b.header().setRequestId(h.getRequestId());
  b.header().setTable(config->id);
  Reply(message.peer(), b.Finish());
  return absl::OkStatus();
}

absl::Status ParameterServer::LoadInitialValues(ShardTable& table, Message& message) {
  const TableConfig& config = table.config();
  if (message.payload_count() < 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "table %d: a declaration with initial values has no values frame", config.id));
  }
  auto values = message.payload(0).As<float>();
  if (!values.ok()) return values.status();
  const uint64_t expected = table.range().size() * config.dim;
  if (values->size() != expected) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "table %d: %d initial values for this server's %d keys of dim %d (%d values)", config.id,
        values->size(), table.range().size(), config.dim, expected));
  }
  for (size_t i = 0; i < values->size(); ++i) {
    if (!std::isfinite((*values)[i])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("table %d: initial value %d (key %d) is not finite", config.id, i,
                          table.range().begin + i / config.dim));
    }
  }
  const std::vector<float> state(
      expected * static_cast<uint64_t>(StateFloatsPerWeight(config.optimizer.kind)), 0.0f);
  return table.LoadDense(*values, state, 0);
}

void ParameterServer::AnswerAwaitingDeclarations(const ShardTable& table) {
  auto it = awaiting_declarations_.find(table.config().id);
  if (it == awaiting_declarations_.end()) return;
  for (const AwaitingDeclaration& d : it->second) {
    const bool same = d.config == table.config();
    MessageBuilder b(same ? wire::MsgType::REPLY : wire::MsgType::ERROR);
    b.header().setRequestId(d.request_id);
    b.header().setTable(table.config().id);
    if (!same) {
      b.header().setStatusCode(static_cast<int32_t>(absl::StatusCode::kFailedPrecondition));
      b.header().setMessage(
          absl::StrFormat("table %d is already declared with a different spec", d.config.id));
    }
    Reply(d.peer, b.Finish());
  }
  awaiting_count_ -= it->second.size();
  awaiting_declarations_.erase(it);
}

absl::StatusOr<std::span<const uint64_t>> ParameterServer::KeysOf(Message& message,
                                                                  std::vector<uint64_t>* storage) {
  auto h = message.header();
  if (message.payload_count() < 1) return absl::InvalidArgumentError("missing keys frame");
  if (h.getKeyCoding() > 2) {
    return absl::InvalidArgumentError(absl::StrFormat("unknown key coding %d", h.getKeyCoding()));
  }
  if (h.getKeyCoding() == 2) {
    // A push that reuses the keys of one of this worker's recent pulls of the table.
    if (h.getType() != wire::MsgType::PUSH) {
      return absl::InvalidArgumentError("only a push may reuse a pull's keys");
    }
    const auto it = recent_pull_keys_.find(std::make_pair(h.getRank(), h.getTable()));
    if (it != recent_pull_keys_.end()) {
      for (const auto& [id, keys] : it->second) {
        if (id != h.getKeysOf()) continue;
        if (keys.size() != h.getKeyCount()) {
          return absl::InvalidArgumentError(
              absl::StrFormat("a push reuses the %d keys of pull %d but says %d", keys.size(), id,
                              h.getKeyCount()));
        }
        return std::span<const uint64_t>(keys);
      }
    }
    return absl::InvalidArgumentError(absl::StrFormat(
        "a push reuses the keys of pull %d, which is not among w%d's last %d pulls of table %d",
        h.getKeysOf(), h.getRank(), kRecentPulls, h.getTable()));
  }
  if (h.getKeyCoding() == 1) {
    const Frame& f = message.payload(0);
    if (h.getKeyCount() == 0) return absl::InvalidArgumentError("a compact keys frame of no keys");
    if (auto s =
            DecodeKeys(std::span<const std::byte>(f.data(), f.size()), h.getKeyCount(), storage);
        !s.ok()) {
      return s;
    }
    return std::span<const uint64_t>(*storage);
  }
  auto keys = message.payload(0).As<uint64_t>();
  if (!keys.ok()) return keys.status();
  if (keys->size() != h.getKeyCount() || keys->empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("keys frame holds %d keys, header says %d", keys->size(), h.getKeyCount()));
  }
  return *keys;
}

void ParameterServer::AckPush(const Message& message) {
  auto h = message.header();
  MessageBuilder b(wire::MsgType::REPLY);
  b.header().setRequestId(h.getRequestId());
  b.header().setTable(h.getTable());
  Reply(message.peer(), b.Finish());
}

namespace {

// OK when every value is finite; otherwise an error naming the table, the sender and the first
// bad value. An exponent of all ones is NaN or Inf: an OR over the bits vectorises, so the
// check runs at memory speed on large pushes.
absl::Status CheckFinite(std::span<const float> values, uint32_t table, int sender) {
  uint32_t any = 0;
  const uint32_t* bits = reinterpret_cast<const uint32_t*>(values.data());
  for (size_t i = 0; i < values.size(); ++i) {
    any |= static_cast<uint32_t>((bits[i] & 0x7f800000u) == 0x7f800000u);
  }
  if (any == 0) return absl::OkStatus();
  size_t i = 0;
  while (std::isfinite(values[i])) ++i;
  return absl::InvalidArgumentError(
      absl::StrFormat("table %d: push from w%d holds a non-finite value (%f at index %d): "
                      "refused, the table is unchanged",
                      table, sender, values[i], i));
}

}  // namespace

absl::Status ParameterServer::Push(Message& message, ShardTable& table, bool* acked) {
  auto h = message.header();
  const TableConfig& c = table.config();
  std::span<const uint64_t> keys;
  std::vector<uint64_t> key_storage;
  KeyRange range;
  size_t values_frame = 0;
  uint64_t expected_values = 0;
  if (c.dense) {
    if (h.getKeyCount() != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("table %d is dense: send a range, not keys", c.id));
    }
    if (h.getHeldCoding() != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("table %d is dense: held counts fit only a sparse push", c.id));
    }
    range = KeyRange{h.getRangeBegin(), h.getRangeEnd()};
    if (auto s = table.CheckRange(range); !s.ok()) return s;
    expected_values = range.size() * c.dim;
  } else {
    auto k = KeysOf(message, &key_storage);
    if (!k.ok()) return k.status();
    keys = *k;
    if (auto s = table.CheckKeys(keys); !s.ok()) return s;
    values_frame = 1;
    expected_values = keys.size() * c.dim;
  }
  if (message.payload_count() <= values_frame) {
    return absl::InvalidArgumentError("push without a values frame");
  }
  absl::StatusOr<std::span<const float>> values;
  std::vector<float> decoded;
  if (h.getCodec() != 0) {
    // A compressed gradient: validated and decoded here, then treated like a raw one.
    const auto kind = static_cast<CodecKind>(h.getCodec());
    if (kind != CodecKind::kTopK && kind != CodecKind::kSign1 && kind != CodecKind::kFp16) {
      return absl::InvalidArgumentError(absl::StrFormat("unknown codec %d", h.getCodec()));
    }
    if (h.getValueCount() != expected_values) {
      return absl::InvalidArgumentError(
          absl::StrFormat("table %d: compressed push of %d values, expected %d", c.id,
                          h.getValueCount(), expected_values));
    }
    const Frame& block = message.payload(values_frame);
    const std::span<const std::byte> bytes(block.data(), block.size());
    if (!c.dense) {
      // Rows of a sparse table: the block covers exactly the pushed rows (the size is checked
      // before anything is allocated).
      if (auto s = DecodeRows(kind, bytes, keys.size(), c.dim, &decoded); !s.ok()) {
        return absl::Status(s.code(), absl::StrFormat("table %d: compressed push from w%d: %s",
                                                      c.id, h.getRank(), s.message()));
      }
      values = std::span<const float>(decoded);
    } else if (kind == CodecKind::kTopK) {
      // A sparse block goes straight to the rows it carries: no dense copy of the range.
      return PushTopK(message, table, range, bytes);
    } else {
      // The block must fit its claimed size before a buffer of that size is made.
      if (auto s = compression_internal::ValidateBlock(kind, bytes, expected_values); !s.ok()) {
        return s;
      }
      decoded.assign(expected_values, 0.0f);
      if (auto s = Codec::Create(CodecSpec{.kind = kind})->DecodeAdd(bytes, decoded); !s.ok()) {
        return s;
      }
      values = std::span<const float>(decoded);
    }
  } else {
    values = message.payload(values_frame).As<float>();
    if (!values.ok()) return values.status();
  }
  if (values->size() != expected_values || h.getValueCount() != expected_values) {
    return absl::InvalidArgumentError(
        absl::StrFormat("table %d: push carries %d values (header: %d), expected %d", c.id,
                        values->size(), h.getValueCount(), expected_values));
  }
  if (auto s = CheckFinite(*values, c.id, h.getRank()); !s.ok()) return s;
  // Rows of a compressed sparse push may each sum several pushes (sparse_rows.h).
  std::vector<uint16_t> held;
  std::vector<float> spread;
  if (h.getHeldCoding() != 0) {
    if (c.dense || h.getHeldCoding() != 1 || message.payload_count() != values_frame + 2) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "table %d: held counts (coding %d, %d frames) fit only a sparse push of 3 frames", c.id,
          h.getHeldCoding(), message.payload_count()));
    }
    const Frame& frame = message.payload(values_frame + 1);
    if (auto s = DecodeHeld(std::span<const std::byte>(frame.data(), frame.size()), keys.size(),
                            &held, &spread);
        !s.ok()) {
      return absl::Status(
          s.code(), absl::StrFormat("table %d: push from w%d: %s", c.id, h.getRank(), s.message()));
    }
  }
  if (LateForRound(h.getRank(), h.getClock())) return absl::OkStatus();
  if (gate_.synchronous()) {
    if (auto s = CheckPushClock(h); !s.ok()) return s;
    const int64_t clock = h.getClock();
    if (c.dense) {
      table.AccumulateRange(clock, h.getRank(), range, values->data());
    } else {
      table.Accumulate(clock, h.getRank(), keys, values->data(), held, spread);
    }
    return absl::OkStatus();
  }
  const float weight = h.getWeight();
  if (!std::isfinite(weight) || weight <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat("push weight %f must be > 0", weight));
  }
  if (c.dense) {
    if (acked != nullptr) {
      AckPush(message);
      *acked = true;
    }
    table.ApplyRange(range, values->data(), 1.0f / weight);
    return absl::OkStatus();
  }
  return table.Apply(keys, values->data(), 1.0f / weight, held, spread);
}

absl::Status ParameterServer::PushTopK(Message& message, ShardTable& table, KeyRange range,
                                       std::span<const std::byte> block) {
  auto h = message.header();
  const TableConfig& c = table.config();
  auto view = compression_internal::ParseTopK(block, range.size() * c.dim);
  if (!view.ok()) return view.status();
  // Indices ascend, so the rows they fall in come in order.
  std::vector<uint64_t> keys;
  std::vector<float> rows;
  keys.reserve(view->k);
  for (size_t i = 0; i < view->k; ++i) {
    const uint64_t index = view->index(i);
    const uint64_t key = range.begin + index / c.dim;
    if (keys.empty() || keys.back() != key) {
      keys.push_back(key);
      rows.resize(rows.size() + c.dim, 0.0f);
    }
    rows[(keys.size() - 1) * c.dim + index % c.dim] = view->value(i);
  }
  if (auto s = CheckFinite(rows, c.id, h.getRank()); !s.ok()) return s;
  if (LateForRound(h.getRank(), h.getClock())) return absl::OkStatus();
  if (gate_.synchronous()) {
    if (auto s = CheckPushClock(h); !s.ok()) return s;
    table.Accumulate(h.getClock(), h.getRank(), keys, rows.data());
    return absl::OkStatus();
  }
  const float weight = h.getWeight();
  if (!std::isfinite(weight) || weight <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat("push weight %f must be > 0", weight));
  }
  return table.Apply(keys, rows.data(), 1.0f / weight);
}

absl::Status ParameterServer::CheckPushClock(const wire::Header::Reader& h) const {
  const int64_t clock = h.getClock();
  // A worker that left (declared lost, its batches handed over) may still be running: what
  // it pushes would reach the clock sums the takers now train for.
  if (!clocks_.active(h.getRank())) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "w%d has left the job (finished, or declared lost): its push for clock %d is dropped",
        h.getRank(), clock));
  }
  if (clock < clocks_.MinClock() || clock < clocks_.clock(h.getRank())) {
    return absl::FailedPreconditionError(
        absl::StrFormat("push for clock %d arrived after that clock was applied (worker clock %d)",
                        clock, clocks_.clock(h.getRank())));
  }
  // A worker pushes for the iteration it is in: the server keeps per-clock sums, and a push
  // for a far future clock would hold a copy of its values there until then.
  if (clock > clocks_.clock(h.getRank()) + 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "w%d pushed for clock %d but has finished only %d: a push is for the iteration in "
        "progress",
        h.getRank(), clock, clocks_.clock(h.getRank())));
  }
  return absl::OkStatus();
}

absl::Status ParameterServer::PullOrPark(Message& message, ShardTable& table) {
  auto h = message.header();
  const TableConfig& c = table.config();
  uint64_t entries = 0;
  if (c.dense) {
    const KeyRange range{h.getRangeBegin(), h.getRangeEnd()};
    if (auto s = table.CheckRange(range); !s.ok()) return s;
    entries = range.size();
  } else {
    std::vector<uint64_t> key_storage;
    auto keys = KeysOf(message, &key_storage);
    if (!keys.ok()) return keys.status();
    if (auto s = table.CheckKeys(*keys); !s.ok()) return s;
    entries = keys->size();
    if (h.getKeyCoding() == 1 && h.getType() == wire::MsgType::PULL) {
      // Its push will likely carry the same keys: it may name this pull instead.
      auto& recent = recent_pull_keys_[std::make_pair(h.getRank(), c.id)];
      if (recent.size() == kRecentPulls) recent.pop_front();
      recent.emplace_back(h.getRequestId(), std::move(key_storage));
    }
  }
  if (h.getPullCodec() != 0) {
    if (pull_codec_ == nullptr ||
        h.getPullCodec() != static_cast<uint8_t>(options_.pull_codec.kind)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("a pull asks for codec %d, but this job's --compress-pull is %s",
                          h.getPullCodec(), CodecName(options_.pull_codec)));
    }
  }
  // A reply is keys x dim floats: up to 2^15 times the request's own size for a sparse pull.
  if (entries > options_.max_reply_bytes / (sizeof(float) * c.dim)) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "table %d: a pull of %d keys x %d floats would need a reply of %d MiB, over the "
        "server's limit of %d MiB (--max-reply, ServerOptions::max_reply_bytes): pull fewer keys "
        "at a time",
        c.id, entries, c.dim, entries * c.dim * sizeof(float) >> 20,
        options_.max_reply_bytes >> 20));
  }
  const int64_t clock = h.getClock();
  if (gate_.CanRead(clock, clocks_.MinClock())) {
    std::string peer = message.peer();
    return AnswerPull(peer, message, table);
  }
  if (parked_.size() >= options_.max_parked_pulls) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("%d pulls are already waiting for slow workers", parked_.size()));
  }
  std::string peer = message.peer();
  const uint64_t bytes = message.ByteSize() + entries * c.dim * sizeof(float);
  const auto waiting = parked_bytes_.find(peer);
  const uint64_t had = waiting == parked_bytes_.end() ? 0 : waiting->second;
  if (had + bytes > options_.max_parked_bytes_per_peer) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%s's pulls waiting for slow workers would weigh %d bytes with this one (requests and "
        "replies; %d already), over the limit of %d bytes per peer (--max-parked, "
        "ServerOptions::max_parked_bytes_per_peer)",
        peer, had + bytes, had, options_.max_parked_bytes_per_peer));
  }
  parked_bytes_[peer] = had + bytes;
  ++stats_.parked;
  parked_.emplace(gate_.RequiredMinClock(clock),
                  ParkedPull{peer, std::move(message), clock, bytes,
                             options_.observer ? absl::Now() : absl::InfinitePast()});
  return absl::OkStatus();
}

absl::Status ParameterServer::AnswerPull(const std::string& peer, Message& request,
                                         ShardTable& table) {
  auto h = request.header();
  const TableConfig& c = table.config();
  Frame values;
  if (c.dense) {
    // References the table's block when the range lies in one (no copy): the table copies a
    // block before changing it while a reply still holds it.
    values = table.ShareRange(KeyRange{h.getRangeBegin(), h.getRangeEnd()});
    if (h.getPullCodec() != 0) {
      // The range's keys are the rows the worker's copy is keyed by.
      std::vector<uint64_t> keys(h.getRangeEnd() - h.getRangeBegin());
      for (size_t i = 0; i < keys.size(); ++i) keys[i] = h.getRangeBegin() + i;
      auto floats = values.As<float>();
      if (!floats.ok()) return floats.status();
      return AnswerCompressedPull(peer, request, c, keys, *floats);
    }
  } else {
    std::vector<uint64_t> key_storage;
    auto keys = KeysOf(request, &key_storage);
    if (!keys.ok()) return keys.status();
    // Uninitialised: every value is overwritten, and zero-filling a large reply costs as much
    // as the copy itself.
    const size_t count = keys->size() * c.dim;
    std::shared_ptr<float[]> copy = std::make_shared_for_overwrite<float[]>(count);
    // An evaluation's read (clock -1) creates no rows: a test set's ids the training never saw
    // read as their initial values and leave the table as it was.
    if (auto s = table.Read(*keys, copy.get(), /*create=*/h.getClock() >= 0); !s.ok()) return s;
    if (h.getPullCodec() != 0) {
      return AnswerCompressedPull(peer, request, c, *keys,
                                  std::span<const float>(copy.get(), count));
    }
    const float* data = copy.get();
    values = Frame::Shared(std::move(copy), data, count * sizeof(float));
  }
  MessageBuilder b = PullReply(h, c.id, values.size() / sizeof(float));
  b.AddFrame(std::move(values));
  Reply(peer, b.Finish());
  return absl::OkStatus();
}

MessageBuilder ParameterServer::PullReply(const wire::Header::Reader& request, uint32_t table,
                                          uint64_t values) {
  MessageBuilder b(wire::MsgType::REPLY);
  b.header().setRequestId(request.getRequestId());
  b.header().setTable(table);
  const int64_t staleness = StalenessGate::StalenessOf(request.getClock(), clocks_.MinClock());
  b.header().setClock(request.getClock());
  b.header().setStaleness(staleness);
  b.header().setValueCount(values);
  stats_.staleness.Record(staleness);
  return b;
}

absl::Status ParameterServer::AnswerCompressedPull(const std::string& peer, Message& request,
                                                   const TableConfig& c,
                                                   std::span<const uint64_t> keys,
                                                   std::span<const float> values) {
  auto h = request.header();
  auto [it, added] =
      pull_copies_.try_emplace(std::make_pair(h.getRank(), c.id), c.dim, options_.pull_copy_rows);
  PulledRows rows;
  EncodePull(*pull_codec_, keys, values, ++pull_stamp_, &it->second, &rows);
  stats_.pull_rows_fresh += rows.fresh.size() / c.dim;
  stats_.pull_rows_evicted += rows.evicted.size();
  std::vector<std::byte> evicted;
  EncodeKeys(rows.evicted, &evicted);
  MessageBuilder b = PullReply(h, c.id, values.size());
  b.header().setCodec(static_cast<uint8_t>(options_.pull_codec.kind));
  b.header().setKeyCount(rows.evicted.size());
  b.AddFrame(Frame::Own(std::move(rows.fresh)));
  b.AddFrame(Frame::Own(std::move(rows.block)));
  b.AddFrame(Frame::Own(std::move(evicted)));
  Reply(peer, b.Finish());
  return absl::OkStatus();
}

bool ParameterServer::LateForRound(int worker, int64_t clock) const {
  // Closing a round moves every active worker's clock past it.
  return options_.federated && clocks_.active(worker) && clock < clocks_.clock(worker);
}

absl::Status ParameterServer::AdvanceClock(int worker, int64_t clock, float weight) {
  const int64_t before = clocks_.clock(worker);
  // The round closed without this client; its clock was moved on then.
  if (options_.federated && clocks_.active(worker) && clock <= before) {
    ++stats_.updates_late;
    SYNCLINE_LOG(WARNING) << absl::StrFormat(
        "w%d finished round %d after the round had closed (--round-timeout %s): its update is "
        "dropped",
        worker, clock - 1, absl::FormatDuration(options_.federated->round_timeout));
    return absl::OkStatus();
  }
  // A worker's clock goes up one at a time: a jump would make the server walk every clock in
  // between (a CLOCK of 2^62 would hang it) and key per-clock state by the sender's whim.
  if (worker >= 0 && worker < clocks_.num_workers() && clocks_.active(worker) &&
      clock != before + 1) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "w%d sent clock %d after clock %d: a worker finishes one iteration at a time", worker,
        clock, before));
  }
  if (auto s = clocks_.Advance(worker, clock); !s.ok()) return s;
  if (clock > before && std::isfinite(weight) && weight > 0) {
    clock_weight_[clock - 1] += weight;
    stats_.examples_trained += weight;
    if (options_.aggregate.robust()) worker_weight_[clock - 1][worker] += weight;
  }
  return options_.federated ? AdvanceRounds() : OnMinClockChanged();
}

void ParameterServer::OpenRound(int64_t round) {
  round_started_ = true;
  round_ = round;
  if (round >= options_.federated->rounds) {  // the job's last round has closed
    round_clients_.clear();
    round_deadline_ = absl::InfiniteFuture();
    return;
  }
  round_clients_ = RoundPicker{.seed = options_.federated->seed,
                               .workers = options_.num_workers,
                               .participation = options_.federated->participation,
                               .poisson_key = options_.federated->dp_key}
                       .Pick(round);
  round_deadline_ = absl::Now() + options_.federated->round_timeout;
  if (options_.federated->secagg) {
    // The protocol's stages bound the round; it closes once they end and its clients clock.
    SecAggRelayOptions o{.params = *options_.federated->secagg,
                         .round = round,
                         .first_stage_timeout = options_.federated->round_timeout,
                         .stage_timeout = options_.federated->secagg_stage_timeout};
    for (int c : round_clients_) o.clients.push_back(c + 1);
    secagg_ = std::make_unique<SecAggRelay>(std::move(o), absl::Now());
    secagg_finished_ = false;
    round_deadline_ = absl::InfiniteFuture();
  }
}

absl::Status ParameterServer::AdvanceRounds() {
  if (!round_started_) OpenRound(clocks_.MinClock());
  // Bounded: each pass closes one round, and a round with no active client closes at once only
  // while some worker is still active (all finished: min clock is kAllFinished).
  for (int passes = 0; passes <= options_.num_workers + 1; ++passes) {
    if (clocks_.MinClock() == kAllFinished || round_ >= options_.federated->rounds) break;
    if (secagg_ != nullptr && secagg_->running()) break;  // its stages' deadlines end it
    std::vector<int> missing;
    for (int c : round_clients_) {
      if (clocks_.active(c) && clocks_.clock(c) <= round_) missing.push_back(c);
    }
    const bool timed_out = absl::Now() >= round_deadline_;
    if (!missing.empty() && !timed_out) break;
    // Under secure aggregation the clients the protocol lost are missing too.
    const size_t picked = round_clients_.size() + secagg_lost_.size();
    missing.insert(missing.end(), secagg_lost_.begin(), secagg_lost_.end());
    secagg_lost_.clear();
    // An aborted secure aggregation leaves the round without its update: short, too.
    const bool aborted = secagg_ != nullptr && !secagg_->outcome().ok();
    secagg_.reset();
    std::sort(missing.begin(), missing.end());
    ++stats_.rounds;
    if (!missing.empty() || aborted) {
      ++stats_.rounds_short;
      if (stats_.short_rounds.size() < kMaxShortRounds) stats_.short_rounds.push_back(round_);
      stats_.clients_missing += missing.size();
    }
    if (!missing.empty()) {
      std::vector<std::string> names;
      for (int c : missing) names.push_back(absl::StrCat("w", c));
      SYNCLINE_LOG(WARNING) << absl::StrFormat(
          "round %d closed at the %s timeout without %s (%d of %d picked clients missing)", round_,
          absl::FormatDuration(options_.federated->round_timeout), absl::StrJoin(names, ", "),
          missing.size(), picked);
    }
    // What a missing client pushed before its time ran out has no weight in the round: it goes.
    for (int c : missing) {
      for (auto& [id, table] : tables_) table->DropContributions(round_, c);
    }
    // The clients not picked, and those that did not answer, leave the round with it.
    for (int w = 0; w < options_.num_workers; ++w) {
      if (clocks_.active(w) && clocks_.clock(w) <= round_) {
        if (auto s = clocks_.Advance(w, round_ + 1); !s.ok()) return s;
      }
    }
    OpenRound(round_ + 1);
  }
  return OnMinClockChanged();
}

ParameterServer::EmbeddingTotals ParameterServer::embedding_totals() const {
  EmbeddingTotals t;
  for (const auto& [id, table] : tables_) {
    const EmbeddingStore* store = table->store();
    if (store == nullptr) continue;
    ++t.tables;
    t.stats += store->stats();
    t.budget_bytes += store->options().max_memory_bytes;
  }
  return t;
}

absl::Status ParameterServer::AddWorker(int worker, int64_t clock) {
  if (auto s = clocks_.Join(worker, clock); !s.ok()) return s;
  SYNCLINE_LOG(INFO) << "w" << worker << " joined the clock set at clock " << clock;
  return OnMinClockChanged();
}

void ParameterServer::RemoveWorker(int worker) {
  if (worker < 0 || worker >= clocks_.num_workers() || !clocks_.active(worker)) return;
  // Under BSP what it pushed for the iterations it did not finish never reaches the model: the
  // workers that take over its batches train them again (worker/work_plan.h).
  if (gate_.synchronous() && !options_.federated) {
    for (auto& [id, table] : tables_) table->DropContributionsFrom(clocks_.clock(worker), worker);
  }
  stats_.lost_workers.emplace_back(worker, clocks_.clock(worker));
  (void)clocks_.Finish(worker);
  if (auto s = options_.federated ? AdvanceRounds() : OnMinClockChanged(); !s.ok()) {
    SYNCLINE_LOG(ERROR) << s;
  }
}

// DP-FedAvg: the closed rounds' sums of clipped updates, each with its noise, over the expected
// number of clients. Every round up to the job's last is applied once, in order, also one that
// no client answered.
absl::Status ParameterServer::ApplyNoisyRounds(int64_t min_clock) {
  const ServerOptions::Federated& f = *options_.federated;
  const int64_t to = std::min(min_clock, f.rounds);
  if (to <= noised_round_) return absl::OkStatus();
  absl::StatusOr<DpKey> key = ParseDpKeyHex(f.dp_key);
  if (!key.ok()) return key.status();
  absl::Status result;
  for (auto& [id, table] : tables_) {
    const uint32_t table_id = id;
    auto add_noise = [&](int64_t round, std::span<float> sum) {
      DpRandom noise(
          *key, DpStream::kRoundNoise,
          {table_id, static_cast<uint64_t>(options_.rank), static_cast<uint64_t>(round)});
      if (!f.distributed_dp) noise.AddGaussian(sum, f.dp_noise_stddev);
    };
    absl::Status s = table->ApplyNoisyAggregates(
        noised_round_, to, static_cast<float>(1.0 / f.dp_expected_clients), add_noise);
    if (!s.ok() && result.ok()) result = s;
  }
  noised_round_ = to;
  return result;
}

absl::Status ParameterServer::OnMinClockChanged() {
  const int64_t min_clock = clocks_.MinClock();
  absl::Status result;
  if (gate_.synchronous()) {
    auto scale_of = [this](int64_t clock) {
      auto it = clock_weight_.find(clock);
      return it == clock_weight_.end() || it->second <= 0 ? 0.0f
                                                          : static_cast<float>(1.0 / it->second);
    };
    if (options_.aggregate.robust()) {
      auto examples_of = [this](int64_t clock, int worker) {
        auto c = worker_weight_.find(clock);
        if (c == worker_weight_.end()) return 0.0;
        auto w = c->second.find(worker);
        return w == c->second.end() ? 0.0 : w->second;
      };
      for (auto& [id, table] : tables_) {
        auto applied = table->ApplyRobustAggregates(min_clock, options_.aggregate, examples_of);
        if (!applied.ok()) {
          if (result.ok()) result = applied.status();
          continue;
        }
        if (*applied > 0 && ShouldLogRejection(++skip_reports_)) {
          SYNCLINE_LOG(WARNING) << absl::StrFormat(
              "table %d, clocks before %d: %d %s held by fewer updates than --aggregate %s "
              "needs (%d) and left unchanged",
              id, min_clock, *applied, table->config().dense ? "dense ranges were" : "keys were",
              AggregateRuleName(options_.aggregate), MinUpdatesFor(options_.aggregate));
        }
        stats_.aggregates_skipped += *applied;
      }
    } else if (options_.federated &&
               (options_.federated->dp_noise_stddev > 0 || options_.federated->distributed_dp)) {
      result = ApplyNoisyRounds(min_clock);
    } else {
      for (auto& [id, table] : tables_) {
        if (auto s = table->ApplyAggregates(min_clock, scale_of); !s.ok() && result.ok()) {
          result = s;
        }
      }
    }
  }
  clock_weight_.erase(clock_weight_.begin(), clock_weight_.lower_bound(min_clock));
  worker_weight_.erase(worker_weight_.begin(), worker_weight_.lower_bound(min_clock));
  // One store step per clock every worker finished (at most a bounded catch-up per call: the
  // min clock only moves by the clocks workers report).
  if (min_clock != kAllFinished) {
    for (; stepped_clock_ < min_clock; ++stepped_clock_) {
      for (auto& [id, table] : tables_) {
        if (auto s = table->AdvanceStep(); !s.ok() && result.ok()) result = s;
      }
      // The min clock jumped over a periodic checkpoint (a slow worker left under SSP/ASP):
      // the workers wrote their parts of it, so say it will not be completed.
      const int64_t passed = stepped_clock_ + 1;
      if (checkpoint_writer_ && passed < min_clock && options_.checkpoint_every > 0 &&
          passed % options_.checkpoint_every == 0 && passed > last_checkpoint_clock_) {
        MissCheckpoint(passed);
      }
    }
    if (checkpoint_writer_) {
      // Requests the workers have already gone past cannot be served any more.
      for (int64_t missed : checkpoint_requests_.TakeMissedBefore(min_clock)) {
        MissCheckpoint(missed);
      }
      const bool requested = checkpoint_requests_.Consume(min_clock);
      const bool periodic =
          options_.checkpoint_every > 0 && min_clock % options_.checkpoint_every == 0;
      if (min_clock > last_checkpoint_clock_ && (requested || periodic)) {
        StartCheckpoint(min_clock);
      }
    }
  } else {
    for (int64_t missed : checkpoint_requests_.TakeMissedBefore(kAllFinished)) {
      MissCheckpoint(missed);
    }
  }
  while (!parked_.empty() && (min_clock == kAllFinished || parked_.begin()->first <= min_clock)) {
    auto node = parked_.extract(parked_.begin());
    ParkedPull& p = node.mapped();
    if (auto it = parked_bytes_.find(p.peer); it != parked_bytes_.end()) {
      it->second -= std::min(it->second, p.bytes);
      if (it->second == 0) parked_bytes_.erase(it);
    }
    auto table = FindTable(p.request.header().getTable());
    absl::Status s = table.ok() ? AnswerPull(p.peer, p.request, **table) : table.status();
    if (!s.ok()) ReplyError(p.peer, p.request.header(), s);
    if (options_.observer) options_.observer->OnParkedPull(p.peer, p.clock, p.since, absl::Now());
  }
  return result;
}

}  // namespace syncline
