#include "mha/io/json_file.hpp"
#include "mha/io/json_text.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/base/error.hpp"
#include "mha/base/message.hpp"

namespace mha {

namespace json_kind {
constexpr std::size_t kMiB = std::size_t{1} << 20;
// A config is a few hundred bytes; a sweep file a few kilobytes.
const JsonKind tool_config{"a JSON config", 16 * kMiB, 64, true, true};
const JsonKind sweep_file{"a sweep file", 16 * kMiB, 64, true, true};
// run.json lists every output with its checksum: a few hundred bytes each.
const JsonKind run_json{"a run.json", 64 * kMiB};
// Hub configs are a few kilobytes; a classifier's id2label may add tens.
const JsonKind model_config{"a config.json", 4 * kMiB};
// Gemma's tokenizer_config.json, with every added token, is ~1 MB.
const JsonKind tokenizer_config{"a tokenizer_config.json", 16 * kMiB};
// Gemma 3's tokenizer.json, the largest in use, is 33 MB.
const JsonKind tokenizer_json{"a tokenizer.json", 64 * kMiB};
// An index lists one line per tensor: ~100 KB for a 70B model.
const JsonKind shard_index{"a model.safetensors.index.json", 16 * kMiB};
// The safetensors format's own limit on its header (100,000,000 bytes).
const JsonKind safetensors_header{"a safetensors header", 100'000'000};
const JsonKind python_value{"a value", 16 * kMiB};
const JsonKind text_list{"a JSON array of strings", 64 * kMiB, 64, false, true};
}  // namespace json_kind

namespace {

// Builds the document through nlohmann's DOM builder while refusing depth
// past the kind's limit and repeated keys; the first error is kept and the
// parse stopped.
template <class Json>
class BoundedDom : public nlohmann::json_sax<Json> {
  using Sax = nlohmann::json_sax<Json>;

 public:
  BoundedDom(Json& root, const JsonKind& kind) : dom_(root, true), kind_(kind) {}

  bool null() override { return dom_.null(); }
  bool boolean(bool v) override { return dom_.boolean(v); }
  bool number_integer(typename Sax::number_integer_t v) override { return dom_.number_integer(v); }
  bool number_unsigned(typename Sax::number_unsigned_t v) override {
    return dom_.number_unsigned(v);
  }
  bool number_float(typename Sax::number_float_t v, const typename Sax::string_t& s) override {
    return dom_.number_float(v, s);
  }
  bool string(typename Sax::string_t& v) override { return dom_.string(v); }
  bool binary(typename Sax::binary_t& v) override { return dom_.binary(v); }
  bool start_object(std::size_t n) override {
    if (!deeper()) return false;
    keys_.emplace_back();
    return dom_.start_object(n);
  }
  bool key(typename Sax::string_t& k) override {
    if (!keys_.back().insert(k).second) {
      error_ = "duplicate key " + echo(k) + "; each key may appear once";
      return false;
    }
    return dom_.key(k);
  }
  bool end_object() override {
    keys_.pop_back();
    --depth_;
    return dom_.end_object();
  }
  bool start_array(std::size_t n) override {
    if (!deeper()) return false;
    keys_.emplace_back();  // unused; keeps keys_ in step with the open containers
    return dom_.start_array(n);
  }
  bool end_array() override {
    keys_.pop_back();
    --depth_;
    return dom_.end_array();
  }
  bool parse_error(std::size_t byte, const std::string&,
                   const nlohmann::detail::exception& e) override {
    byte_ = byte;
    // "[json.exception.parse_error.101] parse error at line 1, column 2: syntax error ...":
    // keep what follows the position, which the caller states itself.
    std::string what = e.what();
    const auto tag = what.find("] ");
    if (tag != std::string::npos) what = what.substr(tag + 2);
    const auto syntax = what.find("syntax error while parsing ");
    if (syntax != std::string::npos) what = what.substr(syntax);
    error_ = what;
    return false;
  }

  const std::string& error() const { return error_; }
  std::size_t byte() const { return byte_; }

 private:
  bool deeper() {
    if (++depth_ <= kind_.max_depth) return true;
    error_ = "JSON nested more than " + std::to_string(kind_.max_depth) + " levels deep";
    return false;
  }

  nlohmann::detail::json_sax_dom_parser<Json> dom_;
  const JsonKind& kind_;
  std::vector<std::unordered_set<std::string>> keys_;
  int depth_ = 0;
  std::string error_;
  std::size_t byte_ = 0;  // 1-based offset of a syntax error, 0 for other errors
};

template <class Json>
Json parse(std::string_view text, const std::string& source, const JsonKind& kind) {
  if (text.size() > kind.max_bytes)
    fail_input(source + ": " + std::to_string(text.size()) + " bytes, over the limit of " +
               std::to_string(kind.max_bytes) + " for " + kind.what);
  // JSON holds no raw NUL byte (strings escape it), and the parser would take
  // one for the end of the input: a valid document followed by a NUL and
  // garbage would pass.
  if (const auto nul = text.find('\0'); nul != std::string_view::npos) {
    std::size_t line =
        1 + static_cast<std::size_t>(std::count(text.begin(), text.begin() + nul, '\n'));
    fail_input(source + ": a NUL byte at offset " + std::to_string(nul) + " (line " +
               std::to_string(line) + "); expected " + kind.what + ", which holds none");
  }
  Json root;
  BoundedDom<Json> sax(root, kind);
  bool ok = false;
  try {
    ok = Json::sax_parse(text.begin(), text.end(), &sax, nlohmann::detail::input_format_t::json,
                         /*strict=*/true, kind.comments);
  } catch (const nlohmann::json::exception& e) {
    // A number too large for a double ("number overflow parsing '1e400'").
    std::string what = e.what();
    const auto tag = what.find("] ");
    if (tag != std::string::npos) what = what.substr(tag + 2);
    fail_input(source + ": invalid JSON: " + one_line(what, 120) + " (expected " + kind.what + ")");
  }
  if (ok) return root;
  if (sax.byte() == 0) fail_input(source + ": " + sax.error() + " (expected " + kind.what + ")");
  // A syntax error: its line and column as a text editor shows them.
  const std::size_t byte = std::min<std::size_t>(sax.byte(), text.size());
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i + 1 < sax.byte() && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else if ((static_cast<unsigned char>(text[i]) & 0xc0) != 0x80) {
      ++column;
    }
  }
  // A '}' or ']' right after a comma is the usual slip: say so.
  std::size_t at = byte;
  while (at > 1 && std::isspace(static_cast<unsigned char>(text[at - 2]))) --at;
  const bool trailing_comma = byte >= 2 && (text[byte - 1] == '}' || text[byte - 1] == ']') &&
                              at >= 2 && text[at - 2] == ',';
  fail_input(source + ":" + std::to_string(line) + ":" + std::to_string(column) +
             ": invalid JSON: " + one_line(sax.error(), 160) +
             (trailing_comma ? " (JSON allows no comma before a closing bracket)" : "") +
             " (reading " + kind.what + ")");
}

}  // namespace

nlohmann::json parse_json(std::string_view text, const std::string& source, const JsonKind& kind) {
  return parse<nlohmann::json>(text, source, kind);
}
nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& source,
                                          const JsonKind& kind) {
  return parse<nlohmann::ordered_json>(text, source, kind);
}

namespace {

// What `path` is, refused by name when it is missing, a directory, or (unless
// `streams`) anything but a regular file: before it is opened.
struct stat input_stat(const std::string& path, const std::string& what, bool streams) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    fail_input(path + ": cannot open (" + std::strerror(errno) + "); expected " + what);
  if (S_ISDIR(st.st_mode)) fail_input(path + ": is a directory; expected " + what);
  if (!streams && !S_ISREG(st.st_mode))
    fail_input(path + ": is not a regular file (a FIFO, socket or device); expected " + what);
  return st;
}

}  // namespace

void require_regular_file(const std::string& path, const std::string& what) {
  input_stat(path, what, false);
}

std::string read_json_text(const std::string& path, const JsonKind& kind) {
  const std::string what = kind.what;
  struct stat st = input_stat(path, what, kind.streams);
  if (S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_size) > kind.max_bytes)
    fail_input(path + ": " + std::to_string(st.st_size) + " bytes, over the limit of " +
               std::to_string(kind.max_bytes) + " for " + what);
  // Regular files are opened non-blocking all the same: the path may have been
  // replaced by a FIFO since the stat.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (kind.streams ? 0 : O_NONBLOCK));
  if (fd < 0) fail_input(path + ": cannot open (" + std::strerror(errno) + "); expected " + what);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (!kind.streams) {
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
      fail_input(path + ": is not a regular file; expected " + what);
  }
  // Read at most one chunk past the limit: a file that grows, or an endless
  // stream (/dev/zero, a pipe), is refused at the limit. Chunks are joined
  // once at the end, so that the peak is the text and its chunks, never the
  // doublings of a growing string.
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  std::vector<std::string> chunks;
  std::size_t total = 0;
  for (;;) {
    std::string chunk(kChunk, '\0');
    std::size_t got = 0;
    while (got < kChunk) {
      const ssize_t n = ::read(fd, chunk.data() + got, kChunk - got);
      if (n < 0) {
        if (errno == EINTR) continue;
        fail_input(path + ": cannot read (" + std::strerror(errno) + ")");
      }
      if (n == 0) break;
      got += static_cast<std::size_t>(n);
    }
    chunk.resize(got);
    total += got;
    if (total > kind.max_bytes)
      fail_input(path + ": over " + std::to_string(kind.max_bytes) + " bytes, the limit for " +
                 what);
    const bool end = got < kChunk;
    chunks.push_back(std::move(chunk));
    if (end) break;
  }
  if (chunks.size() == 1) return std::move(chunks.front());
  std::string text;
  text.reserve(total);
  for (std::string& c : chunks) {
    text += c;
    std::string().swap(c);
  }
  return text;
}

nlohmann::json read_json_file(const std::string& path, const JsonKind& kind) {
  return parse_json(read_json_text(path, kind), path, kind);
}
nlohmann::ordered_json read_ordered_json_file(const std::string& path, const JsonKind& kind) {
  return parse_ordered_json(read_json_text(path, kind), path, kind);
}

std::string dump_json(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string dump_json(const nlohmann::ordered_json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace mha
