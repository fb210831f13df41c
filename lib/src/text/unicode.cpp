#include "unicode.hpp"

namespace mha::text {

icu::UnicodeString to_utf16(std::string_view utf8) {
  return icu::UnicodeString::fromUTF8(
      icu::StringPiece(utf8.data(), static_cast<std::int32_t>(utf8.size())));
}

std::string to_utf8(const icu::UnicodeString& s) {
  std::string out;
  s.toUTF8String(out);
  return out;
}

std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const std::size_t left = s.size() - i;
  const unsigned char c = b(0);
  if (c < 0x80) return 1;
  const auto cont = [&](std::size_t k) { return k < left && (b(k) & 0xC0) == 0x80; };
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xE0 && b(1) < 0xA0) return 0;
    if (c == 0xED && b(1) > 0x9F) return 0;
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xF0 && b(1) < 0x90) return 0;
    if (c == 0xF4 && b(1) > 0x8F) return 0;
    return 4;
  }
  return 0;
}

std::string valid_utf8(std::string_view utf8) {
  for (std::size_t i = 0; i < utf8.size();) {
    const std::size_t n = utf8_sequence_length(utf8, i);
    if (n == 0) return to_utf8(to_utf16(utf8));
    i += n;
  }
  return std::string(utf8);
}

char32_t decode_utf8(std::string_view s, std::size_t i, std::size_t* length) {
  const auto b = [&](std::size_t k) {
    return static_cast<char32_t>(static_cast<unsigned char>(s[i + k]));
  };
  const char32_t c = b(0);
  if (c < 0x80) {
    *length = 1;
    return c;
  }
  if (c < 0xE0) {
    *length = 2;
    return ((c & 0x1F) << 6) | (b(1) & 0x3F);
  }
  if (c < 0xF0) {
    *length = 3;
    return ((c & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
  }
  *length = 4;
  return ((c & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

bool is_js_space(char32_t c) {
  switch (c) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
    case 0xFEFF:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

const char* const kJsSpaceClass =
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"
    "\\x{205F}\\x{3000}\\x{FEFF}";

std::string js_trim(std::string_view s, bool start, bool end) {
  std::size_t begin = 0, stop = s.size();
  if (start) {
    while (begin < stop) {
      std::size_t n;
      if (!is_js_space(decode_utf8(s, begin, &n))) break;
      begin += n;
    }
  }
  if (end) {
    while (stop > begin) {
      std::size_t k = stop - 1;  // back to the first byte of the last character
      while (k > begin && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
      std::size_t n;
      if (!is_js_space(decode_utf8(s, k, &n))) break;
      stop = k;
    }
  }
  return std::string(s.substr(begin, stop - begin));
}

}  // namespace mha::text
