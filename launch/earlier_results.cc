#include "launch/earlier_results.h"

#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace syncline {

namespace fs = std::filesystem;

absl::StatusOr<std::vector<std::string>> SetAsideEarlierResults(const std::string& out) {
  std::vector<std::string> found;
  std::error_code ec;
  for (const char* name : kRunResults) {
    if (fs::exists(fs::path(out) / name, ec)) found.emplace_back(name);
  }
  if (found.empty()) return found;
  const fs::path previous = fs::path(out) / "previous-run";
  fs::remove_all(previous, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot empty ", previous.string(), ": ", ec.message()));
  }
  if (!fs::create_directories(previous, ec) && ec) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", previous.string(), ": ", ec.message()));
  }
  for (const std::string& name : found) {
    fs::rename(fs::path(out) / name, previous / name, ec);
    if (ec) {
      return absl::PermissionDeniedError(absl::StrCat("cannot move ",
                                                      (fs::path(out) / name).string(), " to ",
                                                      previous.string(), ": ", ec.message()));
    }
  }
  return found;
}

}  // namespace syncline
