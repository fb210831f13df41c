#include "byte_level.hpp"

#include <array>
#include <unordered_map>

#include "unicode.hpp"

namespace mha::text {
namespace {

// bytes_to_unicode() of GPT-2's encoder.py: printable Latin-1 bytes stand for themselves, the
// other 68 for 256, 257, ... in byte order.
const std::array<std::string, 256>& byte_table() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      append_utf8(t[b], printable ? static_cast<char32_t>(b) : next++);
    }
    return t;
  }();
  return table;
}

}  // namespace

std::string byte_level_encode(std::string_view bytes) {
  const auto& table = byte_table();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out += table[static_cast<unsigned char>(c)];
  return out;
}

bool byte_level_decode(std::string_view text, std::string& bytes) {
  static const std::unordered_map<std::string, char> inverse = [] {
    std::unordered_map<std::string, char> m;
    for (int b = 0; b < 256; ++b) m[byte_table()[b]] = static_cast<char>(b);
    return m;
  }();
  bytes.clear();
  for (std::size_t i = 0; i < text.size();) {
    std::size_t n = 1;  // the code point's length: the table holds U+0021 to U+0143
    while (i + n < text.size() && (static_cast<unsigned char>(text[i + n]) & 0xC0) == 0x80) ++n;
    const auto it = inverse.find(std::string(text.substr(i, n)));
    if (it == inverse.end()) return false;
    bytes += it->second;
    i += n;
  }
  return true;
}

std::string gpt2_pattern() {
  const std::string s = kJsSpaceClass;
  return "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" + s + "\\p{L}\\p{N}]+|[" + s +
         "]+(?![^" + s + "])|[" + s + "]+";
}

}  // namespace mha::text
