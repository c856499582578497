#include "core/heap_reuse.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace syncline {

bool KeepFreedHeapForReuse() {
#if defined(__GLIBC__) && !SYNCLINE_SANITIZER_HEAP
  // Setting either threshold also stops glibc from adapting them (its dynamic threshold).
  return mallopt(M_MMAP_THRESHOLD, static_cast<int>(kHeapMmapThreshold)) == 1 &&
         mallopt(M_TRIM_THRESHOLD, static_cast<int>(kHeapTrimThreshold)) == 1;
#else
  return false;
#endif
}

}  // namespace syncline
