#include "core/heap_reuse.h"

#include <gtest/gtest.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <cstdlib>
#include <cstring>
#include <vector>

namespace syncline {
namespace {

// Blocks of a 1 MiB message come from the heap rather than from mmap, and once freed stay
// there for the next ones, instead of going back to the kernel.
TEST(HeapReuseTest, MessageSizedBlocksComeFromTheHeapAndStayThereWhenFreed) {
#if !defined(__GLIBC__)
  GTEST_SKIP() << "not glibc: malloc is not tuned";
#else
  if (SYNCLINE_SANITIZER_HEAP) GTEST_SKIP() << "a sanitizer's allocator replaces glibc's malloc";
  ASSERT_TRUE(KeepFreedHeapForReuse());
  constexpr size_t kBlock = size_t{1} << 20;
  constexpr int kBlocks = 8;
  const struct mallinfo2 before = mallinfo2();
  std::vector<void*> blocks;
  for (int i = 0; i < kBlocks; ++i) {
    blocks.push_back(std::malloc(kBlock));
    ASSERT_NE(blocks.back(), nullptr);
    std::memset(blocks.back(), i, kBlock);  // touched, as a received message is
  }
  const struct mallinfo2 allocated = mallinfo2();
  EXPECT_LT(allocated.hblkhd - before.hblkhd, kBlock) << "a 1 MiB block was mmapped";
  for (void* b : blocks) std::free(b);
  const struct mallinfo2 freed = mallinfo2();
  EXPECT_GE(freed.fordblks, kBlocks * kBlock) << "the freed blocks went back to the kernel";
#endif
}

}  // namespace
}  // namespace syncline
