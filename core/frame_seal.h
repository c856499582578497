// Whole frames under a SealedChannel (core/seal.h), laid out so that the plaintext opens in
// place, contiguous, in the frame's own receive buffer: the sealed data path of keyed ZeroMQ
// endpoints (core/zmq_transport.h, ZmqOptions::seal_data) seals a 1 MiB push once into the
// buffer it sends and opens it where ZeroMQ received it, with no second copy.
//
// Layout of a frame of n plaintext bytes, cut into k = max(1, ceil(n / kMaxSegment)) segments:
//   [kPrefixBytes, unused][ciphertext of all n bytes, contiguous][k tags of 16 bytes]
// Segment i is sealed exactly as SealedChannel seals one (its length as associated data, the
// channel's next counter as nonce), so a frame's segments and the frames after it must be
// opened in the order they were sealed: a segment replayed, reordered, cut or altered fails.
// The prefix keeps the plaintext 16-byte aligned where the buffer is, and gives the channel
// the room in front of a segment where its length goes while the segment is sealed or opened.
//
// Thread-safety: functions of one SealedChannel, used by one thread at a time.
#ifndef SYNCLINE_CORE_FRAME_SEAL_H_
#define SYNCLINE_CORE_FRAME_SEAL_H_

#include <cstddef>

#include "core/seal.h"

namespace syncline {

inline constexpr size_t kSealedFramePrefix = 16;

// The segments of a frame of `plain` bytes, and the bytes its sealed form takes.
size_t SealedFrameSegments(size_t plain);
size_t SealedFrameBytes(size_t plain);
// The plaintext size of a sealed frame of `sealed` bytes; false when no plaintext size gives it.
bool SealedFramePlainBytes(size_t sealed, size_t* plain);

// Seals plain[0, n) into out[0, SealedFrameBytes(n)), which must not overlap it.
void SealFrame(SealedChannel& channel, const std::byte* plain, size_t n, std::byte* out);
// Opens the sealed frame frame[0, size) in place: on success the plaintext is at
// frame + kSealedFramePrefix, *plain bytes. False when its size or any tag is wrong (what was
// written into the frame may not be used then, and the channel is out of step).
bool OpenFrame(SealedChannel& channel, std::byte* frame, size_t size, size_t* plain);

}  // namespace syncline

#endif  // SYNCLINE_CORE_FRAME_SEAL_H_
