// Regular expressions over UTF-8 text, through ICU. tokenizer.json's patterns are written for
// Oniguruma (the Rust library's engine); oniguruma_to_icu rewrites the constructs whose
// meaning differs in ICU (\s, \d, \w, ASCII-only (?i:...)), as the reference does for
// JavaScript.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <unicode/uversion.h>

U_NAMESPACE_BEGIN
class RegexPattern;
U_NAMESPACE_END

namespace mha::text {

std::string oniguruma_to_icu(std::string_view pattern);

class Regex {
 public:
  // Throws std::invalid_argument with ICU's reason when the pattern does not compile.
  // `where` names the pattern in messages ("tokenizer.json: pre_tokenizer.pattern.Regex").
  explicit Regex(const std::string& icu_pattern, std::string where = "the tokenizer's regex");
  // Every non-overlapping match, leftmost first, as [begin, end) byte offsets into `utf8`
  // (valid UTF-8). Empty matches are reported too.
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view utf8) const;

 private:
  std::shared_ptr<const icu::RegexPattern> pattern_;  // immutable, shared by copies and threads
  std::string where_;
};

}  // namespace mha::text
