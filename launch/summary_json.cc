#include "launch/summary_json.h"

#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace syncline {
namespace {

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  absl::StatusOr<SummaryFields> Parse() {
    SummaryFields fields;
    SkipSpace();
    if (auto s = ParseObject("", 0, fields); !s.ok()) return s;
    SkipSpace();
    if (pos_ != s_.size()) return Error("text after the object");
    return fields;
  }

 private:
  // An object at pos_; its fields go into `fields` as prefix + key.
  absl::Status ParseObject(const std::string& prefix, int depth, SummaryFields& fields) {
    if (depth > 16) return Error("objects nested too deeply");
    if (!Eat('{')) return Error("expected '{'");
    SkipSpace();
    if (Eat('}')) return absl::OkStatus();
    while (true) {
      SkipSpace();
      std::string key;
      if (!ParseString(&key)) return Error("expected a string key");
      key = prefix + key;
      SkipSpace();
      if (!Eat(':')) return Error("expected ':'");
      SkipSpace();
      if (Peek() == '{') {
        if (auto s = ParseObject(key + ".", depth + 1, fields); !s.ok()) return s;
      } else if (Peek() == '"') {
        std::string text;
        if (!ParseString(&text)) return Error("bad string");
        fields[key].text = std::move(text);
      } else if (Peek() == '-' || absl::ascii_isdigit(Peek())) {
        const size_t begin = pos_;
        while (pos_ < s_.size() &&
               std::string_view("+-.eE0123456789").find(s_[pos_]) != std::string_view::npos) {
          ++pos_;
        }
        double v;
        const std::string_view digits = s_.substr(begin, pos_ - begin);
        if (!absl::SimpleAtod(absl::string_view(digits.data(), digits.size()), &v)) {
          return Error("bad number");
        }
        fields[key].number = v;
      } else if (!SkipValue(0)) {
        return Error("bad value");
      }
      SkipSpace();
      if (Eat('}')) return absl::OkStatus();
      if (!Eat(',')) return Error("expected ',' or '}'");
    }
  }

  char Peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  bool Eat(char c) {
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }
  void SkipSpace() {
    while (pos_ < s_.size() && absl::ascii_isspace(static_cast<unsigned char>(s_[pos_]))) ++pos_;
  }
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(what, " at byte ", pos_));
  }

  bool ParseString(std::string* out) {
    if (!Eat('"')) return false;
    while (pos_ < s_.size()) {
      const char c = s_[pos_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return false;  // raw control characters
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (pos_ >= s_.size()) return false;
      const char e = s_[pos_++];
      switch (e) {
        case 'n':
          out->push_back('\n');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'u': {
          uint32_t code = 0;
          if (!ParseHex4(&code)) return false;
          if (code >= 0xD800 && code < 0xDC00) {  // a high surrogate: its low half must follow
            uint32_t low = 0;
            if (!Eat('\\') || !Eat('u') || !ParseHex4(&low) || low < 0xDC00 || low >= 0xE000) {
              return false;
            }
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
          } else if (code >= 0xDC00 && code < 0xE000) {
            return false;  // a low surrogate alone
          }
          AppendUtf8(code, out);
          break;
        }
        case '"':
        case '\\':
        case '/':
          out->push_back(e);
          break;
        default:
          return false;  // not a JSON escape
      }
    }
    return false;
  }

  // Four hex digits at pos_.
  bool ParseHex4(uint32_t* code) {
    if (pos_ + 4 > s_.size()) return false;
    *code = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = s_[pos_++];
      if (!absl::ascii_isxdigit(static_cast<unsigned char>(h))) return false;
      *code = *code * 16 + (absl::ascii_isdigit(h) ? h - '0' : absl::ascii_tolower(h) - 'a' + 10);
    }
    return true;
  }

  static void AppendUtf8(uint32_t code, std::string* out) {
    if (code < 0x80) {
      out->push_back(static_cast<char>(code));
    } else if (code < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (code >> 6)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else if (code < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (code >> 12)));
      out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (code >> 18)));
      out->push_back(static_cast<char>(0x80 | ((code >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    }
  }

  // Skips null, true, false, an array or an object (bounded nesting).
  bool SkipValue(int depth) {
    if (depth > 16) return false;
    SkipSpace();
    for (const char* word : {"null", "true", "false"}) {
      if (s_.substr(pos_).starts_with(word)) {
        pos_ += std::strlen(word);
        return true;
      }
    }
    std::string ignored;
    if (Peek() == '"') return ParseString(&ignored);
    if (Peek() == '-' || absl::ascii_isdigit(Peek())) {
      while (pos_ < s_.size() &&
             std::string_view("+-.eE0123456789").find(s_[pos_]) != std::string_view::npos) {
        ++pos_;
      }
      return true;
    }
    const char open = Peek();
    if (open != '[' && open != '{') return false;
    const char close = open == '[' ? ']' : '}';
    ++pos_;
    SkipSpace();
    if (Eat(close)) return true;
    while (true) {
      if (open == '{') {
        SkipSpace();
        if (!ParseString(&ignored)) return false;
        SkipSpace();
        if (!Eat(':')) return false;
      }
      if (!SkipValue(depth + 1)) return false;
      SkipSpace();
      if (Eat(close)) return true;
      if (!Eat(',')) return false;
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<SummaryFields> ParseSummaryJson(std::string_view text) {
  return Parser(text).Parse();
}

std::optional<double> SummaryNumber(const SummaryFields& fields, std::string_view key) {
  if (auto it = fields.find(std::string(key)); it != fields.end()) return it->second.number;
  const std::string suffix = "." + std::string(key);
  std::optional<double> found;
  int matches = 0;
  for (const auto& [name, field] : fields) {
    if (name.size() > suffix.size() && name.ends_with(suffix)) {
      found = field.number;
      ++matches;
    }
  }
  return matches == 1 ? found : std::nullopt;
}

}  // namespace syncline
