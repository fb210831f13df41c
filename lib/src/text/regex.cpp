#include "regex.hpp"

#include <stdexcept>

#include <unicode/regex.h>

#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "unicode.hpp"

namespace mha::text {

namespace {
// Oniguruma's Unicode meaning of the shorthands, outside and inside a character class.
const char* shorthand(char c, bool in_class) {
  switch (c) {
    case 's':
      return "\\p{White_Space}";
    case 'S':
      return "\\P{White_Space}";
    case 'd':
      return "\\p{Nd}";
    case 'D':
      return "\\P{Nd}";
    case 'w':
      return in_class ? "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}"
                      : "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}]";
    case 'W':
      return in_class ? nullptr : "[^\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}]";
    default:
      return nullptr;
  }
}
bool is_ascii_letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
}  // namespace

std::string oniguruma_to_icu(std::string_view p) {
  std::string out;
  int class_depth = 0;
  // Depth of the innermost (?i: group whose letters are folded by hand (ASCII only, as
  // Oniguruma folds them in these patterns); -1 outside one.
  int group_depth = 0, fold_depth = -1;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char* s = shorthand(p[i + 1], class_depth > 0);
      if (s) {
        out += s;
      } else {
        out += c;
        out += p[i + 1];
      }
      ++i;
    } else if (c == '[') {
      ++class_depth;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
    } else if (c == ']' && class_depth > 0) {
      --class_depth;
      out += c;
    } else if (class_depth > 0) {
      out += c;
    } else if (c == '(') {
      ++group_depth;
      if (p.substr(i, 4) == "(?i:" && fold_depth < 0) {
        fold_depth = group_depth;
        out += "(?:";
        i += 3;
      } else {
        out += c;
      }
    } else if (c == ')') {
      if (group_depth == fold_depth) fold_depth = -1;
      --group_depth;
      out += c;
    } else if (fold_depth >= 0 && is_ascii_letter(c)) {
      out += '[';
      out += static_cast<char>(c | 0x20);
      out += static_cast<char>(c & ~0x20);
      out += ']';
    } else {
      out += c;
    }
  }
  return out;
}

Regex::Regex(const std::string& icu_pattern, std::string name) : where_(std::move(name)) {
  UErrorCode status = U_ZERO_ERROR;
  UParseError where;
  std::unique_ptr<icu::RegexPattern> compiled(
      icu::RegexPattern::compile(to_utf16(icu_pattern), 0, where, status));
  if (U_FAILURE(status)) {
    throw std::invalid_argument(std::string(u_errorName(status)) + " at offset " +
                                std::to_string(where.offset));
  }
  pattern_ = std::move(compiled);
}

std::vector<std::pair<std::size_t, std::size_t>> Regex::find_all(std::string_view utf8) const {
  const icu::UnicodeString text = to_utf16(utf8);
  // byte_at[k]: the UTF-8 offset of UTF-16 index k (the text is valid UTF-8).
  std::vector<std::size_t> byte_at(static_cast<std::size_t>(text.length()) + 1);
  {
    std::size_t byte = 0;
    std::int32_t k = 0;
    while (k < text.length()) {
      const UChar32 c = text.char32At(k);
      const std::int32_t units = U16_LENGTH(c);
      byte_at[k] = byte;
      if (units == 2) byte_at[k + 1] = byte;
      byte += c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
      k += units;
    }
    byte_at[k] = byte;
  }
  UErrorCode status = U_ZERO_ERROR;
  std::unique_ptr<icu::RegexMatcher> m(pattern_->matcher(text, status));
  std::vector<std::pair<std::size_t, std::size_t>> out;
  if (U_FAILURE(status)) fail_runtime(std::string("ICU regex: ") + u_errorName(status));
  // A tokenizer.json's pattern that backtracks without end is cut off: each find may take
  // about 10^8 steps of ICU's matcher (its limit counts units of 10,000).
  m->setTimeLimit(10000, status);
  while (m->find(status) && U_SUCCESS(status)) {
    const std::int32_t b = m->start(status), e = m->end(status);
    out.emplace_back(byte_at[b], byte_at[e]);
  }
  if (U_FAILURE(status))
    fail_input(where_ + ": failed on the text " + echo(utf8) + " (" + u_errorName(status) +
               (status == U_REGEX_TIME_OUT ? ": the match took too long" : "") + ")");
  return out;
}

}  // namespace mha::text
