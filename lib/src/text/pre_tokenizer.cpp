#include "pre_tokenizer.hpp"
#include "mha/base/message.hpp"

#include <unicode/uchar.h>

#include "byte_level.hpp"
#include "json_fields.hpp"
#include "regex.hpp"
#include "unicode.hpp"

namespace mha::text {
namespace {

using Words = std::vector<std::string>;

// The matches of `regex` in each word, gaps dropped (the reference's String.match).
Words matches_only(const Regex& regex, const Words& words) {
  Words out;
  for (const auto& w : words)
    for (const auto& [b, e] : regex.find_all(w))
      if (e > b) out.push_back(w.substr(b, e - b));
  return out;
}

class ByteLevel : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space),
        regex_(use_regex ? std::make_unique<Regex>(gpt2_pattern()) : nullptr) {}
  Words split(Words words, std::size_t) const override {
    if (add_prefix_space_)
      for (auto& w : words)
        if (w.empty() || w[0] != ' ') w.insert(0, 1, ' ');
    if (regex_) words = matches_only(*regex_, words);
    for (auto& w : words) w = byte_level_encode(w);
    return words;
  }
  bool byte_level() const override { return true; }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

enum class Behavior { removed, isolated, merged_with_previous, merged_with_next, contiguous };

// Split on a literal string or a regex; the pieces between matches and the matches themselves
// are kept as the behavior says (the Rust library's SplitDelimiterBehavior).
class Split : public PreTokenizer {
 public:
  Split(std::string literal, std::unique_ptr<Regex> regex, Behavior behavior, bool invert)
      : literal_(std::move(literal)),
        regex_(std::move(regex)),
        behavior_(behavior),
        invert_(invert) {}

  Words split(Words words, std::size_t) const override {
    Words out;
    for (const auto& w : words) split_one(w, out);
    return out;
  }

 private:
  std::vector<std::pair<std::size_t, std::size_t>> find(const std::string& w) const {
    if (regex_) return regex_->find_all(w);
    std::vector<std::pair<std::size_t, std::size_t>> m;
    if (literal_.empty()) return m;
    for (std::size_t at = w.find(literal_); at != std::string::npos;
         at = w.find(literal_, at + literal_.size()))
      m.emplace_back(at, at + literal_.size());
    return m;
  }

  void split_one(const std::string& w, Words& out) const {
    // (begin, end, is_match) pieces covering w.
    struct Piece {
      std::size_t b, e;
      bool match;
    };
    std::vector<Piece> pieces;
    std::size_t last = 0;
    for (const auto& [b, e] : find(w)) {
      if (e == b) continue;
      if (b > last) pieces.push_back({last, b, false});
      pieces.push_back({b, e, true});
      last = e;
    }
    if (last < w.size()) pieces.push_back({last, w.size(), false});
    if (invert_)
      for (auto& p : pieces) p.match = !p.match;

    std::vector<std::pair<std::size_t, std::size_t>> kept;
    for (std::size_t i = 0; i < pieces.size(); ++i) {
      const Piece& p = pieces[i];
      switch (behavior_) {
        case Behavior::removed:
          if (!p.match) kept.emplace_back(p.b, p.e);
          break;
        case Behavior::isolated:
          kept.emplace_back(p.b, p.e);
          break;
        case Behavior::merged_with_previous:
          if (p.match && !kept.empty() && !pieces[i - 1].match)
            kept.back().second = p.e;
          else
            kept.emplace_back(p.b, p.e);
          break;
        case Behavior::merged_with_next:
          if (!p.match && i > 0 && pieces[i - 1].match)
            kept.back().second = p.e;
          else
            kept.emplace_back(p.b, p.e);
          break;
        case Behavior::contiguous:
          if (p.match && i > 0 && pieces[i - 1].match)
            kept.back().second = p.e;
          else
            kept.emplace_back(p.b, p.e);
          break;
      }
    }
    for (const auto& [b, e] : kept) out.push_back(w.substr(b, e - b));
  }

  std::string literal_;
  std::unique_ptr<Regex> regex_;
  Behavior behavior_;
  bool invert_;
};

// SentencePiece's spaces: " " → "▁", a "▁" in front (always, or only at the text's start),
// then, with split, each "▁" starts a new word.
class Metaspace : public PreTokenizer {
 public:
  enum class Prepend { always, first, never };
  Metaspace(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)), prepend_(prepend), split_(split) {}

  Words split(Words words, std::size_t section) const override {
    Words out;
    for (const auto& w : words) {
      std::string s;
      for (const char c : w) {
        if (c == ' ')
          s += replacement_;
        else
          s += c;
      }
      const bool starts = s.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (prepend_ == Prepend::always || (prepend_ == Prepend::first && section == 0)))
        s.insert(0, replacement_);
      if (!split_ || replacement_.empty()) {
        out.push_back(std::move(s));
        continue;
      }
      std::size_t begin = 0;
      for (std::size_t at = s.find(replacement_, 1); at != std::string::npos;
           at = s.find(replacement_, at + replacement_.size())) {
        if (at > begin) out.push_back(s.substr(begin, at - begin));
        begin = at;
      }
      if (begin < s.size()) out.push_back(s.substr(begin));
    }
    return out;
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
};

// BERT's basic tokenizer: split on whitespace, every punctuation character a word of its own
// (Unicode's P categories and all ASCII non-alphanumeric symbols).
class BertPreTokenizer : public PreTokenizer {
 public:
  Words split(Words words, std::size_t) const override {
    Words out;
    for (const auto& w : words) {
      std::string current;
      for (std::size_t i = 0; i < w.size();) {
        std::size_t n;
        const char32_t c = decode_utf8(w, i, &n);
        if (is_js_space(c) || is_punctuation(c)) {
          if (!current.empty()) out.push_back(std::move(current));
          current.clear();
          if (!is_js_space(c)) out.push_back(w.substr(i, n));
        } else {
          current.append(w, i, n);
        }
        i += n;
      }
      if (!current.empty()) out.push_back(std::move(current));
    }
    return out;
  }

 private:
  static bool is_punctuation(char32_t c) {
    if ((c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
        (c >= 0x7B && c <= 0x7E))
      return true;
    return U_GET_GC_MASK(c) & U_GC_P_MASK;
  }
};

// Whitespace, WhitespaceSplit and Digits: the reference's regexes (JavaScript's ASCII \w and
// \d), matches kept.
class Matches : public PreTokenizer {
 public:
  explicit Matches(const std::string& pattern) : regex_(pattern) {}
  Words split(Words words, std::size_t) const override { return matches_only(regex_, words); }

 private:
  Regex regex_;
};

class Sequence : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<const PreTokenizer>> steps)
      : steps_(std::move(steps)) {}
  Words split(Words words, std::size_t section) const override {
    for (const auto& s : steps_)
      if (s) words = s->split(std::move(words), section);
    return words;
  }
  bool byte_level() const override {
    for (const auto& s : steps_)
      if (s && s->byte_level()) return true;
    return false;
  }

 private:
  std::vector<std::unique_ptr<const PreTokenizer>> steps_;
};

Behavior behavior_of(const std::string& name, const std::string& where) {
  if (name == "Removed") return Behavior::removed;
  if (name == "Isolated") return Behavior::isolated;
  if (name == "MergedWithPrevious") return Behavior::merged_with_previous;
  if (name == "MergedWithNext") return Behavior::merged_with_next;
  if (name == "Contiguous") return Behavior::contiguous;
  fail_at(where + ".behavior", echo(name) +
                                   " is not a split behavior (expected Removed, Isolated, "
                                   "MergedWithPrevious, MergedWithNext or Contiguous)");
}

std::unique_ptr<Regex> compile(const std::string& pattern, const std::string& where) {
  try {
    return std::make_unique<Regex>(pattern, where);
  } catch (const std::invalid_argument& e) {
    fail_at(where, std::string("not a regex this reader supports (") + e.what() + ")");
  }
}

}  // namespace

std::unique_ptr<const PreTokenizer> make_pre_tokenizer(const json& config, const std::string& where,
                                                       int depth) {
  if (config.is_null()) return nullptr;
  object_at(config, where);
  if (depth > kMaxNesting)
    fail_at(where, "nested deeper than " + std::to_string(kMaxNesting) + " sequences");
  const std::string type = string_field(config, "type", where);
  const std::string s = kJsSpaceClass;
  if (type == "Sequence") {
    const json* list = optional_field(config, "pretokenizers");
    if (!list || !list->is_array()) fail_at(where, "expected an array \"pretokenizers\"");
    std::vector<std::unique_ptr<const PreTokenizer>> steps;
    for (std::size_t i = 0; i < list->size(); ++i)
      steps.push_back(make_pre_tokenizer(
          (*list)[i], where + ".pretokenizers[" + std::to_string(i) + "]", depth + 1));
    return std::make_unique<Sequence>(std::move(steps));
  }
  if (type == "ByteLevel")
    return std::make_unique<ByteLevel>(bool_field(config, "add_prefix_space", where, false),
                                       bool_field(config, "use_regex", where, true));
  if (type == "Split") {
    const json* pattern = optional_field(config, "pattern");
    if (!pattern || !pattern->is_object()) fail_at(where, "expected an object \"pattern\"");
    const Behavior behavior =
        behavior_of(string_field(config, "behavior", where, "Isolated"), where);
    const bool invert = bool_field(config, "invert", where, false);
    if (pattern->contains("String"))
      return std::make_unique<Split>(string_field(*pattern, "String", where + ".pattern"), nullptr,
                                     behavior, invert);
    const std::string regex = string_field(*pattern, "Regex", where + ".pattern");
    return std::make_unique<Split>("", compile(oniguruma_to_icu(regex), where + ".pattern.Regex"),
                                   behavior, invert);
  }
  if (type == "Metaspace") {
    const std::string replacement = string_field(config, "replacement", where, "\u2581");
    Metaspace::Prepend prepend = Metaspace::Prepend::always;
    if (optional_field(config, "prepend_scheme")) {
      const std::string scheme = string_field(config, "prepend_scheme", where);
      if (scheme == "always") {
        prepend = Metaspace::Prepend::always;
      } else if (scheme == "first") {
        prepend = Metaspace::Prepend::first;
      } else if (scheme == "never") {
        prepend = Metaspace::Prepend::never;
      } else {
        fail_at(where + ".prepend_scheme",
                echo(scheme) + " is not a prepend scheme (expected always, first or never)");
      }
    } else if (!bool_field(config, "add_prefix_space", where, true)) {
      prepend = Metaspace::Prepend::never;
    }
    return std::make_unique<Metaspace>(replacement, prepend,
                                       bool_field(config, "split", where, true));
  }
  if (type == "BertPreTokenizer") return std::make_unique<BertPreTokenizer>();
  if (type == "Whitespace")
    return std::make_unique<Matches>("[A-Za-z0-9_]+|[^A-Za-z0-9_" + s + "]+");
  if (type == "WhitespaceSplit") return std::make_unique<Matches>("[^" + s + "]+");
  if (type == "Digits")
    return std::make_unique<Matches>(
        bool_field(config, "individual_digits", where, false) ? "[^0-9]+|[0-9]" : "[^0-9]+|[0-9]+");
  fail_at(where + ".type", "pre-tokenizer \"" + type +
                               "\" is not supported (expected Sequence, ByteLevel, Split, "
                               "Metaspace, BertPreTokenizer, Whitespace, WhitespaceSplit or "
                               "Digits)");
}

}  // namespace mha::text
