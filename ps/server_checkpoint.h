// Checkpoints of one parameter-server shard: what a shard writes into a checkpoint folder and
// how it reads it back (the folder's manifest and receipts are checkpoint/checkpoint.h's).
//
// Layout, inside CheckpointDir(root, clock):
//   ps<R>/shard.sst       the shard's clock, every table's spec and every dense table's
//                         weights, optimizer state and update count;
//   ps<R>/table-<T>.sst   sparse table T's rows (weights, optimizer state, update count) in the
//                         embedding store's RocksDB format, a file a store ingests as it is.
// Both are snapshot files (checkpoint/snapshot.h): RocksDB SST with block checksums, and the
// receipt lists their sizes and CRC32Cs.
//
// Capturing (ShardTable::Capture) is the only part on the server's thread; the writing runs on
// a CheckpointWriter's thread while the server goes on serving.
//
// Thread-safety: the free functions are thread-compatible; CheckpointWriter is thread-safe.
#ifndef SYNCLINE_PS_SERVER_CHECKPOINT_H_
#define SYNCLINE_PS_SERVER_CHECKPOINT_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"
#include "ps/shard_table.h"

namespace syncline {

// A shard at one clock.
struct ShardCapture {
  int64_t clock = 0;
  double examples_trained = 0;  // ServerStats::examples_trained at the capture
  std::vector<std::unique_ptr<TableSnapshot>> tables;  // ascending by table id
};

// Writes `capture` into checkpoint_dir/ps<rank>/ and then the node's receipt ("ps<rank>").
// Returns the receipt.
absl::StatusOr<NodeReceipt> WriteShardCheckpoint(const std::string& checkpoint_dir, int rank,
                                                 const ShardCapture& capture);

// Makes the table a restored spec describes: `sparse_file` is the path of the table's row
// file for sparse tables (ingest it or load its rows), empty for dense ones.
using TableMaker = std::function<absl::StatusOr<std::unique_ptr<ShardTable>>(
    const TableConfig& config, const std::string& sparse_file)>;

struct RestoredShard {
  int64_t clock = 0;
  double examples_trained = 0;  // 0 in checkpoints written before it was saved
  std::vector<std::unique_ptr<ShardTable>> tables;
};

// Reads ps<rank>'s part of a validated checkpoint: tables are made by `make_table` and then
// filled (dense weights; sparse rows unless the table has a store, which ingested them).
// DataLoss naming the file for damaged content.
absl::StatusOr<RestoredShard> ReadShardCheckpoint(const std::string& checkpoint_dir, int rank,
                                                  const TableMaker& make_table);

// A thread that writes one checkpoint at a time.
class CheckpointWriter {
 public:
  // `done` is called on the writer's thread after each checkpoint with its clock and outcome.
  explicit CheckpointWriter(std::function<void(int64_t clock, const absl::Status&)> done);
  // Waits for the checkpoint being written.
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Queues the writing of `capture` into `checkpoint_dir`, after waiting for the previous one
  // (that wait is the only way a checkpoint slows the server down beyond the capture).
  void Write(std::string checkpoint_dir, int rank, ShardCapture capture);
  // Waits until nothing is being written.
  void WaitIdle();

 private:
  void Loop();

  const std::function<void(int64_t, const absl::Status&)> done_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool busy_ = false;
  bool stop_ = false;
  std::string dir_;
  int rank_ = 0;
  std::unique_ptr<ShardCapture> job_;
  std::thread thread_;
};

}  // namespace syncline

#endif  // SYNCLINE_PS_SERVER_CHECKPOINT_H_
