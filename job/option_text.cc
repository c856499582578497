#include "job/option_text.h"

#include "absl/strings/str_format.h"

namespace syncline {

absl::Status RefuseControlCharacters(std::string_view what, std::string_view value) {
  for (size_t i = 0; i < value.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(value[i]);
    if (c < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s: holds the control character 0x%02x at byte %d; no option may (it would break "
          "the lines of a generated script or file)",
          absl::string_view(what.data(), what.size()), c, i));
    }
  }
  return absl::OkStatus();
}

}  // namespace syncline
