// KVClient: a worker's connection to the sharded parameter servers, in the spirit of ps-lite's
// KVWorker but with deadlines and Status. Push, Pull and PushPull return a ticket at once;
// Wait(ticket, deadline) completes it. Requests are split by shard (dense tables by key range,
// sparse keys by hash) and large dense ranges into ~1 MiB pieces so that they pipeline.
//
// Zero copy: a push of a dense range, or of sparse keys when there is one server, sends the
// caller's arrays as they are; the caller keeps `keys`, `values` and `out` alive and unchanged
// until Wait returns for that ticket. Pull replies are copied once, straight from the received
// frame into `out`, except by the *Frames calls, which hand the caller the received frames.
//
// There is no background thread: Wait() drives the endpoint itself, so a reply reaches the
// caller without a thread hop.
//
// Thread-safety: thread-compatible; use one KVClient per thread.
#ifndef SYNCLINE_CLIENT_KV_CLIENT_H_
#define SYNCLINE_CLIENT_KV_CLIENT_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "compression/codec.h"
#include "compression/gradient_encoder.h"
#include "compression/sparse_rows.h"
#include "core/control_client.h"
#include "core/table_config.h"
#include "core/transport.h"

namespace syncline {

struct KVClientOptions {
  int rank = 0;                         // this worker's rank
  std::vector<std::string> server_ids;  // data endpoint ids of the servers, by shard
  absl::Duration send_timeout = absl::Seconds(10);
  size_t max_in_flight = 1 << 14;    // requests awaiting a reply
  size_t max_piece_bytes = 1 << 20;  // dense ranges are sent in pieces of at most this size
  // Checked while waiting; a non-OK status ends the wait (e.g. the job was aborted).
  std::function<absl::Status()> health;
  // Sparse pulls, and dense pulls into a buffer of at least kMinCompressedDenseValues values,
  // ask for compressed deltas in this codec (--compress-pull; none: float32 rows), keeping the
  // copy of the pulled rows the servers' replies are relative to. Ungated reads (clock < 0:
  // evaluation, the final parameters) are always exact.
  CodecSpec pull_codec;
  // The job's rollbacks so far (in-place recovery): every request carries it, so that a server
  // that has rolled back drops what was sent before, and this client's request ids start at
  // generation << 40, so that a late reply to a request of the undone timeline matches none.
  uint32_t generation = 0;
};

using Ticket = uint64_t;

// Dense pulls and pushes of at least this many values are compressed (--compress-pull,
// --compress); smaller ones (a model's bias) cost less as they are.
inline constexpr size_t kMinCompressedDenseValues = 256;

// Connects a joined worker's data endpoint to every server of the job (`control`'s node table)
// and returns the client options for them: rank, the servers' ids, and a health check that
// ends waits when the job is over.
absl::StatusOr<KVClientOptions> ConnectToServers(Endpoint& endpoint, ControlClient& control,
                                                 int rank);

class KVClient {
 public:
  // `endpoint` must be connected to every server and outlive the client.
  KVClient(Endpoint* endpoint, KVClientOptions options);

  // Declares a table on every server and waits for their answers. A dense table that this
  // declaration makes takes `initial` (num_keys * dim floats; empty: init_scale and seed);
  // with `await_initial` the declaration waits until another one (with initial values) has
  // made it. Either way, a table that exists already (or was restored from a checkpoint) keeps
  // its values.
  absl::Status DeclareTable(const TableConfig& config, absl::Time deadline,
                            std::span<const float> initial = {}, bool await_initial = false);

  // Sparse tables: `values` / `out` hold keys.size() * dim floats.
  absl::StatusOr<Ticket> Push(uint32_t table, std::span<const uint64_t> keys,
                              std::span<const float> values, int64_t clock, float weight);
  // Push with the values sent as IEEE binary16 (codec fp16): half the value bytes, each value
  // rounded to 11 significant bits (magnitudes below 2^-24 become 0). For sparse row
  // gradients, which change rows every step and so keep no error-feedback residual. A
  // server's part holding a value beyond +-65504 (or not finite) goes as float32 instead.
  absl::StatusOr<Ticket> PushHalf(uint32_t table, std::span<const uint64_t> keys,
                                  std::span<const float> values, int64_t clock, float weight);
  absl::StatusOr<Ticket> Pull(uint32_t table, std::span<const uint64_t> keys, std::span<float> out,
                              int64_t clock);
  absl::StatusOr<Ticket> PushPull(uint32_t table, std::span<const uint64_t> keys,
                                  std::span<const float> values, std::span<float> out,
                                  int64_t clock, float weight);

  // Dense tables: keys [begin, begin + values.size() / dim).
  absl::StatusOr<Ticket> PushDense(uint32_t table, uint64_t begin, std::span<const float> values,
                                   int64_t clock, float weight);
  absl::StatusOr<Ticket> PullDense(uint32_t table, uint64_t begin, std::span<float> out,
                                   int64_t clock);
  absl::StatusOr<Ticket> PushPullDense(uint32_t table, uint64_t begin,
                                       std::span<const float> values, std::span<float> out,
                                       int64_t clock, float weight);

  // Dense tables, zero copy: pull `count` values from keys [begin, begin + count / dim) (and,
  // for PushPull, push `values` first) without copying the reply anywhere. When Wait returns
  // OK, `out` holds the reply frames in key order, one per piece (see max_piece_bytes), whose
  // float arrays (Frame::As<float>) together hold the `count` values. `out` must stay alive and
  // untouched until Wait returns; the frames keep the received bytes alive as long as they do.
  absl::StatusOr<Ticket> PullDenseFrames(uint32_t table, uint64_t begin, size_t count,
                                         int64_t clock, std::vector<Frame>* out);
  absl::StatusOr<Ticket> PushPullDenseFrames(uint32_t table, uint64_t begin,
                                             std::span<const float> values, int64_t clock,
                                             float weight, std::vector<Frame>* out);

  // Dense tables, compressed: pushes one encoded block (see compression/codec.h) holding the
  // gradient of keys [begin, end), which must lie in one shard. `block` must stay valid until
  // Wait returns.
  absl::StatusOr<Ticket> PushDenseEncoded(uint32_t table, uint64_t begin, uint64_t end,
                                          uint8_t codec, std::span<const std::byte> block,
                                          int64_t clock, float weight);
  // Sparse tables, compressed: pushes to server `server` the rows `keys` (strictly ascending,
  // all of that server's shard) as compact keys and one block of keys.size() * dim entries in
  // `codec` (kNone: float32 values; see compression/sparse_rows.h), with each row's held count
  // and spread (empty or all 1: one push each). `block` must stay valid until Wait returns.
  absl::StatusOr<Ticket> PushRowsEncoded(uint32_t table, int server, std::span<const uint64_t> keys,
                                         CodecKind codec, std::span<const std::byte> block,
                                         std::span<const uint16_t> held,
                                         std::span<const float> spread, int64_t clock,
                                         float weight);
  // The most bytes of values one push of rows sent whole carries (PushSparse's flushed rows).
  static constexpr size_t kMaxWholeRowsBytes = size_t{64} << 20;
  // Sends server `server`'s part of a compressed sparse push (compression/sparse_rows.h): its
  // encoded rows (when it has any), then the rows it sends whole (flushed to stay within the
  // residual's capacity, or drained at the end) in pushes of at most kMaxWholeRowsBytes of
  // values, well inside a message's bound. Appends the requests' tickets to *tickets; `push`
  // must stay valid until they are waited for.
  absl::Status PushSparse(uint32_t table, int server, uint32_t dim, const SparsePush& push,
                          int64_t clock, float weight, std::vector<Ticket>* tickets);
  // The server whose shard holds sparse key `key`.
  int SparseServerOf(uint64_t key) const;

  // The shard holding dense keys [begin, end), or an error if they span shards.
  absl::StatusOr<int> DenseShardOf(uint32_t table, uint64_t begin, uint64_t end) const;

  // Completes a ticket: OK, or the first error a server answered, or DeadlineExceeded.
  absl::Status Wait(Ticket ticket, absl::Time deadline);

  // One request of `type` to server `server` with `frames` as its payload, awaited until
  // `deadline`: the reply, or the error the server answered (its status). Its bytes count as
  // pushed. For exchanges outside tables (secure aggregation's stages).
  absl::StatusOr<Message> Call(int server, wire::MsgType type, uint32_t table, int64_t clock,
                               std::vector<Frame> frames, absl::Time deadline);

  // Tells every server that this worker finished `clock` iterations, the last of which
  // covered `examples` examples. Fire and forget: servers answer only errors.
  absl::Status Clock(int64_t clock, float examples);
  // Leaves the servers' clock sets and waits for their acknowledgement.
  absl::Status Finish(absl::Time deadline);

  // Whether a sparse pull at `clock` asks for compressed deltas (--compress-pull, clock >= 0).
  bool CompressesPulls(int64_t clock) const {
    return clock >= 0 && options_.pull_codec.kind != CodecKind::kNone;
  }
  const CodecSpec& pull_codec() const { return options_.pull_codec; }
  // From now on, the compressed replies of `table`'s sparse pulls go to `decoder` (a GPU
  // model's copy of the pulled rows: Model::DecodePulls) instead of this client's copy and the
  // pull's buffer; null: back to this client's copy (empty: the servers' copies must be too).
  // Not owned; it outlives the client's use of it.
  void SetPullDecoder(uint32_t table, PulledRowDecoder* decoder);

  // Mean staleness of the pull replies received since the last call (0 when none).
  double TakeMeanStaleness();
  // Time spent encoding fp16 pushes and decoding compressed pulls since the last call.
  absl::Duration TakeCodecTime() { return std::exchange(codec_time_, absl::ZeroDuration()); }

  // Every byte of the messages this client sent and received: pushes, their acknowledgements
  // and clocks count as pushed; pull requests and their replies as pulled.
  uint64_t bytes_pushed() const { return bytes_pushed_; }
  uint64_t bytes_pulled() const { return bytes_pulled_; }
  int num_servers() const { return static_cast<int>(options_.server_ids.size()); }

 private:
  struct Request {
    Ticket ticket = 0;
    int server = 0;
    float* out = nullptr;                      // where pulled values land
    Message* out_message = nullptr;            // Call: where the whole reply goes
    std::vector<Frame>* out_frames = nullptr;  // or where the pulled frame goes: at
    size_t frame_index = 0;                    // out_frames[frame_index]
    size_t out_values = 0;                     // values expected in the reply (0: none)
    std::vector<uint32_t> positions;  // sparse scatter: reply row i goes to out row positions[i]
    uint32_t dim = 1;
    // Which byte count the request and its reply go to.
    enum class Traffic { kControl, kPush, kPull, kPushPull } traffic = Traffic::kControl;
    // A compressed pull: its table and keys, for the reply's deltas.
    bool compressed_pull = false;
    uint32_t table = 0;
    std::vector<uint64_t> keys;
  };
  struct TicketState {
    int pending = 0;
    absl::Status status;
  };

  enum class Op { kPush, kPull, kPushPull };
  const Codec& HalfCodec();
  static Request::Traffic TrafficOf(Op op);
  // `half`: pushed values go as fp16 blocks (PushHalf).
  absl::StatusOr<Ticket> SparseOp(Op op, uint32_t table, std::span<const uint64_t> keys,
                                  std::span<const float> values, std::span<float> out,
                                  int64_t clock, float weight, bool half = false);
  // Pulled values land in `out`, or as frames in `out_frames` when it is set (then `count`
  // gives the values to pull).
  absl::StatusOr<Ticket> DenseOp(Op op, uint32_t table, uint64_t begin,
                                 std::span<const float> values, std::span<float> out,
                                 std::vector<Frame>* out_frames, size_t count, int64_t clock,
                                 float weight);
  absl::StatusOr<const TableConfig*> FindTable(uint32_t table, bool dense) const;
  Ticket NewTicket();
  // A request header from this worker, with the id the next SendRequest will use.
  MessageBuilder NewMessage(wire::MsgType type, uint32_t table, int64_t clock, float weight) const;
  // Sends one request and records what its reply should do.
  absl::Status SendRequest(Ticket ticket, int server, Message message, Request request);
  absl::Status ReceiveOne(absl::Time deadline);
  void Complete(uint64_t request_id, Message& reply);
  // Compressed pulls send compact keys, which the servers keep for their last few pulls: a
  // push of exactly a recent pull's keys to the same server names that pull instead of
  // sending them again (header keyCoding 2). The client remembers fewer pulls than a server.
  static constexpr size_t kRememberedPulls = 2;
  void RememberPull(uint32_t table, int server, uint64_t request_id,
                    std::span<const uint64_t> keys);
  std::optional<uint64_t> RecentPullWithKeys(uint32_t table, int server,
                                             std::span<const uint64_t> keys) const;
  // The rows of a compressed pull's reply into r.out.
  absl::Status CompletePull(const Request& r, Message& reply);

  Endpoint* const endpoint_;
  const KVClientOptions options_;
  absl::flat_hash_map<uint32_t, TableConfig> tables_;
  absl::flat_hash_map<uint64_t, Request> requests_;
  absl::flat_hash_map<Ticket, TicketState> tickets_;
  uint64_t next_request_id_;
  Ticket next_ticket_ = 1;
  uint64_t bytes_pushed_ = 0;
  uint64_t bytes_pulled_ = 0;
  uint64_t staleness_sum_ = 0;
  uint64_t staleness_replies_ = 0;
  absl::Duration codec_time_;
  std::unique_ptr<Codec> half_codec_;  // made at the first PushHalf
  // Compressed pulls: per table, the rows as the servers know this worker holds them.
  absl::flat_hash_map<uint32_t, RowTable> pull_copies_;
  // ... or the decoders that keep them (SetPullDecoder).
  absl::flat_hash_map<uint32_t, PulledRowDecoder*> pull_decoders_;
  // Per (table, server): request ids and keys of the last kRememberedPulls compressed pulls.
  absl::flat_hash_map<std::pair<uint32_t, int>,
                      std::deque<std::pair<uint64_t, std::vector<uint64_t>>>>
      recent_pulls_;
};

}  // namespace syncline

#endif  // SYNCLINE_CLIENT_KV_CLIENT_H_
