#include "tokenizer_json.hpp"
#include "mha/base/message.hpp"
#include "mha/io/json_file.hpp"

#include <limits>
#include <unordered_set>

namespace mha::text {
namespace {

using Dom = nlohmann::detail::json_sax_dom_parser<json>;

// Forwards every event to the DOM builder except those inside model.vocab and model.merges,
// which it keeps itself. `keys_` holds, per open container, the last key seen in it.
class Reader : public nlohmann::json_sax<json> {
 public:
  Reader(TokenizerJson& out, const std::string& name) : out_(out), name_(name), dom_(out.root) {}

  bool null() override {
    return scalar([&] { return dom_.null(); }, "null");
  }
  bool boolean(bool v) override {
    return scalar([&] { return dom_.boolean(v); }, "a boolean");
  }
  bool number_integer(number_integer_t v) override {
    if (mode_ == Mode::vocab && depth_in_mode_ == 1) return vocab_id(v);
    return scalar([&] { return dom_.number_integer(v); }, "a number");
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ == Mode::vocab && depth_in_mode_ == 1)
      return vocab_id(static_cast<std::int64_t>(
          std::min<number_unsigned_t>(v, std::numeric_limits<std::int64_t>::max())));
    return scalar([&] { return dom_.number_unsigned(v); }, "a number");
  }
  bool number_float(number_float_t v, const string_t& s) override {
    return scalar([&] { return dom_.number_float(v, s); }, "a number");
  }
  bool string(string_t& v) override {
    if (mode_ == Mode::merges && depth_in_mode_ == 1) {
      const std::size_t space = v.find(' ');
      if (space == std::string::npos)
        return fail(merge_where() + ": expected two tokens separated by a space, got " + echo(v));
      const std::size_t end = v.find(' ', space + 1);
      out_.merges.emplace_back(
          v.substr(0, space),
          v.substr(space + 1, end == std::string::npos ? std::string::npos : end - space - 1));
      return true;
    }
    if (mode_ == Mode::merges && depth_in_mode_ == 2) {
      pair_.push_back(std::move(v));
      return true;
    }
    return scalar([&] { return dom_.string(v); }, "a string");
  }
  bool binary(binary_t& v) override { return dom_.binary(v); }

  bool start_object(std::size_t n) override {
    if (mode_ != Mode::dom) return nested("an object");
    if (!deeper()) return false;
    keys_.emplace_back();
    seen_.emplace_back();
    if (at("vocab")) return enter(Mode::vocab);
    return dom_.start_object(n);
  }
  bool key(string_t& k) override {
    if (mode_ == Mode::vocab && depth_in_mode_ == 1) {
      pending_key_ = std::move(k);
      if (out_.vocab.count(pending_key_))
        return fail(name_ + ": model.vocab: duplicate token " + echo(pending_key_) +
                    "; each token may appear once");
      return true;
    }
    if (!seen_.back().insert(k).second)
      return fail(name_ + ": duplicate key " + echo(k) + "; each key may appear once");
    keys_.back() = k;
    return dom_.key(k);
  }
  bool end_object() override {
    if (mode_ != Mode::dom) return leave();
    keys_.pop_back();
    seen_.pop_back();
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) override {
    if (mode_ == Mode::merges && depth_in_mode_ == 1) {
      ++depth_in_mode_;
      pair_.clear();
      return true;
    }
    if (mode_ != Mode::dom) return nested("an array");
    if (!deeper()) return false;
    keys_.emplace_back();
    seen_.emplace_back();
    if (at("merges")) return enter(Mode::merges);
    return dom_.start_array(n);
  }
  bool end_array() override {
    if (mode_ == Mode::merges && depth_in_mode_ == 2) {
      --depth_in_mode_;
      if (pair_.size() != 2) return fail(merge_where() + ": expected [\"a\", \"b\"]");
      out_.merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      return true;
    }
    if (mode_ != Mode::dom) return leave();
    keys_.pop_back();
    seen_.pop_back();
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    std::string what = e.what();  // "[json.exception.parse_error.101] parse error at line 1, ..."
    const auto at = what.find("] ");
    if (at != std::string::npos) what = what.substr(at + 2);
    if (error_.empty()) error_ = name_ + ": not JSON (" + one_line(what, 160) + ")";
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  enum class Mode { dom, vocab, merges };

  bool deeper() {
    if (++depth_ <= json_kind::tokenizer_json.max_depth) return true;
    return fail(name_ + ": JSON nested more than " +
                std::to_string(json_kind::tokenizer_json.max_depth) + " levels deep");
  }

  // The container just opened is root.model.<key>.
  bool at(const char* key) const {
    return keys_.size() == 3 && keys_[0] == "model" && keys_[1] == key;
  }
  bool enter(Mode m) {
    keys_.pop_back();
    seen_.pop_back();
    --depth_;
    mode_ = m;
    depth_in_mode_ = 1;
    (m == Mode::vocab ? out_.has_vocab : out_.has_merges) = true;
    return true;
  }
  // The end of model.vocab or model.merges: the DOM gets null in their place.
  bool leave() {
    if (--depth_in_mode_ > 0) return true;
    mode_ = Mode::dom;
    return dom_.null();
  }
  template <class F>
  bool scalar(F&& forward, const char* what) {
    if (mode_ == Mode::dom) return forward();
    return nested(what);
  }
  bool nested(const char* what) {
    if (mode_ == Mode::vocab)
      return fail(name_ + ": model.vocab[" + echo(pending_key_) +
                  "]: expected a token id (an integer from 0 to 2^31 - 1), got " + what);
    return fail(merge_where() + ": expected \"a b\" or [\"a\", \"b\"], got " + what);
  }
  bool vocab_id(std::int64_t v) {
    if (v < 0 || v > std::numeric_limits<std::int32_t>::max())
      return fail(name_ + ": model.vocab[" + echo(pending_key_) +
                  "]: expected a token id (an integer from 0 to 2^31 - 1), got " +
                  std::to_string(v));
    // Two tokens with one id would make decoding that id ambiguous.
    if (!ids_.insert(static_cast<std::int32_t>(v)).second)
      return fail(name_ + ": model.vocab[" + echo(pending_key_) + "]: id " + std::to_string(v) +
                  " is already another token's; expected each id once");
    out_.vocab[pending_key_] = static_cast<std::int32_t>(v);
    return true;
  }
  std::string merge_where() const {
    return name_ + ": model.merges[" + std::to_string(out_.merges.size()) + "]";
  }
  bool fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
    return false;
  }

  TokenizerJson& out_;
  const std::string& name_;
  Dom dom_;
  std::vector<std::string> keys_;
  std::vector<std::unordered_set<std::string>> seen_;  // the keys of each open container
  std::unordered_set<std::int32_t> ids_;               // the ids model.vocab gave so far
  int depth_ = 0;
  Mode mode_ = Mode::dom;
  int depth_in_mode_ = 0;
  std::string pending_key_;
  std::vector<std::string> pair_;
  std::string error_;
};

}  // namespace

TokenizerJson read_tokenizer_json(std::string_view text, const std::string& name) {
  if (text.size() > json_kind::tokenizer_json.max_bytes)
    fail_input(name + ": " + std::to_string(text.size()) + " bytes, over the limit of " +
               std::to_string(json_kind::tokenizer_json.max_bytes) + " for a tokenizer.json");
  TokenizerJson out;
  out.vocab.reserve(text.size() / 24);
  Reader reader(out, name);
  const bool ok = json::sax_parse(text.begin(), text.end(), &reader);
  if (!ok) fail_input(reader.error().empty() ? name + ": not JSON" : reader.error());
  return out;
}

}  // namespace mha::text
