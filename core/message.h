// Message: a Cap'n Proto header plus raw payload frames, the unit every Transport moves.
//
// Building: MessageBuilder gives a wire::Header::Builder to fill in and frames to append;
// Finish() serialises the header into the first frame. Reading: Message::Parse() checks that
// the header frame is a well-formed Cap'n Proto message (bounded traversal, so a hostile frame
// cannot make the reader loop or allocate without limit) and exposes a wire::Header::Reader.
//
// Thread-safety: thread-compatible.
#ifndef SYNCLINE_CORE_MESSAGE_H_
#define SYNCLINE_CORE_MESSAGE_H_

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/frame.h"
#include "core/syncline.capnp.h"

namespace syncline {

class Message {
 public:
  Message() = default;
  // A parsed message stays parsed: the moved-to message reads the same header bytes (which
  // live in the frame, not in the Message).
  Message(Message&& other) noexcept;
  Message& operator=(Message&& other) noexcept;

  // Routing id of the peer: the sender of a received message.
  const std::string& peer() const { return peer_; }
  void set_peer(std::string peer) { peer_ = std::move(peer); }

  // frames()[0] is the serialised header; payload frames follow.
  std::vector<Frame>& frames() { return frames_; }
  const std::vector<Frame>& frames() const { return frames_; }
  size_t payload_count() const { return frames_.empty() ? 0 : frames_.size() - 1; }
  Frame& payload(size_t i) { return frames_[i + 1]; }

  // Total bytes of all frames, as they travel.
  size_t ByteSize() const;

  // Decodes and bounds-checks the header frame. Must succeed before header() is used.
  absl::Status Parse();
  bool parsed() const { return reader_.has_value(); }
  wire::Header::Reader header() const { return header_; }

 private:
  std::string peer_;
  std::vector<Frame> frames_;
  // Points into the header frame, validated by Parse (here rather than on the heap: a received
  // message costs one allocation fewer).
  void AttachReader();

  std::optional<capnp::FlatArrayMessageReader> reader_;
  wire::Header::Reader header_;
};

class MessageBuilder {
 public:
  // One allocation: the builder writes the header into a first segment preallocated beside
  // it, and Finish() sends that segment as the header frame without copying it (a header too
  // large for the segment is copied into a flat array instead).
  explicit MessageBuilder(wire::MsgType type);
  wire::Header::Builder header() { return header_; }
  MessageBuilder& AddFrame(Frame frame) {
    payloads_.push_back(std::move(frame));
    return *this;
  }
  // Serialises the header; the builder is spent afterwards.
  Message Finish();

 private:
  // The words and the Cap'n Proto builder writing into them, on the heap so that a builder can
  // be moved (header_ points into it) and shared with the header frame.
  struct Arena;
  std::shared_ptr<Arena> arena_;
  wire::Header::Builder header_;
  std::vector<Frame> payloads_;
};

// Shorthand for the commonest replies.
Message MakeErrorReply(const wire::Header::Reader& request, const absl::Status& status);
Message MakeSimple(wire::MsgType type, wire::Role role, int rank);
// A node's report on its part of checkpoint `clock`: written, or why not.
Message MakeCheckpointed(wire::Role role, int rank, int64_t clock, const absl::Status& status);

// The status an error, abort or checkpoint-report header carries (OK for other headers).
absl::Status StatusFromHeader(const wire::Header::Reader& header);

const char* MsgTypeName(wire::MsgType type);

}  // namespace syncline

#endif  // SYNCLINE_CORE_MESSAGE_H_
