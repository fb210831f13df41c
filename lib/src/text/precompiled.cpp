// SentencePiece's normalization rules as tokenizer.json carries them ("Precompiled": T5, ALBERT,
// XLNet, mT5): precompiled_charsmap is the base64 of the model's
// NormalizerSpec.precompiled_charsmap,
//   [trie_size: u32, little-endian] [trie: trie_size / 4 units of a Darts-clone double array]
//   [normalized: the replacement strings, each ended by '\0']
// where the trie maps UTF-8 keys to byte offsets into `normalized`. Text is rewritten as
// sentencepiece's Normalizer::NormalizePrefix does (src/normalizer.cc): at each position the
// longest key that begins there (among the first kMaxTrieResultsSize the search meets) becomes
// its replacement; where no key begins, one character is copied.
//
// Everything in the blob is untrusted. The header is checked when it is read, and so is every
// state a search can reach (a walk over the whole trie): each leaf's replacement must start at a
// character boundary of `normalized`, which must be valid UTF-8. A search then reads only units
// it checks the index of and replacements checked there.
#include <algorithm>
#include <cstdint>
#include <string_view>
#include <vector>

#include "json_fields.hpp"
#include "mha/base/message.hpp"
#include "normalizer.hpp"
#include "unicode.hpp"

namespace mha::text {
namespace {

constexpr std::size_t kMaxTrieResults = 32;  // sentencepiece's Normalizer::kMaxTrieResultsSize

// A Darts-clone unit (darts.h, DoubleArrayUnit): a label in bits 0-7 (bit 31 set in a leaf, so
// that no byte matches it), has_leaf in bit 8, and the XOR offset to the children in bits 10-31,
// shifted left by 8 more when bit 9 is set. A leaf unit holds a value in bits 0-30.
bool has_leaf(std::uint32_t u) {
  return (u >> 8) & 1;
}
std::uint32_t value(std::uint32_t u) {
  return u & 0x7fffffffu;
}
std::uint32_t label(std::uint32_t u) {
  return u & 0x800000ffu;
}
std::uint32_t offset(std::uint32_t u) {
  return (u >> 10) << ((u & (1u << 9)) >> 6);
}

// Standard base64 with '=' padding, as Python's base64 and the Rust library write it.
std::string decode_base64(std::string_view text, const std::string& where) {
  static const std::string_view alphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  if (text.size() % 4 != 0)
    fail_at(where,
            "not base64: " + std::to_string(text.size()) + " characters, expected a multiple of 4");
  std::size_t padding = 0;
  while (padding < 2 && padding < text.size() && text[text.size() - 1 - padding] == '=') ++padding;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  std::uint32_t bits = 0;
  for (std::size_t i = 0; i < text.size() - padding; ++i) {
    const std::size_t v = alphabet.find(text[i]);
    if (v == std::string_view::npos)
      fail_at(where, "not base64: " + echo(text.substr(i, 1)) + " at character " +
                         std::to_string(i) + " (expected A-Z, a-z, 0-9, + and / with = padding)");
    bits = (bits << 6) | static_cast<std::uint32_t>(v);
    if (i % 4 == 3) {
      out += static_cast<char>(bits >> 16);
      out += static_cast<char>(bits >> 8);
      out += static_cast<char>(bits);
      bits = 0;
    }
  }
  if (padding == 1) {  // 3 characters left: 18 bits, 2 bytes
    out += static_cast<char>(bits >> 10);
    out += static_cast<char>(bits >> 2);
  } else if (padding == 2) {  // 2 characters: 12 bits, 1 byte
    out += static_cast<char>(bits >> 4);
  }
  return out;
}

class Precompiled : public Normalizer {
 public:
  Precompiled(const std::string& base64, const std::string& where) {
    const std::string blob = decode_base64(base64, where);
    const std::string layout =
        " (expected a 4-byte little-endian trie size, the trie, then the normalized strings)";
    if (blob.size() < 8)
      fail_at(where, "a blob of " + std::to_string(blob.size()) + " bytes is too short" + layout);
    const auto byte = [&](std::size_t i) {
      return static_cast<std::uint32_t>(static_cast<unsigned char>(blob[i]));
    };
    const std::uint32_t trie_size = byte(0) | byte(1) << 8 | byte(2) << 16 | byte(3) << 24;
    if (trie_size > blob.size() - 4)
      fail_at(where, "a trie of " + std::to_string(trie_size) + " bytes goes past the end of the " +
                         std::to_string(blob.size()) + "-byte blob" + layout);
    if (trie_size == 0 || trie_size % 4 != 0)
      fail_at(where, "a trie of " + std::to_string(trie_size) +
                         " bytes (expected a positive multiple of 4: 32-bit units)");
    units_.resize(trie_size / 4);
    for (std::size_t k = 0; k < units_.size(); ++k)
      units_[k] =
          byte(4 + 4 * k) | byte(5 + 4 * k) << 8 | byte(6 + 4 * k) << 16 | byte(7 + 4 * k) << 24;
    normalized_ = blob.substr(4 + trie_size);
    if (valid_utf8(normalized_) != normalized_)
      fail_at(where, "the normalized strings after the trie are not valid UTF-8");
    root_ = offset(units_[0]);
    check_trie(where);
  }

  std::string normalize(std::string text) const override {
    std::string out;
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size();) {
      const auto [length, replacement] = longest_rule(text, i);
      if (length > 0) {
        out.append(normalized_, replacement,
                   normalized_.find('\0', replacement) - replacement);  // npos: to the end
        i += length;
        continue;
      }
      const std::size_t n = utf8_sequence_length(text, i);
      if (n == 0) {  // only after a key that ended inside a character: U+FFFD, as spm does
        out += "\xEF\xBF\xBD";
        i += 1;
      } else {
        out.append(text, i, n);
        i += n;
      }
    }
    return out;
  }

 private:
  // The length of the longest key at text[i...] (0: none) and its replacement's offset.
  std::pair<std::size_t, std::uint32_t> longest_rule(const std::string& text, std::size_t i) const {
    std::size_t length = 0, found = 0;
    std::uint32_t replacement = 0;
    std::uint32_t node = root_;
    for (std::size_t k = i; k < text.size(); ++k) {
      const auto c = static_cast<unsigned char>(text[k]);
      const std::uint32_t at = node ^ c;
      if (at >= units_.size() || label(units_[at]) != c) break;
      node = at ^ offset(units_[at]);
      if (has_leaf(units_[at])) {
        if (found++ == kMaxTrieResults || node >= units_.size()) break;
        length = k + 1 - i;  // keys come shortest first
        replacement = value(units_[node]);
      }
    }
    return {length, replacement};
  }

  // Every state a search can reach, from the root, under every byte: a state is the index the
  // next byte is XORed into, so each is visited once even if the units make a cycle.
  void check_trie(const std::string& where) const {
    // A state at or past `limit` has all its children (state ^ byte) out of range.
    const std::size_t limit = (units_.size() + 255) / 256 * 256;
    std::vector<bool> seen(limit, false);
    std::vector<std::uint32_t> stack;
    if (root_ < limit) {
      seen[root_] = true;
      stack.push_back(root_);
    }
    while (!stack.empty()) {
      const std::uint32_t state = stack.back();
      stack.pop_back();
      for (std::uint32_t c = 0; c < 256; ++c) {
        const std::uint32_t at = state ^ c;
        if (at >= units_.size() || label(units_[at]) != c) continue;
        const std::uint32_t next = at ^ offset(units_[at]);
        if (has_leaf(units_[at])) {
          if (next >= units_.size())
            fail_at(where, "unit " + std::to_string(at) + " has its value at unit " +
                               std::to_string(next) + ", past the trie's " +
                               std::to_string(units_.size()) + " units");
          const std::uint32_t v = value(units_[next]);
          if (v >= normalized_.size() ||
              (static_cast<unsigned char>(normalized_[v]) & 0xC0) == 0x80)
            fail_at(where, "unit " + std::to_string(next) + " points at byte " + std::to_string(v) +
                               " of the " + std::to_string(normalized_.size()) +
                               "-byte normalized strings (expected the start of a string in them)");
        }
        if (next < limit && !seen[next]) {
          seen[next] = true;
          stack.push_back(next);
        }
      }
    }
  }

  std::vector<std::uint32_t> units_;
  std::string normalized_;
  std::uint32_t root_ = 0;  // the state of the empty key
};

}  // namespace

std::unique_ptr<const Normalizer> make_precompiled(const json& config, const std::string& where) {
  const std::string key = where + ".precompiled_charsmap";
  const json* map = optional_field(config, "precompiled_charsmap");
  if (!map || !map->is_string())
    fail_at(where, "expected a string \"precompiled_charsmap\" (base64)");
  return std::make_unique<Precompiled>(map->get<std::string>(), key);
}

}  // namespace mha::text
