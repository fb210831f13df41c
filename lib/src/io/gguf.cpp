#include "mha/io/gguf.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "mha/io/npy.hpp"

namespace mha {

namespace {

constexpr std::uint64_t kMaxKeyBytes = 65535;      // docs/gguf.md: gguf_metadata_kv_t.key
constexpr std::uint64_t kMaxTensorNameBytes = 64;  // docs/gguf.md: gguf_tensor_info_t.name
constexpr std::uint64_t kMaxDims = 4;              // GGML_MAX_DIMS
constexpr std::uint64_t kMaxAlignment = 1u << 20;  // far above any writer's (32 by default)
constexpr std::uint64_t kMinKeyValueBytes = 8 + 1 + 4 + 1;    // a 1-byte key and a uint8
constexpr std::uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // an empty name, 0-d
constexpr std::size_t kBufferBytes = 1 << 16;  // the header is read this much at a time
constexpr std::size_t kChunkBytes = 1 << 20;   // tensor data is read this much at a time
constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 62;

std::string str(std::uint64_t n) {
  return std::to_string(n);
}

// Reads `bytes` at `at` with pread, all of it; false when the file ends first.
bool pread_all(int fd, void* into, std::size_t bytes, std::uint64_t at) {
  auto* p = static_cast<unsigned char*>(into);
  std::size_t got = 0;
  while (got < bytes) {
    const ssize_t r = ::pread(fd, p + got, bytes - got, static_cast<off_t>(at + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<std::size_t>(r);
  }
  return true;
}

template <class T>
void to_host_order(T* values, std::size_t n) {
  if (sizeof(T) == 1 || !host_is_big_endian()) return;
  for (std::size_t i = 0; i < n; ++i) {
    auto* b = reinterpret_cast<unsigned char*>(values + i);
    std::reverse(b, b + sizeof(T));
  }
}

// The header's reader: a cursor over the file through a buffer, every read
// checked against the bytes left before anything is allocated for it.
class Parser {
 public:
  Parser(const std::string& path, int fd, std::uint64_t size) : path_(path), fd_(fd), size_(size) {}

  std::uint64_t pos() const { return pos_; }
  std::uint64_t left() const { return size_ - pos_; }

  [[noreturn]] void fail(const std::string& message) const { fail_input(path_ + ": " + message); }

  // Fails with "WHAT runs past the end of the file" unless n bytes are left.
  template <class What>
  void need(std::uint64_t n, What&& what) const {
    if (n > left())
      fail(what() + " runs past the end of the file (" + str(left()) + " bytes left of " +
           str(size_) + ")");
  }

  // The next n bytes (checked by the caller with need()).
  void take(void* out, std::size_t n) {
    if (n == 0) return;
    if (pos_ >= buffer_at_ && pos_ + n <= buffer_at_ + buffer_.size()) {
      std::memcpy(out, buffer_.data() + (pos_ - buffer_at_), n);
    } else if (n >= kBufferBytes) {
      if (!pread_all(fd_, out, n, pos_)) truncated();
    } else {
      buffer_.resize(static_cast<std::size_t>(std::min<std::uint64_t>(kBufferBytes, left())));
      buffer_at_ = pos_;
      if (!pread_all(fd_, buffer_.data(), buffer_.size(), pos_)) truncated();
      std::memcpy(out, buffer_.data(), n);
    }
    pos_ += n;
  }

  template <class T, class What>
  T scalar(What&& what) {
    need(sizeof(T), what);
    T v;
    take(&v, sizeof v);
    to_host_order(&v, 1);
    return v;
  }

  // A GGUF string of at most `max` bytes (`limit` says whose limit it is).
  template <class What>
  std::string string(std::uint64_t max, const char* limit, What&& what) {
    const auto n = scalar<std::uint64_t>([&] { return what() + "'s length"; });
    if (n > max) fail(what() + " is " + str(n) + " bytes long; " + limit + " at most " + str(max));
    need(n, [&] { return what() + " (a string of " + str(n) + " bytes)"; });
    std::string s(static_cast<std::size_t>(n), '\0');
    take(s.data(), s.size());
    return s;
  }

  void skip_to(std::uint64_t at) { pos_ = at; }

 private:
  [[noreturn]] void truncated() const {
    fail("cannot read the header (was the file truncated while it was read?)");
  }

  const std::string& path_;
  int fd_;
  std::uint64_t size_;
  std::uint64_t pos_ = 0;
  std::vector<unsigned char> buffer_;
  std::uint64_t buffer_at_ = 0;
};

// Bytes a value of the type takes in the file; a string's or an array's at
// least (its length; its type and count).
std::size_t value_bytes(GgufValueType t) {
  static constexpr std::size_t kBytes[] = {1, 1, 2, 2, 4, 4, 4, 1, 8, 12, 8, 8, 8};
  return kBytes[static_cast<std::size_t>(t)];  // t <= float64: checked when read
}

// `count` fixed-size values into a vector of T.
template <class T>
std::vector<T> read_values(Parser& in, std::uint64_t count) {
  std::vector<T> v(static_cast<std::size_t>(count));
  in.take(v.data(), v.size() * sizeof(T));
  to_host_order(v.data(), v.size());
  return v;
}

template <class What>
GgufValue read_value(Parser& in, GgufValueType type, std::uint64_t count, bool is_array,
                     What&& what) {
  GgufValue v;
  v.type = type;
  v.is_array = is_array;
  const std::size_t item = value_bytes(type);
  // Bounded by the file before anything is allocated: strings take 8 bytes
  // (their length) at least.
  if (count > in.left() / item)
    in.fail(what() + ": " + (is_array ? "an array of " + str(count) + " " : std::string()) +
            gguf_value_type_name(type) + " needs " +
            (type == GgufValueType::string ? "at least " : "") +
            (count > std::numeric_limits<std::uint64_t>::max() / item ? "more than 2^64"
                                                                      : str(count * item)) +
            " bytes, more than the " + str(in.left()) + " left in the file");
  switch (type) {
    case GgufValueType::uint8:
      v.values = read_values<std::uint8_t>(in, count);
      break;
    case GgufValueType::int8:
      v.values = read_values<std::int8_t>(in, count);
      break;
    case GgufValueType::uint16:
      v.values = read_values<std::uint16_t>(in, count);
      break;
    case GgufValueType::int16:
      v.values = read_values<std::int16_t>(in, count);
      break;
    case GgufValueType::uint32:
      v.values = read_values<std::uint32_t>(in, count);
      break;
    case GgufValueType::int32:
      v.values = read_values<std::int32_t>(in, count);
      break;
    case GgufValueType::float32:
      v.values = read_values<float>(in, count);
      break;
    case GgufValueType::uint64:
      v.values = read_values<std::uint64_t>(in, count);
      break;
    case GgufValueType::int64:
      v.values = read_values<std::int64_t>(in, count);
      break;
    case GgufValueType::float64:
      v.values = read_values<double>(in, count);
      break;
    case GgufValueType::boolean: {
      const std::vector<std::uint8_t> bytes = read_values<std::uint8_t>(in, count);
      std::vector<bool> b(bytes.size());
      for (std::size_t i = 0; i < bytes.size(); ++i) {
        if (bytes[i] > 1)  // docs/gguf.md: anything else is invalid
          in.fail(what() + (is_array ? ": element " + str(i) : std::string()) + ": bool " +
                  str(bytes[i]) + ", expected 0 or 1");
        b[i] = bytes[i] == 1;
      }
      v.values = std::move(b);
      break;
    }
    case GgufValueType::string: {
      std::vector<std::string> s;
      s.reserve(static_cast<std::size_t>(count));
      for (std::uint64_t i = 0; i < count; ++i)
        s.push_back(in.string(std::numeric_limits<std::uint64_t>::max(), "",
                              [&] { return is_array ? what() + ": string " + str(i) : what(); }));
      v.values = std::move(s);
      break;
    }
    case GgufValueType::array:
      break;  // refused by the caller
  }
  return v;
}

bool is_integer(GgufValueType t) {
  switch (t) {
    case GgufValueType::uint8:
    case GgufValueType::int8:
    case GgufValueType::uint16:
    case GgufValueType::int16:
    case GgufValueType::uint32:
    case GgufValueType::int32:
    case GgufValueType::uint64:
    case GgufValueType::int64:
      return true;
    default:
      return false;
  }
}

// Element i of an integer value: its magnitude and sign, without overflow.
struct Integer {
  bool negative = false;
  std::uint64_t magnitude = 0;
};
Integer integer_at(const GgufValue& v, std::size_t i) {
  return std::visit(
      [&](const auto& values) -> Integer {
        using T = typename std::decay_t<decltype(values)>::value_type;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
          const T x = values[i];
          if constexpr (std::is_signed_v<T>) {
            if (x < 0) return {true, ~static_cast<std::uint64_t>(static_cast<std::int64_t>(x)) + 1};
          }
          return {false, static_cast<std::uint64_t>(x)};
        } else {
          return {};
        }
      },
      v.values);
}

double float_at(const GgufValue& v, std::size_t i) {
  if (v.type == GgufValueType::float32) return std::get<std::vector<float>>(v.values)[i];
  return std::get<std::vector<double>>(v.values)[i];
}

}  // namespace

const char* gguf_value_type_name(GgufValueType type) {
  static constexpr const char* kNames[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                           "int32",  "float32", "bool",   "string", "array",
                                           "uint64", "int64",   "float64"};
  const auto i = static_cast<std::size_t>(type);
  return i < sizeof kNames / sizeof kNames[0] ? kNames[i] : "?";
}

std::size_t GgufValue::size() const {
  return std::visit([](const auto& v) { return v.size(); }, values);
}

std::string GgufValue::describe() const {
  if (!is_array) return gguf_value_type_name(type);
  return "array of " + str(size()) + " " + gguf_value_type_name(type);
}

std::vector<std::size_t> GgufTensor::shape() const {
  return std::vector<std::size_t>(dims.rbegin(), dims.rend());
}

std::size_t GgufTensor::size() const {
  std::size_t n = 1;
  for (std::uint64_t d : dims) n *= static_cast<std::size_t>(d);
  return n;
}

std::size_t GgufTensor::row_size() const {
  return dims.empty() ? 1 : static_cast<std::size_t>(dims[0]);
}

std::size_t GgufTensor::rows() const {
  std::size_t n = 1;
  for (std::size_t i = 1; i < dims.size(); ++i) n *= static_cast<std::size_t>(dims[i]);
  return n;
}

GgufFile::GgufFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail_input(path_ + ": cannot open: " + std::strerror(errno));
  try {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) fail_input(path_ + ": cannot stat: " + std::strerror(errno));
    if (!S_ISREG(st.st_mode))
      fail_input(path_ + ": not a regular file (a GGUF file is read in place)");
    const auto file_size = static_cast<std::uint64_t>(st.st_size);
    Parser in(path_, fd_, file_size);

    // The header: magic, version, counts.
    if (file_size < 24)
      in.fail("too short for a GGUF file (" + str(file_size) + " bytes; the header alone is 24)");
    char magic[4];
    in.take(magic, 4);
    if (std::memcmp(magic, "GGUF", 4) != 0)
      in.fail("not a GGUF file: it starts with " + echo(std::string(magic, 4)) +
              ", expected \"GGUF\"");
    version_ = in.scalar<std::uint32_t>([] { return std::string("the version"); });
    if (version_ != 2 && version_ != 3) {
      if (version_ == 1)
        in.fail(
            "GGUF version 1 (the 2023 draft with 32-bit counts) is not read; expected version "
            "2 or 3");
      if (version_ != 0 && (version_ & 0xFFFFu) == 0)
        in.fail("a big-endian GGUF file (its version reads " + str(version_) +
                " little-endian); mha reads little-endian GGUF files only");
      in.fail("GGUF version " + str(version_) + " is not read; expected version 2 or 3");
    }
    const auto tensor_count = in.scalar<std::uint64_t>([] { return std::string("tensor_count"); });
    const auto kv_count = in.scalar<std::uint64_t>([] { return std::string("metadata_kv_count"); });
    // Each key-value pair and tensor info takes some bytes at least: counts
    // are bounded by the file before anything is sized by them.
    if (kv_count > in.left() / kMinKeyValueBytes)
      in.fail("metadata_kv_count " + str(kv_count) + " needs at least " + str(kMinKeyValueBytes) +
              " bytes each, more than the " + str(in.left()) + " bytes left in the file");
    if (tensor_count > in.left() / kMinTensorInfoBytes)
      in.fail("tensor_count " + str(tensor_count) + " needs at least " + str(kMinTensorInfoBytes) +
              " bytes each, more than the " + str(in.left()) + " bytes left in the file");

    // The metadata.
    for (std::uint64_t k = 0; k < kv_count; ++k) {
      const std::string key =
          in.string(kMaxKeyBytes, "GGUF keys are", [&] { return "metadata key " + str(k); });
      if (key.empty()) in.fail("metadata key " + str(k) + " is empty");
      const std::string name = "metadata key " + echo(key);
      if (metadata_index_.count(key)) in.fail(name + " appears twice");
      auto what = [&] { return name; };
      auto type_of = [&](std::uint32_t t, const char* whose) {
        if (t > static_cast<std::uint32_t>(GgufValueType::float64))
          in.fail(name + ": " + whose + " type " + str(t) + " is not a GGUF value type (0 to 12)");
        return static_cast<GgufValueType>(t);
      };
      GgufValueType type =
          type_of(in.scalar<std::uint32_t>([&] { return name + "'s type"; }), "value");
      GgufValue value;
      if (type == GgufValueType::array) {
        type =
            type_of(in.scalar<std::uint32_t>([&] { return name + "'s element type"; }), "element");
        if (type == GgufValueType::array)
          in.fail(name + " is an array of arrays, which mha does not read (nor does ggml)");
        const auto count = in.scalar<std::uint64_t>([&] { return name + "'s element count"; });
        value = read_value(in, type, count, true, what);
      } else {
        value = read_value(in, type, 1, false, what);
      }
      metadata_index_[key] = metadata_.size();
      metadata_.emplace_back(key, std::move(value));
    }

    // general.alignment: a uint32 power of two, 32 when absent (as ggml).
    if (const GgufValue* a = find("general.alignment")) {
      if (a->is_array || a->type != GgufValueType::uint32)
        in.fail("general.alignment is " + a->describe() + ", expected uint32");
      alignment_ = std::get<std::vector<std::uint32_t>>(a->values)[0];
      if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0)
        in.fail("general.alignment " + str(alignment_) + " is not a power of two");
      if (alignment_ > kMaxAlignment)
        in.fail("general.alignment " + str(alignment_) + " is over " + str(kMaxAlignment) +
                " (1 MiB), the most mha reads");
    }

    // The tensor infos.
    for (std::uint64_t t = 0; t < tensor_count; ++t) {
      GgufTensor info;
      info.name = in.string(kMaxTensorNameBytes, "GGUF tensor names are",
                            [&] { return "the name of tensor " + str(t); });
      const std::string name = "tensor " + echo(info.name);
      if (tensor_index_.count(info.name)) in.fail(name + " appears twice");
      const auto n_dims = in.scalar<std::uint32_t>([&] { return name + "'s n_dims"; });
      if (n_dims > kMaxDims)
        in.fail(name + " has " + str(n_dims) + " dimensions; GGUF tensors have at most " +
                str(kMaxDims));
      std::uint64_t product = 1;  // of the dims, zeros counted as ones: bounds rows() too
      for (std::uint32_t d = 0; d < n_dims; ++d) {
        const auto dim = in.scalar<std::uint64_t>([&] { return name + "'s dims"; });
        info.dims.push_back(dim);
        if (dim > 1 && product > kMaxElements / dim)
          in.fail(name + ": dims " + shape_str(info.dims) + " hold more than 2^62 elements");
        product *= std::max<std::uint64_t>(dim, 1);
      }
      const auto type = in.scalar<std::uint32_t>([&] { return name + "'s type"; });
      const GgmlTypeInfo* ti = ggml_type_info(type);
      if (!ti)
        in.fail(name + " has type " + ggml_type_label(type) + ", which GGUF files do not hold");
      info.type = static_cast<GgmlType>(type);
      if (info.row_size() % ti->block_elements != 0)
        in.fail(name + ": its rows of " + str(info.row_size()) +
                " values are not whole blocks of " + str(ti->block_elements) + " (" + ti->name +
                ")");
      const std::uint64_t blocks = info.size() / ti->block_elements;  // <= 2^62
      if (blocks > std::numeric_limits<std::uint64_t>::max() / ti->block_bytes)
        in.fail(name + ": dims " + shape_str(info.dims) + " of " + ti->name +
                " need more than 2^64 bytes");
      info.bytes = blocks * ti->block_bytes;
      info.offset = in.scalar<std::uint64_t>([&] { return name + "'s offset"; });
      tensor_index_[info.name] = tensors_.size();
      tensors_.push_back(std::move(info));
    }

    // The data section starts at the next multiple of the alignment.
    const std::uint64_t end = in.pos();
    const std::uint64_t pad = (alignment_ - end % alignment_) % alignment_;
    if (tensors_.empty()) {
      data_offset_ = std::min(end + pad, file_size);
      return;
    }
    if (pad > file_size - end)
      in.fail("the tensor data would start at byte " + str(end + pad) +
              " (the header's end aligned to " + str(alignment_) + "), past the end of the file (" +
              str(file_size) + " bytes)");
    data_offset_ = end + pad;
    const std::uint64_t data_bytes = file_size - data_offset_;
    for (const GgufTensor& t : tensors_) {
      const std::string name = "tensor " + echo(t.name);
      if (t.offset % alignment_ != 0)
        in.fail(name + ": offset " + str(t.offset) + " is not a multiple of the alignment " +
                str(alignment_));
      if (t.offset > data_bytes || t.bytes > data_bytes - t.offset)
        in.fail(name + ": its " + str(t.bytes) + " bytes at offset " + str(t.offset) +
                " run past the end of the data (" + str(data_bytes) + " bytes from byte " +
                str(data_offset_) + ")");
    }
    // No two tensors share a byte (empty ones hold none).
    std::vector<std::size_t> order(tensors_.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return tensors_[a].offset < tensors_[b].offset;
    });
    const GgufTensor* previous = nullptr;
    for (std::size_t i : order) {
      const GgufTensor& t = tensors_[i];
      if (t.bytes == 0) continue;
      if (previous && t.offset < previous->offset + previous->bytes)
        in.fail("tensors " + echo(previous->name) + " (bytes " + str(previous->offset) + " to " +
                str(previous->offset + previous->bytes) + " of the data) and " + echo(t.name) +
                " (from byte " + str(t.offset) + ") overlap");
      previous = &t;
    }
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

GgufFile::~GgufFile() {
  if (fd_ >= 0) ::close(fd_);
}

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufValue& GgufFile::value(const std::string& key, const char* expected) const {
  const GgufValue* v = find(key);
  if (!v) fail_input(path_ + ": has no metadata key " + echo(key) + " (expected " + expected + ")");
  return *v;
}

namespace {

[[noreturn]] void wrong_kind(const std::string& path, const std::string& key, const GgufValue& v,
                             const char* expected) {
  fail_input(path + ": metadata key " + echo(key) + " is " + v.describe() + ", expected " +
             expected);
}

}  // namespace

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue& v = value(key, "a string");
  if (v.is_array || v.type != GgufValueType::string) wrong_kind(path_, key, v, "a string");
  return std::get<std::vector<std::string>>(v.values)[0];
}

std::uint64_t GgufFile::get_u64(const std::string& key) const {
  const GgufValue& v = value(key, "an unsigned integer");
  if (v.is_array || !is_integer(v.type)) wrong_kind(path_, key, v, "an unsigned integer");
  const Integer x = integer_at(v, 0);
  if (x.negative && x.magnitude)
    fail_input(path_ + ": metadata key " + echo(key) + " is -" + str(x.magnitude) +
               ", expected an unsigned integer");
  return x.magnitude;
}

std::int64_t GgufFile::get_i64(const std::string& key) const {
  const GgufValue& v = value(key, "an integer");
  if (v.is_array || !is_integer(v.type)) wrong_kind(path_, key, v, "an integer");
  const Integer x = integer_at(v, 0);
  if (!x.negative && x.magnitude > static_cast<std::uint64_t>(INT64_MAX))
    fail_input(path_ + ": metadata key " + echo(key) + " is " + str(x.magnitude) +
               ", over the largest int64");
  return x.negative ? static_cast<std::int64_t>(~x.magnitude + 1)
                    : static_cast<std::int64_t>(x.magnitude);
}

double GgufFile::get_f64(const std::string& key) const {
  const GgufValue& v = value(key, "a float");
  if (v.is_array || (v.type != GgufValueType::float32 && v.type != GgufValueType::float64))
    wrong_kind(path_, key, v, "float32 or float64");
  // NaN and infinities would pass every range check a caller makes (and a NaN turns into
  // JSON's null, the key's default, in the config rebuilt from the metadata).
  const double x = float_at(v, 0);
  if (!std::isfinite(x))
    fail_input(path_ + ": metadata key " + echo(key) + " is " +
               (std::isnan(x) ? "nan"
                : x > 0       ? "inf"
                              : "-inf") +
               ", expected a finite number");
  return x;
}

bool GgufFile::get_bool(const std::string& key) const {
  const GgufValue& v = value(key, "a bool");
  if (v.is_array || v.type != GgufValueType::boolean) wrong_kind(path_, key, v, "a bool");
  return std::get<std::vector<bool>>(v.values)[0];
}

std::vector<std::string> GgufFile::get_array_strings(const std::string& key) const {
  const GgufValue& v = value(key, "an array of strings");
  if (!v.is_array || v.type != GgufValueType::string)
    wrong_kind(path_, key, v, "an array of strings");
  return std::get<std::vector<std::string>>(v.values);
}

std::vector<std::int64_t> GgufFile::get_array_i64(const std::string& key) const {
  const GgufValue& v = value(key, "an array of integers");
  if (!v.is_array || !is_integer(v.type)) wrong_kind(path_, key, v, "an array of integers");
  std::vector<std::int64_t> out(v.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    const Integer x = integer_at(v, i);
    if (!x.negative && x.magnitude > static_cast<std::uint64_t>(INT64_MAX))
      fail_input(path_ + ": metadata key " + echo(key) + ": element " + str(i) + " is " +
                 str(x.magnitude) + ", over the largest int64");
    out[i] = x.negative ? static_cast<std::int64_t>(~x.magnitude + 1)
                        : static_cast<std::int64_t>(x.magnitude);
  }
  return out;
}

std::vector<double> GgufFile::get_array_f64(const std::string& key) const {
  const GgufValue& v = value(key, "an array of floats");
  if (!v.is_array || (v.type != GgufValueType::float32 && v.type != GgufValueType::float64))
    wrong_kind(path_, key, v, "an array of float32 or float64");
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = float_at(v, i);
  return out;
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::tensor(const std::string& name) const {
  const GgufTensor* t = find_tensor(name);
  if (!t) fail_input(path_ + ": has no tensor " + echo(name));
  return *t;
}

void GgufFile::read(const std::string& name, float* out) const {
  read_rows(name, 0, tensor(name).rows(), out);
}

void GgufFile::read_rows(const std::string& name, std::size_t row0, std::size_t rows,
                         float* out) const {
  const GgufTensor& t = tensor(name);
  const GgmlTypeInfo& type = ggml_type_info(t.type);
  if (!type.dequantized)
    fail_input(path_ + ": tensor " + echo(name) + " has type " +
               ggml_type_label(static_cast<std::uint32_t>(t.type)) + ", which mha does not read");
  const std::size_t total = t.rows();
  if (row0 > total || rows > total - row0)
    fail_input(path_ + ": tensor " + echo(name) + " has " + str(total) + " rows, not " + str(row0) +
               " + " + str(rows));
  // Checked when the file was opened: rows are whole blocks, and every byte
  // of the tensor lies in the file.
  const std::size_t row_blocks = t.row_size() / type.block_elements;
  std::uint64_t at = data_offset_ + t.offset + std::uint64_t{row0} * row_blocks * type.block_bytes;
  std::size_t blocks = rows * row_blocks;
  const std::size_t chunk = std::max<std::size_t>(1, kChunkBytes / type.block_bytes);
  std::vector<unsigned char> buffer(std::min(blocks, chunk) * type.block_bytes);
  while (blocks > 0) {
    const std::size_t n = std::min(blocks, chunk);
    if (!pread_all(fd_, buffer.data(), n * type.block_bytes, at))
      fail_input(path_ + ": cannot read tensor " + echo(name) + " (was the file truncated?)");
    dequantize(t.type, buffer.data(), n * type.block_elements, out);
    out += n * type.block_elements;
    at += n * type.block_bytes;
    blocks -= n;
  }
}

bool is_gguf_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char magic[4] = {};
  const bool gguf = pread_all(fd, magic, 4, 0) && std::memcmp(magic, "GGUF", 4) == 0;
  ::close(fd);
  return gguf;
}

}  // namespace mha
