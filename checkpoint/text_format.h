// The sealed text format of receipts and manifests: human-readable lines of space-separated
// tokens, framed so that damage and foreign files are reported, never trusted.
//
//   syncline-<kind> version <V>        first line: what the file is and its format version
//   <key> <token> <token> ...          body lines (tokens percent-escaped, see EscapeToken)
//   crc32c <8 lowercase hex digits>    last line: CRC32C of every byte before this line
//
// Every line ends with '\n', the last one included. Errors name the file and the line:
// DataLoss for damage (checksum, truncation, a malformed line), FailedPrecondition for a sound
// file of another format version.
//
// Thread-safety: stateless functions.
#ifndef SYNCLINE_CHECKPOINT_TEXT_FORMAT_H_
#define SYNCLINE_CHECKPOINT_TEXT_FORMAT_H_

#include <charconv>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace syncline {

// Percent-escapes '%', space, control bytes and bytes >= 0x7f ("a b" -> "a%20b"), so that any
// byte string is one token; printable ASCII stays as it is. The empty string stays empty.
std::string EscapeToken(std::string_view raw);
// Inverse of EscapeToken; false for a malformed escape or an unescaped byte it would escape.
bool UnescapeToken(std::string_view token, std::string* raw);

// Builds a sealed text file: the header line, then lines of escaped tokens, then the CRC line.
class SealedTextBuilder {
 public:
  SealedTextBuilder(std::string_view kind, int version);
  // Appends the line "key token..." (tokens escaped; key must be a plain word).
  void AddLine(std::string_view key, const std::vector<std::string>& tokens);
  // The finished file (header, lines, CRC line).
  std::string Seal() const;

 private:
  std::string text_;
};

// One body line of a sealed text file, tokens unescaped.
struct SealedTextLine {
  int number = 0;  // 1-based line number in the file
  std::string key;
  std::vector<std::string> tokens;
};

// Checks the CRC line, the header's kind and version, and splits the body into lines. `path`
// is used in error messages only.
absl::StatusOr<std::vector<SealedTextLine>> ParseSealedText(const std::string& path,
                                                            std::string_view contents,
                                                            std::string_view kind, int version);

// Parses all of `text` as an integer in `base` (no sign for unsigned types, no spaces).
template <typename T>
bool ParseNumber(std::string_view text, T* value, int base = 10) {
  if (text.empty()) return false;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *value, base);
  return error == std::errc() && end == text.data() + text.size();
}

// DataLoss "path:line: message" for a malformed body line.
absl::Status LineError(const std::string& path, int line, std::string_view message);

}  // namespace syncline

#endif  // SYNCLINE_CHECKPOINT_TEXT_FORMAT_H_
