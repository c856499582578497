#include "core/message.h"

#include <capnp/schema.h>

#include <cstring>

#include "absl/strings/str_format.h"

namespace syncline {
namespace {

// A header is small; anything larger is hostile or corrupt. Cap'n Proto's traversal limit
// bounds the work a reader does on a malicious message.
constexpr size_t kMaxHeaderBytes = 1 << 20;

}  // namespace

size_t Message::ByteSize() const {
  size_t total = 0;
  for (const Frame& f : frames_) total += f.size();
  return total;
}

absl::Status Message::Parse() {
  if (frames_.empty()) return absl::InvalidArgumentError("message has no header frame");
  Frame& head = frames_[0];
  if (head.size() == 0 || head.size() > kMaxHeaderBytes || head.size() % sizeof(capnp::word)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("header frame of %d bytes is not a Cap'n Proto message", head.size()));
  }
  auto words = head.As<capnp::word>();
  if (!words.ok()) return words.status();
  capnp::ReaderOptions options;
  options.traversalLimitInWords = 1 << 17;
  options.nestingLimit = 16;
  kj::ArrayPtr<const capnp::word> array(words->data(), words->size());
  // Cap'n Proto signals malformed input with exceptions; turn them into a Status here so
  // that nothing beyond this function sees them.
  kj::Maybe<kj::Exception> failure = kj::runCatchingExceptions([&]() {
    reader_ = std::make_unique<capnp::FlatArrayMessageReader>(array, options);
    header_ = reader_->getRoot<wire::Header>();
    // Touch every field that later code reads so that out-of-bounds pointers fail here.
    (void)header_.getMessage();
    switch (header_.getBody().which()) {
      case wire::Header::Body::REGISTER: {
        auto r = header_.getBody().getRegister();
        (void)r.getDataAddress();
        (void)r.getHost();
        break;
      }
      case wire::Header::Body::NODE_TABLE:
        for (auto n : header_.getBody().getNodeTable().getNodes()) {
          (void)n.getId();
          (void)n.getAddress();
        }
        break;
      case wire::Header::Body::SERVER_STATS:
        (void)header_.getBody().getServerStats().getStalenessHistogram();
        break;
      case wire::Header::Body::NODE_DOWN:
        (void)header_.getBody().getNodeDown().getReason();
        break;
      default:
        break;
    }
  });
  KJ_IF_MAYBE (e, failure) {
    reader_.reset();
    return absl::InvalidArgumentError(
        absl::StrFormat("malformed header: %s", e->getDescription().cStr()));
  }
  return absl::OkStatus();
}

MessageBuilder::MessageBuilder(wire::MsgType type)
    : builder_(std::make_unique<capnp::MallocMessageBuilder>(64)),
      header_(builder_->initRoot<wire::Header>()) {
  header_.setType(type);
}

Message MessageBuilder::Finish() {
  // The flat array becomes the frame's owner: no copy.
  auto flat = std::make_shared<kj::Array<capnp::word>>(capnp::messageToFlatArray(*builder_));
  const auto bytes = flat->asBytes();
  Message message;
  message.frames().reserve(1 + payloads_.size());
  message.frames().push_back(Frame::Shared(flat, bytes.begin(), bytes.size()));
  for (Frame& f : payloads_) message.frames().push_back(std::move(f));
  payloads_.clear();
  return message;
}

Message MakeErrorReply(const wire::Header::Reader& request, const absl::Status& status) {
  MessageBuilder b(wire::MsgType::ERROR);
  b.header().setRequestId(request.getRequestId());
  b.header().setTable(request.getTable());
  b.header().setStatusCode(static_cast<int32_t>(status.code()));
  b.header().setMessage(std::string(status.message()));
  return b.Finish();
}

Message MakeSimple(wire::MsgType type, wire::Role role, int rank) {
  MessageBuilder b(type);
  b.header().setRole(role);
  b.header().setRank(rank);
  return b.Finish();
}

absl::Status StatusFromHeader(const wire::Header::Reader& header) {
  if (header.getType() != wire::MsgType::ERROR && header.getType() != wire::MsgType::ABORT) {
    return absl::OkStatus();
  }
  int code = header.getStatusCode();
  if (code <= 0 || code > static_cast<int>(absl::StatusCode::kUnauthenticated)) {
    code = static_cast<int>(absl::StatusCode::kUnknown);
  }
  return absl::Status(static_cast<absl::StatusCode>(code), header.getMessage().cStr());
}

const char* MsgTypeName(wire::MsgType type) {
  auto schema = capnp::Schema::from<wire::MsgType>();
  for (auto e : schema.getEnumerants()) {
    if (e.getOrdinal() == static_cast<uint16_t>(type)) return e.getProto().getName().cStr();
  }
  return "unknown";
}

}  // namespace syncline
