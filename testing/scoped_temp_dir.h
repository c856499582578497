// ScopedTempDir: a fresh directory of its own under the test's temporary folder (mkdtemp),
// removed with everything in it when the object goes away. For unit tests that need a real
// file system (RocksDB, checkpoint files).
#ifndef SYNCLINE_TESTING_SCOPED_TEMP_DIR_H_
#define SYNCLINE_TESTING_SCOPED_TEMP_DIR_H_

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <string>

namespace syncline::testing_util {

class ScopedTempDir {
 public:
  // The directory's name starts with `prefix`.
  explicit ScopedTempDir(const std::string& prefix) {
    std::string pattern = ::testing::TempDir() + prefix + "_XXXXXX";
    path_ = mkdtemp(pattern.data()) ? pattern : "";
    EXPECT_FALSE(path_.empty()) << "mkdtemp " << pattern;
  }
  ~ScopedTempDir() {
    if (!path_.empty()) std::filesystem::remove_all(path_);
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;

  const std::string& path() const { return path_; }
  // path()/name.
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace syncline::testing_util

#endif  // SYNCLINE_TESTING_SCOPED_TEMP_DIR_H_
