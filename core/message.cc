#include "core/message.h"

#include <capnp/dynamic.h>
#include <capnp/schema.h>

#include <bit>
#include <cstring>

#include "absl/strings/str_format.h"

namespace syncline {
namespace {

// A header is small; anything larger is hostile or corrupt. Cap'n Proto's traversal limit
// bounds the work a reader does on a malicious message.
constexpr size_t kMaxHeaderBytes = 1 << 20;

}  // namespace

Message::Message(Message&& other) noexcept
    : peer_(std::move(other.peer_)), frames_(std::move(other.frames_)) {
  if (other.reader_) {
    other.reader_.reset();
    AttachReader();
  }
}

Message& Message::operator=(Message&& other) noexcept {
  if (this == &other) return *this;
  header_ = {};
  reader_.reset();
  peer_ = std::move(other.peer_);
  frames_ = std::move(other.frames_);
  if (other.reader_) {
    other.reader_.reset();
    AttachReader();
  }
  other.header_ = {};
  return *this;
}

namespace {

// Reads every set field of `s` as its schema's type, recursively (a union's active member only).
void ReadEveryField(capnp::DynamicStruct::Reader s);

void ReadEveryValue(const capnp::DynamicValue::Reader& v) {
  switch (v.getType()) {
    case capnp::DynamicValue::TEXT:
      (void)v.as<capnp::Text>();
      break;
    case capnp::DynamicValue::DATA:
      (void)v.as<capnp::Data>();
      break;
    case capnp::DynamicValue::STRUCT:
      ReadEveryField(v.as<capnp::DynamicStruct>());
      break;
    case capnp::DynamicValue::LIST:
      for (const capnp::DynamicValue::Reader element : v.as<capnp::DynamicList>()) {
        ReadEveryValue(element);
      }
      break;
    default:
      break;
  }
}

void ReadEveryField(capnp::DynamicStruct::Reader s) {
  for (const capnp::StructSchema::Field field : s.getSchema().getFields()) {
    if (s.has(field)) ReadEveryValue(s.get(field));
  }
}

capnp::ReaderOptions HeaderReaderOptions() {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = 1 << 17;
  options.nestingLimit = 16;
  return options;
}

}  // namespace

void Message::AttachReader() {
  // Parse() has aligned the frame and checked every pointer that later code follows; the
  // reader of a message that passed it again does not throw.
  const Frame& head = frames_[0];
  kj::ArrayPtr<const capnp::word> words(reinterpret_cast<const capnp::word*>(head.data()),
                                        head.size() / sizeof(capnp::word));
  // Parse walked the whole header within a budget of its size; readers after it get eight
  // such walks, so that code may read a field more than once.
  capnp::ReaderOptions options = HeaderReaderOptions();
  options.traversalLimitInWords *= 8;
  reader_.emplace(words, options);
  header_ = reader_->getRoot<wire::Header>();
}

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
  kj::ArrayPtr<const capnp::word> array(words->data(), words->size());
  // Cap'n Proto signals malformed input with exceptions; turn them into a Status here so
  // that nothing beyond this function sees them.
  kj::Maybe<kj::Exception> failure = kj::runCatchingExceptions([&]() {
    reader_.emplace(array, HeaderReaderOptions());
    header_ = reader_->getRoot<wire::Header>();
    // Walk every pointer of the header, whatever its body: a pointer out of bounds, a
    // nesting too deep or a traversal too long fails here...
    (void)header_.totalSize();
    // ... and read every pointer field as its type, so that a list where a text belongs fails
    // here too. Requests and replies carry only the message text; control messages (rare)
    // have their body read field by field.
    (void)header_.getMessage();
    if (!header_.getBody().isNone()) ReadEveryField(capnp::toDynamic(header_.getBody()));
  });
  KJ_IF_MAYBE (e, failure) {
    reader_.reset();
    return absl::InvalidArgumentError(
        absl::StrFormat("malformed header: %s", e->getDescription().cStr()));
  }
  // A fresh reader for the code that reads the header: the walk above spent the first
  // reader's traversal budget, and a second read of a large text would throw.
  reader_.reset();
  AttachReader();
  return absl::OkStatus();
}

struct MessageBuilder::Arena {
  // A request or reply header takes about 15 words; short error texts fit as well.
  static constexpr size_t kFirstSegmentWords = 40;
  // The serialised message as it travels: the segment table (one word for one segment), then
  // segment 0, which the builder fills. Zero-filled, as Cap'n Proto requires.
  uint64_t words[1 + kFirstSegmentWords] = {};
  capnp::MallocMessageBuilder builder{
      kj::arrayPtr(reinterpret_cast<capnp::word*>(words + 1), kFirstSegmentWords)};
};

MessageBuilder::MessageBuilder(wire::MsgType type)
    : arena_(std::make_shared<Arena>()), header_(arena_->builder.initRoot<wire::Header>()) {
  header_.setType(type);
}

Message MessageBuilder::Finish() {
  static_assert(std::endian::native == std::endian::little, "Cap'n Proto's wire is little-endian");
  Message message;
  message.frames().reserve(1 + payloads_.size());
  auto segments = arena_->builder.getSegmentsForOutput();
  const auto* first = reinterpret_cast<const capnp::word*>(arena_->words + 1);
  if (segments.size() == 1 && segments[0].begin() == first) {
    // Segment table: (segments - 1) in the low half, segment 0's size in words in the high one.
    const uint64_t size = segments[0].size();
    arena_->words[0] = size << 32;
    const uint64_t* words = arena_->words;
    message.frames().push_back(
        Frame::Shared(std::move(arena_), words, (1 + size) * sizeof(capnp::word)));
  } else {
    // Spilled into more segments: one flat copy, which becomes the frame's owner.
    auto flat =
        std::make_shared<kj::Array<capnp::word>>(capnp::messageToFlatArray(arena_->builder));
    const auto bytes = flat->asBytes();
    message.frames().push_back(Frame::Shared(std::move(flat), bytes.begin(), bytes.size()));
    arena_.reset();
  }
  for (Frame& f : payloads_) message.frames().push_back(std::move(f));
  payloads_.clear();
  return message;
}

Message MakeErrorReply(const wire::Header::Reader& request, const absl::Status& status) {
  MessageBuilder b(wire::MsgType::ERROR);
  b.header().setRequestId(request.getRequestId());
  b.header().setTable(request.getTable());
  b.header().setGeneration(request.getGeneration());
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

Message MakeCheckpointed(wire::Role role, int rank, int64_t clock, const absl::Status& status) {
  MessageBuilder b(wire::MsgType::CHECKPOINTED);
  b.header().setRole(role);
  b.header().setRank(rank);
  b.header().setClock(clock);
  if (!status.ok()) {
    b.header().setStatusCode(static_cast<int32_t>(status.code()));
    b.header().setMessage(std::string(status.message()));
  }
  return b.Finish();
}

absl::Status StatusFromHeader(const wire::Header::Reader& header) {
  const wire::MsgType type = header.getType();
  int code = header.getStatusCode();
  // Errors and aborts always carry a failure; a checkpoint report does when it has a code.
  const bool failure = type == wire::MsgType::ERROR || type == wire::MsgType::ABORT ||
                       (type == wire::MsgType::CHECKPOINTED && code != 0);
  if (!failure) return absl::OkStatus();
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
