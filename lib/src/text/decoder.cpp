#include "decoder.hpp"

#include "byte_level.hpp"
#include "mha/text/tokenizer.hpp"
#include "unicode.hpp"

#include <cctype>
#include <cstdio>

namespace mha::text {
namespace {

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// The reference's clean_up_tokenization (the WordPiece decoder's "cleanup").
void clean_up(std::string& s) {
  static const char* const pairs[][2] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& p : pairs) replace_all(s, p[0], p[1]);
}

std::size_t count_field(const json& d, const char* key, const std::string& where) {
  const json* v = optional_field(d, key);
  if (!v) return 0;
  if (!v->is_number_unsigned()) fail_at(where + "." + key, "expected a count, got " + describe(*v));
  return v->get<std::size_t>();
}

}  // namespace

Decoder::Decoder(const json& decoder, const std::string& where) {
  if (!decoder.is_null()) add(decoder, where);
}

void Decoder::add(const json& d, const std::string& where) {
  const std::string type = string_field(object_at(d, where), "type", where, "");
  Step s{type, "", "", 0, 0, false};
  if (type == "Sequence") {
    const json* list = optional_field(d, "decoders");
    if (!list || !list->is_array()) fail_at(where, "expected an array \"decoders\"");
    for (std::size_t i = 0; i < list->size(); ++i)
      add((*list)[i], where + ".decoders[" + std::to_string(i) + "]");
    return;
  }
  if (type == "ByteLevel" || type == "ByteFallback" || type == "Fuse") {
    // Fuse joins the tokens into one: one token already is.
  } else if (type == "Metaspace") {
    s.to = string_field(d, "replacement", where, "\u2581");
    s.flag = string_field(d, "prepend_scheme", where, "always") != "never" &&
             bool_field(d, "add_prefix_space", where, true);
  } else if (type == "WordPiece") {
    s.flag = bool_field(d, "cleanup", where, true);  // its prefix goes only from later tokens
  } else if (type == "BPE") {
    s.from = string_field(d, "suffix", where, "</w>");
  } else if (type == "Strip") {
    s.from = string_field(d, "content", where, " ");
    s.start = count_field(d, "start", where);
    s.stop = count_field(d, "stop", where);
  } else if (type == "Replace") {
    const json* pattern = optional_field(d, "pattern");
    if (!pattern || !pattern->is_object() || !pattern->contains("String") ||
        !(*pattern)["String"].is_string()) {
      supported_ = false;  // a regex pattern
      return;
    }
    s.from = (*pattern)["String"].get<std::string>();
    s.to = string_field(d, "content", where, "");
  } else {
    supported_ = false;  // CTC, or a type this library does not know
    return;
  }
  steps_.push_back(std::move(s));
}

std::string Decoder::decode(const std::string& piece, bool added, bool first) const {
  if (!supported_) return piece;
  std::string t = piece, bytes;
  bool fused = false;  // after Fuse, a later token is inside the text Strip sees
  for (const Step& s : steps_) {
    if (s.type == "ByteLevel") {
      if (!added && byte_level_decode(t, bytes)) t = bytes;
    } else if (s.type == "Metaspace") {
      replace_all(t, s.to, " ");
      if (first && s.flag && !t.empty() && t[0] == ' ') t.erase(0, 1);
    } else if (s.type == "WordPiece") {
      if (s.flag) clean_up(t);
    } else if (s.type == "BPE") {
      replace_all(t, s.from, "");  // the last token's suffix goes without a space
    } else if (s.type == "ByteFallback") {
      auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && hex(t[3]) && hex(t[4]))
        t = std::string(1, static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
    } else if (s.type == "Fuse") {
      fused = true;
    } else if (s.type == "Strip") {
      if (!first && fused) continue;  // the fused text's ends are other tokens'
      const std::size_t n = s.from.size();
      std::size_t begin = 0, end = t.size();
      for (std::size_t i = 0; i < s.start && n && t.compare(begin, n, s.from) == 0; ++i) begin += n;
      for (std::size_t i = 0;
           i < s.stop && n && end >= begin + n && t.compare(end - n, n, s.from) == 0; ++i)
        end -= n;
      t = t.substr(begin, end - begin);
    } else if (s.type == "Replace") {
      replace_all(t, s.from, s.to);
    }
  }
  return t;
}

}  // namespace mha::text

namespace mha {

std::string visible_text(std::string_view bytes) {
  std::string out;
  char hex[8];
  for (std::size_t i = 0; i < bytes.size();) {
    std::size_t n = text::utf8_sequence_length(bytes, i);
    if (n == 0) {  // a run of bytes that are no whole character: ‹e2 9c›
      out += "\u2039";
      for (bool first = true; i < bytes.size() && text::utf8_sequence_length(bytes, i) == 0;
           ++i, first = false) {
        std::snprintf(hex, sizeof hex, first ? "%02x" : " %02x",
                      static_cast<unsigned char>(bytes[i]));
        out += hex;
      }
      out += "\u203a";
      continue;
    }
    const char32_t c = text::decode_utf8(bytes, i, &n);
    if (c == ' ')
      out += "\u2423";  // ␣
    else if (c == '\n')
      out += "\u21b5";  // ↵
    else if (c == '\t')
      out += "\u21e5";  // ⇥
    else if (c < 0x20 || (c >= 0x7F && c <= 0x9F)) {
      std::snprintf(hex, sizeof hex, "\\x%02x", static_cast<unsigned>(c));
      out += hex;
    } else {
      out.append(bytes, i, n);
    }
    i += n;
  }
  return out;
}

}  // namespace mha
