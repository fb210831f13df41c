#include "mha/io/checksum.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "mha/base/error.hpp"

namespace mha {

std::uint32_t crc32_update(std::uint32_t crc, const void* bytes, std::size_t n) {
  const auto* p = static_cast<const Bytef*>(bytes);
  constexpr std::size_t kPiece = std::size_t{1} << 30;  // what a uInt length holds
  uLong c = crc;
  for (std::size_t done = 0; done < n; done += kPiece)
    c = ::crc32(c, p + done, static_cast<uInt>(std::min(kPiece, n - done)));
  return static_cast<std::uint32_t>(c);
}

std::uint32_t crc32_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t bytes_b) {
  return static_cast<std::uint32_t>(
      ::crc32_combine64(crc_a, crc_b, static_cast<z_off64_t>(bytes_b)));
}

std::string crc32_hex(std::uint32_t crc) {
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", crc);
  return hex;
}

FileChecksum fd_checksum(int fd, const std::string& name, std::uint64_t limit) {
  FileChecksum c;
  std::vector<unsigned char> buffer(std::size_t{1} << 20);
  while (c.bytes < limit) {
    const std::size_t want =
        static_cast<std::size_t>(std::min<std::uint64_t>(limit - c.bytes, buffer.size()));
    const ssize_t n = ::pread(fd, buffer.data(), want, static_cast<off_t>(c.bytes));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_input(name + ": cannot read it: " + std::strerror(errno));
    if (n == 0) break;
    c.crc32 = crc32_update(c.crc32, buffer.data(), static_cast<std::size_t>(n));
    c.bytes += static_cast<std::uint64_t>(n);
  }
  return c;
}

FileChecksum file_checksum(const std::string& path, std::uint64_t limit) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_input(path + ": cannot read it: " + std::strerror(errno));
  try {
    FileChecksum c = fd_checksum(fd, path, limit);
    ::close(fd);
    return c;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

}  // namespace mha
