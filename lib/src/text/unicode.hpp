// UTF-8 text in, UTF-8 text out: the conversions to ICU's UTF-16 strings and the character
// classes the tokenizers share. JavaScript's \s is spelled out here because the reference
// implementation matches with it where the Rust library uses Unicode's White_Space.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <unicode/unistr.h>

namespace mha::text {

icu::UnicodeString to_utf16(std::string_view utf8);  // invalid bytes become U+FFFD
std::string to_utf8(const icu::UnicodeString& s);
// The text itself when it is valid UTF-8, else with each invalid sequence as U+FFFD.
std::string valid_utf8(std::string_view utf8);

// The bytes of the well-formed UTF-8 sequence starting at s[i] (RFC 3629: no
// overlongs, no surrogates, nothing above U+10FFFF), or 0 when none starts there.
std::size_t utf8_sequence_length(std::string_view s, std::size_t i);
// The code point at byte `i` of valid UTF-8 and its length in bytes.
char32_t decode_utf8(std::string_view s, std::size_t i, std::size_t* length);
void append_utf8(std::string& out, char32_t c);

// JavaScript's \s and String.prototype.trim: ECMAScript's WhiteSpace and LineTerminator.
bool is_js_space(char32_t c);
// The same set as the inside of a regex character class, for ICU patterns.
extern const char* const kJsSpaceClass;
std::string js_trim(std::string_view s, bool start, bool end);

}  // namespace mha::text
