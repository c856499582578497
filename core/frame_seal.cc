#include "core/frame_seal.h"

#include <algorithm>
#include <cstring>

namespace syncline {
namespace {

constexpr size_t kSegment = SealedChannel::kMaxSegment;
constexpr size_t kTag = SealedChannel::kTagBytes;
constexpr size_t kHeader = SealedChannel::kHeaderBytes;
static_assert(kSealedFramePrefix >= kHeader);

// SealedChannel works on records [length][ciphertext][tag]. A frame keeps its ciphertext
// contiguous instead, so each segment borrows the bytes around it for the call: the length
// goes into the 4 bytes in front of it (the prefix, or the end of the segment before), the tag
// into the 16 after it, and both are put back afterwards.
struct Borrowed {
  Borrowed(std::byte* record, size_t n) : record(record), n(n) {
    std::memcpy(front, record, kHeader);
    std::memcpy(back, record + kHeader + n, kTag);
  }
  ~Borrowed() {
    std::memcpy(record, front, kHeader);
    std::memcpy(record + kHeader + n, back, kTag);
  }
  std::byte* record;
  size_t n;
  std::byte front[kHeader];
  std::byte back[kTag];
};

}  // namespace

size_t SealedFrameSegments(size_t plain) {
  return std::max<size_t>(1, (plain + kSegment - 1) / kSegment);
}

size_t SealedFrameBytes(size_t plain) {
  return kSealedFramePrefix + plain + kTag * SealedFrameSegments(plain);
}

bool SealedFramePlainBytes(size_t sealed, size_t* plain) {
  if (sealed < kSealedFramePrefix + kTag) return false;
  // n + 16 * segments(n) grows with n, so at most one n gives `sealed`: the one that the
  // segment count of an upper bound implies.
  const size_t body = sealed - kSealedFramePrefix;
  const size_t segments = (body + kSegment + kTag - 1) / (kSegment + kTag);
  for (size_t k : {segments, segments + 1}) {
    if (k == 0 || body < kTag * k) continue;
    const size_t n = body - kTag * k;
    if (SealedFrameSegments(n) == k) {
      *plain = n;
      return true;
    }
  }
  return false;
}

void SealFrame(SealedChannel& channel, const std::byte* plain, size_t n, std::byte* out) {
  const size_t k = SealedFrameSegments(n);
  std::byte* tags = out + kSealedFramePrefix + n;
  for (size_t i = 0; i < k; ++i) {
    const size_t offset = i * kSegment;
    const size_t len = std::min(kSegment, n - offset);
    std::byte* record = out + kSealedFramePrefix + offset - kHeader;
    std::byte tag[kTag];
    {
      Borrowed room(record, len);
      channel.Seal(plain + offset, len, record);
      std::memcpy(tag, record + kHeader + len, kTag);
    }
    // After the borrowed bytes are back: for the last segment they are the first tag's.
    std::memcpy(tags + i * kTag, tag, kTag);
  }
  std::memset(out, 0, kSealedFramePrefix);
}

bool OpenFrame(SealedChannel& channel, std::byte* frame, size_t size, size_t* plain) {
  size_t n = 0;
  if (!SealedFramePlainBytes(size, &n)) return false;
  const size_t k = SealedFrameSegments(n);
  const std::byte* tags = frame + kSealedFramePrefix + n;
  for (size_t i = 0; i < k; ++i) {
    const size_t offset = i * kSegment;
    const size_t len = std::min(kSegment, n - offset);
    std::byte* record = frame + kSealedFramePrefix + offset - kHeader;
    std::byte tag[kTag];
    std::memcpy(tag, tags + i * kTag, kTag);  // before the last segment's borrowing covers it
    Borrowed room(record, len);
    std::byte* header = record;
    for (size_t b = 0; b < kHeader; ++b) header[b] = static_cast<std::byte>(len >> (8 * b));
    std::memcpy(record + kHeader + len, tag, kTag);
    if (!channel.Open(record, len)) return false;
  }
  *plain = n;
  return true;
}

}  // namespace syncline
