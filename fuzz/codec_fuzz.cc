// Fuzz target: every codec's decoder on untrusted blocks. The input picks a codec and a
// length; a block that is refused must leave the output untouched. Then the sparse rows' parts
// (compression/sparse_rows.h) on the same bytes: compact keys, held counts, and a compressed
// pull's reply against a worker's copy, which a refused reply must leave as it was, and the
// same reply against the device's copy (device/pull_copy.h, on the host executor), which
// must take, refuse and decode exactly as the CPU does.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "compression/codec.h"
#include "compression/sparse_rows.h"
#include "compression/wire.h"
#include "device/host_executor.h"
#include "device/pull_copy.h"
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
  std::vector<uint64_t> keys;
  (void)syncline::DecodeKeys(bytes, n, &keys);
  // Held counts: what decodes is within the bounds the optimizer takes.
  std::vector<uint16_t> held;
  std::vector<float> spread;
  if (syncline::DecodeHeld(bytes, n, &held, &spread).ok()) {
    if (held.size() != n || spread.size() != n) __builtin_trap();
    for (size_t i = 0; i < n; ++i) {
      if (held[i] < 1 || held[i] > syncline::kMaxHeldSteps || !(spread[i] >= 1.0f)) {
        __builtin_trap();
      }
    }
  }
  // A copy holding rows 0..9 of 2 floats; a pull of rows 5..14 (five known, five new) with the
  // block as its deltas and its first bytes as the new rows.
  syncline::RowTable copy(2, 0);
  for (uint64_t k = 0; k < 10; ++k) copy.Touch(k, 0)[0] = 1.0f;
  std::vector<uint64_t> pulled;
  for (uint64_t k = 5; k < 15; ++k) pulled.push_back(k);
  std::vector<float> rows(pulled.size() * 2);
  const size_t fresh = std::min<size_t>(bytes.size(), 40);
  const std::vector<uint64_t> evicted =
      n % 2 == 0 ? std::vector<uint64_t>{} : std::vector<uint64_t>{n % 12};
  // The device's copy (on the host executor, which runs its kernels) holding the same rows.
  using Device = syncline::DevicePullCopy<syncline::device_step::HostExecutor>;
  syncline::device_step::HostExecutor e;
  std::unique_ptr<Device> device = *Device::Create(e, spec.kind, 2);
  std::vector<uint64_t> held_keys;
  std::vector<float> held_rows;
  for (uint64_t k = 0; k < 10; ++k) {
    held_keys.push_back(k);
    held_rows.insert(held_rows.end(), {1.0f, 0.0f});
  }
  syncline::device_step::HostExecutor::Array<float> device_rows;
  device_rows.Reserve(2 * held_keys.size());
  if (!device
           ->Apply(held_keys, {}, std::as_bytes(std::span<const float>(held_rows)), {}, {},
                   device_rows.data(), held_keys.size())
           .ok()) {
    __builtin_trap();
  }
  const bool cpu_ok = syncline::DecodePull(spec.kind, pulled, bytes.first(fresh),
                                           bytes.subspan(fresh), evicted, &copy, rows)
                          .ok();
  if (!cpu_ok) {
    if (copy.size() != 10 || copy.Find(0)[0] != 1.0f) __builtin_trap();  // refused, yet changed
  }
  // The device takes what the CPU takes, refuses what it refuses (and then holds what it held),
  // and decodes the same bits.
  const bool device_ok = device
                             ->Apply(pulled, {}, bytes.first(fresh), bytes.subspan(fresh), evicted,
                                     device_rows.data(), pulled.size())
                             .ok();
  if (device_ok != cpu_ok) __builtin_trap();
  syncline::RowTable device_copy(2, 0);
  if (!device->CopyRows(&device_copy).ok() || device_copy.size() != copy.size()) __builtin_trap();
  if (cpu_ok && std::memcmp(device_rows.data(), rows.data(), rows.size() * sizeof(float)) != 0) {
    __builtin_trap();
  }
  bool same = true;
  copy.ForEach([&](uint64_t key, uint64_t, const syncline::RowMeta&, const float* row) {
    const float* d = device_copy.Find(key);
    same = same && d != nullptr && std::memcmp(d, row, 2 * sizeof(float)) == 0;
  });
  if (!same) __builtin_trap();
  return 0;
}
