#include "mha/base/message.hpp"

#include <cstdint>
#include <cstdio>

#include "mha/base/error.hpp"
#include "mha/base/utf8.hpp"

namespace mha {
namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if it is not one
// (overlong forms, surrogates and code points past U+10FFFF are invalid).
std::size_t utf8_length(std::string_view s, std::size_t i, std::uint32_t& cp) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  std::size_t n;
  if (c < 0x80) {
    cp = c;
    return 1;
  } else if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(k) & 0x3f);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
      (cp >= 0xd800 && cp <= 0xdfff))
    return 0;
  return n;
}

void hex_byte(std::string& out, unsigned char c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", c);
  out += buf;
}

// Appends the escaped form of `text` to `out`, at most `max_chars`
// characters of it; returns whether all of it fitted.
bool append_escaped(std::string& out, std::string_view text, std::size_t max_chars) {
  std::size_t chars = 0;
  for (std::size_t i = 0; i < text.size();) {
    if (chars == max_chars) return false;
    ++chars;
    std::uint32_t cp = 0;
    const std::size_t n = utf8_length(text, i, cp);
    if (n == 0) {
      hex_byte(out, static_cast<unsigned char>(text[i++]));
      continue;
    }
    if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || cp == 0x7f) {
      hex_byte(out, static_cast<unsigned char>(cp));
    } else if ((cp >= 0x80 && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029) {
      // C1 controls and the Unicode line separators: terminals may break on them.
      char buf[12];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      out.append(text.substr(i, n));
    }
    i += n;
  }
  return true;
}

}  // namespace

std::size_t invalid_utf8_at(std::string_view text) {
  for (std::size_t i = 0; i < text.size();) {
    std::uint32_t cp = 0;
    const std::size_t n = utf8_length(text, i, cp);
    if (n == 0) return i;
    i += n;
  }
  return std::string_view::npos;
}

void check_utf8(std::string_view text, const std::string& what) {
  const std::size_t at = invalid_utf8_at(text);
  if (at == std::string_view::npos) return;
  char byte[8];
  std::snprintf(byte, sizeof byte, "0x%02x", static_cast<unsigned char>(text[at]));
  fail_input(what + " " + echo(text) + ": invalid UTF-8 at byte " + std::to_string(at) + " (" +
             byte + "); expected UTF-8 text");
}

std::string echo(std::string_view value, std::size_t max_chars) {
  std::string out = "\"";
  const bool whole = append_escaped(out, value, max_chars);
  out += '"';
  if (!whole) out += "… (" + std::to_string(value.size()) + " bytes)";
  return out;
}

std::string one_line(std::string_view text, std::size_t max_chars) {
  std::string out;
  append_escaped(out, text, std::string::npos);
  // The escaped text is valid UTF-8: count characters by their lead bytes.
  const auto is_lead = [](char c) { return (static_cast<unsigned char>(c) & 0xc0) != 0x80; };
  std::size_t chars = 0;
  for (const char c : out) chars += is_lead(c);
  if (chars <= max_chars) return out;
  // Too long: keep its head (the file, the key) and its tail (what was expected).
  const std::size_t head = max_chars / 2, tail = max_chars - head - 3;
  std::size_t head_end = 0, seen = 0;
  while (head_end < out.size() && !(is_lead(out[head_end]) && seen == head))
    seen += is_lead(out[head_end++]);
  std::size_t tail_begin = out.size(), kept = 0;
  while (tail_begin > head_end && kept < tail) kept += is_lead(out[--tail_begin]);
  return out.substr(0, head_end) + " … " + out.substr(tail_begin);
}

}  // namespace mha
