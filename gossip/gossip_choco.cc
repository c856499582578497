// CHOCO-Gossip: compressed differences against one pair of public copies per edge (see the
// header's comment), and the copies' checkpoint form.
#include <algorithm>
#include <cstring>
#include <map>

#include "absl/strings/str_format.h"
#include "core/log.h"
#include "core/scoped_time.h"
#include "gossip/gossip_mixer.h"
#include "gossip/topology.h"

namespace syncline {

Frame GossipMixer::EncodeDifference(int peer, std::span<const float> values,
                                    std::vector<float>* sent) {
  ScopedTime timed(&codec_time_);
  Edge& edge = edges_[peer];
  if (edge.own.empty()) {
    edge.own.assign(size_, 0.0f);
    edge.theirs.assign(size_, 0.0f);
  }
  difference_.resize(size_);
  for (size_t k = 0; k < size_; ++k) difference_[k] = values[k] - edge.own[k];
  codec_->Encode(difference_, &block_);
  sent->assign(size_, 0.0f);
  if (!codec_->DecodeAdd(block_, *sent).ok()) {
    // sign1 of a non-finite difference has a non-finite scale, which no peer would accept:
    // send a zero difference, so that all of it stays in x - own for later.
    SYNCLINE_LOG(WARNING) << "gossip: the difference to " << Name(peer)
                          << "'s copy does not encode (not finite?); sending none this step";
    std::fill(difference_.begin(), difference_.end(), 0.0f);
    codec_->Encode(difference_, &block_);
    sent->assign(size_, 0.0f);
  }
  return Frame::Copy(block_.data(), block_.size());
}

void GossipMixer::MixCompressed(int64_t step, std::span<float> values,
                                const std::map<int, Incoming>& got,
                                const std::map<int, std::vector<float>>& delivered) {
  // The degree counts every neighbour heard from, as in D-PSGD, so that both ends of an edge
  // compute the same weight; an edge whose ends disagree contributes nothing at either end.
  const int degree = static_cast<int>(got.size());
  std::vector<const Edge*> mixed;
  std::vector<double> weights;
  for (const auto& [r, in] : got) {
    auto sent = delivered.find(r);
    if (sent == delivered.end()) continue;  // r did not get this node's block: nor does it mix
    Edge& edge = edges_[r];
    if (in.exchanges != static_cast<uint64_t>(edge.exchanges)) {
      SYNCLINE_LOG(WARNING) << "gossip: the public copies shared with " << Name(r)
                            << " disagree at step " << step << " (" << edge.exchanges
                            << " exchanges here, " << in.exchanges
                            << " there): both ends restart them from zero";
      edge.exchanges = 0;
      std::fill(edge.own.begin(), edge.own.end(), 0.0f);
      std::fill(edge.theirs.begin(), edge.theirs.end(), 0.0f);
      continue;
    }
    for (size_t k = 0; k < size_; ++k) {
      edge.own[k] += sent->second[k];
      edge.theirs[k] += in.values[k];
    }
    ++edge.exchanges;
    mixed.push_back(&edge);
    weights.push_back(gamma_ * MetropolisWeight(degree, in.degree));
  }
  std::vector<std::span<const float>> copies;
  for (const Edge* edge : mixed) copies.push_back(edge->theirs);
  RecordProxy(values, copies);
  for (size_t k = 0; k < size_; ++k) {
    double move = 0;
    for (size_t j = 0; j < mixed.size(); ++j) {
      move += weights[j] * (static_cast<double>(mixed[j]->theirs[k]) - mixed[j]->own[k]);
    }
    values[k] = static_cast<float>(values[k] + move);
  }
  // A peer that is gone from the next step on never exchanges on its edge again.
  for (auto it = edges_.begin(); it != edges_.end();) {
    it = gone_from_[it->first] <= step + 1 ? edges_.erase(it) : std::next(it);
  }
}

std::vector<int64_t> GossipMixer::CopyExchanges() const {
  std::vector<int64_t> exchanges(options_.num_peers, -1);
  for (const auto& [r, edge] : edges_) exchanges[r] = edge.exchanges;
  return exchanges;
}

void GossipMixer::AppendCopies(std::string* out) const {
  for (const auto& [r, edge] : edges_) {
    for (const std::vector<float>* copy : {&edge.own, &edge.theirs}) {
      if (copy->empty()) continue;
      out->append(reinterpret_cast<const char*>(copy->data()), copy->size() * sizeof(float));
    }
  }
}

absl::StatusOr<size_t> GossipMixer::CopyBytes(std::span<const int64_t> exchanges) const {
  if (exchanges.size() != static_cast<size_t>(options_.num_peers)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("public copies for %d gossip peers; this job has %d", exchanges.size(),
                        options_.num_peers));
  }
  size_t edges = 0;
  for (int r = 0; r < options_.num_peers; ++r) {
    if (exchanges[r] < -1 || (r == options_.rank && exchanges[r] != -1)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("bad public copy entry %d for rank %d (this node is rank %d)",
                          exchanges[r], r, options_.rank));
    }
    edges += exchanges[r] >= 0;
  }
  return edges * 2 * size_ * sizeof(float);
}

absl::Status GossipMixer::RestoreCopies(std::span<const int64_t> exchanges,
                                        std::string_view bytes) {
  absl::StatusOr<size_t> want = CopyBytes(exchanges);
  if (!want.ok()) return want.status();
  if (*want != bytes.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d bytes of public copies, expected %d", bytes.size(), *want));
  }
  std::map<int, Edge> edges;
  const char* p = bytes.data();
  for (int r = 0; r < options_.num_peers; ++r) {
    if (exchanges[r] < 0) continue;
    Edge& edge = edges[r];
    edge.exchanges = exchanges[r];
    for (std::vector<float>* copy : {&edge.own, &edge.theirs}) {
      copy->resize(size_);
      std::memcpy(copy->data(), p, size_ * sizeof(float));
      p += size_ * sizeof(float);
    }
  }
  edges_ = std::move(edges);
  return absl::OkStatus();
}

}  // namespace syncline
