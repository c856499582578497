// SyncBackend: the one interface between a worker's training loop and the way replicas stay in
// sync. The loop asks for the parameters of a batch, hands back gradient sums and marks the end
// of each iteration; the backend decides what that means (a sharded parameter server under
// BSP/SSP/ASP here; gossip and all-reduce backends fit the same calls), so switching the
// consistency model or the backend is a flag, not a change to the loop.
//
// Parameters follow the models' layout: a sparse table of rows (row_dim floats per feature id)
// and a dense bias (bias_dim floats).
//
// Thread-safety: thread-compatible.
#ifndef SYNCLINE_WORKER_SYNC_BACKEND_H_
#define SYNCLINE_WORKER_SYNC_BACKEND_H_

#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "compression/gradient_encoder.h"
#include "core/scoped_time.h"
#include "core/table_config.h"

namespace syncline {

struct ParameterLayout {
  uint32_t row_dim = 1;
  uint64_t num_features = 0;  // sparse keys are below this (0: any)
  uint32_t bias_dim = 1;
  // Keep the rows in a dense table of num_features rows instead of a sparse one: every read
  // fetches the whole table, every update sends a dense gradient, which is what gradient
  // compression works on.
  bool dense_rows = false;
  OptimizerConfig optimizer;
  uint64_t seed = 1;
  // Rows and bias start uniform in [-scale, scale], drawn from `seed` (0: zeros), where the
  // parameter servers hold them; gossip replicas start from zeros.
  float row_init_scale = 0;
  float bias_init_scale = 0;
};

class SyncBackend {
 public:
  virtual ~SyncBackend() = default;

  // Creates (or joins) the model's parameters.
  virtual absl::Status Init(const ParameterLayout& layout) = 0;

  // Fills `rows` (keys.size() * row_dim) and `bias` with the parameters a reader in iteration
  // `clock` may see; a negative clock reads the latest values without waiting (evaluation).
  virtual absl::Status Read(int64_t clock, std::span<const uint64_t> keys, std::span<float> rows,
                            std::span<float> bias) = 0;

  // Starts iteration `clock`'s read early, so that the transfer (and the servers' work)
  // overlaps whatever the worker does before the matching Read(clock, the same spans), which
  // completes it; the spans must stay valid and untouched until then. Returns false, starting
  // nothing, where the backend cannot read ahead. Only for consistency models that let a read
  // miss the reader's own last update: the read of clock t+1 leaves before t's Update (ASP, and
  // SSP with a bound of at least 1, which the servers still enforce). An error in sending is
  // returned by the matching Read.
  virtual bool ReadAhead(int64_t clock, std::span<const uint64_t> keys, std::span<float> rows,
                         std::span<float> bias) {
    return false;
  }

  // Sends the gradient sums of iteration `clock`. The spans (keys too) must stay valid and
  // unchanged until the next Read() or Finish() has returned: they may still be on the wire.
  virtual absl::Status Update(int64_t clock, std::span<const uint64_t> keys,
                              std::span<const float> row_grads, std::span<const float> bias_grad,
                              float examples) = 0;

  // The clock of training's last iteration (every epoch's, not an early stop's), told before
  // the first one: a backend that holds gradients back (error feedback) sends what it still
  // holds with that iteration's Update, so that the final model lacks none of them.
  virtual void SetFinalClock(int64_t clock) {}

  // The gradients a backend encodes with error feedback as dense parts (after Init): an
  // all-reduce's rows under top-K or sign1, parameter servers' dense rows and compressed dense
  // table; none for others. Given an encoder for one (a GPU model's: Model::EncodeGradients),
  // the backend takes that table's blocks from the encoder, checkpoints its residuals through
  // it, and reads nothing of that table's gradients in Update (the model kept them).
  virtual std::vector<GradientCompression> CompressionWanted() const { return {}; }
  virtual void SetEncoder(GradientTable table, GradientEncoder* encoder) {}
  // The sparse rows a backend compresses with per-row error feedback (after Init): parameter
  // servers' sparse tables under top-K or sign1. Given an encoder for them (a GPU model's:
  // Model::EncodeRows), the backend takes each shard's push from it, checkpoints the residual
  // rows through it, and reads none of the row gradients in Update.
  virtual std::optional<RowCompression> RowCompressionWanted() const { return std::nullopt; }
  virtual void SetRowEncoder(RowGradientEncoder* encoder) {}
  // Compressed pulls of sparse rows (after Init): parameter servers' under --compress-pull.
  // Given a decoder for them (a GPU model's: Model::DecodePulls), every training read of the
  // rows begins a read of the decoder's, and the replies are decoded by it: the rows buffer
  // handed to Read is left as it is, and the model reads the rows where it computes.
  virtual std::optional<PullDecoding> PullDecodingWanted() const { return std::nullopt; }
  virtual void SetPullDecoder(PulledRowDecoder* decoder) {}

  // Worker `worker` joined the running job: its iterations count from `first_clock`, and
  // `donors` (rank order) are the workers still training that gave it batches. Every worker
  // hears every arrival, in the order of departures, before it prepares an iteration at or past
  // the cut it gave; a joiner hears its own before its first iteration. Backends whose replicas
  // do not know each other (parameter servers) ignore it.
  virtual absl::Status OnArrival(int worker, int64_t first_clock, std::span<const int> donors) {
    return absl::OkStatus();
  }

  // `take` returns the workers the job's coordinator has declared down since its last call (a
  // worker whose process exited or whose heartbeats stopped). Backends that wait for other
  // workers themselves (gossip) poll it while they wait, and stop waiting for those at once
  // rather than after their own timeout; others ignore it. Called from the training thread.
  virtual void WatchDownWorkers(std::function<std::vector<int>()> take) {}

  // The clock from which lost worker `worker`'s batches go to the workers still training
  // (worker/work_plan.h's Departure::clock): the coordinator's `clock` (its last heartbeat's),
  // or, for a backend whose members agree on it among themselves (an elastic all-reduce: the
  // first round no survivor completed), theirs once agreed and nullopt until then (the
  // departure waits). Called from the training thread.
  virtual std::optional<int64_t> DepartureClock(int worker, int64_t clock) { return clock; }

  // Iteration `clock` (covering `examples` examples) is over.
  virtual absl::Status EndIteration(int64_t clock, float examples) = 0;

  // The worker is done training; it no longer holds others back.
  virtual absl::Status Finish() = 0;

  // Training stopped on an error, with Update()s that may still be using their spans (sent
  // without a copy): waits at most `max_wait` until they are done with them, so that the
  // caller may free the spans. Finish() does this itself.
  virtual void Settle(absl::Duration max_wait) {}

  // After Finish: the examples whose gradients the model holds, every worker's, where the
  // backend counts them (an elastic all-reduce); -1 where it does not.
  virtual double ExamplesInModel() const { return -1; }

  // Mean staleness (in iterations) of the reads served since the last call.
  virtual double TakeMeanStaleness() { return 0; }
  // Decentralised backends: mean distance of this replica from its neighbours' since the last
  // call (0 where replicas are not kept apart).
  virtual double TakeConsensusProxy() { return 0; }
  // Time spent in gradient or parameter codecs (encoding, decoding, error feedback) since the
  // last call, on the caller's thread inside the backend's calls: the part of their time that
  // is compression, not the network. Zero for backends without codecs.
  virtual absl::Duration TakeCodecTime() { return absl::ZeroDuration(); }

  // Checkpoints: the state a backend keeps between iterations (error-feedback residuals, say),
  // as bytes, and its restore. Backends without such state save nothing.
  virtual absl::StatusOr<std::string> SaveState() const { return std::string(); }
  virtual absl::Status RestoreState(std::string_view state) {
    return state.empty() ? absl::OkStatus()
                         : absl::InvalidArgumentError("this backend keeps no state to restore");
  }

  virtual uint64_t bytes_pushed() const = 0;
  virtual uint64_t bytes_pulled() const = 0;
};

// Reads a SaveState() string back field by field (in this machine's byte order).
class StateReader {
 public:
  explicit StateReader(std::string_view state) : state_(state) {}
  // Copies the next n bytes into `out`; false (nothing read) when fewer are left.
  bool Read(void* out, size_t n) {
    if (left() < n) return false;
    if (n == 0) return true;  // `out` may be null (an empty vector's data): memcpy must not see it
    std::memcpy(out, state_.data() + at_, n);
    at_ += n;
    return true;
  }
  size_t left() const { return state_.size() - at_; }

 private:
  std::string_view state_;
  size_t at_ = 0;
};

}  // namespace syncline

#endif  // SYNCLINE_WORKER_SYNC_BACKEND_H_
