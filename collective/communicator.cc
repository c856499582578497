#include "collective/communicator.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compression/half.h"
#include "core/log.h"

namespace syncline {
namespace {

using compression_internal::FloatToHalf;
using compression_internal::HalfToFloat;

constexpr uint32_t kPhaseReduceScatter = 1;
constexpr uint32_t kPhaseAllGather = 2;
constexpr uint32_t kPhaseDoubling = 3;
constexpr uint32_t kPhaseLocalReduce = 4;
constexpr uint32_t kPhaseLocalResult = 5;
constexpr uint32_t kPhaseBroadcast = 6;
constexpr uint32_t kPhaseHalving = 7;
// Halving and doubling: segments a rank sends to its partner before it waits for the partner's
// first, so that adding one overlaps the transfer of the next.
constexpr size_t kSegmentsAhead = 4;
// Messages kept for later (early ones from fast peers); beyond this a flood is dropped.
constexpr size_t kMaxPending = 1 << 16;

// Rounds every value to the nearest half, as the wire would.
void RoundToHalf(std::span<float> data) {
  for (float& v : data) v = HalfToFloat(FloatToHalf(v));
}

}  // namespace

const char* AlgorithmName(Algorithm a) {
  switch (a) {
    case Algorithm::kAuto:
      return "auto";
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kRecursiveDoubling:
      return "doubling";
    case Algorithm::kHierarchical:
      return "hierarchical";
    case Algorithm::kHalvingDoubling:
      return "halving";
  }
  return "?";
}

Communicator::Communicator(Endpoint* endpoint, int rank, std::vector<std::string> peers,
                           CommunicatorOptions options)
    : endpoint_(endpoint), rank_(rank), peers_(std::move(peers)), options_(std::move(options)) {
  for (int r = 0; r < size(); ++r) rank_of_[peers_[r]] = r;
  reached_.assign(size(), false);
}

size_t Communicator::ChunkBegin(size_t n, int parts, int c) {
  const size_t base = n / parts, extra = n % parts;
  const size_t uc = static_cast<size_t>(c);
  return uc * base + std::min(uc, extra);
}

Algorithm Communicator::Choose(size_t bytes) const {
  // Measured (docs/COLLECTIVES.md): doubling wins up to 64 KiB, the pipelined ring from 256 KiB,
  // with 2 ranks too (16 MiB: 15 ms against 40 ms).
  if (bytes < options_.small_bytes) return Algorithm::kRecursiveDoubling;
  if (!options_.host_of_rank.empty()) {
    std::vector<int> hosts = options_.host_of_rank;
    std::sort(hosts.begin(), hosts.end());
    const size_t distinct = std::unique(hosts.begin(), hosts.end()) - hosts.begin();
    if (distinct > 1 && distinct < hosts.size()) return Algorithm::kHierarchical;
  }
  // Halving's 2 log2 N steps against the ring's 2(N - 1), the same bytes, exchanged a few
  // segments ahead: measured faster at N = 2, 4 and 8 (N = 8, 256 MiB: the ring lost to
  // Gloo's halving-doubling for its steps).
  const unsigned n = static_cast<unsigned>(size());
  if (static_cast<int>(n) >= options_.halving_min_ranks && std::has_single_bit(n)) {
    return Algorithm::kHalvingDoubling;
  }
  return Algorithm::kRing;
}

std::string Communicator::Describe(int from, const Tag& tag) const {
  return absl::StrFormat("%s #%d (phase %d, step %d, segment %d): from %s (rank %d)", op_, tag.seq,
                         tag.phase, tag.step, tag.segment, peers_[from], from);
}

absl::Status Communicator::Send(int to, const Tag& tag, std::span<const float> values,
                                WireType wire) {
  // A copy, unless the endpoint writes or copies it before Send returns: the caller's buffer
  // changes in later steps while ZeroMQ may still hold the bytes. Made once: a resend while a
  // lower rank connects shares it.
  Frame payload;
  if (wire == WireType::kFloat16) {
    std::vector<uint16_t> half(values.size());
    for (size_t i = 0; i < values.size(); ++i) half[i] = FloatToHalf(values[i]);
    payload = Frame::Own(std::move(half));
  } else if (endpoint_->SendCopiesBorrowedFrames()) {
    payload = Frame::Borrow(values);
  } else {
    payload = Frame::Own(std::vector<float>(values.begin(), values.end()));
  }
  auto message = [&] {
    MessageBuilder b(wire::MsgType::COLLECTIVE);
    auto h = b.header();
    h.setRole(wire::Role::WORKER);
    h.setRank(rank_);
    h.setClock(tag.seq);
    h.setTable(tag.phase);
    h.setRangeBegin(static_cast<uint64_t>(tag.step));
    h.setRangeEnd(static_cast<uint64_t>(tag.segment));
    h.setValueCount(values.size());
    if (wire == WireType::kFloat16) h.setCodec(1);
    b.AddFrame(payload);
    return b.Finish();
  };
  const absl::Time deadline = absl::Now() + options_.timeout;
  absl::Duration backoff = absl::Milliseconds(1);
  absl::Status s = endpoint_->Send(peers_[to], message(), deadline);
  // Between two workers the lower rank opens the one connection (planes.cc), when it gets
  // there: a rank still reading its data can be minutes behind. Until a lower rank has been
  // reached once, "not connected" means "not yet", and the collective's own timeout bounds
  // the wait; after that it means the peer is gone, and the send fails at once.
  while (absl::IsUnavailable(s) && to < rank_ && !reached_[to] &&
         absl::Now() + backoff < deadline) {
    // A rollback ends the wait too: the rank may be the node that died (StopWaitingWhen).
    if (interrupted_) {
      if (absl::Status i = interrupted_(); !i.ok()) {
        return absl::Status(i.code(), absl::StrFormat("%s #%d: waiting for %s (rank %d): %s", op_,
                                                      tag.seq, peers_[to], to, i.message()));
      }
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(50));
    s = endpoint_->Send(peers_[to], message(), deadline);
  }
  if (!s.ok()) {
    return absl::Status(s.code(), absl::StrFormat("%s #%d: cannot send to %s (rank %d): %s", op_,
                                                  tag.seq, peers_[to], to, s.message()));
  }
  reached_[to] = true;
  counters_.bytes_sent += payload.size();
  return absl::OkStatus();
}

absl::Status Communicator::Pump(int from, const Tag& tag, absl::Time deadline) {
  constexpr absl::Duration kInterruptionPoll = absl::Milliseconds(100);
  absl::StatusOr<Message> m = endpoint_->Receive(
      interrupted_ ? std::min(deadline, absl::Now() + kInterruptionPoll) : deadline);
  if (!m.ok()) {
    if (absl::IsDeadlineExceeded(m.status()) && interrupted_) {
      if (absl::Status s = interrupted_(); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat(Describe(from, tag), ": ", s.message()));
      }
      if (absl::Now() < deadline) return absl::OkStatus();  // the caller waits on
    }
    if (absl::IsDeadlineExceeded(m.status())) {
      return absl::DeadlineExceededError(absl::StrCat(Describe(from, tag), ": nothing within ",
                                                      absl::FormatDuration(options_.timeout),
                                                      " (is that peer alive?)"));
    }
    return m.status();
  }
  auto drop = [&](absl::string_view why) {
    if (counters_.messages_dropped++ < 10) {
      SYNCLINE_LOG(WARNING) << "collective: dropped a message from " << m->peer() << ": " << why;
    }
    return absl::OkStatus();
  };
  if (absl::Status s = m->Parse(); !s.ok()) return drop(s.message());
  auto h = m->header();
  auto sender = rank_of_.find(m->peer());
  if (h.getType() != wire::MsgType::COLLECTIVE) return drop("not a collective message");
  if (sender == rank_of_.end() || sender->second == rank_ || h.getRank() != sender->second) {
    return drop("not from a peer of this communicator");
  }
  reached_[sender->second] = true;  // its connection is up
  if (h.getClock() < seq_) return drop("from a finished collective");
  if (m->payload_count() != 1 || h.getCodec() > 1) return drop("not one values frame");
  const size_t width = h.getCodec() == 1 ? sizeof(uint16_t) : sizeof(float);
  if (m->payload(0).size() != h.getValueCount() * width) return drop("size does not match count");
  if (pending_.size() >= kMaxPending) return drop("too many early messages");
  const auto key = std::make_tuple(sender->second, h.getClock(), h.getTable(),
                                   static_cast<int64_t>(h.getRangeBegin()),
                                   static_cast<int64_t>(h.getRangeEnd()));
  if (!pending_.emplace(key, *std::move(m)).second) return drop("a duplicate");
  return absl::OkStatus();
}

absl::Status Communicator::Receive(int from, const Tag& tag, std::span<float> out, WireType wire,
                                   bool add) {
  const auto key = std::tuple_cat(std::make_tuple(from), tag.key());
  const absl::Time deadline = absl::Now() + options_.timeout;
  auto it = pending_.find(key);
  while (it == pending_.end()) {
    if (auto s = Pump(from, tag, deadline); !s.ok()) return s;
    it = pending_.find(key);
  }
  Message m = std::move(it->second);
  pending_.erase(it);
  auto h = m.header();
  const bool half = h.getCodec() == 1;
  if (half != (wire == WireType::kFloat16) || h.getValueCount() != out.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Describe(from, tag), ": ", h.getValueCount(), half ? " halves" : " floats",
                     ", expected ", out.size(), wire == WireType::kFloat16 ? " halves" : " floats",
                     " (do all ranks call the same collective on the same size?)"));
  }
  counters_.bytes_received += m.payload(0).size();
  if (half) {
    auto values = m.payload(0).As<uint16_t>();
    if (!values.ok()) return values.status();
    for (size_t i = 0; i < out.size(); ++i) {
      const float v = HalfToFloat((*values)[i]);
      out[i] = add ? out[i] + v : v;
    }
  } else {
    auto values = m.payload(0).As<float>();
    if (!values.ok()) return values.status();
    if (add) {
      // Restrict-qualified, so that -O2's cheap vectorizer needs no aliasing check.
      float* __restrict o = out.data();
      const float* __restrict in = values->data();
      for (size_t i = 0; i < out.size(); ++i) o[i] += in[i];
    } else {
      // (Guarded: memcpy must not see the null pointers of empty spans.)
      if (!out.empty()) std::memcpy(out.data(), values->data(), out.size_bytes());
    }
  }
  return absl::OkStatus();
}

// One pass around `ring`: position i sends chunk `first` (mod n), then at step s receives chunk
// (first - s - 1) mod n from its left, adds it to its own (`add`) or takes it, and forwards each
// segment as soon as it has it, so that segments pipeline through the ring.
absl::Status Communicator::RingPass(std::span<float> data, const Ring& ring, int first, bool add,
                                    uint32_t phase, WireType wire) {
  const int n = ring.n();
  const size_t seg = std::max<size_t>(1, options_.segment_bytes / sizeof(float));
  auto chunk = [&](int c) {
    c = ((c % n) + n) % n;
    const size_t b = ChunkBegin(data.size(), n, c), e = ChunkBegin(data.size(), n, c + 1);
    return data.subspan(b, e - b);
  };
  auto segments = [&](std::span<float> c) { return (c.size() + seg - 1) / seg; };
  auto segment = [&](std::span<float> c, size_t k) {
    return c.subspan(k * seg, std::min(seg, c.size() - k * seg));
  };
  const std::span<float> own = chunk(first);
  for (size_t k = 0; k < segments(own); ++k) {
    Tag t{seq_, phase, 0, static_cast<int64_t>(k)};
    if (auto s = Send(ring.right(), t, segment(own, k), wire); !s.ok()) return s;
  }
  for (int step = 0; step < n - 1; ++step) {
    std::span<float> c = chunk(first - step - 1);
    for (size_t k = 0; k < segments(c); ++k) {
      std::span<float> piece = segment(c, k);
      Tag t{seq_, phase, step, static_cast<int64_t>(k)};
      if (auto s = Receive(ring.left(), t, piece, wire, add); !s.ok()) return s;
      if (step + 1 < n - 1) {
        Tag next{seq_, phase, step + 1, static_cast<int64_t>(k)};
        if (auto s = Send(ring.right(), next, piece, wire); !s.ok()) return s;
      }
    }
  }
  return absl::OkStatus();
}

// Reduce-scatter around `ring`: afterwards position i holds the sum of chunk (i + shift) mod n.
absl::Status Communicator::RingReduceScatter(std::span<float> data, const Ring& ring, int shift,
                                             uint32_t phase, WireType wire) {
  if (ring.n() == 1) return absl::OkStatus();
  return RingPass(data, ring, ring.me + shift - 1, /*add=*/true, phase, wire);
}

// All-gather around `ring`: position i starts with chunk (i + shift) mod n.
absl::Status Communicator::RingAllGather(std::span<float> data, const Ring& ring, int shift,
                                         uint32_t phase, WireType wire) {
  const int n = ring.n();
  if (n == 1) return absl::OkStatus();
  if (wire == WireType::kFloat16) {
    // Every rank must end with the same bits: the owner keeps what the others will receive.
    const int c = ((ring.me + shift) % n + n) % n;
    RoundToHalf(data.subspan(ChunkBegin(data.size(), n, c),
                             ChunkBegin(data.size(), n, c + 1) - ChunkBegin(data.size(), n, c)));
  }
  return RingPass(data, ring, ring.me + shift, /*add=*/false, phase, wire);
}

absl::Status Communicator::RecursiveDoubling(std::span<float> data, WireType wire) {
  const int n = size();
  const int p = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));
  const int r = rank_;
  std::vector<float> other(data.size());
  // Ranks beyond p fold into rank r - p first and get the result from it last.
  if (r >= p) {
    if (auto s = Send(r - p, {seq_, kPhaseDoubling, 0, 0}, data, wire); !s.ok()) return s;
    return Receive(r - p, {seq_, kPhaseDoubling, 1000, 0}, data, wire, /*add=*/false);
  }
  if (r + p < n) {
    if (auto s = Receive(r + p, {seq_, kPhaseDoubling, 0, 0}, data, wire, true); !s.ok()) return s;
  }
  int step = 1;
  for (int mask = 1; mask < p; mask <<= 1, ++step) {
    const int partner = r ^ mask;
    if (auto s = Send(partner, {seq_, kPhaseDoubling, step, 0}, data, wire); !s.ok()) return s;
    // Received into a copy and then added: a + b == b + a bit for bit, so both partners hold
    // the same sum.
    std::span<float> in(other);
    if (auto s = Receive(partner, {seq_, kPhaseDoubling, step, 0}, in, wire, false); !s.ok()) {
      return s;
    }
    if (wire == WireType::kFloat16) RoundToHalf(data);  // what the partner received of ours
    for (size_t i = 0; i < data.size(); ++i) data[i] += other[i];
  }
  if (wire == WireType::kFloat16) RoundToHalf(data);
  if (r + p < n) return Send(r + p, {seq_, kPhaseDoubling, 1000, 0}, data, wire);
  return absl::OkStatus();
}

absl::Status Communicator::Exchange(int partner, uint32_t phase, int64_t step,
                                    std::span<const float> out, std::span<float> in, WireType wire,
                                    bool add) {
  const size_t seg = std::max<size_t>(1, options_.segment_bytes / sizeof(float));
  const size_t out_segments = (out.size() + seg - 1) / seg;
  const size_t in_segments = (in.size() + seg - 1) / seg;
  size_t sent = 0;
  auto send_until = [&](size_t k) {
    for (k = std::min(k, out_segments); sent < k; ++sent) {
      const size_t at = sent * seg;
      Tag t{seq_, phase, step, static_cast<int64_t>(sent)};
      if (auto s = Send(partner, t, out.subspan(at, std::min(seg, out.size() - at)), wire);
          !s.ok()) {
        return s;
      }
    }
    return absl::OkStatus();
  };
  if (auto s = send_until(kSegmentsAhead); !s.ok()) return s;
  for (size_t k = 0; k < in_segments; ++k) {
    const size_t at = k * seg;
    Tag t{seq_, phase, step, static_cast<int64_t>(k)};
    if (auto s = Receive(partner, t, in.subspan(at, std::min(seg, in.size() - at)), wire, add);
        !s.ok()) {
      return s;
    }
    if (auto s = send_until(k + 1 + kSegmentsAhead); !s.ok()) return s;
  }
  return send_until(out_segments);
}

// Rabenseifner's all-reduce (Thakur, Rabenseifner and Gropp 2005) over the largest power of
// two p <= N: a reduce-scatter by recursive halving (at distance p/2, p/4, ..., 1 each rank
// keeps half of what it still reduces, sends the other half to its partner and adds the
// partner's copy of its own half), after which rank v holds the sum of chunk v of p, then an
// all-gather by recursive doubling (distance 1, 2, ..., p/2). 2 log2 p steps where the ring
// takes 2(N-1), and the same bytes, (p-1)/p of the buffer each way. Ranks from p on fold
// their buffer into rank r - p first and get the result from it last. Each chunk's sum is
// made by its one owner, in an order fixed by the ranks, and only copied from there: every
// rank ends with the same bits.
absl::Status Communicator::HalvingDoubling(std::span<float> data, WireType wire) {
  const int n = size();
  const int p = static_cast<int>(std::bit_floor(static_cast<unsigned>(n)));
  const int r = rank_;
  constexpr int64_t kFoldBack = 1000;
  if (r >= p) {
    if (auto s = Exchange(r - p, kPhaseHalving, 0, data, {}, wire, false); !s.ok()) return s;
    return Exchange(r - p, kPhaseHalving, kFoldBack, {}, data, wire, /*add=*/false);
  }
  if (r + p < n) {
    if (auto s = Exchange(r + p, kPhaseHalving, 0, {}, data, wire, /*add=*/true); !s.ok()) {
      return s;
    }
  }
  // The chunks [lo, hi) of p that this rank still reduces, then holds.
  auto chunks = [&](int lo, int hi) {
    const size_t b = ChunkBegin(data.size(), p, lo), e = ChunkBegin(data.size(), p, hi);
    return data.subspan(b, e - b);
  };
  int lo = 0, hi = p;
  int64_t step = 1;
  for (int mask = p / 2; mask >= 1; mask >>= 1, ++step) {
    const int mid = lo + (hi - lo) / 2;
    const bool lower = (r & mask) == 0;
    const std::span<float> give = lower ? chunks(mid, hi) : chunks(lo, mid);
    (lower ? hi : lo) = mid;
    if (auto s = Exchange(r ^ mask, kPhaseHalving, step, give, chunks(lo, hi), wire, /*add=*/true);
        !s.ok()) {
      return s;
    }
  }
  // Every rank must end with the same bits: the owner keeps what the others will receive.
  if (wire == WireType::kFloat16) RoundToHalf(chunks(lo, hi));
  for (int mask = 1; mask < p; mask <<= 1, ++step) {
    const bool lower = (r & mask) == 0;
    const int other_lo = lower ? hi : lo - mask, other_hi = other_lo + mask;
    if (auto s = Exchange(r ^ mask, kPhaseHalving, step, chunks(lo, hi), chunks(other_lo, other_hi),
                          wire, /*add=*/false);
        !s.ok()) {
      return s;
    }
    lo = std::min(lo, other_lo);
    hi = std::max(hi, other_hi);
  }
  if (r + p < n) return Exchange(r + p, kPhaseHalving, kFoldBack, data, {}, wire, false);
  return absl::OkStatus();
}

absl::Status Communicator::Hierarchical(std::span<float> data, WireType wire) {
  // Ranks by host; each host's lowest rank leads it.
  const std::vector<int>& host = options_.host_of_rank;
  std::vector<int> local;  // this host's ranks, ascending
  std::vector<int> leaders;
  for (int r = 0; r < size(); ++r) {
    if (host[r] == host[rank_]) local.push_back(r);
    bool first = true;
    for (int q = 0; q < r; ++q) first = first && host[q] != host[r];
    if (first) leaders.push_back(r);
  }
  const int leader = local.front();
  if (rank_ != leader) {
    if (auto s = Send(leader, {seq_, kPhaseLocalReduce, 0, 0}, data, WireType::kFloat32); !s.ok()) {
      return s;
    }
    return Receive(leader, {seq_, kPhaseLocalResult, 0, 0}, data, WireType::kFloat32, false);
  }
  // In rank order, so that the sum is the same every run.
  for (size_t k = 1; k < local.size(); ++k) {
    if (auto s = Receive(local[k], {seq_, kPhaseLocalReduce, 0, 0}, data, WireType::kFloat32,
                         /*add=*/true);
        !s.ok()) {
      return s;
    }
  }
  Ring ring;
  ring.group = leaders;
  ring.me = static_cast<int>(std::find(leaders.begin(), leaders.end(), rank_) - leaders.begin());
  if (auto s = RingReduceScatter(data, ring, 1, kPhaseReduceScatter, wire); !s.ok()) return s;
  if (auto s = RingAllGather(data, ring, 1, kPhaseAllGather, wire); !s.ok()) return s;
  if (wire == WireType::kFloat16 && ring.n() == 1) RoundToHalf(data);
  for (size_t k = 1; k < local.size(); ++k) {
    if (auto s = Send(local[k], {seq_, kPhaseLocalResult, 0, 0}, data, WireType::kFloat32);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status Communicator::AllReduce(std::span<float> data, Algorithm algorithm, WireType wire) {
  op_ = "all-reduce";
  if (algorithm == Algorithm::kAuto) algorithm = Choose(data.size_bytes());
  if (algorithm == Algorithm::kHierarchical &&
      options_.host_of_rank.size() != static_cast<size_t>(size())) {
    algorithm = Algorithm::kRing;  // no hosts known: every rank is its own host
  }
  absl::Status s;
  if (size() == 1) {
    if (wire == WireType::kFloat16) RoundToHalf(data);
  } else if (algorithm == Algorithm::kRecursiveDoubling) {
    s = RecursiveDoubling(data, wire);
  } else if (algorithm == Algorithm::kHierarchical) {
    s = Hierarchical(data, wire);
  } else if (algorithm == Algorithm::kHalvingDoubling) {
    s = HalvingDoubling(data, wire);
  } else {
    Ring ring;
    for (int r = 0; r < size(); ++r) ring.group.push_back(r);
    ring.me = rank_;
    s = RingReduceScatter(data, ring, 1, kPhaseReduceScatter, wire);
    if (s.ok()) s = RingAllGather(data, ring, 1, kPhaseAllGather, wire);
  }
  ++seq_;
  return s;
}

absl::Status Communicator::ReduceScatter(std::span<float> data, WireType wire) {
  op_ = "reduce-scatter";
  Ring ring;
  for (int r = 0; r < size(); ++r) ring.group.push_back(r);
  ring.me = rank_;
  absl::Status s = RingReduceScatter(data, ring, 0, kPhaseReduceScatter, wire);
  ++seq_;
  return s;
}

absl::Status Communicator::AllGather(std::span<float> data, WireType wire) {
  op_ = "all-gather";
  Ring ring;
  for (int r = 0; r < size(); ++r) ring.group.push_back(r);
  ring.me = rank_;
  absl::Status s = RingAllGather(data, ring, 0, kPhaseAllGather, wire);
  ++seq_;
  return s;
}

absl::Status Communicator::AllGatherBytes(std::span<const std::byte> mine,
                                          std::vector<std::byte>* all) {
  op_ = "all-gather";
  // In floats (their bits are only copied, never added), one chunk of equal length per rank.
  const size_t words = (mine.size() + sizeof(float) - 1) / sizeof(float);
  std::vector<float> buffer(words * size(), 0.0f);
  if (!mine.empty()) std::memcpy(buffer.data() + words * rank_, mine.data(), mine.size());
  Ring ring;
  for (int r = 0; r < size(); ++r) ring.group.push_back(r);
  ring.me = rank_;
  absl::Status s =
      RingAllGather(std::span<float>(buffer), ring, 0, kPhaseAllGather, WireType::kFloat32);
  ++seq_;
  if (!s.ok()) return s;
  all->resize(mine.size() * size());
  if (mine.empty()) return absl::OkStatus();
  for (int r = 0; r < size(); ++r) {
    std::memcpy(all->data() + mine.size() * r, buffer.data() + words * r, mine.size());
  }
  return absl::OkStatus();
}

absl::Status Communicator::Broadcast(std::span<float> data, int root) {
  op_ = "broadcast";
  const int n = size();
  const int v = (rank_ - root + n) % n;  // position in a tree rooted at 0
  absl::Status s;
  // Binomial tree: position v receives from v minus its lowest set bit, then sends to v + m
  // for every m below that bit.
  int lowest = 1;
  while (lowest < n && (v & lowest) == 0) lowest <<= 1;
  // In segments, as every other collective sends: a plane's message bound is sized to the
  // job's largest all-reduce buffer, and a broadcast (a model with its optimizer state) may be
  // larger.
  const size_t seg = std::max<size_t>(1, options_.segment_bytes / sizeof(float));
  for (size_t begin = 0, i = 0; s.ok() && (begin < data.size() || i == 0); begin += seg, ++i) {
    std::span<float> piece = data.subspan(begin, std::min(seg, data.size() - begin));
    const Tag tag{seq_, kPhaseBroadcast, 0, static_cast<int64_t>(i)};
    if (v != 0) s = Receive(((v - lowest) + root) % n, tag, piece, WireType::kFloat32, false);
    for (int mask = lowest >> 1; s.ok() && mask > 0; mask >>= 1) {
      if (v + mask < n) s = Send((v + mask + root) % n, tag, piece, WireType::kFloat32);
    }
  }
  ++seq_;
  return s;
}

}  // namespace syncline
