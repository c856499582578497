// KeepFreedHeapForReuse: makes glibc's malloc keep the memory a process frees for its next
// allocations instead of giving it back to the kernel at once.
//
// A node allocates and frees buffers of a message's size all the time: ZeroMQ's buffer for
// each message received, a sealed frame for each message sent (core/zmq_transport.cc). glibc
// serves a block of 128 KiB or more with mmap and frees it with munmap, and trims a heap
// whose free top passes twice its (adaptive) mmap threshold: with 8 requests of 1 MiB in
// flight, every message then costs fresh pages (faults, zeroing, memory-cgroup charges) and,
// on free, TLB shootdowns across the cores. Keeping blocks up to 32 MiB on the heap and up to
// 32 MiB of free memory per arena removes that: 1 MiB sealed pulls with 8 in flight went from
// 0.49-0.55 of plaintext to 0.61-0.66, and their CPU per request from 1,070-1,139 µs to
// 705-731 µs (bench/ps_throughput.cc --heap, docs/PERFORMANCE.md, "Encryption"). The price is
// that memory a node freed stays in its resident set until it allocates again (up to the trim
// threshold per arena), as with tcmalloc or jemalloc.
//
// Thread-safety: call once, at the start of main, before threads start (mallopt is not meant
// to race with allocations).
#ifndef SYNCLINE_CORE_HEAP_REUSE_H_
#define SYNCLINE_CORE_HEAP_REUSE_H_

#include <cstddef>

// 1 where AddressSanitizer or ThreadSanitizer bring an allocator of their own (mallopt then
// reaches nothing, and freed memory sits in their quarantine), else 0.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SYNCLINE_SANITIZER_HEAP 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SYNCLINE_SANITIZER_HEAP 1
#endif
#endif
#ifndef SYNCLINE_SANITIZER_HEAP
#define SYNCLINE_SANITIZER_HEAP 0
#endif

namespace syncline {

inline constexpr size_t kHeapMmapThreshold = size_t{32} << 20;
inline constexpr size_t kHeapTrimThreshold = size_t{32} << 20;

// Sets malloc's mmap threshold to kHeapMmapThreshold and its trim threshold to
// kHeapTrimThreshold. False where the C library is not glibc or a sanitizer's allocator
// replaces it (nothing is changed), or where mallopt refuses.
bool KeepFreedHeapForReuse();

}  // namespace syncline

#endif  // SYNCLINE_CORE_HEAP_REUSE_H_
