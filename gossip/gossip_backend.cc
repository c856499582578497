#include "gossip/gossip_backend.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/log.h"
#include "job/options.h"

namespace syncline {

GossipBackend::GossipBackend(Endpoint* endpoint, GossipOptions options)
    : options_(options), mixer_(endpoint, std::move(options)) {}

absl::Status GossipBackend::Init(const ParameterLayout& layout) {
  if (auto s = model_.Init(layout, options_.optimizer); !s.ok()) return s;
  return mixer_.Init(model_.parameters().size());
}

absl::Status GossipBackend::Read(int64_t clock, std::span<const uint64_t> keys,
                                 std::span<float> rows, std::span<float> bias) {
  // A joiner's first step starts from its neighbours' models, not from zeros.
  if (mixer_.must_enter()) {
    if (auto s = mixer_.Enter(model_.parameters()); !s.ok()) return s;
  }
  return model_.Read(keys, rows, bias);
}

absl::Status GossipBackend::Update(int64_t clock, std::span<const uint64_t> keys,
                                   std::span<const float> row_grads,
                                   std::span<const float> bias_grad, float examples) {
  if (!(examples > 0)) return absl::InvalidArgumentError("gossip update of no examples");
  if (auto s = model_.CheckUpdate(keys, row_grads, bias_grad); !s.ok()) return s;
  const float scale = 1.0f / examples;
  const uint32_t dim = model_.layout().row_dim;
  for (size_t i = 0; i < keys.size(); ++i) {
    model_.ApplyRow(keys[i], row_grads.data() + i * dim, scale);
  }
  model_.ApplyBias(bias_grad.data(), scale);
  return absl::OkStatus();
}

absl::Status GossipBackend::EndIteration(int64_t clock, float examples) {
  next_step_ = clock + 1;
  return mixer_.MixOnce(clock, model_.parameters());
}

namespace {

constexpr char kStateMagic[4] = {'G', 'S', 'P', '1'};
// CHOCO (topk, sign1): the header also holds the peer count and each rank's copy exchanges
// (GossipMixer::CopyExchanges), the tail the copies (GossipMixer::AppendCopies).
constexpr char kCompressedStateMagic[4] = {'G', 'S', 'C', '1'};
constexpr char kNotMine[] =
    "the saved worker state is not a gossip peer's (was the checkpoint written with parameter "
    "servers?)";

}  // namespace

absl::StatusOr<std::string> GossipBackend::SaveState() const {
  if (options_.asynchronous) {
    return absl::FailedPreconditionError(
        "asynchronous gossip does not checkpoint: push-sum weight in flight would be lost");
  }
  std::string out;
  if (!mixer_.compressed()) {
    const int64_t header[1] = {next_step_};
    model_.Save(kStateMagic, header, {}, &out);
    return out;
  }
  std::vector<int64_t> header = {next_step_, options_.num_peers};
  const std::vector<int64_t> exchanges = mixer_.CopyExchanges();
  header.insert(header.end(), exchanges.begin(), exchanges.end());
  std::string copies;
  mixer_.AppendCopies(&copies);
  model_.Save(kCompressedStateMagic, header, copies, &out);
  return out;
}

absl::Status GossipBackend::RestoreState(std::string_view state) {
  if (options_.asynchronous) {
    return absl::FailedPreconditionError("asynchronous gossip does not restore checkpoints");
  }
  std::vector<int64_t> header;
  std::string_view tail;
  if (state.substr(0, 4) != std::string_view(kCompressedStateMagic, 4)) {
    absl::Status s = model_.Restore(
        state, kStateMagic, 1, [](std::span<const int64_t>) { return size_t{0}; }, kNotMine,
        &header, &tail);
    if (!s.ok()) return s;
    next_step_ = header[0];
    if (mixer_.compressed()) {
      // Every peer restores the same kind of checkpoint, so every copy restarts from zero at
      // both of its ends; the first exchanges then resend the models, a few K entries a step.
      SYNCLINE_LOG(WARNING) << "gossip: the checkpoint holds no public copies (it was written "
                               "with codec none or fp16); they restart from zero";
      mixer_.DropCopies();
    }
    return absl::OkStatus();
  }
  // Validated before anything changes: a table that does not fit asks for more bytes than
  // there are, so that Restore refuses it untouched, and `bad` says why.
  const int n = options_.num_peers;
  std::string bad;
  absl::Status s = model_.Restore(
      state, kCompressedStateMagic, 2 + n,
      [&](std::span<const int64_t> h) -> size_t {
        if (h[1] != n) {
          bad = absl::StrFormat("the saved gossip state is from a job of %d peers; this job has %d",
                                h[1], n);
          return state.size() + 1;
        }
        absl::StatusOr<size_t> bytes = mixer_.CopyBytes(h.subspan(2));
        if (!bytes.ok()) {
          bad = absl::StrCat("the saved gossip state is not valid: ", bytes.status().message());
          return state.size() + 1;
        }
        return *bytes;
      },
      kNotMine, &header, &tail);
  if (!bad.empty()) return absl::InvalidArgumentError(bad);
  if (!s.ok()) return s;
  next_step_ = header[0];
  if (!mixer_.compressed()) {
    SYNCLINE_LOG(INFO) << "gossip: the checkpoint's public copies are not needed by codec "
                       << CodecName(options_.codec);
    return absl::OkStatus();
  }
  return mixer_.RestoreCopies(std::span<const int64_t>(header).subspan(2), tail);
}

absl::Status GossipBackend::Finish() {
  if (finished_) return absl::OkStatus();
  finished_ = true;
  if (options_.asynchronous) {
    if (auto s = mixer_.DrainIncoming(model_.parameters()); !s.ok()) return s;
  }
  mixer_.Leave(next_step_, options_.asynchronous ? std::span<const float>(model_.parameters())
                                                 : std::span<const float>());
  return absl::OkStatus();
}

}  // namespace syncline
