#include "programs/gen_common.h"

#include <cerrno>
#include <cstring>
#include <iostream>

#include "absl/strings/str_format.h"
#include "core/command_line.h"

namespace syncline::gen {

std::unique_ptr<std::ofstream> OpenOutput(const std::string& path) {
  auto out = std::make_unique<std::ofstream>(path, std::ios::binary | std::ios::trunc);
  if (!*out) {
    std::cerr << absl::StrFormat("syncline-gen: cannot open %s for writing: %s\n", path,
                                 std::strerror(errno));
    return nullptr;
  }
  return out;
}

CLI::Validator NotNegative() {
  return CLI::Validator(
      [](std::string& value) {
        return !value.empty() && value.front() == '-' ? "must not be negative: " + value
                                                      : std::string();
      },
      "", "NOT_NEGATIVE");
}

std::optional<int> Parse(CLI::App& app, int argc, char** argv, const char* program) {
  return ParseCommandLine(app, argc, argv, program);
}

}  // namespace syncline::gen
