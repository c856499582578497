#include "core/descriptor_limit.h"

#include <dirent.h>
#include <sys/resource.h>

#include <algorithm>

namespace syncline {
namespace {

constexpr rlim_t kMost = rlim_t{1} << 30;

}  // namespace

int RaiseDescriptorLimit() {
  struct rlimit rl = {};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &rl);
  }
  return DescriptorLimit();
}

int DescriptorLimit() {
  struct rlimit rl = {};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) {
    return static_cast<int>(kMost);
  }
  return static_cast<int>(std::min(rl.rlim_cur, kMost));
}

int OpenDescriptorCount() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int n = 0;
  while (const dirent* e = readdir(dir)) n += e->d_name[0] != '.';
  closedir(dir);
  return n - 1;  // the listing's own descriptor
}

}  // namespace syncline
