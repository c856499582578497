// CRC32C (Castagnoli), the checksum of RocksDB, iSCSI and ext4 metadata: every byte format of
// Syncline that reaches a disk carries one, so damage is reported instead of trusted.
//
// Uses the SSE4.2 crc32 instruction when the CPU has it (chosen once, at first use), a table
// otherwise; both give the same values.
//
// Thread-safety: thread-safe.
#ifndef SYNCLINE_CORE_CRC32C_H_
#define SYNCLINE_CORE_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace syncline {

// CRC32C of `n` bytes, continuing from `crc` (0 to start): Crc32c(b, m, Crc32c(a, n)) is the
// CRC of a followed by b.
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);

}  // namespace syncline

#endif  // SYNCLINE_CORE_CRC32C_H_
