#include "libzip.hpp"

#include <algorithm>

#include "mha/base/error.hpp"
#include "mha/base/shared_library.hpp"

#ifndef MHA_LIBZIP_SONAME
#define MHA_LIBZIP_SONAME "libzip.so.4"
#endif

namespace mha::detail {

namespace {

Libzip load() {
  const SharedLibrary library(MHA_LIBZIP_SONAME, "libzip",
                              ".npz files need Debian's libzip4 (scripts/setup.sh installs it)");
  Libzip z;
#define MHA_LIBZIP_BIND(name) library.bind(z.name, #name);
  MHA_LIBZIP_FUNCTIONS(MHA_LIBZIP_BIND)
#undef MHA_LIBZIP_BIND
  return z;
}

}  // namespace

const Libzip& libzip() {
  static const Libzip z = load();
  return z;
}

std::string read_member_bytes(zip_t* za, zip_uint64_t index, std::uint64_t declared,
                              const std::string& what, std::size_t head_bytes,
                              const std::function<void(const std::string& head)>& check_head) {
  const Libzip& lz = libzip();
  ZipFilePtr file(lz.zip_fopen_index(za, index, 0));
  if (!file) fail_input(what + ": cannot open: " + lz.zip_strerror(za));
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  std::string bytes;
  std::string chunk(kChunk, '\0');
  bool head_checked = !check_head;
  for (;;) {
    // Until the head is checked, only as much is asked for (libzip inflates what is asked).
    const std::size_t want =
        head_checked ? kChunk
                     : std::min(kChunk, std::max<std::size_t>(1, head_bytes - bytes.size()));
    const zip_int64_t n = lz.zip_fread(file.get(), chunk.data(), want);
    if (n < 0) fail_input(what + ": cannot read: " + lz.zip_file_strerror(file.get()));
    if (n > 0 && static_cast<std::uint64_t>(n) > declared - bytes.size())
      fail_input(what + ": holds more data than the " + std::to_string(declared) +
                 " bytes its directory entry declares");
    // Grown by doubling as data arrives, but never past what the entry declares.
    if (bytes.size() + static_cast<std::size_t>(n) > bytes.capacity())
      bytes.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(
          declared, std::max<std::uint64_t>(2 * bytes.capacity(), bytes.size() + n))));
    bytes.append(chunk.data(), static_cast<std::size_t>(n));
    if (!head_checked && (n == 0 || bytes.size() >= head_bytes)) {
      head_checked = true;
      check_head(bytes);
    }
    if (n == 0) break;
  }
  if (bytes.size() != declared)
    fail_input(what + ": holds " + std::to_string(bytes.size()) +
               " bytes, but its directory entry declares " + std::to_string(declared));
  return bytes;
}

}  // namespace mha::detail
