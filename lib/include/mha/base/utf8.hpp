// Text a user gives (a --text, a line of a corpus, a tokenize input) is UTF-8
// or refused at the edge, by what it is and the byte where it stops being
// UTF-8, with the same words in every command and in Python:
//
//   check_utf8(text, "--text");
//     -> --text "the \xff cat": invalid UTF-8 at byte 4 (0xff); expected UTF-8 text
//
// Well-formed means RFC 3629: no overlong forms, surrogates or code points
// past U+10FFFF (as echo() in message.hpp decides what it escapes).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace mha {

// The offset of the first byte that does not start a well-formed sequence, or
// std::string_view::npos when the whole text is UTF-8.
std::size_t invalid_utf8_at(std::string_view text);
// Throws mha::Error (invalid_input) naming `what`, the text and the byte.
void check_utf8(std::string_view text, const std::string& what);

}  // namespace mha
