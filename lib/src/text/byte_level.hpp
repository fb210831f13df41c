// GPT-2's byte-level alphabet: each byte of the UTF-8 text stands as one printable code point
// ('Ġ' for the space, 'Ċ' for the newline), so that BPE never meets an unknown character.
#pragma once

#include <string>
#include <string_view>

namespace mha::text {

// The UTF-8 spelling of each byte's code point, e.g. " " → "Ġ".
std::string byte_level_encode(std::string_view bytes);
// The other way, " Ġcat" → " cat"; false when a code point is not one of the 256.
bool byte_level_decode(std::string_view text, std::string& bytes);

// GPT-2's split into words (contractions, letters, numbers, other, whitespace), as an ICU
// pattern with JavaScript's \s, as the reference compiles it.
std::string gpt2_pattern();

}  // namespace mha::text
