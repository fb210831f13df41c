// Byte-pair encoding: each word starts as its characters and the pair of adjacent symbols
// with the lowest merge rank (leftmost among equals) is merged until no pair has a rank. A
// heap of candidate pairs makes a word of n characters O(n log n); stale candidates (a
// symbol merged away since) are skipped when popped.
#include <queue>
#include <unordered_map>

#include "json_fields.hpp"
#include "mha/base/message.hpp"
#include "model.hpp"
#include "unicode.hpp"

namespace mha::text {
namespace {

struct Merge {
  std::int32_t rank;
  std::int32_t merged;  // the merged token's id, -1 when the vocabulary lacks it
};

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) |
         static_cast<std::uint32_t>(b);
}

class Bpe : public Model {
 public:
  Bpe(const json& model, const TokenIds& ids, const Merges& merges, const std::string& where)
      : ids_(ids) {
    if (const json* unk = optional_field(model, "unk_token")) {
      if (!unk->is_string()) fail_at(where + ".unk_token", "expected a string or null");
      unk_token_ = unk->get<std::string>();
      const auto it = ids_.find(*unk_token_);
      if (it == ids_.end())
        fail_at(where + ".unk_token", echo(*unk_token_) + " is not in the vocabulary");
      unk_id_ = it->second;
    }
    byte_fallback_ = bool_field(model, "byte_fallback", where, false);
    ignore_merges_ = bool_field(model, "ignore_merges", where, false);
    fuse_unk_ = bool_field(model, "fuse_unk", where, false);
    for (const char* key : {"end_of_word_suffix", "continuing_subword_suffix"}) {
      const json* v = optional_field(model, key);
      if (v && !(v->is_string() && v->get<std::string>().empty()))
        fail_at(where + "." + key, "a non-empty suffix is not supported");
    }
    if (byte_fallback_) {
      for (int b = 0; b < 256; ++b) {
        static const char* hex = "0123456789ABCDEF";
        const std::string name = std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
        const auto it = ids_.find(name);
        byte_ids_[b] = it == ids_.end() ? -1 : it->second;
      }
    }
    read_merges(merges, where);
  }

  void tokenize(const std::vector<std::string>& words,
                std::vector<std::string>& tokens) const override {
    const std::size_t first = tokens.size();
    for (const auto& w : words) {
      if (w.empty()) continue;
      if (ignore_merges_ && ids_.count(w)) {
        tokens.push_back(w);
        continue;
      }
      merge_word(w, tokens);
    }
    if (fuse_unk_ && unk_id_) fuse_unknown(tokens, first);
  }

  std::optional<std::int32_t> unk_id() const override { return unk_id_; }
  bool byte_fallback() const override { return byte_fallback_; }

 private:
  // Every token of a merge, and what it makes, must be in the vocabulary, as
  // the reference's BPE builder requires (MergeTokenOutOfVocabulary): a merge
  // into a token without an id would drop the text it covers.
  void read_merges(const Merges& merges, const std::string& where) {
    merges_.reserve(merges.size());
    std::string joined;
    for (std::size_t i = 0; i < merges.size(); ++i) {
      const auto& [a, b] = merges[i];
      const auto ia = ids_.find(a), ib = ids_.find(b);
      joined.assign(a).append(b);
      const auto merged = ids_.find(joined);
      for (const std::string* token : {&a, &b, static_cast<const std::string*>(&joined)})
        if (!ids_.count(*token))
          fail_at(where + ".merges[" + std::to_string(i) + "]",
                  "token " + echo(*token) + " is not in the vocabulary");
      // A later duplicate takes the earlier's place, as in the reference.
      merges_[pair_key(ia->second, ib->second)] = {static_cast<std::int32_t>(i),
                                                   merged == ids_.end() ? -1 : merged->second};
    }
  }

  struct Symbol {
    std::size_t begin, end;  // bytes of the word
    std::int32_t id;         // -1: not in the vocabulary, merges with nothing
    std::int32_t prev, next;
    bool alive;
  };
  struct Candidate {
    std::int32_t rank;
    std::size_t pos;  // the left symbol's first byte: leftmost first among equal ranks
    std::int32_t left, right, left_id, right_id, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };

  void push_candidate(
      std::vector<Symbol>& s, std::int32_t left,
      std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>>& heap) const {
    const std::int32_t right = s[left].next;
    if (right < 0 || s[left].id < 0 || s[right].id < 0) return;
    const auto it = merges_.find(pair_key(s[left].id, s[right].id));
    if (it == merges_.end()) return;
    heap.push(
        {it->second.rank, s[left].begin, left, right, s[left].id, s[right].id, it->second.merged});
  }

  void merge_word(const std::string& w, std::vector<std::string>& tokens) const {
    std::vector<Symbol> s;
    s.reserve(w.size());
    std::string ch;
    for (std::size_t i = 0; i < w.size();) {
      std::size_t n;
      decode_utf8(w, i, &n);
      ch.assign(w, i, n);
      const auto it = ids_.find(ch);
      const auto k = static_cast<std::int32_t>(s.size());
      s.push_back({i, i + n, it == ids_.end() ? -1 : it->second, k - 1, -1, true});
      if (k > 0) s[k - 1].next = k;
      i += n;
    }
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
    for (std::int32_t k = 0; k + 1 < static_cast<std::int32_t>(s.size()); ++k)
      push_candidate(s, k, heap);
    while (!heap.empty()) {
      const Candidate c = heap.top();
      heap.pop();
      Symbol& l = s[c.left];
      if (!l.alive || l.next != c.right || l.id != c.left_id || !s[c.right].alive ||
          s[c.right].id != c.right_id)
        continue;
      Symbol& r = s[c.right];
      l.end = r.end;
      l.id = c.merged;
      l.next = r.next;
      r.alive = false;
      if (l.next >= 0) s[l.next].prev = c.left;
      if (l.prev >= 0) push_candidate(s, l.prev, heap);
      push_candidate(s, c.left, heap);
    }
    for (std::int32_t k = 0; k >= 0 && k < static_cast<std::int32_t>(s.size()); k = s[k].next)
      emit(w.substr(s[k].begin, s[k].end - s[k].begin), s[k].id, tokens);
  }

  // A symbol's token; out-of-vocabulary ones become their bytes' <0xXX> tokens (byte fallback)
  // or the unknown token, or are dropped when there is neither.
  void emit(std::string piece, std::int32_t id, std::vector<std::string>& tokens) const {
    // By its spelling, not the symbol's id: with ids shared by two tokens (a malformed file)
    // a merge may spell a token the vocabulary lacks.
    if (id >= 0 && ids_.count(piece)) {
      tokens.push_back(std::move(piece));
      return;
    }
    if (byte_fallback_) {
      bool all = true;
      for (const char c : piece) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        static const char* hex = "0123456789ABCDEF";
        for (const char c : piece) {
          const auto b = static_cast<unsigned char>(c);
          tokens.push_back(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">");
        }
        return;
      }
    }
    if (unk_token_) tokens.push_back(*unk_token_);
  }

  // Runs of unknown tokens become one (fuse_unk), within one section's tokens.
  void fuse_unknown(std::vector<std::string>& tokens, std::size_t first) const {
    const auto is_unk = [&](const std::string& t) {
      const auto it = ids_.find(t);
      return it == ids_.end() || it->second == *unk_id_;
    };
    std::size_t out = first;
    for (std::size_t i = first; i < tokens.size(); ++i) {
      if (out > first && is_unk(tokens[i]) && is_unk(tokens[out - 1])) continue;
      if (out != i) tokens[out] = std::move(tokens[i]);
      ++out;
    }
    tokens.resize(out);
  }

  const TokenIds& ids_;
  std::optional<std::string> unk_token_;
  std::optional<std::int32_t> unk_id_;
  bool byte_fallback_ = false, ignore_merges_ = false, fuse_unk_ = false;
  std::int32_t byte_ids_[256] = {};
  std::unordered_map<std::uint64_t, Merge> merges_;
};

}  // namespace

std::unique_ptr<const Model> make_bpe(const json& model, const TokenIds& ids, const Merges& merges,
                                      const std::string& where) {
  return std::make_unique<Bpe>(model, ids, merges, where);
}

}  // namespace mha::text
