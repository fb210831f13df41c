// The decoder: tokenizer.json's "decoder" applied to one token alone, as the reference's
// decode([id]) does it: ByteLevel, Metaspace, WordPiece, BPE (its suffix), ByteFallback, Fuse,
// Strip and Replace (a string pattern), alone or in a Sequence. It gives bytes, not text: a
// byte-level or byte-fallback piece may be part of a UTF-8 character (the reference shows
// U+FFFD there; visible_text() shows the bytes).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "json_fields.hpp"

namespace mha::text {

class Decoder {
 public:
  // `decoder` null: no decoder (a token decodes to its piece). Another type, or a Replace with
  // a regex, is not an error (encoding does not need it): supported() is then false and every
  // token decodes to its piece. A malformed one throws mha::Error naming `where`.
  Decoder() = default;
  Decoder(const json& decoder, const std::string& where);
  bool supported() const { return supported_; }
  // `added`: an added token, which the byte-level step leaves as it is. `first`: decoded as
  // the text's first token, as decode([id]) does (Metaspace and a Strip after Fuse take the
  // word-start space off); false: as a token after others, its word-start space kept.
  std::string decode(const std::string& piece, bool added, bool first = true) const;

 private:
  struct Step {
    std::string type, from, to;       // Replace: from → to; Metaspace: replacement; others: their
                                      // prefix, suffix or content in `from`
    std::size_t start = 0, stop = 0;  // Strip
    bool flag = false;                // WordPiece: cleanup; Metaspace: strips its leading space
  };
  void add(const json& decoder, const std::string& where);
  std::vector<Step> steps_;
  bool supported_ = true;
};

}  // namespace mha::text
