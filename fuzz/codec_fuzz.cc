// Fuzz target: every codec's decoder on untrusted blocks. The input picks a codec and a
// length; a block that is refused must leave the output untouched.
#include <cstdint>
#include <vector>

#include "compression/codec.h"
#include "compression/wire.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  syncline::fuzz::Input in(data, size);
  syncline::CodecSpec spec;
  spec.kind = static_cast<syncline::CodecKind>(1 + in.Byte() % 3);  // topk, sign1, fp16
  const size_t n = in.U32() % 4096;
  const std::string_view block = in.Rest();
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(block.data()),
                                         block.size());
  std::vector<float> out(n, 1.0f);
  (void)syncline::compression_internal::ValidateBlock(spec.kind, bytes, n);
  const absl::Status decoded = syncline::Codec::Create(spec)->DecodeAdd(bytes, out);
  if (!decoded.ok()) {
    for (float v : out) {
      if (v != 1.0f) __builtin_trap();  // a refused block changed the output
    }
  }
  return 0;
}
