// Added tokens (special or not) are found in the text before the model sees it: the text is
// cut at each longest match, leftmost first; a token with lstrip/rstrip also takes the
// whitespace before/after it. Tokens marked "normalized" are looked for in the normalized text
// (the second cut), the others in the raw text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mha::text {

struct AddedToken {
  std::string content;
  std::int32_t id = 0;
  bool special = false, lstrip = false, rstrip = false, normalized = false;
};

class AddedTokenSplitter {
 public:
  // A content to look for and whether it takes the whitespace on its left and right.
  struct Entry {
    std::string content;
    bool lstrip, rstrip;
  };
  AddedTokenSplitter() = default;  // finds nothing
  explicit AddedTokenSplitter(std::vector<Entry> entries);
  // The text as pieces: each match, and the (possibly stripped, possibly empty) text between.
  struct Piece {
    std::string text;
    bool token;
  };
  std::vector<Piece> split(std::string_view text) const;

 private:
  std::vector<Entry> entries_;
  std::vector<std::vector<std::size_t>> by_first_byte_;  // entry indices, longest first
};

}  // namespace mha::text
