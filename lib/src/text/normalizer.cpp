#include "normalizer.hpp"

#include <optional>

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>

#include "json_fields.hpp"
#include "regex.hpp"
#include "unicode.hpp"

namespace mha::text {
namespace {

// Drops the code points of the given general categories (a U_GC_*_MASK).
std::string remove_categories(const std::string& text, std::uint32_t mask) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    std::size_t n;
    const char32_t c = decode_utf8(text, i, &n);
    if (!(U_GET_GC_MASK(c) & mask)) out.append(text, i, n);
    i += n;
  }
  return out;
}

std::string unicode_form(const std::string& text, const icu::Normalizer2* form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::UnicodeString s = to_utf16(text);
  if (form->isNormalized(s, status) && U_SUCCESS(status)) return text;
  status = U_ZERO_ERROR;
  const icu::UnicodeString out = form->normalize(s, status);
  if (U_FAILURE(status)) fail_runtime(std::string("Unicode normalization: ") + u_errorName(status));
  return to_utf8(out);
}

const icu::Normalizer2* form_instance(const std::string& name) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = name == "NFC"    ? icu::Normalizer2::getNFCInstance(status)
                              : name == "NFD"  ? icu::Normalizer2::getNFDInstance(status)
                              : name == "NFKC" ? icu::Normalizer2::getNFKCInstance(status)
                                               : icu::Normalizer2::getNFKDInstance(status);
  if (U_FAILURE(status)) fail_runtime(std::string("ICU ") + name + ": " + u_errorName(status));
  return n;
}

// Full lowercase mapping with Final_Sigma, as JavaScript's toLowerCase and Rust's to_lowercase.
std::string lowercase(const std::string& text) {
  bool ascii = true;
  for (const char c : text) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) {
    std::string out = text;
    for (char& c : out)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c + 32);
    return out;
  }
  icu::UnicodeString s = to_utf16(text);
  s.toLower(icu::Locale::getRoot());
  return to_utf8(s);
}

class UnicodeForm : public Normalizer {
 public:
  explicit UnicodeForm(const std::string& name) : form_(form_instance(name)) {}
  std::string normalize(std::string text) const override { return unicode_form(text, form_); }

 private:
  const icu::Normalizer2* form_;
};

class Lowercase : public Normalizer {
 public:
  std::string normalize(std::string text) const override { return lowercase(text); }
};

// The reference removes every mark (\p{M}), without decomposing first.
class StripAccents : public Normalizer {
 public:
  std::string normalize(std::string text) const override {
    return remove_categories(text, U_GC_M_MASK);
  }
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string text) const override { return js_trim(text, left_, right_); }

 private:
  bool left_, right_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  std::string normalize(std::string text) const override { return prefix_ + text; }

 private:
  std::string prefix_;
};

// Every occurrence of a string or regex match replaced by `content`, taken literally.
class Replace : public Normalizer {
 public:
  Replace(std::string literal, std::unique_ptr<Regex> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}
  std::string normalize(std::string text) const override {
    std::string out;
    std::size_t last = 0;
    if (regex_) {
      for (const auto& [b, e] : regex_->find_all(text)) {
        out.append(text, last, b - last);
        out += content_;
        last = e;
      }
    } else {
      if (literal_.empty()) return text;
      for (std::size_t at = text.find(literal_); at != std::string::npos;
           at = text.find(literal_, last)) {
        out.append(text, last, at - last);
        out += content_;
        last = at + literal_.size();
      }
    }
    out.append(text, last, std::string::npos);
    return out;
  }

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

// BERT's cleanup: control characters dropped, whitespace to " ", spaces around CJK
// ideographs, lowercase and accents stripped (NFD, then nonspacing marks dropped).
class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean_text, bool chinese, std::optional<bool> strip_accents, bool lower)
      : clean_text_(clean_text),
        chinese_(chinese),
        strip_accents_(strip_accents.value_or(lower)),
        lowercase_(lower),
        nfd_(form_instance("NFD")) {}

  std::string normalize(std::string text) const override {
    if (clean_text_ || chinese_) {
      std::string out;
      out.reserve(text.size());
      for (std::size_t i = 0; i < text.size();) {
        std::size_t n;
        const char32_t c = decode_utf8(text, i, &n);
        if (clean_text_ && is_dropped(c)) {
          // dropped
        } else if (clean_text_ && is_js_space(c)) {
          out += ' ';
        } else if (chinese_ && is_cjk(c)) {
          out += ' ';
          out.append(text, i, n);
          out += ' ';
        } else {
          out.append(text, i, n);
        }
        i += n;
      }
      text = std::move(out);
    }
    if (lowercase_) text = lowercase(text);
    if (strip_accents_) text = remove_categories(unicode_form(text, nfd_), U_GC_MN_MASK);
    return text;
  }

 private:
  static bool is_dropped(char32_t c) {
    if (c == 0 || c == 0xFFFD) return true;
    if (c == '\t' || c == '\n' || c == '\r') return false;
    return U_GET_GC_MASK(c) & (U_GC_CC_MASK | U_GC_CF_MASK | U_GC_CO_MASK | U_GC_CS_MASK);
  }
  // The reference tests UTF-16 code units, so only the BMP's CJK blocks get spaces.
  static bool is_cjk(char32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0xF900 && c <= 0xFAFF);
  }
  bool clean_text_, chinese_, strip_accents_, lowercase_;
  const icu::Normalizer2* nfd_;
};

// The Rust library's Nmt (normalizers/unicode.rs, do_nmt): SentencePiece's nmt_nfkc rules for
// control characters and spaces, without the NFKC part: C0/C1 controls other than whitespace
// dropped, the other whitespace and U+200B-U+200F, U+2581, U+FEFF, U+FFFD to " ".
class Nmt : public Normalizer {
 public:
  std::string normalize(std::string text) const override {
    std::string out;
    out.reserve(text.size());
    for (std::size_t i = 0; i < text.size();) {
      std::size_t n;
      const char32_t c = decode_utf8(text, i, &n);
      if ((c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F ||
          c == 0x8F || c == 0x9F) {
        // dropped
      } else if (c == 0x09 || c == 0x0A || c == 0x0C || c == 0x0D || c == 0x1680 ||
                 (c >= 0x200B && c <= 0x200F) || c == 0x2028 || c == 0x2029 || c == 0x2581 ||
                 c == 0xFEFF || c == 0xFFFD) {
        out += ' ';
      } else {
        out.append(text, i, n);
      }
      i += n;
    }
    return out;
  }
};

class Sequence : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<const Normalizer>> steps)
      : steps_(std::move(steps)) {}
  std::string normalize(std::string text) const override {
    for (const auto& s : steps_)
      if (s) text = s->normalize(std::move(text));
    return text;
  }

 private:
  std::vector<std::unique_ptr<const Normalizer>> steps_;
};

}  // namespace

std::unique_ptr<const Normalizer> make_normalizer(const json& config, const std::string& where,
                                                  int depth) {
  if (config.is_null()) return nullptr;
  object_at(config, where);
  if (depth > kMaxNesting)
    fail_at(where, "nested deeper than " + std::to_string(kMaxNesting) + " sequences");
  const std::string type = string_field(config, "type", where);
  if (type == "Sequence") {
    const json* list = optional_field(config, "normalizers");
    if (!list || !list->is_array()) fail_at(where, "expected an array \"normalizers\"");
    std::vector<std::unique_ptr<const Normalizer>> steps;
    for (std::size_t i = 0; i < list->size(); ++i)
      steps.push_back(make_normalizer((*list)[i], where + ".normalizers[" + std::to_string(i) + "]",
                                      depth + 1));
    return std::make_unique<Sequence>(std::move(steps));
  }
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD")
    return std::make_unique<UnicodeForm>(type);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Nmt") return std::make_unique<Nmt>();
  if (type == "Precompiled") return make_precompiled(config, where);
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Strip")
    return std::make_unique<Strip>(bool_field(config, "strip_left", where, false),
                                   bool_field(config, "strip_right", where, false));
  if (type == "Prepend") return std::make_unique<Prepend>(string_field(config, "prepend", where));
  if (type == "Replace") {
    const json* pattern = optional_field(config, "pattern");
    if (!pattern || !pattern->is_object()) fail_at(where, "expected an object \"pattern\"");
    const std::string content = string_field(config, "content", where, "");
    if (pattern->contains("String"))
      return std::make_unique<Replace>(string_field(*pattern, "String", where + ".pattern"),
                                       nullptr, content);
    const std::string regex = string_field(*pattern, "Regex", where + ".pattern");
    try {
      return std::make_unique<Replace>(
          "", std::make_unique<Regex>(oniguruma_to_icu(regex), where + ".pattern.Regex"), content);
    } catch (const std::invalid_argument& e) {
      fail_at(where + ".pattern.Regex",
              std::string("not a regex this reader supports (") + e.what() + ")");
    }
  }
  if (type == "BertNormalizer") {
    const json* strip = optional_field(config, "strip_accents");
    if (strip && !strip->is_boolean())
      fail_at(where + ".strip_accents", "expected true, false or null, got " + describe(*strip));
    return std::make_unique<BertNormalizer>(
        bool_field(config, "clean_text", where, true),
        bool_field(config, "handle_chinese_chars", where, true),
        strip ? std::optional<bool>(strip->get<bool>()) : std::nullopt,
        bool_field(config, "lowercase", where, true));
  }
  fail_at(where + ".type",
          "normalizer \"" + type +
              "\" is not supported (expected Sequence, BertNormalizer, NFC, NFD, NFKC, NFKD, "
              "Lowercase, Strip, StripAccents, Replace, Prepend, Nmt or Precompiled)");
}

}  // namespace mha::text
