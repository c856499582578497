#include "checkpoint/text_format.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_format.h"
#include "core/crc32c.h"

namespace syncline {
namespace {

constexpr std::string_view kCrcKey = "crc32c ";

bool NeedsEscape(unsigned char c) { return c <= 0x20 || c >= 0x7f || c == '%'; }

// Pieces of `text` between `sep` bytes (n separators give n + 1 pieces).
std::vector<std::string_view> Split(std::string_view text, char sep) {
  std::vector<std::string_view> pieces;
  size_t start = 0;
  for (;;) {
    const size_t end = text.find(sep, start);
    if (end == std::string_view::npos) {
      pieces.push_back(text.substr(start));
      return pieces;
    }
    pieces.push_back(text.substr(start, end - start));
    start = end + 1;
  }
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string Header(std::string_view kind, int version) {
  return absl::StrFormat("syncline-%s version %d\n", kind, version);
}

}  // namespace

std::string EscapeToken(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  for (char ch : raw) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (NeedsEscape(c)) {
      absl::StrAppendFormat(&out, "%%%02X", c);
    } else {
      out.push_back(ch);
    }
  }
  return out;
}

bool UnescapeToken(std::string_view token, std::string* raw) {
  raw->clear();
  for (size_t i = 0; i < token.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(token[i]);
    if (c == '%') {
      if (i + 2 >= token.size()) return false;
      const int hi = HexValue(token[i + 1]), lo = HexValue(token[i + 2]);
      if (hi < 0 || lo < 0) return false;
      raw->push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (NeedsEscape(c)) {
      return false;
    } else {
      raw->push_back(token[i]);
    }
  }
  return true;
}

SealedTextBuilder::SealedTextBuilder(std::string_view kind, int version)
    : text_(Header(kind, version)) {}

void SealedTextBuilder::AddLine(std::string_view key, const std::vector<std::string>& tokens) {
  text_.append(key);
  for (const std::string& token : tokens) {
    text_.push_back(' ');
    text_.append(EscapeToken(token));
  }
  text_.push_back('\n');
}

std::string SealedTextBuilder::Seal() const {
  return absl::StrFormat("%s%s%08x\n", text_, kCrcKey, Crc32c(text_.data(), text_.size()));
}

absl::Status LineError(const std::string& path, int line, std::string_view message) {
  return absl::DataLossError(absl::StrFormat("%s:%d: %s", path, line, message));
}

absl::StatusOr<std::vector<SealedTextLine>> ParseSealedText(const std::string& path,
                                                            std::string_view contents,
                                                            std::string_view kind, int version) {
  if (contents.empty() || contents.back() != '\n') {
    return absl::DataLossError(absl::StrFormat(
        "%s: does not end with a newline (truncated? %d bytes)", path, contents.size()));
  }
  const size_t last_start = contents.rfind('\n', contents.size() - 2);
  const size_t crc_start = last_start == std::string_view::npos ? 0 : last_start + 1;
  const std::string_view body = contents.substr(0, crc_start);
  const int line_count = static_cast<int>(std::count(contents.begin(), contents.end(), '\n'));
  std::string_view crc_line = contents.substr(crc_start, contents.size() - 1 - crc_start);
  if (crc_line.substr(0, kCrcKey.size()) != kCrcKey) {
    return LineError(path, line_count, "the last line is not the crc32c line (truncated?)");
  }
  crc_line.remove_prefix(kCrcKey.size());
  uint32_t stored = 0;
  if (crc_line.size() != 8 || !ParseNumber(crc_line, &stored, 16)) {
    return LineError(path, line_count, "malformed crc32c line");
  }
  const uint32_t actual = Crc32c(body.data(), body.size());
  if (actual != stored) {
    return absl::DataLossError(
        absl::StrFormat("%s: CRC32C of the first %d lines is %08x, the file says %08x (damaged)",
                        path, line_count - 1, actual, stored));
  }

  std::vector<std::string_view> lines = Split(body, '\n');
  lines.pop_back();  // the empty piece after the body's last '\n'
  const std::string prefix = absl::StrFormat("syncline-%s version ", kind);
  if (lines.empty() || lines[0].substr(0, prefix.size()) != prefix) {
    return LineError(path, 1, absl::StrFormat("not a %s file (expected \"%sN\")", kind, prefix));
  }
  int file_version = 0;
  if (!ParseNumber(lines[0].substr(prefix.size()), &file_version)) {
    return LineError(path, 1, "malformed version");
  }
  if (file_version != version) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s:1: %s format version %d; this build reads version %d", path, kind,
                        file_version, version));
  }
  std::vector<SealedTextLine> parsed;
  parsed.reserve(lines.size() - 1);
  for (size_t i = 1; i < lines.size(); ++i) {
    SealedTextLine line;
    line.number = static_cast<int>(i) + 1;
    std::vector<std::string_view> pieces = Split(lines[i], ' ');
    line.key = std::string(pieces[0]);
    if (line.key.empty()) return LineError(path, line.number, "empty key");
    for (size_t t = 1; t < pieces.size(); ++t) {
      std::string token;
      if (!UnescapeToken(pieces[t], &token)) {
        return LineError(path, line.number, absl::StrFormat("malformed token \"%s\"", pieces[t]));
      }
      line.tokens.push_back(std::move(token));
    }
    parsed.push_back(std::move(line));
  }
  return parsed;
}

}  // namespace syncline
