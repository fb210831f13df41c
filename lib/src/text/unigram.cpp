// Unigram (SentencePiece's unigram language model: T5, ALBERT, XLNet, mT5): each word is cut into
// the pieces whose scores (log probabilities) add up to the most, by Viterbi over the word's
// characters, as huggingface/tokenizers' Unigram::encode_optimized does (models/unigram/
// model.rs; the reference's TokenLattice finds the same path and breaks ties the same way: the
// first candidate to reach a position, in order of start, then of length, keeps it).
//
// A character that begins no piece of exactly its own length is unknown: a node of score
// min_score - kUnkPenalty with the unknown id. Adjacent unknown tokens are fused into one, across
// the words of a section as the reference does; with byte_fallback, an unknown token becomes the
// <0xXX> pieces of its bytes when the vocabulary has all of them (the Rust library's rule; the
// reference has no byte fallback for Unigram).
#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <string_view>

#include "json_fields.hpp"
#include "mha/base/message.hpp"
#include "model.hpp"
#include "unicode.hpp"

namespace mha::text {
namespace {

constexpr double kUnkPenalty = 10.0;  // SentencePiece's kUnkPenalty
constexpr std::int32_t kNoPiece = -1;

// The pieces as a byte trie whose nodes keep their children contiguous and sorted by label: a
// prefix search from one position costs O(bytes matched × log 256), so a word of n bytes costs
// O(n × longest piece) whatever the size of the vocabulary.
class PieceTrie {
 public:
  explicit PieceTrie(const std::vector<std::string>& pieces) {
    std::vector<std::int32_t> order;
    order.reserve(pieces.size());
    for (std::size_t i = 0; i < pieces.size(); ++i)
      if (!pieces[i].empty()) order.push_back(static_cast<std::int32_t>(i));
    // std::string compares bytes as unsigned char, the order the labels need.
    std::sort(order.begin(), order.end(),
              [&](std::int32_t a, std::int32_t b) { return pieces[a] < pieces[b]; });
    nodes_.push_back({0, 0, kNoPiece});
    labels_.push_back(0);
    // Breadth first, without recursion (a piece may be as long as the file): each range of
    // `order` shares its first `depth` bytes, and becomes the subtree of `node`.
    struct Range {
      std::uint32_t node;
      std::size_t lo, hi, depth;
    };
    std::deque<Range> queue{{0, 0, order.size(), 0}};
    while (!queue.empty()) {
      const Range r = queue.front();
      queue.pop_front();
      std::size_t lo = r.lo;
      // Pieces are unique, so at most one ends here, and it sorts first.
      if (lo < r.hi && pieces[order[lo]].size() == r.depth) nodes_[r.node].id = order[lo++];
      const auto first = static_cast<std::uint32_t>(nodes_.size());
      std::uint32_t count = 0;
      for (std::size_t i = lo; i < r.hi;) {
        const auto label = static_cast<unsigned char>(pieces[order[i]][r.depth]);
        std::size_t j = i + 1;
        while (j < r.hi && static_cast<unsigned char>(pieces[order[j]][r.depth]) == label) ++j;
        nodes_.push_back({0, 0, kNoPiece});
        labels_.push_back(label);
        queue.push_back({first + count, i, j, r.depth + 1});
        ++count;
        i = j;
      }
      nodes_[r.node].first_child = first;
      nodes_[r.node].children = count;
    }
  }

  // f(length, id) for each piece that begins text[begin...], shortest first.
  template <class F>
  void prefixes(std::string_view text, std::size_t begin, F&& f) const {
    std::uint32_t node = 0;
    for (std::size_t k = begin; k < text.size(); ++k) {
      const Node& n = nodes_[node];
      const unsigned char* lo = labels_.data() + n.first_child;
      const unsigned char* hi = lo + n.children;
      const auto c = static_cast<unsigned char>(text[k]);
      const unsigned char* at = std::lower_bound(lo, hi, c);
      if (at == hi || *at != c) return;
      node = static_cast<std::uint32_t>(at - labels_.data());
      if (nodes_[node].id != kNoPiece) f(k + 1 - begin, nodes_[node].id);
    }
  }

 private:
  struct Node {
    std::uint32_t first_child, children;
    std::int32_t id;  // the piece ending here, or kNoPiece
  };
  std::vector<Node> nodes_;
  std::vector<unsigned char> labels_;  // labels_[k]: the byte that leads to nodes_[k]
};

class Unigram : public Model {
 public:
  Unigram(const json& model, UnigramVocab vocab, const std::string& where)
      : pieces_(std::move(vocab.pieces)), scores_(std::move(vocab.scores)), trie_(pieces_) {
    if (const json* unk = optional_field(model, "unk_id")) {
      if (!unk->is_number_integer() || unk->get<std::int64_t>() < 0 ||
          unk->get<std::int64_t>() >= static_cast<std::int64_t>(pieces_.size()))
        fail_at(where + ".unk_id", "expected the index of a piece of model.vocab (0 to " +
                                       std::to_string(pieces_.size() - 1) + "), got " +
                                       describe(*unk));
      unk_id_ = static_cast<std::int32_t>(unk->get<std::int64_t>());
    }
    byte_fallback_ = bool_field(model, "byte_fallback", where, false);
    unk_score_ = *std::min_element(scores_.begin(), scores_.end()) - kUnkPenalty;
    // The reference scores the unknown piece, should the text spell it, as an unknown
    // character (the Rust library keeps its vocabulary score; SentencePiece never matches it).
    if (unk_id_) scores_[*unk_id_] = unk_score_;
    std::fill(std::begin(byte_ids_), std::end(byte_ids_), kNoPiece);
    if (byte_fallback_) {
      for (std::size_t i = 0; i < pieces_.size(); ++i) {
        const int b = byte_piece(pieces_[i]);
        if (b >= 0 && byte_ids_[b] == kNoPiece) byte_ids_[b] = static_cast<std::int32_t>(i);
      }
    }
  }

  void tokenize(const std::vector<std::string>& words,
                std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::vector<bool> unknown;  // out[k] is a run of unknown nodes
    std::vector<Best> best;
    std::vector<std::size_t> ends;  // of the best path's nodes, last first
    for (const auto& w : words) {
      if (w.empty()) continue;
      viterbi(w, best);
      ends.clear();
      for (std::size_t end = w.size(); end > 0; end = best[end].start) ends.push_back(end);
      for (auto it = ends.rbegin(); it != ends.rend(); ++it) {
        const std::size_t end = *it, begin = best[end].start;
        const std::int32_t id = best[end].id;
        const bool unk = id == kNoPiece || (unk_id_ && id == *unk_id_);
        if (unk && !unknown.empty() && unknown.back()) {
          // The reference's fuse_unk: appended, unless the token so far is the unknown piece.
          if (!(unk_id_ && out.back() == pieces_[*unk_id_]))
            out.back().append(w, begin, end - begin);
          continue;
        }
        out.emplace_back(w, begin, end - begin);
        unknown.push_back(unk);
      }
    }
    for (std::size_t k = 0; k < out.size(); ++k) {
      if (!unknown[k] || (unk_id_ && out[k] == pieces_[*unk_id_])) {
        tokens.push_back(std::move(out[k]));
      } else if (byte_fallback_ && has_bytes(out[k])) {
        for (const char c : out[k])
          tokens.push_back(pieces_[byte_ids_[static_cast<unsigned char>(c)]]);
      } else if (unk_id_) {
        tokens.push_back(std::move(out[k]));  // not in the vocabulary: the unknown id
      }
      // Without an unknown piece or bytes for it, unknown text is dropped, as BPE does.
    }
  }

  std::optional<std::int32_t> unk_id() const override { return unk_id_; }
  bool byte_fallback() const override { return byte_fallback_; }

 private:
  struct Best {
    double score;       // of the best path ending here
    std::size_t start;  // where its last node starts; npos: no path yet
    std::int32_t id;    // that node's piece (kNoPiece: unknown without an unknown piece)
  };

  // best[e] for each character boundary e of w: the best path over w[0, e).
  void viterbi(const std::string& w, std::vector<Best>& best) const {
    constexpr std::size_t none = std::string::npos;
    best.assign(w.size() + 1, {0.0, none, kNoPiece});
    for (std::size_t start = 0; start < w.size();) {
      const double here = best[start].score;
      const std::size_t length = std::max<std::size_t>(1, utf8_sequence_length(w, start));
      bool single = false;
      const auto reach = [&](std::size_t n, std::int32_t id, double score) {
        Best& b = best[start + n];
        const double candidate = score + here;
        if (b.start == none || candidate > b.score) b = {candidate, start, id};
      };
      trie_.prefixes(w, start, [&](std::size_t n, std::int32_t id) {
        reach(n, id, scores_[id]);
        single = single || n == length;
      });
      if (!single) reach(length, unk_id_ ? *unk_id_ : kNoPiece, unk_score_);
      start += length;
    }
  }

  // "<0x41>" → 0x41 (two upper-case hex digits, as the Rust library spells them), else -1.
  static int byte_piece(const std::string& p) {
    const auto hex = [](char c) {
      return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    };
    if (p.size() != 6 || p.compare(0, 3, "<0x") != 0 || p[5] != '>') return -1;
    const int hi = hex(p[3]), lo = hex(p[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
  }
  bool has_bytes(const std::string& s) const {
    for (const char c : s)
      if (byte_ids_[static_cast<unsigned char>(c)] == kNoPiece) return false;
    return true;
  }

  std::vector<std::string> pieces_;
  std::vector<double> scores_;
  PieceTrie trie_;
  std::optional<std::int32_t> unk_id_;
  double unk_score_ = 0;
  bool byte_fallback_ = false;
  std::int32_t byte_ids_[256];
};

}  // namespace

UnigramVocab read_unigram_vocab(const json& model, const std::string& where) {
  const json* vocab = optional_field(model, "vocab");
  if (!vocab || !vocab->is_array())
    fail_at(where, "expected an array \"vocab\" of [piece, score] pairs");
  if (vocab->empty()) fail_at(where + ".vocab", "expected at least one [piece, score] pair");
  UnigramVocab v;
  v.pieces.reserve(vocab->size());
  v.scores.reserve(vocab->size());
  for (std::size_t i = 0; i < vocab->size(); ++i) {
    const json& e = (*vocab)[i];
    const std::string at = where + ".vocab[" + std::to_string(i) + "]";
    if (!e.is_array() || e.size() != 2)
      fail_at(at, "expected [piece, score], got " +
                      (e.is_array() ? "an array of " + std::to_string(e.size()) : describe(e)));
    if (!e[0].is_string()) fail_at(at, "expected the piece as a string, got " + describe(e[0]));
    if (!e[1].is_number()) fail_at(at, "expected the score as a number, got " + describe(e[1]));
    const double score = e[1].get<double>();
    // Scores are added along paths and compared: an infinite one would decide every path.
    if (!std::isfinite(score)) fail_at(at, "expected a finite score, got " + std::to_string(score));
    v.pieces.push_back(e[0].get<std::string>());
    v.scores.push_back(score);
  }
  return v;
}

std::unique_ptr<const Model> make_unigram(const json& model, UnigramVocab vocab,
                                          const std::string& where) {
  return std::make_unique<Unigram>(model, std::move(vocab), where);
}

}  // namespace mha::text
