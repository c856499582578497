#include "client/kv_client.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/log.h"
#include "core/scoped_time.h"
#include "core/sharding.h"

namespace syncline {
namespace {

wire::MsgType TypeOf(int op) {
  static constexpr wire::MsgType kTypes[] = {wire::MsgType::PUSH, wire::MsgType::PULL,
                                             wire::MsgType::PUSH_PULL};
  return kTypes[op];
}

}  // namespace

absl::StatusOr<KVClientOptions> ConnectToServers(Endpoint& endpoint, ControlClient& control,
                                                 int rank) {
  KVClientOptions options;
  options.rank = rank;
  for (const NodeInfo* s : control.table().Servers()) {
    options.server_ids.push_back(s->id);
    if (auto st = endpoint.Connect(s->id, s->address); !st.ok()) return st;
  }
  options.health = [&control] { return control.health(); };
  return options;
}

KVClient::KVClient(Endpoint* endpoint, KVClientOptions options)
    : endpoint_(endpoint),
      options_(std::move(options)),
      next_request_id_((uint64_t{options_.generation} << 40) + 1) {}

Ticket KVClient::NewTicket() {
  const Ticket t = next_ticket_++;
  tickets_[t] = TicketState{};
  return t;
}

absl::StatusOr<const TableConfig*> KVClient::FindTable(uint32_t table, bool dense) const {
  auto it = tables_.find(table);
  if (it == tables_.end()) {
    return absl::FailedPreconditionError(absl::StrFormat("table %d was not declared", table));
  }
  if (it->second.dense != dense) {
    return absl::InvalidArgumentError(absl::StrFormat("table %d is %s; use the %s calls", table,
                                                      dense ? "sparse" : "dense",
                                                      dense ? "sparse" : "dense"));
  }
  return &it->second;
}

absl::Status KVClient::SendRequest(Ticket ticket, int server, Message message, Request request) {
  if (requests_.size() >= options_.max_in_flight) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "%d requests are already in flight; Wait() for some first", requests_.size()));
  }
  const uint64_t id = next_request_id_++;
  request.ticket = ticket;
  request.server = server;
  const uint64_t bytes = message.ByteSize();
  auto status = endpoint_->Send(options_.server_ids[server], std::move(message),
                                absl::Now() + options_.send_timeout);
  if (!status.ok()) return status;
  if (request.traffic == Request::Traffic::kPull) {
    bytes_pulled_ += bytes;
  } else if (request.traffic != Request::Traffic::kControl) {
    bytes_pushed_ += bytes;
  }
  requests_.emplace(id, std::move(request));
  ++tickets_[ticket].pending;
  return absl::OkStatus();
}

MessageBuilder KVClient::NewMessage(wire::MsgType type, uint32_t table, int64_t clock,
                                    float weight) const {
  MessageBuilder b(type);
  b.header().setRole(wire::Role::WORKER);
  b.header().setRank(options_.rank);
  b.header().setRequestId(next_request_id_);  // SendRequest assigns this id
  b.header().setTable(table);
  b.header().setClock(clock);
  b.header().setWeight(weight);
  b.header().setGeneration(options_.generation);
  return b;
}

absl::Status KVClient::DeclareTable(const TableConfig& config, absl::Time deadline,
                                    std::span<const float> initial, bool await_initial) {
  if (!initial.empty() && (!config.dense || initial.size() != config.num_keys * config.dim)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "table %d: initial values are for a dense table, num_keys x dim = %d floats; got %d",
        config.id, config.dense ? config.num_keys * config.dim : 0, initial.size()));
  }
  tables_[config.id] = config;
  const Ticket ticket = NewTicket();
  const int n = num_servers();
  for (int s = 0; s < n; ++s) {
    MessageBuilder b = NewMessage(wire::MsgType::DECLARE_TABLE, config.id, 0, 0);
    wire::TableSpec::Builder spec = b.header().getBody().initTable();
    config.ToWire(spec);
    if (!initial.empty()) {
      spec.setInitial(wire::TableInit::VALUES);
      const KeyRange range = DenseShardRange(config.num_keys, s, n);
      b.AddFrame(Frame::Borrow(initial.data() + range.begin * config.dim,
                               range.size() * config.dim * sizeof(float)));
    } else if (await_initial) {
      spec.setInitial(wire::TableInit::AWAIT_VALUES);
    }
    if (auto st = SendRequest(ticket, s, b.Finish(), Request{}); !st.ok()) return st;
  }
  return Wait(ticket, deadline);
}

namespace {
constexpr float kMaxHalf = 65504.0f;  // the largest finite binary16
}  // namespace

absl::StatusOr<Ticket> KVClient::SparseOp(Op op, uint32_t table, std::span<const uint64_t> keys,
                                          std::span<const float> values, std::span<float> out,
                                          int64_t clock, float weight, bool half) {
  auto config = FindTable(table, /*dense=*/false);
  if (!config.ok()) return config.status();
  const uint32_t dim = (*config)->dim;
  const bool pushes = op != Op::kPull;
  const bool pulls = op != Op::kPush;
  if (pushes && values.size() != keys.size() * dim) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "push of %d keys needs %d values, got %d", keys.size(), keys.size() * dim, values.size()));
  }
  if (pulls && out.size() != keys.size() * dim) {
    return absl::InvalidArgumentError(
        absl::StrFormat("pull of %d keys needs room for %d values, got %d", keys.size(),
                        keys.size() * dim, out.size()));
  }
  const Ticket ticket = NewTicket();
  if (keys.empty()) return ticket;
  const int n = num_servers();
  // Compressed pulls send compact keys (which need them ascending) and keep the keys for
  // the reply.
  // An ungated read (clock < 0: evaluation, the final parameters) gets the exact values.
  const bool compressed =
      op == Op::kPull && clock >= 0 && options_.pull_codec.kind != CodecKind::kNone;
  if (compressed) {
    for (size_t i = 1; i < keys.size(); ++i) {
      if (keys[i] <= keys[i - 1]) {
        return absl::InvalidArgumentError(
            "a compressed pull needs its keys strictly ascending (no repeats)");
      }
    }
    pull_copies_.try_emplace(table, dim, 0);
  }
  const Request::Traffic traffic = TrafficOf(op);

  auto build = [&](int server, std::span<const uint64_t> k, std::span<const float> v,
                   Frame key_frame, Frame value_frame) {
    MessageBuilder b = NewMessage(TypeOf(static_cast<int>(op)), table, clock, weight);
    b.header().setKeyCount(k.size());
    if (op == Op::kPush) {
      if (auto pull = RecentPullWithKeys(table, server, k); pull.has_value()) {
        b.header().setKeyCoding(2);
        b.header().setKeysOf(*pull);
        key_frame = Frame();
      }
    }
    if (compressed) {
      RememberPull(table, server, next_request_id_, k);
      std::vector<std::byte> coded;
      EncodeKeys(k, &coded);
      b.header().setKeyCoding(1);
      b.header().setPullCodec(static_cast<uint8_t>(options_.pull_codec.kind));
      key_frame = Frame::Own(std::move(coded));
    }
    b.AddFrame(std::move(key_frame));
    if (pushes) {
      b.header().setValueCount(v.size());
      // A value beyond binary16's range (or not finite) would arrive as infinity: such a
      // message goes raw.
      if (half &&
          std::all_of(v.begin(), v.end(), [](float x) { return std::abs(x) <= kMaxHalf; })) {
        std::vector<std::byte> block;
        ScopedTime timed(&codec_time_);
        HalfCodec().Encode(v, &block);
        b.header().setCodec(static_cast<uint8_t>(CodecKind::kFp16));
        value_frame = Frame::Own(std::move(block));
      }
      b.AddFrame(std::move(value_frame));
    }
    return b.Finish();
  };

  if (n == 1) {
    Request r;
    r.dim = dim;
    r.traffic = traffic;
    if (pulls) {
      r.out = out.data();
      r.out_values = out.size();
    }
    if (compressed) {
      r.compressed_pull = true;
      r.table = table;
      r.keys.assign(keys.begin(), keys.end());
    }
    Message m = build(0, keys, values, Frame::Borrow(keys), Frame::Borrow(values));
    if (auto s = SendRequest(ticket, 0, std::move(m), std::move(r)); !s.ok()) return s;
    return ticket;
  }

  // Group keys by shard, keeping each key's position for the scatter of the reply.
  std::vector<std::vector<uint32_t>> positions(n);
  for (uint32_t i = 0; i < keys.size(); ++i) positions[SparseShardOf(keys[i], n)].push_back(i);
  for (int s = 0; s < n; ++s) {
    if (positions[s].empty()) continue;
    std::vector<uint64_t> shard_keys(positions[s].size());
    std::vector<float> shard_values(pushes ? positions[s].size() * dim : 0);
    for (size_t j = 0; j < positions[s].size(); ++j) {
      const uint32_t i = positions[s][j];
      shard_keys[j] = keys[i];
      if (pushes)
        std::memcpy(&shard_values[j * dim], &values[size_t{i} * dim], dim * sizeof(float));
    }
    Request r;
    r.dim = dim;
    r.traffic = traffic;
    if (pulls) {
      r.out = out.data();
      r.out_values = positions[s].size() * dim;
      r.positions = positions[s];
    }
    if (compressed) {
      r.compressed_pull = true;
      r.table = table;
      r.keys = shard_keys;
    }
    const std::span<const uint64_t> k(shard_keys);
    const std::span<const float> v(shard_values);
    Message m =
        build(s, k, v, Frame::Own(std::move(shard_keys)), Frame::Own(std::move(shard_values)));
    if (auto st = SendRequest(ticket, s, std::move(m), std::move(r)); !st.ok()) return st;
  }
  return ticket;
}

absl::StatusOr<Ticket> KVClient::DenseOp(Op op, uint32_t table, uint64_t begin,
                                         std::span<const float> values, std::span<float> out,
                                         std::vector<Frame>* out_frames, size_t count,
                                         int64_t clock, float weight) {
  auto config = FindTable(table, /*dense=*/true);
  if (!config.ok()) return config.status();
  const TableConfig& c = **config;
  const bool pushes = op != Op::kPull;
  const bool pulls = op != Op::kPush;
  if (out_frames == nullptr) count = pushes ? values.size() : out.size();
  if (pushes && pulls && values.size() != (out_frames ? count : out.size())) {
    return absl::InvalidArgumentError("push-pull needs as many output values as input values");
  }
  if (count % c.dim != 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d values is not a whole number of rows of %d", count, c.dim));
  }
  const uint64_t end = begin + count / c.dim;
  if (end > c.num_keys || begin >= end) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "range [%d, %d) is empty or outside table %d's %d keys", begin, end, table, c.num_keys));
  }
  const Ticket ticket = NewTicket();
  if (out_frames != nullptr) out_frames->clear();
  const int n = num_servers();
  const uint64_t keys_per_piece =
      std::max<uint64_t>(1, options_.max_piece_bytes / (sizeof(float) * c.dim));
  for (int s = 0; s < n; ++s) {
    const KeyRange shard = DenseShardRange(c.num_keys, s, n);
    uint64_t lo = std::max(begin, shard.begin);
    const uint64_t hi = std::min(end, shard.end);
    for (; lo < hi; lo += keys_per_piece) {
      const uint64_t piece_end = std::min(hi, lo + keys_per_piece);
      const size_t offset = (lo - begin) * c.dim;
      const size_t piece_values = (piece_end - lo) * c.dim;
      MessageBuilder b = NewMessage(TypeOf(static_cast<int>(op)), table, clock, weight);
      b.header().setRangeBegin(lo);
      b.header().setRangeEnd(piece_end);
      if (pushes) {
        b.header().setValueCount(piece_values);
        b.AddFrame(Frame::Borrow(values.data() + offset, piece_values * sizeof(float)));
      }
      // A pull of a large enough piece into `out` asks for compressed deltas as a sparse one
      // does, its keys being the piece's range (small ones, a bias, cost less as they are).
      const bool compressed = op == Op::kPull && clock >= 0 && out_frames == nullptr &&
                              options_.pull_codec.kind != CodecKind::kNone &&
                              piece_values >= kMinCompressedDenseValues;
      if (compressed) b.header().setPullCodec(static_cast<uint8_t>(options_.pull_codec.kind));
      Request r;
      if (compressed) {
        pull_copies_.try_emplace(table, c.dim, 0);
        r.compressed_pull = true;
        r.table = table;
        r.keys.resize(piece_end - lo);
        for (uint64_t k = lo; k < piece_end; ++k) r.keys[k - lo] = k;
      }
      r.dim = c.dim;
      r.traffic = TrafficOf(op);
      if (pulls) {
        if (out_frames != nullptr) {
          r.out_frames = out_frames;
          r.frame_index = out_frames->size();
          out_frames->emplace_back();
        } else {
          r.out = out.data() + offset;
        }
        r.out_values = piece_values;
      }
      Message m = b.Finish();
      if (auto st = SendRequest(ticket, s, std::move(m), std::move(r)); !st.ok()) return st;
    }
  }
  return ticket;
}

absl::StatusOr<Ticket> KVClient::Push(uint32_t table, std::span<const uint64_t> keys,
                                      std::span<const float> values, int64_t clock, float weight) {
  return SparseOp(Op::kPush, table, keys, values, {}, clock, weight);
}
absl::StatusOr<Ticket> KVClient::PushHalf(uint32_t table, std::span<const uint64_t> keys,
                                          std::span<const float> values, int64_t clock,
                                          float weight) {
  return SparseOp(Op::kPush, table, keys, values, {}, clock, weight, /*half=*/true);
}

KVClient::Request::Traffic KVClient::TrafficOf(Op op) {
  return op == Op::kPush   ? Request::Traffic::kPush
         : op == Op::kPull ? Request::Traffic::kPull
                           : Request::Traffic::kPushPull;
}

const Codec& KVClient::HalfCodec() {
  if (half_codec_ == nullptr) half_codec_ = Codec::Create(CodecSpec{.kind = CodecKind::kFp16});
  return *half_codec_;
}

absl::StatusOr<Ticket> KVClient::Pull(uint32_t table, std::span<const uint64_t> keys,
                                      std::span<float> out, int64_t clock) {
  return SparseOp(Op::kPull, table, keys, {}, out, clock, 0);
}
absl::StatusOr<Ticket> KVClient::PushPull(uint32_t table, std::span<const uint64_t> keys,
                                          std::span<const float> values, std::span<float> out,
                                          int64_t clock, float weight) {
  return SparseOp(Op::kPushPull, table, keys, values, out, clock, weight);
}
absl::StatusOr<Ticket> KVClient::PushDense(uint32_t table, uint64_t begin,
                                           std::span<const float> values, int64_t clock,
                                           float weight) {
  return DenseOp(Op::kPush, table, begin, values, {}, nullptr, 0, clock, weight);
}
absl::StatusOr<Ticket> KVClient::PullDense(uint32_t table, uint64_t begin, std::span<float> out,
                                           int64_t clock) {
  return DenseOp(Op::kPull, table, begin, {}, out, nullptr, 0, clock, 0);
}
absl::StatusOr<Ticket> KVClient::PushPullDense(uint32_t table, uint64_t begin,
                                               std::span<const float> values, std::span<float> out,
                                               int64_t clock, float weight) {
  return DenseOp(Op::kPushPull, table, begin, values, out, nullptr, 0, clock, weight);
}
absl::StatusOr<Ticket> KVClient::PullDenseFrames(uint32_t table, uint64_t begin, size_t count,
                                                 int64_t clock, std::vector<Frame>* out) {
  return DenseOp(Op::kPull, table, begin, {}, {}, out, count, clock, 0);
}
absl::StatusOr<Ticket> KVClient::PushPullDenseFrames(uint32_t table, uint64_t begin,
                                                     std::span<const float> values, int64_t clock,
                                                     float weight, std::vector<Frame>* out) {
  return DenseOp(Op::kPushPull, table, begin, values, {}, out, values.size(), clock, weight);
}

absl::StatusOr<int> KVClient::DenseShardOf(uint32_t table, uint64_t begin, uint64_t end) const {
  auto config = FindTable(table, /*dense=*/true);
  if (!config.ok()) return config.status();
  for (int s = 0; s < num_servers(); ++s) {
    const KeyRange shard = DenseShardRange((*config)->num_keys, s, num_servers());
    if (begin >= shard.begin && end <= shard.end && begin < end) return s;
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("range [%d, %d) of table %d is not inside one shard", begin, end, table));
}

absl::StatusOr<Ticket> KVClient::PushDenseEncoded(uint32_t table, uint64_t begin, uint64_t end,
                                                  uint8_t codec, std::span<const std::byte> block,
                                                  int64_t clock, float weight) {
  auto shard = DenseShardOf(table, begin, end);
  if (!shard.ok()) return shard.status();
  const TableConfig& c = tables_.at(table);
  const Ticket ticket = NewTicket();
  MessageBuilder b = NewMessage(wire::MsgType::PUSH, table, clock, weight);
  b.header().setRangeBegin(begin);
  b.header().setRangeEnd(end);
  b.header().setCodec(codec);
  b.header().setValueCount((end - begin) * c.dim);
  b.AddFrame(Frame::Borrow(block.data(), block.size()));
  Message m = b.Finish();
  Request r;
  r.traffic = Request::Traffic::kPush;
  if (auto st = SendRequest(ticket, *shard, std::move(m), std::move(r)); !st.ok()) return st;
  return ticket;
}

int KVClient::SparseServerOf(uint64_t key) const {
  return num_servers() <= 1 ? 0 : SparseShardOf(key, num_servers());
}

absl::StatusOr<Ticket> KVClient::PushRowsEncoded(uint32_t table, int server,
                                                 std::span<const uint64_t> keys, CodecKind codec,
                                                 std::span<const std::byte> block,
                                                 std::span<const uint16_t> held,
                                                 std::span<const float> spread, int64_t clock,
                                                 float weight) {
  auto config = FindTable(table, /*dense=*/false);
  if (!config.ok()) return config.status();
  if (server < 0 || server >= num_servers()) {
    return absl::InvalidArgumentError(absl::StrFormat("no server %d", server));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if ((i > 0 && keys[i] <= keys[i - 1]) || SparseServerOf(keys[i]) != server) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "compressed push: key %d is out of order or not of server %d's shard", keys[i], server));
    }
  }
  if ((!held.empty() && held.size() != keys.size()) ||
      (!spread.empty() && spread.size() != held.size())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("compressed push: %d held counts and %d spreads for %d rows", held.size(),
                        spread.size(), keys.size()));
  }
  const Ticket ticket = NewTicket();
  if (keys.empty()) return ticket;
  std::vector<std::byte> coded;
  MessageBuilder b = NewMessage(wire::MsgType::PUSH, table, clock, weight);
  b.header().setKeyCount(keys.size());
  if (auto pull = RecentPullWithKeys(table, server, keys); pull.has_value()) {
    b.header().setKeyCoding(2);
    b.header().setKeysOf(*pull);
  } else {
    EncodeKeys(keys, &coded);
    b.header().setKeyCoding(1);
  }
  b.header().setCodec(static_cast<uint8_t>(codec));
  b.header().setValueCount(keys.size() * (*config)->dim);
  b.AddFrame(Frame::Own(std::move(coded)));
  b.AddFrame(Frame::Borrow(block.data(), block.size()));
  if (std::vector<std::byte> counts; EncodeHeld(held, spread, &counts)) {
    b.header().setHeldCoding(1);
    b.AddFrame(Frame::Own(std::move(counts)));
  }
  Request r;
  r.traffic = Request::Traffic::kPush;
  if (auto st = SendRequest(ticket, server, b.Finish(), std::move(r)); !st.ok()) return st;
  return ticket;
}

void KVClient::SetPullDecoder(uint32_t table, PulledRowDecoder* decoder) {
  if (decoder == nullptr) {
    pull_decoders_.erase(table);
  } else {
    pull_decoders_[table] = decoder;
  }
  pull_copies_.erase(table);
}

void KVClient::RememberPull(uint32_t table, int server, uint64_t request_id,
                            std::span<const uint64_t> keys) {
  auto& recent = recent_pulls_[std::make_pair(table, server)];
  if (recent.size() == kRememberedPulls) recent.pop_front();
  recent.emplace_back(request_id, std::vector<uint64_t>(keys.begin(), keys.end()));
}

std::optional<uint64_t> KVClient::RecentPullWithKeys(uint32_t table, int server,
                                                     std::span<const uint64_t> keys) const {
  const auto it = recent_pulls_.find(std::make_pair(table, server));
  if (it == recent_pulls_.end()) return std::nullopt;
  for (auto r = it->second.rbegin(); r != it->second.rend(); ++r) {
    if (std::equal(keys.begin(), keys.end(), r->second.begin(), r->second.end())) return r->first;
  }
  return std::nullopt;
}

absl::Status KVClient::CompletePull(const Request& r, Message& reply) {
  auto h = reply.header();
  const std::string& server = options_.server_ids[r.server];
  if (h.getCodec() != static_cast<uint8_t>(options_.pull_codec.kind) ||
      reply.payload_count() != 3) {
    return absl::DataLossError(absl::StrFormat(
        "%s answered a compressed pull with codec %d and %d frames, expected codec %d and 3",
        server, h.getCodec(), reply.payload_count(), static_cast<int>(options_.pull_codec.kind)));
  }
  std::vector<uint64_t> evicted;
  const Frame& dropped = reply.payload(2);
  if (auto s = DecodeKeys(std::span<const std::byte>(dropped.data(), dropped.size()),
                          h.getKeyCount(), &evicted);
      !s.ok()) {
    return absl::DataLossError(absl::StrFormat("%s: rows dropped: %s", server, s.message()));
  }
  const Frame& fresh = reply.payload(0);
  const Frame& block = reply.payload(1);
  if (const auto d = pull_decoders_.find(r.table); d != pull_decoders_.end()) {
    absl::Status decoded;
    {
      ScopedTime timed(&codec_time_);
      decoded = d->second->Decode(
          r.keys, r.positions, std::span<const std::byte>(fresh.data(), fresh.size()),
          std::span<const std::byte>(block.data(), block.size()), evicted, r.out);
    }
    if (!decoded.ok()) {
      return absl::Status(decoded.code(), absl::StrFormat("%s: %s", server, decoded.message()));
    }
    return absl::OkStatus();
  }
  RowTable& copy = pull_copies_.at(r.table);
  std::vector<float> rows(r.keys.size() * r.dim);
  absl::Status decoded;
  {
    ScopedTime timed(&codec_time_);
    decoded = DecodePull(options_.pull_codec.kind, r.keys,
                         std::span<const std::byte>(fresh.data(), fresh.size()),
                         std::span<const std::byte>(block.data(), block.size()), evicted, &copy,
                         std::span<float>(rows));
  }
  if (!decoded.ok()) {
    return absl::Status(decoded.code(), absl::StrFormat("%s: %s", server, decoded.message()));
  }
  if (r.positions.empty()) {
    std::memcpy(r.out, rows.data(), rows.size() * sizeof(float));
  } else {
    for (size_t j = 0; j < r.positions.size(); ++j) {
      std::memcpy(r.out + size_t{r.positions[j]} * r.dim, rows.data() + j * r.dim,
                  r.dim * sizeof(float));
    }
  }
  return absl::OkStatus();
}

void KVClient::Complete(uint64_t request_id, Message& reply) {
  auto it = requests_.find(request_id);
  if (it == requests_.end()) return;
  Request& r = it->second;
  TicketState& t = tickets_[r.ticket];
  auto h = reply.header();
  const std::string& server = options_.server_ids[r.server];
  absl::Status status;
  if (reply.peer() != server) {
    status = absl::InternalError(absl::StrFormat("reply to request %d came from %s, not %s",
                                                 request_id, reply.peer(), server));
  } else if (h.getType() == wire::MsgType::ERROR) {
    const absl::Status e = StatusFromHeader(h);
    status = absl::Status(e.code(), absl::StrFormat("%s: %s", server, e.message()));
  } else if (r.out_message != nullptr) {
    *r.out_message = std::move(reply);
  } else if (r.compressed_pull) {
    bytes_pulled_ += reply.ByteSize();
    status = CompletePull(r, reply);
    if (status.ok()) {
      staleness_sum_ += static_cast<uint64_t>(std::max<int64_t>(0, h.getStaleness()));
      ++staleness_replies_;
    }
  } else if (r.out_values > 0) {
    // The values are copied byte-wise (ZeroMQ may hand out a frame at any address) or handed
    // over as they are (Frame::As realigns them if the caller reads them as floats).
    const Frame* values = reply.payload_count() > 0 ? &reply.payload(0) : nullptr;
    const size_t count = values != nullptr && values->size() % sizeof(float) == 0
                             ? values->size() / sizeof(float)
                             : 0;
    if (count != r.out_values) {
      status = absl::DataLossError(
          absl::StrFormat("%s answered a pull with %d bytes of values, expected %d values", server,
                          values != nullptr ? values->size() : 0, r.out_values));
    } else {
      (r.traffic == Request::Traffic::kPull || r.traffic == Request::Traffic::kPushPull
           ? bytes_pulled_
           : bytes_pushed_) += reply.ByteSize();
      staleness_sum_ += static_cast<uint64_t>(std::max<int64_t>(0, h.getStaleness()));
      ++staleness_replies_;
      const std::byte* src = values->data();
      if (r.out_frames != nullptr) {
        if (r.frame_index >= r.out_frames->size()) r.out_frames->resize(r.frame_index + 1);
        (*r.out_frames)[r.frame_index] = *values;
      } else if (r.positions.empty()) {
        std::memcpy(r.out, src, r.out_values * sizeof(float));
      } else {
        const size_t row_bytes = size_t{r.dim} * sizeof(float);
        for (size_t j = 0; j < r.positions.size(); ++j) {
          std::memcpy(r.out + size_t{r.positions[j]} * r.dim, src + j * row_bytes, row_bytes);
        }
      }
    }
  }
  if (r.traffic == Request::Traffic::kPush && status.ok()) {
    bytes_pushed_ += r.out_message != nullptr ? r.out_message->ByteSize() : reply.ByteSize();
  }
  if (!status.ok() && t.status.ok()) t.status = status;
  --t.pending;
  requests_.erase(it);
}

absl::Status KVClient::ReceiveOne(absl::Time deadline) {
  // Wake at least every 100 ms to look at the job's health.
  const absl::Time slice = std::min(deadline, absl::Now() + absl::Milliseconds(100));
  auto message = endpoint_->Receive(slice);
  if (!message.ok()) {
    if (absl::IsDeadlineExceeded(message.status())) {
      if (options_.health) return options_.health();
      return absl::OkStatus();
    }
    return message.status();
  }
  if (auto s = message->Parse(); !s.ok()) {
    SYNCLINE_LOG(WARNING) << "malformed reply from " << message->peer() << ": " << s;
    return absl::OkStatus();
  }
  const uint64_t id = message->header().getRequestId();
  if (message->header().getType() == wire::MsgType::ERROR &&
      message->header().getGeneration() != options_.generation) {
    return absl::OkStatus();  // about a request of a timeline rolled back since
  }
  if (id == 0 && message->header().getType() == wire::MsgType::ERROR) {
    // An error about a message that has no reply (a clock): the job cannot be trusted.
    return absl::Status(
        StatusFromHeader(message->header()).code(),
        absl::StrFormat("%s: %s", message->peer(), StatusFromHeader(message->header()).message()));
  }
  Complete(id, *message);
  return absl::OkStatus();
}

absl::Status KVClient::Wait(Ticket ticket, absl::Time deadline) {
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) {
    return absl::InvalidArgumentError(absl::StrFormat("unknown ticket %d", ticket));
  }
  while (tickets_[ticket].pending > 0) {
    if (absl::Now() >= deadline) {
      std::vector<std::string> waiting;
      for (const auto& [id, r] : requests_) {
        if (r.ticket == ticket) waiting.push_back(options_.server_ids[r.server]);
      }
      std::sort(waiting.begin(), waiting.end());
      waiting.erase(std::unique(waiting.begin(), waiting.end()), waiting.end());
      return absl::DeadlineExceededError(
          absl::StrFormat("no reply from %s before the deadline", absl::StrJoin(waiting, ", ")));
    }
    if (auto s = ReceiveOne(deadline); !s.ok()) return s;
  }
  absl::Status status = tickets_[ticket].status;
  tickets_.erase(ticket);
  return status;
}

double KVClient::TakeMeanStaleness() {
  const double mean =
      staleness_replies_ == 0 ? 0.0 : static_cast<double>(staleness_sum_) / staleness_replies_;
  staleness_sum_ = 0;
  staleness_replies_ = 0;
  return mean;
}

absl::StatusOr<Message> KVClient::Call(int server, wire::MsgType type, uint32_t table,
                                       int64_t clock, std::vector<Frame> frames,
                                       absl::Time deadline) {
  if (server < 0 || server >= num_servers()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("server %d is not in [0, %d)", server, num_servers()));
  }
  MessageBuilder b = NewMessage(type, table, clock, 0);
  for (Frame& f : frames) b.AddFrame(std::move(f));
  Message reply;
  Request request;
  request.out_message = &reply;
  request.traffic = Request::Traffic::kPush;
  const Ticket ticket = NewTicket();
  absl::Status status = SendRequest(ticket, server, b.Finish(), std::move(request));
  if (status.ok()) status = Wait(ticket, deadline);
  if (!status.ok()) {
    // A reply that comes later must not land in `reply`, which is gone by then.
    absl::erase_if(requests_, [&](const auto& entry) { return entry.second.ticket == ticket; });
    tickets_.erase(ticket);
    return status;
  }
  return reply;
}

absl::Status KVClient::Clock(int64_t clock, float examples) {
  for (int s = 0; s < num_servers(); ++s) {
    MessageBuilder b = NewMessage(wire::MsgType::CLOCK, 0, clock, examples);
    // No reply is awaited: an error about a clock comes back with request id 0.
    b.header().setRequestId(0);
    Message m = b.Finish();
    const uint64_t bytes = m.ByteSize();
    auto st =
        endpoint_->Send(options_.server_ids[s], std::move(m), absl::Now() + options_.send_timeout);
    if (!st.ok()) return st;
    bytes_pushed_ += bytes;
  }
  return absl::OkStatus();
}

absl::Status KVClient::Finish(absl::Time deadline) {
  const Ticket ticket = NewTicket();
  for (int s = 0; s < num_servers(); ++s) {
    MessageBuilder b = NewMessage(wire::MsgType::FINISH, 0, 0, 0);
    if (auto st = SendRequest(ticket, s, b.Finish(), Request{}); !st.ok()) return st;
  }
  return Wait(ticket, deadline);
}

absl::Status KVClient::PushSparse(uint32_t table, int server, uint32_t dim, const SparsePush& push,
                                  int64_t clock, float weight, std::vector<Ticket>* tickets) {
  if (!push.keys.empty()) {
    auto t = PushRowsEncoded(table, server, push.keys, push.kind, push.block, push.held,
                             push.spread, clock, weight);
    if (!t.ok()) return t.status();
    tickets->push_back(*t);
  }
  const size_t per_push = std::max<size_t>(1, kMaxWholeRowsBytes / (size_t{dim} * sizeof(float)));
  for (size_t at = 0; at < push.flushed_keys.size(); at += per_push) {
    const size_t rows = std::min(per_push, push.flushed_keys.size() - at);
    auto t = PushRowsEncoded(
        table, server, std::span<const uint64_t>(push.flushed_keys).subspan(at, rows),
        CodecKind::kNone,
        std::as_bytes(std::span<const float>(push.flushed_values).subspan(at * dim, rows * dim)),
        std::span<const uint16_t>(push.flushed_held).subspan(at, rows),
        std::span<const float>(push.flushed_spread).subspan(at, rows), clock, weight);
    if (!t.ok()) return t.status();
    tickets->push_back(*t);
  }
  return absl::OkStatus();
}

}  // namespace syncline
