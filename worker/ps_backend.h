// PsBackend: the SyncBackend over sharded parameter servers. The model's rows live in sparse
// table kRowsTable (hash-sharded) and its bias in dense table kBiasTable. Reads are pulls
// gated by the servers' staleness bound; updates are pushes acknowledged lazily (the next
// Read waits for them), so a push overlaps with the computation that follows it.
//
// Thread-safety: thread-compatible.
#ifndef SYNCLINE_WORKER_PS_BACKEND_H_
#define SYNCLINE_WORKER_PS_BACKEND_H_

#include <memory>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "client/kv_client.h"
#include "compression/codec.h"
#include "compression/sparse_rows.h"
#include "worker/sync_backend.h"

namespace syncline {

class PsBackend : public SyncBackend {
 public:
  static constexpr uint32_t kRowsTable = 1;
  static constexpr uint32_t kBiasTable = 2;

  // `client` must outlive the backend; every request gets `request_timeout`. With a codec
  // other than none, row gradients are compressed with error feedback: dense rows keep one
  // residual per shard; sparse rows (top-K, sign1) a residual per row, at most
  // `residual_rows` rows per shard, the oldest flushed beyond it (compression/sparse_rows.h);
  // fp16 sparse pushes keep none.
  PsBackend(KVClient* client, absl::Duration request_timeout, CodecSpec codec = {},
            size_t residual_rows = 1000000);

  // The bias (a ctr model's dense layers) lives elsewhere (a hybrid worker all-reduces it):
  // no bias table is declared, pulled or pushed, and Read leaves `bias` alone. Before Init.
  void KeepBiasElsewhere() { bias_on_servers_ = false; }

  absl::Status Init(const ParameterLayout& layout) override;
  absl::Status Read(int64_t clock, std::span<const uint64_t> keys, std::span<float> rows,
                    std::span<float> bias) override;
  // Sparse rows only (a dense table's pull is gathered from reply frames at Read).
  bool ReadAhead(int64_t clock, std::span<const uint64_t> keys, std::span<float> rows,
                 std::span<float> bias) override;
  absl::Status Update(int64_t clock, std::span<const uint64_t> keys,
                      std::span<const float> row_grads, std::span<const float> bias_grad,
                      float examples) override;
  void SetFinalClock(int64_t clock) override { final_clock_ = clock; }
  absl::Status EndIteration(int64_t clock, float examples) override;
  absl::Status Finish() override;
  // Waits for the acknowledgements of the pushes in flight (their requests borrow the spans).
  void Settle(absl::Duration max_wait) override;
  double TakeMeanStaleness() override { return client_->TakeMeanStaleness(); }
  // Error feedback and its codec on pushes, and the client's fp16 pushes and compressed pulls.
  absl::Duration TakeCodecTime() override {
    return std::exchange(codec_time_, absl::ZeroDuration()) + client_->TakeCodecTime();
  }
  // Dense rows compressed (any codec), and the dense table when compressed: one part a shard.
  std::vector<GradientCompression> CompressionWanted() const override;
  // That table's blocks (and the dense table's last-clock flush) come from `encoder` (a GPU
  // model's, which keeps the gradients and the residuals on its device); Update does not read
  // that table's gradients.
  void SetEncoder(GradientTable table, GradientEncoder* encoder) override {
    (table == GradientTable::kRows ? encoder_ : bias_encoder_) = encoder;
  }
  // Sparse rows under top-K or sign1: one residual table per shard, of --residual-rows rows.
  std::optional<RowCompression> RowCompressionWanted() const override;
  // Each shard's push (and the last clock's drain) comes from `encoder` (a GPU model's, which
  // keeps the row gradients and the residual rows on its device); it holds the residuals.
  void SetRowEncoder(RowGradientEncoder* encoder) override { row_encoder_ = encoder; }
  // Sparse rows under --compress-pull: the pulls' codec and the rows' width.
  std::optional<PullDecoding> PullDecodingWanted() const override;
  // The client hands the rows table's compressed replies to `decoder`; a training read begins
  // the decoder's read of its rows buffer.
  void SetPullDecoder(PulledRowDecoder* decoder) override;
  // The error-feedback residuals: one per shard (dense rows) or per row (sparse rows), none
  // without compression.
  absl::StatusOr<std::string> SaveState() const override;
  absl::Status RestoreState(std::string_view state) override;
  uint64_t bytes_pushed() const override { return client_->bytes_pushed(); }
  uint64_t bytes_pulled() const override { return client_->bytes_pulled(); }

 private:
  // Sends the pulls of a read.
  absl::Status StartRead(int64_t clock, std::span<const uint64_t> keys, std::span<float> rows,
                         std::span<float> bias, Ticket* row_ticket, Ticket* bias_ticket);
  absl::Status WaitForPushes();
  // Dense rows: copies the rows of `keys` out of table_pieces_ and releases them.
  absl::Status GatherDenseRows(std::span<const uint64_t> keys, std::span<float> rows);
  absl::Status PushDenseRows(int64_t clock, std::span<const uint64_t> keys,
                             std::span<const float> row_grads, float examples);
  // Sparse rows with top-K or sign1: per shard, the compressed rows and the flushed ones.
  absl::Status PushSparseRows(int64_t clock, std::span<const uint64_t> keys,
                              std::span<const float> row_grads, float examples);
  bool sparse_feedback() const { return !sparse_feedback_.empty(); }
  bool bias_compressed() const { return !bias_feedback_.empty(); }
  absl::Status RestoreSparseState(StateReader& in);
  absl::Time Deadline() const { return absl::Now() + request_timeout_; }

  KVClient* const client_;
  const absl::Duration request_timeout_;
  bool bias_on_servers_ = true;
  std::vector<Ticket> pending_pushes_;
  absl::Duration codec_time_;  // since the last TakeCodecTime
  // The read started by ReadAhead, until its Read.
  struct Ahead {
    bool active = false;
    int64_t clock = 0;
    const uint64_t* keys = nullptr;
    const float* rows = nullptr;
    const float* bias = nullptr;
    absl::Status status;  // of sending it
    Ticket row_ticket = 0, bias_ticket = 0;
  };
  Ahead ahead_;
  ParameterLayout layout_;
  const CodecSpec codec_spec_;
  std::unique_ptr<Codec> codec_;
  // Dense rows: the pulled table as reply frames in key order (rows are gathered from them
  // without copying the whole table; released at the end of Read), the dense gradient and,
  // per shard, the error feedback residual and the encoded block (kept until the push is
  // acknowledged).
  std::vector<Frame> table_pieces_;
  std::vector<float> gradient_;
  std::vector<ErrorFeedback> feedback_;
  GradientEncoder* encoder_ = nullptr;  // dense rows: not owned; it holds the residuals
  std::vector<std::vector<std::byte>> blocks_;
  // Sparse rows: per shard, the residuals and the last push (kept until acknowledged).
  const size_t residual_rows_;
  std::vector<SparseErrorFeedback> sparse_feedback_;
  std::vector<SparsePush> sparse_pushes_;
  RowGradientEncoder* row_encoder_ = nullptr;  // not owned; when set, it holds the residuals
  PulledRowDecoder* pull_decoder_ = nullptr;   // not owned; when set, it holds the pulls' copy
  // Training's last clock: its pushes carry every residual whole (-1: not known).
  int64_t final_clock_ = -1;
  std::vector<float> bias_final_;  // the last clock's bias gradient plus residual
  // The bias table (dense layers) when compressed: per shard, residual and block.
  std::vector<ErrorFeedback> bias_feedback_;
  GradientEncoder* bias_encoder_ = nullptr;  // not owned; when set, it holds the residuals
  std::vector<std::vector<std::byte>> bias_blocks_;
};

}  // namespace syncline

#endif  // SYNCLINE_WORKER_PS_BACKEND_H_
