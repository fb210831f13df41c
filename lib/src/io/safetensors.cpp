#include "mha/io/safetensors.hpp"
#include "mha/base/message.hpp"
#include "mha/io/json_file.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "mha/base/error.hpp"
#include "mha/io/float16.hpp"
#include "mha/io/stream_input.hpp"

namespace mha {

namespace {

using nlohmann::json;

// The reference implementation's limit on the header: far above any real
// checkpoint's (a few MiB for thousands of tensors).
constexpr std::uint64_t kMaxHeaderBytes = std::uint64_t{100} << 20;

struct Entry {
  std::string name;
  std::string dtype;
  std::vector<std::size_t> shape;
  std::uint64_t begin = 0, end = 0;
};

std::size_t dtype_size(const std::string& d) {
  if (d == "F64") return 8;
  if (d == "F32") return 4;
  if (d == "F16" || d == "BF16") return 2;
  return 0;
}

std::uint64_t read_u64(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// The header's entries, checked against the data size, sorted by offset.
std::vector<Entry> parse_header(const std::string& text, std::uint64_t data_size,
                                const std::string& name) {
  const json header =
      parse_json(text, name + " (safetensors header)", json_kind::safetensors_header);
  if (!header.is_object()) fail_input(name + ": the safetensors header is not a JSON object");
  std::vector<Entry> entries;
  for (const auto& [key, v] : header.items()) {
    if (key == "__metadata__") continue;
    const std::string what = name + ": tensor " + echo(key);
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") ||
        !v.contains("data_offsets"))
      fail_input(what + ": expected {\"dtype\", \"shape\", \"data_offsets\"}");
    Entry e;
    e.name = key;
    if (!v["dtype"].is_string()) fail_input(what + ": dtype is not a string");
    e.dtype = v["dtype"].get<std::string>();
    const std::size_t item = dtype_size(e.dtype);
    if (!item)
      fail_input(what + ": dtype " + echo(e.dtype) +
                 " is not read; expected F32, F64, F16 or BF16");
    if (!v["shape"].is_array()) fail_input(what + ": shape is not a list");
    std::uint64_t count = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned() || d.get<std::uint64_t>() > (std::uint64_t{1} << 40))
        fail_input(what + ": shape " + v["shape"].dump() + " is not a list of sizes");
      const std::uint64_t n = d.get<std::uint64_t>();
      if (n && count > std::numeric_limits<std::uint64_t>::max() / n / item)
        fail_input(what + ": shape " + v["shape"].dump() + " overflows");
      count *= n;
      e.shape.push_back(static_cast<std::size_t>(n));
    }
    const json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      fail_input(what + ": data_offsets is not [begin, end]");
    e.begin = off[0].get<std::uint64_t>();
    e.end = off[1].get<std::uint64_t>();
    if (e.end < e.begin || e.end > data_size)
      fail_input(what + ": data_offsets [" + std::to_string(e.begin) + ", " +
                 std::to_string(e.end) + "] lie outside the " + std::to_string(data_size) +
                 " data bytes");
    if (e.end - e.begin != count * item)
      fail_input(what + ": data_offsets hold " + std::to_string(e.end - e.begin) +
                 " bytes, but a " + e.dtype + " tensor of shape " + shape_str(e.shape) + " needs " +
                 std::to_string(count * item));
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin < b.begin || (a.begin == b.begin && a.end < b.end);
  });
  std::uint64_t at = 0;
  for (const Entry& e : entries) {
    if (e.begin < at)
      fail_input(name + ": tensor '" + e.name + "' overlaps the tensor before it (data_offsets " +
                 std::to_string(e.begin) + " < " + std::to_string(at) + ")");
    if (e.begin > at)
      fail_input(name + ": bytes " + std::to_string(at) + " to " + std::to_string(e.begin) +
                 " of the data belong to no tensor (a safetensors file has no gaps)");
    at = e.end;
  }
  if (at != data_size)
    fail_input(name + ": the last " + std::to_string(data_size - at) +
               " data bytes belong to no tensor (a safetensors file has no gaps)");
  return entries;
}

NpyArray tensor_of(const Entry& e, const unsigned char* data) {
  NpyArray a;
  a.shape = e.shape;
  const std::size_t bytes = static_cast<std::size_t>(e.end - e.begin);
  if (e.dtype == "BF16") {  // widened exactly: bfloat16 is float32's upper half
    a.dtype = DType::f4;
    a.data.resize(bytes * 2);
    for (std::size_t i = 0; i < bytes / 2; ++i) {
      const std::uint32_t bits =
          (std::uint32_t{data[2 * i + 1]} << 24) | (std::uint32_t{data[2 * i]} << 16);
      std::memcpy(&a.data[4 * i], &bits, 4);
    }
    return a;
  }
  a.dtype = e.dtype == "F64" ? DType::f8 : e.dtype == "F32" ? DType::f4 : DType::f2;
  a.data.assign(data, data + bytes);  // little-endian, as this host
  return a;
}

}  // namespace

std::map<std::string, NpyArray> parse_safetensors(const std::string& bytes,
                                                  const std::string& name) {
  if (bytes.size() < 8) fail_input(name + ": too short for a safetensors file (under 8 bytes)");
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  const std::uint64_t n = read_u64(p);
  if (n > kMaxHeaderBytes)
    fail_input(name + ": safetensors header length " + std::to_string(n) +
               " is over the 104857600-byte (100 MiB) limit");
  if (n > bytes.size() - 8)
    fail_input(name + ": safetensors header length " + std::to_string(n) +
               " runs past the end of the file (" + std::to_string(bytes.size()) + " bytes)");
  const std::vector<Entry> entries =
      parse_header(bytes.substr(8, static_cast<std::size_t>(n)), bytes.size() - 8 - n, name);
  std::map<std::string, NpyArray> out;
  for (const Entry& e : entries) out[e.name] = tensor_of(e, p + 8 + n + e.begin);
  return out;
}

namespace {

// The file's header entries (checked) and the data's offset in the file.
std::vector<Entry> read_entries(const std::string& path, std::ifstream& in, std::uint64_t& start) {
  in.open(path, std::ios::binary);
  if (!in) fail_input(path + ": cannot open: " + std::strerror(errno));
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  in.seekg(0);
  if (size < 8) fail_input(path + ": too short for a safetensors file (under 8 bytes)");
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  const std::uint64_t n = read_u64(len);
  const auto file_size = static_cast<std::uint64_t>(size);
  if (n > kMaxHeaderBytes)
    fail_input(path + ": safetensors header length " + std::to_string(n) +
               " is over the 104857600-byte (100 MiB) limit");
  if (n > file_size - 8)
    fail_input(path + ": safetensors header length " + std::to_string(n) +
               " runs past the end of the file (" + std::to_string(file_size) + " bytes)");
  std::string header(static_cast<std::size_t>(n), '\0');
  in.read(header.data(), static_cast<std::streamsize>(n));
  start = 8 + n;
  return parse_header(header, file_size - 8 - n, path);
}

}  // namespace

std::vector<std::string> safetensors_names(const std::string& path) {
  std::vector<std::string> names;
  if (is_stream_input(path)) {
    for (const auto& [name, a] : parse_safetensors(stream_input_bytes(path), path))
      names.push_back(name);
    return names;
  }
  std::ifstream in;
  std::uint64_t start = 0;
  for (const Entry& e : read_entries(path, in, start)) names.push_back(e.name);
  return names;
}

std::map<std::string, NpyArray> read_safetensors(const std::string& path,
                                                 const std::set<std::string>& only) {
  if (is_stream_input(path)) {
    std::map<std::string, NpyArray> all = parse_safetensors(stream_input_bytes(path), path), out;
    for (auto& [name, a] : all)
      if (only.count(name)) out[name] = std::move(a);
    return out;
  }
  std::ifstream in;
  std::uint64_t start = 0;
  const std::vector<Entry> entries = read_entries(path, in, start);
  std::map<std::string, NpyArray> out;
  std::vector<unsigned char> buffer;
  for (const Entry& e : entries) {  // the offsets were checked: only declared bytes are read
    if (!only.count(e.name)) continue;
    buffer.resize(static_cast<std::size_t>(e.end - e.begin));
    in.seekg(static_cast<std::streamoff>(start + e.begin));
    if (!buffer.empty() && !in.read(reinterpret_cast<char*>(buffer.data()),
                                    static_cast<std::streamsize>(buffer.size())))
      fail_input(path + ": cannot read tensor '" + e.name + "' (was the file truncated?)");
    out[e.name] = tensor_of(e, buffer.data());
  }
  return out;
}

std::map<std::string, NpyArray> read_safetensors(const std::string& path) {
  const std::vector<std::string> names = safetensors_names(path);
  return read_safetensors(path, std::set<std::string>(names.begin(), names.end()));
}

std::size_t SafetensorsFile::Tensor::size() const {
  std::size_t n = 1;
  for (std::size_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  std::ifstream in;
  for (Entry& e : read_entries(path_, in, data_start_))
    tensors_[e.name] = Tensor{e.dtype, std::move(e.shape), e.begin, e.end};
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail_input(path_ + ": cannot open: " + std::strerror(errno));
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsFile::Tensor* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

void SafetensorsFile::read(const std::string& name, float* out) const {
  const Tensor* t = find(name);
  if (!t) fail_input(path_ + ": has no tensor '" + name + "'");
  read_rows(name, 0, t->shape.empty() ? 1 : t->shape[0], out);
}

namespace {

// bytes from `at` of fd into `into`, or one line naming the file and tensor.
void read_bytes(int fd, const std::string& path, const std::string& name, void* into,
                std::size_t bytes, std::uint64_t at) {
  auto* p = static_cast<unsigned char*>(into);
  std::size_t got = 0;
  while (got < bytes) {
    const ssize_t r = ::pread(fd, p + got, bytes - got, static_cast<off_t>(at + got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) fail_input(path + ": cannot read tensor '" + name + "' (was the file truncated?)");
    got += static_cast<std::size_t>(r);
  }
}

}  // namespace

void SafetensorsFile::read_bfloat16(const std::string& name, std::uint16_t* out) const {
  const Tensor* t = find(name);
  if (!t) fail_input(path_ + ": has no tensor '" + name + "'");
  if (t->dtype != "BF16")
    fail_input(path_ + ": tensor '" + name + "' is " + t->dtype + ", not BF16");
  read_bytes(fd_, path_, name, out, 2 * t->size(), data_start_ + t->begin);
}

void SafetensorsFile::read_rows(const std::string& name, std::size_t row0, std::size_t rows,
                                float* out) const {
  const Tensor* t = find(name);
  if (!t) fail_input(path_ + ": has no tensor '" + name + "'");
  const std::size_t first = t->shape.empty() ? 1 : t->shape[0];
  if (row0 > first || rows > first - row0)
    fail_input(path_ + ": tensor '" + name + "' has " + std::to_string(first) + " rows, not " +
               std::to_string(row0 + rows));
  const std::size_t row = first ? t->size() / first : 0, n = rows * row;
  const std::size_t item = dtype_size(t->dtype);
  auto read_bytes = [&](void* into, std::size_t bytes, std::uint64_t at) {
    mha::read_bytes(fd_, path_, name, into, bytes, at);
  };
  const std::uint64_t start = data_start_ + t->begin + row0 * row * item;
  if (t->dtype == "F32") {  // straight into place: no copy, no buffer
    read_bytes(out, n * 4, start);
    return;
  }
  // Other dtypes in pieces of at most 4 MiB, converted as they arrive.
  constexpr std::size_t kPiece = std::size_t{4} << 20;
  const std::unique_ptr<unsigned char[]> buffer(new unsigned char[std::min(n * item, kPiece)]);
  for (std::size_t done = 0; done < n;) {
    const std::size_t count = std::min(n - done, kPiece / item);
    read_bytes(buffer.get(), count * item, start + done * item);
    const unsigned char* p = buffer.get();
    float* o = out + done;
    if (t->dtype == "BF16") {  // float32's upper half
      for (std::size_t i = 0; i < count; ++i) {
        const std::uint32_t bits =
            (std::uint32_t{p[2 * i + 1]} << 24) | (std::uint32_t{p[2 * i]} << 16);
        std::memcpy(o + i, &bits, 4);
      }
    } else if (t->dtype == "F16") {
      for (std::size_t i = 0; i < count; ++i) {
        float16 h;
        std::memcpy(&h.bits, p + 2 * i, 2);
        o[i] = static_cast<float>(to_double(h));
      }
    } else {  // F64
      for (std::size_t i = 0; i < count; ++i) {
        double v;
        std::memcpy(&v, p + 8 * i, 8);
        o[i] = static_cast<float>(v);
      }
    }
    done += count;
  }
}

bool looks_like_safetensors(const std::string& head) {
  if (head.size() < 9) return false;
  const auto* p = reinterpret_cast<const unsigned char*>(head.data());
  return read_u64(p) <= kMaxHeaderBytes && p[8] == '{';
}

std::string encode_safetensors(const std::vector<std::pair<std::string, NpyArray>>& tensors) {
  json header = json::object();
  std::uint64_t at = 0;
  for (const auto& [name, a] : tensors) {
    const char* dtype = a.dtype == DType::f8   ? "F64"
                        : a.dtype == DType::f4 ? "F32"
                        : a.dtype == DType::f2 ? "F16"
                                               : nullptr;
    if (!dtype)
      fail_input(name + ": a " + a.describe() + " cannot be written to safetensors (floats only)");
    header[name] = {
        {"dtype", dtype}, {"shape", a.shape}, {"data_offsets", {at, at + a.data.size()}}};
    at += a.data.size();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  out += text;
  for (const auto& [name, a] : tensors)
    out.append(reinterpret_cast<const char*>(a.data.data()), a.data.size());
  return out;
}

}  // namespace mha
