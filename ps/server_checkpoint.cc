#include "ps/server_checkpoint.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "capnp/message.h"
#include "capnp/serialize.h"
#include "checkpoint/file_io.h"
#include "core/log.h"
#include "embeddings/row_codec.h"
#include "optim/optimizer.h"

namespace syncline {
namespace {

// Keys of shard.sst, ascending in this order: 'c' table specs, 'd' dense tables, 'k' the clock,
// 'x' the examples trained before it (a float64; absent in older checkpoints).
constexpr char kSpecKey = 'c';
constexpr char kDenseKey = 'd';
constexpr char kClockKey = 'k';
constexpr char kExamplesKey = 'x';
// Dense tables are stored in pieces of this many floats, so no value is huge.
constexpr size_t kChunkFloats = size_t{1} << 18;

void PutBigEndian(std::string& key, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) key.push_back(static_cast<char>(v >> (8 * i)));
}

uint64_t GetBigEndian(std::string_view key, size_t offset, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | static_cast<unsigned char>(key[offset + i]);
  return v;
}

std::string SpecKey(uint32_t table) {
  std::string key(1, kSpecKey);
  PutBigEndian(key, table, 4);
  return key;
}

// 'd' | table (4) | part ('n' step, 's' state, 'w' weights) | chunk (8, for s and w).
std::string DenseKey(uint32_t table, char part, uint64_t chunk) {
  std::string key(1, kDenseKey);
  PutBigEndian(key, table, 4);
  key.push_back(part);
  if (part != 'n') PutBigEndian(key, chunk, 8);
  return key;
}

std::string ShardFolder(int rank) { return absl::StrCat("ps", rank); }
std::string TableFile(int rank, uint32_t table) {
  return absl::StrFormat("ps%d/table-%d.sst", rank, table);
}

std::string EncodeSpec(const TableConfig& config) {
  capnp::MallocMessageBuilder message;
  config.ToWire(message.initRoot<wire::TableSpec>());
  auto words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

absl::StatusOr<TableConfig> DecodeSpec(std::string_view value, const std::string& file) {
  if (value.size() % sizeof(capnp::word) != 0 || value.empty()) {
    return absl::DataLossError(absl::StrCat(file, ": a table spec of ", value.size(), " bytes"));
  }
  std::vector<capnp::word> words(value.size() / sizeof(capnp::word));
  std::memcpy(words.data(), value.data(), value.size());
  try {
    capnp::FlatArrayMessageReader reader(
        kj::ArrayPtr<const capnp::word>(words.data(), words.size()));
    auto config = TableConfig::FromWire(reader.getRoot<wire::TableSpec>());
    if (!config.ok()) {
      return absl::DataLossError(absl::StrCat(file, ": ", config.status().message()));
    }
    return *config;
  } catch (const kj::Exception& e) {
    return absl::DataLossError(
        absl::StrCat(file, ": a damaged table spec: ", e.getDescription().cStr()));
  }
}

absl::Status PutFloats(SnapshotWriter& writer, uint32_t table, char part,
                       const std::vector<float>& floats) {
  for (size_t begin = 0, chunk = 0; begin < floats.size(); begin += kChunkFloats, ++chunk) {
    const size_t n = std::min(kChunkFloats, floats.size() - begin);
    if (auto s = writer.Put(DenseKey(table, part, chunk),
                            std::string_view(reinterpret_cast<const char*>(floats.data() + begin),
                                             n * sizeof(float)));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<NodeReceipt> WriteShardCheckpoint(const std::string& checkpoint_dir, int rank,
                                                 const ShardCapture& capture) {
  const std::string folder = JoinPath(checkpoint_dir, ShardFolder(rank));
  if (absl::Status s = CreateDirectoriesDurably(folder); !s.ok()) return s;
  NodeReceipt receipt;
  receipt.node = ShardFolder(rank);
  receipt.clock = capture.clock;
  {
    auto writer = SnapshotWriter::Create(JoinPath(folder, "shard.sst"));
    if (!writer.ok()) return writer.status();
    for (const auto& t : capture.tables) {
      if (auto s = (*writer)->Put(SpecKey(t->config.id), EncodeSpec(t->config)); !s.ok()) return s;
    }
    for (const auto& t : capture.tables) {
      if (!t->config.dense) continue;
      const int64_t step = t->step;
      if (auto s = (*writer)->Put(DenseKey(t->config.id, 'n', 0),
                                  std::string_view(reinterpret_cast<const char*>(&step), 8));
          !s.ok()) {
        return s;
      }
      if (auto s = PutFloats(**writer, t->config.id, 's', t->state); !s.ok()) return s;
      if (auto s = PutFloats(**writer, t->config.id, 'w', t->weights); !s.ok()) return s;
    }
    const int64_t clock = capture.clock;
    if (auto s = (*writer)->Put(std::string(1, kClockKey),
                                std::string_view(reinterpret_cast<const char*>(&clock), 8));
        !s.ok()) {
      return s;
    }
    const double examples = capture.examples_trained;
    if (auto s = (*writer)->Put(std::string(1, kExamplesKey),
                                std::string_view(reinterpret_cast<const char*>(&examples), 8));
        !s.ok()) {
      return s;
    }
    auto entry = (*writer)->Finish();
    if (!entry.ok()) return entry.status();
    entry->path = ShardFolder(rank) + "/shard.sst";
    receipt.files.push_back(*entry);
  }
  for (const auto& t : capture.tables) {
    if (t->config.dense) continue;
    const std::string relative = TableFile(rank, t->config.id);
    auto writer = SnapshotWriter::Create(JoinPath(checkpoint_dir, relative));
    if (!writer.ok()) return writer.status();
    if (auto s = t->ForEachSparseEntry([&](std::string_view key, std::string_view value) {
          return (*writer)->Put(key, value);
        });
        !s.ok()) {
      return s;
    }
    auto entry = (*writer)->Finish();
    if (!entry.ok()) return entry.status();
    entry->path = relative;
    receipt.files.push_back(*entry);
  }
  if (auto s = WriteReceipt(checkpoint_dir, receipt); !s.ok()) return s;
  return receipt;
}

absl::StatusOr<RestoredShard> ReadShardCheckpoint(const std::string& checkpoint_dir, int rank,
                                                  const TableMaker& make_table) {
  const std::string file = JoinPath(checkpoint_dir, ShardFolder(rank) + "/shard.sst");
  auto reader = SnapshotReader::Open(file);
  if (!reader.ok()) return reader.status();
  RestoredShard shard;
  bool have_clock = false;
  std::map<uint32_t, ShardTable*> by_id;
  // Dense pieces arrive in key order: state chunks, then weight chunks, of one table at a time.
  std::vector<float> state, weights;
  int64_t step = 0;
  uint32_t dense_table = 0;
  bool dense_open = false;
  auto finish_dense = [&]() -> absl::Status {
    if (!dense_open) return absl::OkStatus();
    dense_open = false;
    auto s = by_id[dense_table]->LoadDense(weights, state, step);
    state.clear();
    weights.clear();
    if (!s.ok()) return absl::DataLossError(absl::StrCat(file, ": ", s.message()));
    return absl::OkStatus();
  };
  auto status = (*reader)->ForEach([&](std::string_view key,
                                       std::string_view value) -> absl::Status {
    if (key.empty()) return absl::DataLossError(absl::StrCat(file, ": an empty key"));
    if (key[0] == kSpecKey && key.size() == 5) {
      auto config = DecodeSpec(value, file);
      if (!config.ok()) return config.status();
      const std::string sparse =
          config->dense ? std::string() : JoinPath(checkpoint_dir, TableFile(rank, config->id));
      auto table = make_table(*config, sparse);
      if (!table.ok()) return table.status();
      by_id[config->id] = table->get();
      shard.tables.push_back(std::move(*table));
      return absl::OkStatus();
    }
    if (key[0] == kDenseKey && key.size() >= 6) {
      const auto table = static_cast<uint32_t>(GetBigEndian(key, 1, 4));
      auto it = by_id.find(table);
      if (it == by_id.end() || !it->second->config().dense) {
        return absl::DataLossError(
            absl::StrCat(file, ": values of undeclared dense table ", table));
      }
      if (!dense_open || dense_table != table) {
        if (auto s = finish_dense(); !s.ok()) return s;
        dense_open = true;
        dense_table = table;
        step = 0;
      }
      const char part = key[5];
      if (part == 'n' && value.size() == 8) {
        std::memcpy(&step, value.data(), 8);
        return absl::OkStatus();
      }
      if ((part == 's' || part == 'w') && value.size() % sizeof(float) == 0) {
        auto& out = part == 's' ? state : weights;
        const size_t n = value.size() / sizeof(float);
        out.resize(out.size() + n);
        std::memcpy(out.data() + out.size() - n, value.data(), value.size());
        return absl::OkStatus();
      }
      return absl::DataLossError(absl::StrCat(file, ": a malformed dense entry of table ", table));
    }
    if (key[0] == kClockKey && value.size() == 8) {
      std::memcpy(&shard.clock, value.data(), 8);
      have_clock = true;
      return absl::OkStatus();
    }
    if (key[0] == kExamplesKey && key.size() == 1 && value.size() == 8) {
      std::memcpy(&shard.examples_trained, value.data(), 8);
      if (!std::isfinite(shard.examples_trained) || shard.examples_trained < 0) {
        return absl::DataLossError(absl::StrCat(file, ": a malformed count of examples"));
      }
      return absl::OkStatus();
    }
    return absl::DataLossError(absl::StrCat(file, ": an unknown entry"));
  });
  if (!status.ok()) return status;
  if (auto s = finish_dense(); !s.ok()) return s;
  if (!have_clock) return absl::DataLossError(absl::StrCat(file, ": no clock entry"));
  // Sparse tables without a store load their rows here; stores ingested their file.
  for (auto& table : shard.tables) {
    if (table->config().dense || table->store() != nullptr) continue;
    const std::string rows = JoinPath(checkpoint_dir, TableFile(rank, table->config().id));
    auto rows_reader = SnapshotReader::Open(rows);
    if (!rows_reader.ok()) return rows_reader.status();
    const uint32_t id = table->config().id;
    auto s = (*rows_reader)->ForEach([&](std::string_view key, std::string_view value) {
      uint64_t row = 0;
      if (!DecodeRowKey(key.data(), key.size(), id, &row)) return absl::OkStatus();  // step record
      auto loaded = table->LoadRow(row, value);
      return loaded.ok() ? loaded : absl::DataLossError(absl::StrCat(rows, ": ", loaded.message()));
    });
    if (!s.ok()) return s;
  }
  return shard;
}

CheckpointWriter::CheckpointWriter(std::function<void(int64_t, const absl::Status&)> done)
    : done_(std::move(done)), thread_([this] { Loop(); }) {}

CheckpointWriter::~CheckpointWriter() {
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !busy_; });
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CheckpointWriter::Write(std::string checkpoint_dir, int rank, ShardCapture capture) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !busy_; });
  busy_ = true;
  dir_ = std::move(checkpoint_dir);
  rank_ = rank;
  job_ = std::make_unique<ShardCapture>(std::move(capture));
  lock.unlock();
  cv_.notify_all();
}

void CheckpointWriter::WaitIdle() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !busy_; });
}

void CheckpointWriter::Loop() {
  // Background work: on a machine whose cores the servers and workers keep busy, the writer
  // takes the cycles they leave (Linux applies a thread's nice value to that thread alone).
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 19) != 0) {
    SYNCLINE_LOG(WARNING) << "checkpoint writer: cannot lower its priority: "
                          << std::strerror(errno);
  }
  while (true) {
    std::unique_ptr<ShardCapture> job;
    std::string dir;
    int rank = 0;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || job_ != nullptr; });
      if (job_ == nullptr) return;
      job = std::move(job_);
      dir = dir_;
      rank = rank_;
    }
    const int64_t clock = job->clock;
    auto receipt = WriteShardCheckpoint(dir, rank, *job);
    job.reset();  // releases the RocksDB snapshots
    if (done_) done_(clock, receipt.status());
    {
      std::lock_guard lock(mu_);
      busy_ = false;
    }
    cv_.notify_all();
  }
}

}  // namespace syncline
