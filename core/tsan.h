// Hand-over annotations for ThreadSanitizer (scripts/tsan.sh), no-ops in every other build.
//
// Some hand-overs are correct but invisible to TSan: a relaxed read of a shared_ptr's use count
// followed by an acquire fence synchronises with the other thread's release of its reference,
// yet TSan ignores standalone fences. SYNCLINE_TSAN_RELEASE(p) on the releasing side and
// SYNCLINE_TSAN_ACQUIRE(p) on the acquiring side (the same address) tell it.
#ifndef SYNCLINE_CORE_TSAN_H_
#define SYNCLINE_CORE_TSAN_H_

#if defined(__SANITIZE_THREAD__)
#define SYNCLINE_TSAN_ENABLED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SYNCLINE_TSAN_ENABLED 1
#endif
#endif

#ifdef SYNCLINE_TSAN_ENABLED
#include <sanitizer/tsan_interface.h>
#define SYNCLINE_TSAN_RELEASE(p) __tsan_release(const_cast<void*>(static_cast<const void*>(p)))
#define SYNCLINE_TSAN_ACQUIRE(p) __tsan_acquire(const_cast<void*>(static_cast<const void*>(p)))
#else
#define SYNCLINE_TSAN_ENABLED 0
#define SYNCLINE_TSAN_RELEASE(p) ((void)0)
#define SYNCLINE_TSAN_ACQUIRE(p) ((void)0)
#endif

#endif  // SYNCLINE_CORE_TSAN_H_
