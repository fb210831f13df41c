#include "mha/io/npy.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <type_traits>

#include "mha/base/error.hpp"
#include "mha/io/provided_input.hpp"
#include "mha/io/stream_input.hpp"

namespace mha {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicLen = 6;
// NumPy itself refuses headers over 10000 bytes unless told to trust the
// file; we are more lenient but still refuse before allocating.
constexpr std::size_t kMaxHeaderLen = 1 << 20;
// Every header NumPy writes makes the data start on a 64-byte boundary.
constexpr std::size_t kAlign = 64;
// NumPy pads the header so that the first axis can grow in place to this many
// digits; we reproduce it to write byte-identical files.
constexpr std::size_t kGrowthAxisMaxDigits = 21;

struct DTypeInfo {
  DType dtype;
  char kind;  // NumPy's type character: descr is byte order + kind + size
  std::size_t size;
  const char* name;
};
// Indexed by DType, so it must list them in declaration order.
constexpr DTypeInfo kDTypes[] = {
    {DType::f2, 'f', 2, "float16"}, {DType::f4, 'f', 4, "float32"}, {DType::f8, 'f', 8, "float64"},
    {DType::b1, 'b', 1, "bool"},    {DType::i1, 'i', 1, "int8"},    {DType::i2, 'i', 2, "int16"},
    {DType::i4, 'i', 4, "int32"},   {DType::i8, 'i', 8, "int64"},   {DType::u1, 'u', 1, "uint8"},
    {DType::u2, 'u', 2, "uint16"},  {DType::u4, 'u', 4, "uint32"},  {DType::u8, 'u', 8, "uint64"},
};
constexpr bool table_in_order() {
  for (std::size_t i = 0; i < std::size(kDTypes); ++i)
    if (static_cast<std::size_t>(kDTypes[i].dtype) != i) return false;
  return true;
}
static_assert(table_in_order(), "kDTypes must follow the order of DType");

const DTypeInfo& info(DType dtype) {
  return kDTypes[static_cast<std::size_t>(dtype)];
}

// A stream can fail without an OS error, leaving errno at 0.
std::string errno_str(int err) {
  return err ? std::strerror(err) : "unknown error";
}

// Product of the dims times `item`, or false on overflow. Dims of zero make
// the result zero but the other dims must still be representable together,
// as NumPy requires.
bool checked_bytes(const std::vector<std::size_t>& shape, std::size_t item, std::size_t& out) {
  const std::size_t limit = static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max());
  std::size_t n = item;
  bool empty = false;
  for (std::size_t d : shape) {
    if (d == 0) {
      empty = true;
      continue;
    }
    if (n > limit / d) return false;
    n *= d;
  }
  out = empty ? 0 : n;
  return true;
}

// Messages stay on one line even when a header holds control bytes.
std::string printable(char c) {
  if (c >= 0x20 && c < 0x7f) return std::string("'") + c + "'";
  char buf[16];
  std::snprintf(buf, sizeof buf, "byte 0x%02x", static_cast<unsigned char>(c));
  return buf;
}

// A string from the file, quoted in a message: bytes outside printable ASCII
// become \xNN so that a hostile header cannot break the message into lines
// or send escape sequences to a terminal. Long strings are cut.
std::string escaped(const std::string& s) {
  constexpr std::size_t kMaxShown = 64;
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    const char c = s[i];
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += c;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
      out += buf;
    }
  }
  if (s.size() > kMaxShown) out += "...";
  return out;
}

// What the header says, before any data is looked at.
struct Header {
  unsigned major = 1, minor = 0;
  std::string descr;  // as written, once parse_descr accepted it
  DType dtype = DType::f4;
  bool big_endian = false;
  bool fortran_order = false;
  std::vector<std::size_t> shape;
  std::size_t data_offset = 0;  // magic, version, length and dict
  std::size_t data_bytes = 0;
};

// A descr is byte order ('<', '>', '=' or '|'), kind and item size: '<f4'.
// Kinds that can never be supported get a hint so users know what to fix.
DType parse_descr(const std::string& descr, bool& big_endian, const std::string& name) {
  auto refuse = [&](const std::string& why) -> DType {
    fail_input(name + ": unsupported dtype '" + escaped(descr) + "'" + why +
               "; expected float16/32/64, bool or an integer type");
  };
  if (descr == "O" || (descr.size() == 2 && descr[1] == 'O'))
    fail_input(name + ": dtype '" + escaped(descr) +
               "' holds pickled Python objects, which are not supported");
  if (descr.size() < 3) return refuse("");
  const char order = descr[0];
  const char kind = descr[1];
  if (std::strchr("<>=|", order) == nullptr || order == '\0') return refuse("");
  switch (kind) {
    case 'c':
      return refuse(" (complex)");
    case 'U':
    case 'S':
    case 'a':
      return refuse(" (strings)");
    case 'M':
    case 'm':
      return refuse(" (datetime)");
    case 'V':
      return refuse(" (raw or structured bytes)");
    default:
      break;
  }
  const std::string size = descr.substr(2);
  for (const auto& row : kDTypes) {
    if (row.kind != kind || size != std::to_string(row.size)) continue;
    // '|' means "byte order not applicable", which only holds for one byte.
    if (order == '|' && row.size != 1) return refuse("");
    big_endian = order == '>' || (order == '=' && host_is_big_endian());
    return row.dtype;
  }
  return refuse("");
}

// A recursive-descent reader for the one Python dict literal NumPy writes:
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// NumPy evaluates it as Python; we accept the same literal syntax (either
// quote, any key order, optional trailing commas) but nothing beyond it.
class HeaderParser {
 public:
  HeaderParser(const char* begin, const char* end, const std::string& name)
      : p_(begin), end_(end), name_(name) {}

  void parse(Header& h) {
    bool seen_descr = false, seen_order = false, seen_shape = false;
    skip_ws();
    expect('{', "the header to start with '{'");
    for (;;) {
      skip_ws();
      if (accept('}')) break;
      if (at_end() || (*p_ != '\'' && *p_ != '"'))
        fail("expected a quoted key or '}', found " + found());
      const std::string key = parse_string();
      skip_ws();
      expect(':', "':' after key '" + escaped(key) + "'");
      skip_ws();
      if (key == "descr") {
        mark(seen_descr, key);
        parse_descr_value(h);
      } else if (key == "fortran_order") {
        mark(seen_order, key);
        h.fortran_order = parse_bool(key);
      } else if (key == "shape") {
        mark(seen_shape, key);
        h.shape = parse_shape();
      } else {
        fail("unexpected key '" + escaped(key) +
             "' (expected only 'descr', 'fortran_order' and 'shape')");
      }
      skip_ws();
      if (accept('}')) break;
      expect(',', "',' or '}' after the value of '" + key + "'");
    }
    skip_ws();
    if (!at_end()) fail("unexpected " + found() + " after the closing '}'");
    if (!seen_descr) fail("missing key 'descr'");
    if (!seen_order) fail("missing key 'fortran_order'");
    if (!seen_shape) fail("missing key 'shape'");
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    fail_input(name_ + ": .npy header: " + what);
  }
  bool at_end() const { return p_ == end_; }
  std::string found() const { return at_end() ? "end of header" : printable(*p_); }
  // The NUL test matters: strchr() finds the terminator of its string.
  void skip_ws() {
    while (!at_end() && std::strchr(" \t\n\r\f\v", *p_) != nullptr && *p_ != '\0') ++p_;
  }
  bool accept(char c) {
    if (at_end() || *p_ != c) return false;
    ++p_;
    return true;
  }
  void expect(char c, const std::string& what) {
    if (!accept(c)) fail("expected " + what + ", found " + found());
  }
  void mark(bool& seen, const std::string& key) {
    if (seen) fail("duplicate key '" + escaped(key) + "'");
    seen = true;
  }

  std::string parse_string() {
    const char quote = *p_++;
    std::string s;
    for (;;) {
      if (at_end()) fail("unterminated string");
      const char c = *p_++;
      if (c == quote) return s;
      if (c == '\n') fail("unterminated string");
      // Escapes never occur in valid dtypes; keeping the escaped character
      // is enough to find the end and report the string.
      if (c == '\\') {
        if (at_end()) fail("unterminated string");
        s += *p_++;
      } else {
        s += c;
      }
    }
  }

  std::string parse_word() {
    std::string w;
    while (!at_end() && (std::isalnum(static_cast<unsigned char>(*p_)) || *p_ == '_')) w += *p_++;
    return w;
  }

  void parse_descr_value(Header& h) {
    if (!at_end() && *p_ == '[')
      fail_input(name_ + ": structured dtypes (a list as 'descr') are not supported");
    if (at_end() || (*p_ != '\'' && *p_ != '"'))
      fail("expected a string as the value of 'descr', found " + found());
    const std::string descr = parse_string();
    h.dtype = parse_descr(descr, h.big_endian, name_);
    h.descr = descr;
  }

  bool parse_bool(const std::string& key) {
    if (!at_end() && (*p_ == '\'' || *p_ == '"')) {
      const std::string quote = found();
      fail("expected True or False as the value of '" + key + "', found " + quote +
           " (the string '" + escaped(parse_string()) + "', not the bare word)");
    }
    const std::string w = parse_word();
    if (w == "True") return true;
    if (w == "False") return false;
    fail("expected True or False as the value of '" + key + "', found " +
         (w.empty() ? found() : "'" + w + "'"));
  }

  std::size_t parse_dim() {
    const std::string bad = "expected a non-negative integer in 'shape', found ";
    if (!at_end() && *p_ == '-') {
      const char* start = p_++;
      while (!at_end() && std::isalnum(static_cast<unsigned char>(*p_))) ++p_;
      fail(bad + "'-' (negative dimension " + escaped(std::string(start, p_)) + ")");
    }
    if (at_end() || !std::isdigit(static_cast<unsigned char>(*p_))) fail(bad + found());
    const char* start = p_;
    std::size_t v = 0;
    while (!at_end() && std::isdigit(static_cast<unsigned char>(*p_))) {
      const std::size_t digit = static_cast<std::size_t>(*p_ - '0');
      if (v > (std::numeric_limits<std::size_t>::max() - digit) / 10) {
        while (!at_end() && std::isdigit(static_cast<unsigned char>(*p_))) ++p_;
        fail("dimension " + escaped(std::string(start, p_)) + " in 'shape' is too large");
      }
      v = v * 10 + digit;
      ++p_;
    }
    const auto in_token = [](char c) {
      return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_';
    };
    if (!at_end() && in_token(*p_)) {
      while (!at_end() && in_token(*p_)) ++p_;
      fail(bad + "'" + escaped(std::string(start, p_)) + "'");
    }
    return v;
  }

  std::vector<std::size_t> parse_shape() {
    expect('(', "a tuple as the value of 'shape'");
    std::vector<std::size_t> shape;
    bool trailing_comma = false;
    for (;;) {
      skip_ws();
      if (accept(')')) break;
      shape.push_back(parse_dim());
      skip_ws();
      trailing_comma = accept(',');
      if (!trailing_comma) {
        expect(')', "',' or ')' in 'shape'");
        break;
      }
    }
    // In Python "(3)" is the integer 3, not a tuple.
    if (shape.size() == 1 && !trailing_comma)
      fail("'shape' (" + std::to_string(shape[0]) + ") is not a tuple; a 1-d shape is written (" +
           std::to_string(shape[0]) + ",)");
    return shape;
  }

  const char* p_;
  const char* end_;
  const std::string& name_;
};

// Reads the fixed-size preamble (magic, version, header length) from the
// first bytes of a file of `file_size` bytes. Returns the offset of the dict.
std::size_t parse_preamble(const unsigned char* p, std::size_t avail, std::uint64_t file_size,
                           const std::string& name, std::size_t& header_len, Header& h) {
  const auto too_short = [&]() {
    fail_input(name + ": file is " + std::to_string(file_size) +
               " bytes, too short for a .npy header");
  };
  if (std::memcmp(p, kMagic, std::min(avail, kMagicLen)) != 0)
    fail_input(name + ": not a .npy file (it does not start with the \\x93NUMPY magic string)");
  if (avail < kMagicLen + 2) too_short();
  const unsigned major = p[6], minor = p[7];
  if (minor != 0 || major < 1 || major > 3)
    fail_input(name + ": unsupported .npy format version " + std::to_string(major) + "." +
               std::to_string(minor) + " (expected 1.0, 2.0 or 3.0)");
  h.major = major;
  h.minor = minor;
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  const std::size_t offset = 8 + len_bytes;
  if (avail < offset) too_short();
  std::uint64_t len = 0;
  for (std::size_t i = 0; i < len_bytes; ++i) len |= std::uint64_t{p[8 + i]} << (8 * i);
  if (len > kMaxHeaderLen)
    fail_input(name + ": header length " + std::to_string(len) + " exceeds the " +
               std::to_string(kMaxHeaderLen) + "-byte limit (" +
               std::to_string(kMaxHeaderLen >> 20) + " MiB) for a .npy header");
  if (offset + len > file_size)
    fail_input(name + ": header length " + std::to_string(len) + " exceeds the file size (" +
               std::to_string(file_size) + " bytes)");
  header_len = static_cast<std::size_t>(len);
  return offset;
}

void finish_header(Header& h, const std::string& name) {
  if (!checked_bytes(h.shape, itemsize(h.dtype), h.data_bytes))
    fail_input(name + ": " + dtype_name(h.dtype) + " array of shape " + shape_str(h.shape) +
               " is too large (size overflows)");
}

void check_data_size(const Header& h, std::uint64_t remaining, const std::string& name) {
  if (remaining == h.data_bytes) return;
  fail_input(name + ": data is " + std::to_string(remaining) + " bytes, expected " +
             std::to_string(h.data_bytes) + " for " + dtype_name(h.dtype) + " array of shape " +
             shape_str(h.shape));
}

// Turns raw file data (any byte order, either memory order) into an array in
// native byte order and C order.
NpyArray finish_array(Header& h, std::vector<unsigned char> raw) {
  const std::size_t item = itemsize(h.dtype);
  if (item > 1 && h.big_endian != host_is_big_endian()) {
    for (std::size_t i = 0; i < raw.size(); i += item) std::reverse(&raw[i], &raw[i] + item);
  }
  if (h.dtype == DType::b1) {
    // Other writers may use any non-zero byte for true; a C++ bool must be 0 or 1.
    for (auto& b : raw) b = b != 0;
  }
  // With at most one axis longer than 1, both orders are the same layout.
  const auto non_trivial =
      std::count_if(h.shape.begin(), h.shape.end(), [](std::size_t d) { return d > 1; });
  if (h.fortran_order && non_trivial > 1 && !raw.empty()) {
    const std::size_t nd = h.shape.size();
    std::vector<std::size_t> fstride(nd), index(nd, 0);
    std::size_t stride = 1;
    for (std::size_t k = 0; k < nd; ++k) {
      fstride[k] = stride;
      stride *= h.shape[k];
    }
    // Walk the output in C order with an odometer index, updating the
    // matching Fortran offset incrementally instead of recomputing it.
    const std::size_t n = raw.size() / item;
    std::vector<unsigned char> out(raw.size());
    std::size_t src = 0;
    for (std::size_t i = 0; i < n; ++i) {
      std::memcpy(&out[i * item], &raw[src * item], item);
      for (std::size_t k = nd; k-- > 0;) {
        if (++index[k] < h.shape[k]) {
          src += fstride[k];
          break;
        }
        src -= (h.shape[k] - 1) * fstride[k];
        index[k] = 0;
      }
    }
    raw.swap(out);
  }
  NpyArray a;
  a.dtype = h.dtype;
  a.shape = std::move(h.shape);
  a.data = std::move(raw);
  return a;
}

char order_char(DType dtype) {
  if (itemsize(dtype) == 1) return '|';
  return host_is_big_endian() ? '>' : '<';
}

template <class T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return DType::f4;
  else if constexpr (std::is_same_v<T, double>)
    return DType::f8;
  else if constexpr (std::is_same_v<T, bool>)
    return DType::b1;
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return DType::i4;
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return DType::i8;
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return DType::u1;
}

}  // namespace

// Arrays are held in the host's byte order, so files are converted to it and
// '=' in a descr (the writer's native order) is taken to be ours.
bool host_is_big_endian() {
  const std::uint16_t one = 1;
  unsigned char first;
  std::memcpy(&first, &one, 1);
  return first == 0;
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16;
  const std::uint32_t exp = (h >> 10) & 0x1f;
  const std::uint32_t mant = h & 0x3ff;
  std::uint32_t bits;
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24 is exact in float.
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf, or NaN keeping its payload
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

std::size_t itemsize(DType dtype) {
  return info(dtype).size;
}

const char* dtype_name(DType dtype) {
  return info(dtype).name;
}

bool is_float(DType dtype) {
  return dtype == DType::f2 || dtype == DType::f4 || dtype == DType::f8;
}

bool is_integer(DType dtype) {
  return !is_float(dtype) && dtype != DType::b1;
}

std::size_t NpyArray::size() const {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  return n;
}

std::string NpyArray::describe() const {
  return std::string(dtype_name(dtype)) + " array of shape " + shape_str(shape);
}

template <class T>
NpyArray NpyArray::of(const T* values, std::vector<std::size_t> shape) {
  static_assert(sizeof(bool) == 1, "bool arrays are stored one byte per element");
  NpyArray a;
  a.dtype = dtype_of<T>();
  std::size_t bytes = 0;
  if (!checked_bytes(shape, sizeof(T), bytes))
    fail_runtime(std::string(dtype_name(a.dtype)) + " array of shape " + shape_str(shape) +
                 " is too large (size overflows)");
  a.shape = std::move(shape);
  a.data.resize(bytes);
  if (bytes) std::memcpy(a.data.data(), values, bytes);
  return a;
}

template NpyArray NpyArray::of<float>(const float*, std::vector<std::size_t>);
template NpyArray NpyArray::of<double>(const double*, std::vector<std::size_t>);
template NpyArray NpyArray::of<bool>(const bool*, std::vector<std::size_t>);
template NpyArray NpyArray::of<std::int32_t>(const std::int32_t*, std::vector<std::size_t>);
template NpyArray NpyArray::of<std::int64_t>(const std::int64_t*, std::vector<std::size_t>);
template NpyArray NpyArray::of<std::uint8_t>(const std::uint8_t*, std::vector<std::size_t>);

namespace {

// Everything parse_npy checks before it copies the data: preamble, dict,
// size overflow and the data size against the bytes that follow the header.
Header parse_header(const std::string& bytes, const std::string& name) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  Header h;
  std::size_t header_len = 0;
  const std::size_t offset = parse_preamble(p, bytes.size(), bytes.size(), name, header_len, h);
  const char* dict = bytes.data() + offset;
  HeaderParser(dict, dict + header_len, name).parse(h);
  finish_header(h, name);
  h.data_offset = offset + header_len;
  check_data_size(h, bytes.size() - h.data_offset, name);
  return h;
}

// Opens `path` and makes every check read_npy makes before reading the data,
// reading only the header, so that a header that claims a huge array cannot
// make us allocate it. `in` is left open at the first data byte.
Header read_header(const std::string& path, std::ifstream& in) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    fail_input(path + ": is a directory, not a .npy file");
  in.open(path, std::ios::binary);
  if (!in) fail_input(path + ": cannot open: " + errno_str(errno));
  // A regular file (read_npy takes pipes and devices whole first,
  // stream_input.hpp): its size is checked against the header.
  in.seekg(0, std::ios::end);
  const std::streamoff end = in.tellg();
  in.seekg(0, std::ios::beg);
  if (end < 0 || !in) fail_input(path + ": cannot determine the file size");
  const auto file_size = static_cast<std::uint64_t>(end);

  unsigned char pre[12] = {};
  in.read(reinterpret_cast<char*>(pre), sizeof pre);
  const auto got = static_cast<std::size_t>(in.gcount());
  in.clear();
  Header h;
  std::size_t header_len = 0;
  const std::size_t offset = parse_preamble(pre, got, file_size, path, header_len, h);
  std::string dict(header_len, '\0');
  in.seekg(static_cast<std::streamoff>(offset));
  if (!in.read(dict.data(), static_cast<std::streamsize>(header_len)))
    fail_input(path + ": cannot read the .npy header: " + errno_str(errno));
  HeaderParser(dict.data(), dict.data() + dict.size(), path).parse(h);
  finish_header(h, path);
  h.data_offset = offset + header_len;
  check_data_size(h, file_size - h.data_offset, path);
  return h;
}

NpyHeaderInfo info_of(Header h) {
  NpyHeaderInfo info;
  info.major = static_cast<int>(h.major);
  info.minor = static_cast<int>(h.minor);
  info.descr = std::move(h.descr);
  info.dtype = h.dtype;
  info.big_endian = h.big_endian;
  info.fortran_order = h.fortran_order;
  info.shape = std::move(h.shape);
  info.header_bytes = h.data_offset;
  info.data_bytes = h.data_bytes;
  return info;
}

}  // namespace

// parse_npy and read_npy share every check; read_npy only differs in reading
// the header before deciding whether the body is worth reading.
NpyArray parse_npy(const std::string& bytes, const std::string& name) {
  Header h = parse_header(bytes, name);
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  std::vector<unsigned char> raw(p + h.data_offset, p + bytes.size());
  return finish_array(h, std::move(raw));
}

std::uint64_t npy_stream_size(const std::string& so_far, const std::string& name) {
  const auto* p = reinterpret_cast<const unsigned char*>(so_far.data());
  if (so_far.size() < 12) {
    if (std::memcmp(p, kMagic, std::min(so_far.size(), kMagicLen)) != 0)
      fail_input(name + ": not a .npy file (it does not start with the \\x93NUMPY magic string)");
    return 0;
  }
  Header h;
  std::size_t header_len = 0;
  const std::size_t offset = parse_preamble(
      p, so_far.size(), std::numeric_limits<std::uint64_t>::max(), name, header_len, h);
  if (so_far.size() < offset + header_len) return 0;
  HeaderParser(so_far.data() + offset, so_far.data() + offset + header_len, name).parse(h);
  finish_header(h, name);
  return offset + header_len + h.data_bytes;
}

namespace {

const std::string& npy_stream(const std::string& path) {
  return stream_input_bytes(
      path, [&path](const std::string& so_far) { return npy_stream_size(so_far, path); });
}

}  // namespace

NpyArray read_npy(const std::string& path) {
  if (const NpyArray* given = provided_npy(path)) return *given;
  if (const NpyView* view = provided_view(path)) {
    NpyArray a;
    a.dtype = view->dtype;
    a.shape = view->shape;
    const auto* p = static_cast<const unsigned char*>(view->data);
    a.data.assign(p, p + view->bytes());
    return a;
  }
  if (is_stream_input(path)) return parse_npy(npy_stream(path), path);
  std::ifstream in;
  Header h = read_header(path, in);
  std::vector<unsigned char> raw(h.data_bytes);
  if (!raw.empty() &&
      !in.read(reinterpret_cast<char*>(raw.data()), static_cast<std::streamsize>(raw.size())))
    fail_input(path + ": read only " + std::to_string(in.gcount()) + " of " +
               std::to_string(raw.size()) + " data bytes (was the file truncated while reading?)");
  return finish_array(h, std::move(raw));
}

std::size_t NpyHeaderInfo::size() const {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  return n;
}

NpyHeaderInfo parse_npy_header(const std::string& bytes, const std::string& name) {
  return info_of(parse_header(bytes, name));
}

NpyHeaderInfo parse_npy_header(const std::string& first_bytes, std::uint64_t file_size,
                               const std::string& name) {
  const auto* p = reinterpret_cast<const unsigned char*>(first_bytes.data());
  Header h;
  std::size_t header_len = 0;
  const std::size_t offset = parse_preamble(p, first_bytes.size(), file_size, name, header_len, h);
  if (first_bytes.size() < offset + header_len)
    fail_runtime(name + ": internal: the .npy header was not read whole");
  const char* dict = first_bytes.data() + offset;
  HeaderParser(dict, dict + header_len, name).parse(h);
  finish_header(h, name);
  h.data_offset = offset + header_len;
  check_data_size(h, file_size - h.data_offset, name);
  return info_of(std::move(h));
}

NpyHeaderInfo read_npy_header(const std::string& path) {
  const NpyArray* given = provided_npy(path);
  const NpyView* view = given ? nullptr : provided_view(path);
  NpyArray shape_only;  // a view's dtype and shape (no data)
  if (view) {
    shape_only.dtype = view->dtype;
    shape_only.shape = view->shape;
    given = &shape_only;
  }
  if (given) {  // as encode_npy would write it
    NpyHeaderInfo h;
    h.descr = std::string(1, order_char(given->dtype)) + info(given->dtype).kind +
              std::to_string(info(given->dtype).size);
    h.dtype = given->dtype;
    h.big_endian = host_is_big_endian();
    h.shape = given->shape;
    h.header_bytes = npy_header(given->dtype, given->shape).size();
    h.data_bytes = view ? view->bytes() : given->data.size();
    return h;
  }
  if (is_stream_input(path)) return parse_npy_header(npy_stream(path), path);
  std::ifstream in;
  return info_of(read_header(path, in));
}

std::string npy_header(DType dtype, const std::vector<std::size_t>& shape) {
  std::string dict = std::string("{'descr': '") + order_char(dtype) + info(dtype).kind +
                     std::to_string(info(dtype).size) +
                     "', 'fortran_order': False, 'shape': " + shape_str(shape) + ", }";
  if (!shape.empty()) {
    const std::size_t digits = std::to_string(shape[0]).size();
    if (digits < kGrowthAxisMaxDigits) dict.append(kGrowthAxisMaxDigits - digits, ' ');
  }
  const std::size_t dict_len = dict.size() + 1;  // with the final '\n'
  // Version 1.0 has a 2-byte length field; 2.0 a 4-byte one. Like NumPy, the
  // padding is never empty: an aligned header still gets kAlign spaces.
  std::size_t prefix = kMagicLen + 2 + 2;
  std::size_t pad = kAlign - (prefix + dict_len) % kAlign;
  unsigned major = 1;
  if (dict_len + pad > 0xffff) {
    major = 2;
    prefix = kMagicLen + 2 + 4;
    pad = kAlign - (prefix + dict_len) % kAlign;
    if (dict_len + pad > 0xffffffffu)
      fail_runtime("cannot encode a " + std::to_string(shape.size()) +
                   "-d shape: the .npy header would be too large");
  }
  const std::size_t len = dict_len + pad;
  std::string out(kMagic, kMagicLen);
  out += static_cast<char>(major);
  out += '\0';
  for (std::size_t i = 0; i < (major == 1 ? 2u : 4u); ++i)
    out += static_cast<char>((len >> (8 * i)) & 0xff);
  out += dict;
  out.append(pad, ' ');
  out += '\n';
  return out;
}

std::string encode_npy(const NpyArray& array) {
  std::size_t bytes = 0;
  if (!checked_bytes(array.shape, itemsize(array.dtype), bytes) || bytes != array.data.size())
    fail_runtime("cannot encode " + array.describe() + ": it holds " +
                 std::to_string(array.data.size()) + " data bytes");
  std::string out = npy_header(array.dtype, array.shape);
  out.append(reinterpret_cast<const char*>(array.data.data()), array.data.size());
  return out;
}

void check_float_array(DType dtype, const std::vector<std::size_t>& shape,
                       const std::string& name) {
  if (!is_float(dtype))
    fail_input(name + ": expected a float array (float16/32/64), got " + dtype_name(dtype) +
               " array of shape " + shape_str(shape));
}

template <class T>
void convert(const NpyArray& array, T* out, const std::string& name) {
  check_float_array(array.dtype, array.shape, name);
  const std::size_t n = array.size();
  if (array.data.size() != n * itemsize(array.dtype))
    fail_runtime(name + ": " + array.describe() + " holds " + std::to_string(array.data.size()) +
                 " data bytes, expected " + std::to_string(n * itemsize(array.dtype)));
  // Narrowing float64 to float rounds to nearest; out-of-range values become
  // +-inf, as in NumPy's astype(np.float32).
  const unsigned char* p = array.data.data();
  switch (array.dtype) {
    case DType::f2:
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = static_cast<T>(half_to_float(h));
      }
      break;
    case DType::f4:
      for (std::size_t i = 0; i < n; ++i) {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        out[i] = static_cast<T>(f);
      }
      break;
    default:
      for (std::size_t i = 0; i < n; ++i) {
        double d;
        std::memcpy(&d, p + 8 * i, 8);
        out[i] = static_cast<T>(d);
      }
      break;
  }
}

template void convert<float>(const NpyArray&, float*, const std::string&);
template void convert<double>(const NpyArray&, double*, const std::string&);

}  // namespace mha
