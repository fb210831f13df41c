#include "mha/io/npz.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <set>

#include "libzip.hpp"
#include "mha/base/error.hpp"
#include "mha/io/stream_input.hpp"

namespace mha {

namespace {

const detail::Libzip& lz() {
  return detail::libzip();
}

// Members are held in memory whole before parsing, so the sizes the archive
// declares are capped to keep a hostile or corrupt archive (a zip bomb) from
// exhausting memory: 4 GiB per member, which is far above any tensor this tool
// runs on and also where plain zip sizes end, and 4 GiB for all members
// together. Both are checked on the declared sizes before anything is
// inflated, and reading stops as soon as a member yields more than it
// declared. Keep in step with the comment in npz.hpp.
constexpr std::uint64_t kMaxMemberBytes = std::uint64_t{4} << 30;
constexpr std::uint64_t kMaxTotalBytes = std::uint64_t{4} << 30;
const std::string kSuffix = ".npy";

using detail::ZipFilePtr;
using detail::ZipPtr;

bool is_control(char c) {
  return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
}

// A member name from the archive, quoted in a message: control bytes become
// \xNN so that a hostile name cannot break the message into lines or send
// escape sequences to a terminal. Long names are cut.
std::string escaped(const std::string& s) {
  constexpr std::size_t kMaxShown = 128;
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < kMaxShown; ++i) {
    const char c = s[i];
    if (!is_control(c)) {
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

std::string zip_code_str(int code) {
  zip_error_t error;
  lz().zip_error_init_with_code(&error, code);
  std::string s = lz().zip_error_strerror(&error);
  lz().zip_error_fini(&error);
  return s;
}

// "4294967296 bytes (4 GiB)": limits are stated in both units.
std::string bytes_str(std::uint64_t n) {
  std::string s = std::to_string(n) + " bytes";
  if (n >= (std::uint64_t{1} << 30) && n % (std::uint64_t{1} << 30) == 0)
    s += " (" + std::to_string(n >> 30) + " GiB)";
  return s;
}

// The directory entry of one member, checked before anything is read: its
// declared size against the per-member cap, and whether libzip can decode it.
zip_stat_t stat_member(zip_t* za, zip_uint64_t index, const std::string& what) {
  zip_stat_t st;
  lz().zip_stat_init(&st);
  if (lz().zip_stat_index(za, index, 0, &st) != 0)
    fail_input(what + ": cannot read its directory entry: " + lz().zip_strerror(za));
  if (!(st.valid & ZIP_STAT_SIZE)) fail_input(what + ": the archive does not record its size");
  if (st.size > kMaxMemberBytes)
    fail_input(what + ": declares an uncompressed size of " + std::to_string(st.size) +
               " bytes, over the limit of " + bytes_str(kMaxMemberBytes) + " per member");
  if ((st.valid & ZIP_STAT_ENCRYPTION_METHOD) && st.encryption_method != ZIP_EM_NONE)
    fail_input(what + ": is encrypted; expected a plain .npz as numpy.savez writes it");
  if ((st.valid & ZIP_STAT_COMP_METHOD) &&
      !lz().zip_compression_method_supported(st.comp_method, 0))
    fail_input(what + ": compression method " + std::to_string(st.comp_method) +
               " is not supported; expected stored or deflated members");
  return st;
}

std::string read_member(zip_t* za, zip_uint64_t index, const zip_stat_t& st,
                        const std::string& what) {
  return detail::read_member_bytes(za, index, st.size, what);
}

// Streams one member (npy header, then the array's bytes) into libzip without
// first assembling the whole .npy file in memory.
struct MemberSource {
  std::string header;
  const NpyArray* array = nullptr;
  std::uint64_t pos = 0;
  zip_error_t error;

  std::uint64_t size() const { return header.size() + array->data.size(); }

  zip_int64_t read(void* out, zip_uint64_t len) {
    auto* dst = static_cast<unsigned char*>(out);
    zip_uint64_t done = 0;
    while (done < len && pos < size()) {
      const bool in_header = pos < header.size();
      const unsigned char* src = in_header
                                     ? reinterpret_cast<const unsigned char*>(header.data()) + pos
                                     : array->data.data() + (pos - header.size());
      const std::uint64_t avail = in_header ? header.size() - pos : size() - pos;
      const std::uint64_t n = std::min<std::uint64_t>(avail, len - done);
      std::memcpy(dst + done, src, static_cast<std::size_t>(n));
      done += n;
      pos += n;
    }
    return static_cast<zip_int64_t>(done);
  }

  static zip_int64_t callback(void* userdata, void* data, zip_uint64_t len, zip_source_cmd_t cmd) {
    auto* self = static_cast<MemberSource*>(userdata);
    switch (cmd) {
      case ZIP_SOURCE_OPEN:
        self->pos = 0;
        return 0;
      case ZIP_SOURCE_READ:
        return self->read(data, len);
      case ZIP_SOURCE_CLOSE:
        return 0;
      case ZIP_SOURCE_STAT: {
        if (len < sizeof(zip_stat_t)) {  // ZIP_SOURCE_GET_ARGS, which calls the linked libzip
          lz().zip_error_set(&self->error, ZIP_ER_INVAL, 0);
          return -1;
        }
        auto* st = static_cast<zip_stat_t*>(data);
        lz().zip_stat_init(st);
        st->size = self->size();
        st->valid |= ZIP_STAT_SIZE;
        return sizeof(*st);
      }
      case ZIP_SOURCE_ERROR:
        return lz().zip_error_to_data(&self->error, data, len);
      case ZIP_SOURCE_FREE:
        return 0;  // owned by write_npz, which outlives the archive
      case ZIP_SOURCE_SUPPORTS:
        return lz().zip_source_make_command_bitmap(ZIP_SOURCE_OPEN, ZIP_SOURCE_READ,
                                                   ZIP_SOURCE_CLOSE, ZIP_SOURCE_STAT,
                                                   ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE, -1);
      default:
        lz().zip_error_set(&self->error, ZIP_ER_OPNOTSUPP, 0);
        return -1;
    }
  }
};

// An archive from a pipe (mha/io/stream_input.hpp), opened from its bytes in
// memory; null with `code` set on failure, as zip_open.
zip_t* open_stream_zip(const std::string& path, int& code) {
  const std::string& bytes = stream_input_bytes(path);
  zip_error_t error;
  lz().zip_error_init(&error);
  zip_source_t* source = lz().zip_source_buffer_create(bytes.data(), bytes.size(), 0, &error);
  zip_t* za =
      source ? lz().zip_open_from_source(source, ZIP_RDONLY | ZIP_CHECKCONS, &error) : nullptr;
  if (!za) {
    code = lz().zip_error_code_zip(&error);
    if (source) lz().zip_source_free(source);
  }
  lz().zip_error_fini(&error);
  return za;
}

// libzip writes no file at all for an archive without members, but
// numpy.savez() with no arrays writes an empty zip: just the end record.
void write_empty_zip(const std::string& path) {
  const std::string eocd = std::string("PK\x05\x06", 4) + std::string(18, '\0');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(eocd.data(), static_cast<std::streamsize>(eocd.size()));
  out.close();
  if (!out) fail_runtime(path + ": cannot write: " + std::strerror(errno));
}

// An archive opened for reading, with every member's directory entry and
// .npy header.
struct OpenArchive {
  ZipPtr za;
  std::vector<zip_uint64_t> index;  // of each member, in archive order
  std::vector<zip_stat_t> st;
  std::vector<std::string> what;  // "path: member 'W_q.npy'"
  std::vector<NpzMember> members;
};

ZipPtr open_archive(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail_input(path + ": no such file");
  if (std::filesystem::is_directory(path, ec))
    fail_input(path + ": is a directory, not a .npz file");
  // libzip treats an empty file as an empty archive; NumPy does not.
  if ((std::filesystem::file_size(path, ec) == 0 && !ec) ||
      (is_stream_input(path) && stream_input_bytes(path).empty()))
    fail_input(path + ": not a valid .npz (zip) archive: the file is empty");

  int code = 0;
  ZipPtr za(is_stream_input(path) ? open_stream_zip(path, code)
                                  : lz().zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code));
  if (!za) {
    if (code == ZIP_ER_NOENT) fail_input(path + ": no such file");
    if (code == ZIP_ER_OPEN || code == ZIP_ER_READ)
      fail_input(path + ": cannot open: " + zip_code_str(code));
    // libzip says "File already exists" for two members of the same name.
    if (code == ZIP_ER_EXISTS)
      fail_input(path + ": not a valid .npz (zip) archive: two members have the same name");
    fail_input(path + ": not a valid .npz (zip) archive: " + zip_code_str(code));
  }
  return za;
}

// The member's .npy header from its first bytes: only as much is inflated as
// the header takes (npy_stream_size says when it is whole, and refuses a
// header over 1 MiB), so that a member declaring gigabytes costs nothing to
// refuse.
NpyHeaderInfo read_member_header(zip_t* za, zip_uint64_t index, const zip_stat_t& st,
                                 const std::string& what, const std::string& name) {
  ZipFilePtr file(lz().zip_fopen_index(za, index, 0));
  if (!file) fail_input(what + ": cannot open: " + lz().zip_strerror(za));
  std::string head;
  std::size_t want = 4096;
  while (head.size() < st.size) {
    const std::size_t old = head.size();
    const auto n_want = static_cast<std::size_t>(std::min<std::uint64_t>(want, st.size - old));
    head.resize(old + n_want);
    const zip_int64_t n = lz().zip_fread(file.get(), head.data() + old, n_want);
    if (n < 0) fail_input(what + ": cannot read: " + lz().zip_file_strerror(file.get()));
    head.resize(old + static_cast<std::size_t>(n));
    if (n == 0) break;
    if (npy_stream_size(head, name) != 0) break;
    want = head.size();  // the header is longer: read as much again
  }
  // A member that ends early is refused as read_member would refuse it.
  const std::uint64_t whole = npy_stream_size(head, name);
  if (head.size() < st.size && whole == 0)
    fail_input(what + ": holds " + std::to_string(head.size()) +
               " bytes, but its directory entry declares " + std::to_string(st.size));
  if (whole == 0 || whole == st.size) return parse_npy_header(head, st.size, name);
  // The header's array against the member's size as the directory records it.
  const NpyHeaderInfo h = parse_npy_header(head, whole, name);
  const std::uint64_t data = st.size > h.header_bytes ? st.size - h.header_bytes : 0;
  fail_input(name + ": data is " + std::to_string(data) + " bytes, expected " +
             std::to_string(h.data_bytes) + " for " + dtype_name(h.dtype) + " array of shape " +
             shape_str(h.shape) + ": the .npy header declares " +
             (whole > st.size ? "more" : "less") + " data than the member holds (" +
             std::to_string(st.size) + " bytes, as the archive records it)");
}

OpenArchive read_archive(const std::string& path) {
  OpenArchive a;
  a.za = open_archive(path);
  zip_t* za = a.za.get();
  // First every directory entry: names, declared sizes and their total, so
  // that an archive over the limits is refused before anything is inflated.
  std::set<std::string> keys;
  std::uint64_t total = 0;
  const zip_int64_t count = lz().zip_get_num_entries(za, 0);
  for (zip_int64_t i = 0; i < count; ++i) {
    const auto index = static_cast<zip_uint64_t>(i);
    const char* raw_name = lz().zip_get_name(za, index, 0);
    if (raw_name == nullptr)
      fail_input(path + ": cannot read the name of member " + std::to_string(i) + ": " +
                 lz().zip_strerror(za));
    const std::string member = raw_name;
    const std::string what = path + ": member '" + escaped(member) + "'";
    if (member.size() < kSuffix.size() ||
        member.compare(member.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0)
      fail_input(what + ": expected only .npy members in a .npz archive");
    // Names become tensor names in later messages, which must stay one line.
    if (std::any_of(member.begin(), member.end(), is_control))
      fail_input(what + ": the name holds control characters; expected a tensor name such as " +
                 "'W_q.npy'");
    const std::string key = member.substr(0, member.size() - kSuffix.size());
    if (!keys.insert(key).second) fail_input(what + ": the archive holds it more than once");
    const zip_stat_t st = stat_member(za, index, what);
    // Each size is at most kMaxMemberBytes, so the sum cannot wrap before
    // it passes the limit.
    total += st.size;
    if (total > kMaxTotalBytes)
      fail_input(path + ": members declare " + std::to_string(total) +
                 " bytes uncompressed by member '" + escaped(member) + "', over the limit of " +
                 bytes_str(kMaxTotalBytes) +
                 " for a whole .npz (save large weights as a directory of .npy files)");
    a.index.push_back(index);
    a.st.push_back(st);
    a.what.push_back(what);
    NpzMember m;
    m.key = key;
    m.name = path + ":" + key;
    m.bytes = st.size;
    a.members.push_back(std::move(m));
  }
  // Then every header, each from its member's first bytes.
  for (std::size_t i = 0; i < a.members.size(); ++i)
    a.members[i].header = read_member_header(za, a.index[i], a.st[i], a.what[i], a.members[i].name);
  return a;
}

}  // namespace

std::vector<NpzMember> read_npz_members(const std::string& path) {
  return read_archive(path).members;
}

void for_each_npz_member(
    const std::string& path,
    const std::function<void(const NpzMember& member, const std::string& bytes)>& f,
    const NpzCheck& check) {
  OpenArchive a = read_archive(path);
  if (check) check(path, a.members);
  for (std::size_t i = 0; i < a.members.size(); ++i)
    f(a.members[i], read_member(a.za.get(), a.index[i], a.st[i], a.what[i]));
}

void for_each_npz_member_streamed(
    const std::string& path,
    const std::function<void(const NpzMember& member, const NpzMemberRead& read)>& f,
    const NpzCheck& check) {
  OpenArchive a = read_archive(path);
  if (check) check(path, a.members);
  for (std::size_t i = 0; i < a.members.size(); ++i) {
    const std::string& what = a.what[i];
    const std::uint64_t declared = a.st[i].size;
    ZipFilePtr file(lz().zip_fopen_index(a.za.get(), a.index[i], 0));
    if (!file) fail_input(what + ": cannot open: " + lz().zip_strerror(a.za.get()));
    std::uint64_t pos = 0;
    const NpzMemberRead read = [&](std::size_t n, unsigned char* out) {
      for (std::size_t done = 0; done < n;) {
        const zip_int64_t got = lz().zip_fread(file.get(), out + done, n - done);
        if (got < 0) fail_input(what + ": cannot read: " + lz().zip_file_strerror(file.get()));
        if (got == 0)
          fail_input(what + ": holds " + std::to_string(pos) +
                     " bytes, but its directory entry declares " + std::to_string(declared));
        done += static_cast<std::size_t>(got);
        pos += static_cast<std::uint64_t>(got);
      }
    };
    f(a.members[i], read);
    if (pos != declared) continue;  // `f` stopped early: nothing more to check
    // Read past the end: libzip checks the CRC there, and no byte may follow.
    unsigned char extra = 0;
    const zip_int64_t got = lz().zip_fread(file.get(), &extra, 1);
    if (got < 0) fail_input(what + ": cannot read: " + lz().zip_file_strerror(file.get()));
    if (got > 0)
      fail_input(what + ": holds more data than the " + std::to_string(declared) +
                 " bytes its directory entry declares");
  }
}

std::map<std::string, NpyArray> read_npz(const std::string& path, const NpzCheck& check) {
  std::map<std::string, NpyArray> arrays;
  for_each_npz_member(
      path,
      [&](const NpzMember& m, const std::string& bytes) {
        arrays.emplace(m.key, parse_npy(bytes, m.name));
      },
      check);
  return arrays;
}

void write_npz(const std::string& path,
               const std::vector<std::pair<std::string, NpyArray>>& members) {
  if (members.empty()) return write_empty_zip(path);

  // Sources must stay put until lz().zip_close() has read them.
  std::vector<std::unique_ptr<MemberSource>> sources;
  for (const auto& [name, array] : members) {
    auto src = std::make_unique<MemberSource>();
    if (array.data.size() != array.size() * itemsize(array.dtype))
      fail_runtime(path + ": member '" + name + ".npy': " + array.describe() + " holds " +
                   std::to_string(array.data.size()) + " data bytes");
    src->header = npy_header(array.dtype, array.shape);
    src->array = &array;
    lz().zip_error_init(&src->error);
    sources.push_back(std::move(src));
  }
  struct ErrorFini {
    std::vector<std::unique_ptr<MemberSource>>& s;
    ~ErrorFini() {
      for (auto& src : s) lz().zip_error_fini(&src->error);
    }
  } fini{sources};

  int code = 0;
  ZipPtr za(lz().zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code));
  if (!za) fail_runtime(path + ": cannot create: " + zip_code_str(code));
  for (std::size_t i = 0; i < members.size(); ++i) {
    const std::string member = members[i].first + kSuffix;
    zip_source_t* source =
        lz().zip_source_function(za.get(), &MemberSource::callback, sources[i].get());
    if (source == nullptr)
      fail_runtime(path + ": member '" + member + "': " + lz().zip_strerror(za.get()));
    const zip_int64_t index = lz().zip_file_add(za.get(), member.c_str(), source, ZIP_FL_ENC_UTF_8);
    if (index < 0) {
      lz().zip_source_free(source);
      fail_runtime(path + ": member '" + member + "': " + lz().zip_strerror(za.get()));
    }
    // numpy.savez stores members uncompressed; so do we.
    if (lz().zip_set_file_compression(za.get(), static_cast<zip_uint64_t>(index), ZIP_CM_STORE,
                                      0) != 0)
      fail_runtime(path + ": member '" + member + "': " + lz().zip_strerror(za.get()));
  }
  if (lz().zip_close(za.get()) != 0)
    fail_runtime(path + ": cannot write: " + lz().zip_strerror(za.get()));
  za.release();  // lz().zip_close() freed it
}

}  // namespace mha
