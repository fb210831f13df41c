// What a message may carry from a file: every value an input file supplies
// (a key, a name, a dtype, a token) is echoed through echo(), which cuts it to
// about 60 characters at a character boundary and escapes what could forge
// or break a line; every message of mha::Error goes through one_line(), so
// it is one line of valid UTF-8 of at most 300 characters whatever it holds.
//
//   fail_input(path + ": unknown model_type " + echo(value));
//     -> config.json: unknown model_type "bert\nmha: error: …" (5000 bytes)
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace mha {

// The longest value echo() shows, in characters, and the longest message.
constexpr std::size_t kEchoChars = 60;
constexpr std::size_t kMessageChars = 300;

// `value` in double quotes, control characters as \n, \t, \r or \xHH, bytes
// that are not valid UTF-8 as \xHH, cut after `max_chars` characters with
// "…" and the value's size in bytes.
std::string echo(std::string_view value, std::size_t max_chars = kEchoChars);

// The same escapes without quotes: the text as one line of valid UTF-8 of at
// most `max_chars` characters; a longer one keeps its head and its tail
// (the file named first, what was expected last) around " … ".
std::string one_line(std::string_view text, std::size_t max_chars = kMessageChars);

}  // namespace mha
