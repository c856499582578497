#ifndef SYNCLINE_CORE_PREFETCH_H_
#define SYNCLINE_CORE_PREFETCH_H_

// A cache prefetch that the optimiser keeps.
//
// GCC gives __builtin_prefetch no side effects, so a function that only prefetches (say, one
// that looks a row up and fetches its lines) counts as pure to its interprocedural analysis,
// and calls whose result is unused are deleted: the embedding store's prefetch stage compiled
// to a bare `ret` that way. A volatile asm is a side effect, and stays.

namespace syncline {

// Fetches the line holding `p` into the caches; `p` need not be valid memory.
inline void PrefetchLine(const void* p) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
#elif defined(__aarch64__)
  asm volatile("prfm pldl1keep, %0" : : "Q"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p);
#endif
}

}  // namespace syncline

#endif  // SYNCLINE_CORE_PREFETCH_H_
