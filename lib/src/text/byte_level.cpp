#include "byte_level.hpp"

#include <array>

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

std::string gpt2_pattern() {
  const std::string s = kJsSpaceClass;
  return "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" + s + "\\p{L}\\p{N}]+|[" + s +
         "]+(?![^" + s + "])|[" + s + "]+";
}

}  // namespace mha::text
