#include "added_tokens.hpp"

#include <algorithm>

#include "unicode.hpp"

namespace mha::text {

AddedTokenSplitter::AddedTokenSplitter(std::vector<Entry> entries)
    : entries_(std::move(entries)), by_first_byte_(256) {
  for (std::size_t i = 0; i < entries_.size(); ++i)
    if (!entries_[i].content.empty())
      by_first_byte_[static_cast<unsigned char>(entries_[i].content[0])].push_back(i);
  for (auto& bucket : by_first_byte_)
    std::stable_sort(bucket.begin(), bucket.end(), [&](std::size_t a, std::size_t b) {
      return entries_[a].content.size() > entries_[b].content.size();
    });
}

std::vector<AddedTokenSplitter::Piece> AddedTokenSplitter::split(std::string_view text) const {
  std::vector<Piece> pieces;
  std::vector<const Entry*> matched;  // per piece: the token's entry, or nullptr
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size();) {
    const Entry* match = nullptr;
    if (!entries_.empty())
      for (const std::size_t e : by_first_byte_[static_cast<unsigned char>(text[i])])
        if (text.compare(i, entries_[e].content.size(), entries_[e].content) == 0) {
          match = &entries_[e];
          break;
        }
    if (!match) {
      ++i;
      continue;
    }
    if (i > start) {
      pieces.push_back({std::string(text.substr(start, i - start)), false});
      matched.push_back(nullptr);
    }
    pieces.push_back({match->content, true});
    matched.push_back(match);
    i += match->content.size();
    start = i;
  }
  if (start < text.size()) {
    pieces.push_back({std::string(text.substr(start)), false});
    matched.push_back(nullptr);
  }
  // lstrip/rstrip: the neighbouring piece loses its whitespace on that side.
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    if (!matched[k]) continue;
    if (matched[k]->lstrip && k > 0) pieces[k - 1].text = js_trim(pieces[k - 1].text, false, true);
    if (matched[k]->rstrip && k + 1 < pieces.size())
      pieces[k + 1].text = js_trim(pieces[k + 1].text, true, false);
  }
  return pieces;
}

}  // namespace mha::text
