#include "mha/npz.hpp"

#include <zip.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>

#include "mha/error.hpp"

namespace mha {

namespace {

// A member is held in memory whole before parsing, so its size is capped to
// keep a hostile or corrupt archive from exhausting memory. 4 GiB is far above
// any tensor this tool runs on, and is also where plain zip sizes end.
constexpr std::uint64_t kMaxMemberBytes = std::uint64_t{4} << 30;
constexpr std::size_t kChunk = std::size_t{1} << 20;
const std::string kSuffix = ".npy";

struct ZipDiscard {
  void operator()(zip_t* za) const { zip_discard(za); }
};
using ZipPtr = std::unique_ptr<zip_t, ZipDiscard>;

struct ZipFileClose {
  void operator()(zip_file_t* f) const { zip_fclose(f); }
};
using ZipFilePtr = std::unique_ptr<zip_file_t, ZipFileClose>;

std::string zip_code_str(int code) {
  zip_error_t error;
  zip_error_init_with_code(&error, code);
  std::string s = zip_error_strerror(&error);
  zip_error_fini(&error);
  return s;
}

std::string read_member(zip_t* za, zip_uint64_t index, const std::string& what) {
  zip_stat_t st;
  zip_stat_init(&st);
  if (zip_stat_index(za, index, 0, &st) != 0)
    fail_input(what + ": cannot read its directory entry: " + zip_strerror(za));
  if (!(st.valid & ZIP_STAT_SIZE)) fail_input(what + ": the archive does not record its size");
  if (st.size > kMaxMemberBytes)
    fail_input(what + ": uncompressed size " + std::to_string(st.size) + " bytes exceeds the " +
               std::to_string(kMaxMemberBytes) + "-byte limit");
  ZipFilePtr file(zip_fopen_index(za, index, 0));
  if (!file) fail_input(what + ": cannot open: " + zip_strerror(za));

  // Grow as data actually arrives rather than trusting the declared size
  // for the allocation; then insist the two agree.
  const auto declared = static_cast<std::size_t>(st.size);
  std::string bytes;
  bytes.reserve(std::min<std::size_t>(declared, 64 * kChunk));
  std::vector<char> chunk(kChunk);
  for (;;) {
    const zip_int64_t n = zip_fread(file.get(), chunk.data(), chunk.size());
    if (n < 0) fail_input(what + ": cannot read: " + zip_file_strerror(file.get()));
    if (n == 0) break;
    bytes.append(chunk.data(), static_cast<std::size_t>(n));
    if (bytes.size() > declared)
      fail_input(what + ": holds more data than the " + std::to_string(declared) +
                 " bytes its directory entry declares");
  }
  if (bytes.size() != declared)
    fail_input(what + ": holds " + std::to_string(bytes.size()) +
               " bytes, but its directory entry declares " + std::to_string(declared));
  return bytes;
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
        auto* st = ZIP_SOURCE_GET_ARGS(zip_stat_t, data, len, &self->error);
        if (st == nullptr) return -1;
        zip_stat_init(st);
        st->size = self->size();
        st->valid |= ZIP_STAT_SIZE;
        return sizeof(*st);
      }
      case ZIP_SOURCE_ERROR:
        return zip_error_to_data(&self->error, data, len);
      case ZIP_SOURCE_FREE:
        return 0;  // owned by write_npz, which outlives the archive
      case ZIP_SOURCE_SUPPORTS:
        return zip_source_make_command_bitmap(ZIP_SOURCE_OPEN, ZIP_SOURCE_READ, ZIP_SOURCE_CLOSE,
                                              ZIP_SOURCE_STAT, ZIP_SOURCE_ERROR, ZIP_SOURCE_FREE,
                                              -1);
      default:
        zip_error_set(&self->error, ZIP_ER_OPNOTSUPP, 0);
        return -1;
    }
  }
};

// libzip writes no file at all for an archive without members, but
// numpy.savez() with no arrays writes an empty zip: just the end record.
void write_empty_zip(const std::string& path) {
  const std::string eocd = std::string("PK\x05\x06", 4) + std::string(18, '\0');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(eocd.data(), static_cast<std::streamsize>(eocd.size()));
  out.close();
  if (!out) fail_runtime(path + ": cannot write: " + std::strerror(errno));
}

}  // namespace

std::map<std::string, NpyArray> read_npz(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail_input(path + ": no such file");
  if (std::filesystem::is_directory(path, ec))
    fail_input(path + ": is a directory, not a .npz file");
  // libzip treats an empty file as an empty archive; NumPy does not.
  if (std::filesystem::file_size(path, ec) == 0 && !ec)
    fail_input(path + ": not a valid .npz (zip) archive: the file is empty");

  int code = 0;
  ZipPtr za(zip_open(path.c_str(), ZIP_RDONLY | ZIP_CHECKCONS, &code));
  if (!za) {
    if (code == ZIP_ER_NOENT) fail_input(path + ": no such file");
    if (code == ZIP_ER_OPEN || code == ZIP_ER_READ)
      fail_input(path + ": cannot open: " + zip_code_str(code));
    fail_input(path + ": not a valid .npz (zip) archive: " + zip_code_str(code));
  }

  std::map<std::string, NpyArray> arrays;
  const zip_int64_t count = zip_get_num_entries(za.get(), 0);
  for (zip_int64_t i = 0; i < count; ++i) {
    const auto index = static_cast<zip_uint64_t>(i);
    const char* raw_name = zip_get_name(za.get(), index, 0);
    if (raw_name == nullptr)
      fail_input(path + ": cannot read the name of member " + std::to_string(i) + ": " +
                 zip_strerror(za.get()));
    const std::string member = raw_name;
    const std::string what = path + ": member '" + member + "'";
    if (member.size() < kSuffix.size() ||
        member.compare(member.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0)
      fail_input(what + ": expected only .npy members in a .npz archive");
    const std::string key = member.substr(0, member.size() - kSuffix.size());
    if (arrays.count(key)) fail_input(what + ": the archive holds it more than once");
    const std::string bytes = read_member(za.get(), index, what);
    arrays.emplace(key, parse_npy(bytes, path + ":" + key));
  }
  return arrays;
}

void write_npz(const std::string& path,
               const std::vector<std::pair<std::string, NpyArray>>& members) {
  if (members.empty()) return write_empty_zip(path);

  // Sources must stay put until zip_close() has read them.
  std::vector<std::unique_ptr<MemberSource>> sources;
  for (const auto& [name, array] : members) {
    auto src = std::make_unique<MemberSource>();
    if (array.data.size() != array.size() * itemsize(array.dtype))
      fail_runtime(path + ": member '" + name + ".npy': " + array.describe() + " holds " +
                   std::to_string(array.data.size()) + " data bytes");
    src->header = npy_header(array.dtype, array.shape);
    src->array = &array;
    zip_error_init(&src->error);
    sources.push_back(std::move(src));
  }
  struct ErrorFini {
    std::vector<std::unique_ptr<MemberSource>>& s;
    ~ErrorFini() {
      for (auto& src : s) zip_error_fini(&src->error);
    }
  } fini{sources};

  int code = 0;
  ZipPtr za(zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code));
  if (!za) fail_runtime(path + ": cannot create: " + zip_code_str(code));
  for (std::size_t i = 0; i < members.size(); ++i) {
    const std::string member = members[i].first + kSuffix;
    zip_source_t* source = zip_source_function(za.get(), &MemberSource::callback, sources[i].get());
    if (source == nullptr)
      fail_runtime(path + ": member '" + member + "': " + zip_strerror(za.get()));
    const zip_int64_t index = zip_file_add(za.get(), member.c_str(), source, ZIP_FL_ENC_UTF_8);
    if (index < 0) {
      zip_source_free(source);
      fail_runtime(path + ": member '" + member + "': " + zip_strerror(za.get()));
    }
    // numpy.savez stores members uncompressed; so do we.
    if (zip_set_file_compression(za.get(), static_cast<zip_uint64_t>(index), ZIP_CM_STORE, 0) != 0)
      fail_runtime(path + ": member '" + member + "': " + zip_strerror(za.get()));
  }
  if (zip_close(za.get()) != 0) fail_runtime(path + ": cannot write: " + zip_strerror(za.get()));
  za.release();  // zip_close() freed it
}

}  // namespace mha
