// zlib's crc32, the checksum run.json records for each file a run writes or
// reads, so that a reader can tell a run's own outputs from files that were
// changed or left there by another run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mha {

// crc32 continued over `n` bytes (start from 0).
std::uint32_t crc32_update(std::uint32_t crc, const void* bytes, std::size_t n);
// The crc32 of A followed by B, from crc(A), crc(B) and B's length.
std::uint32_t crc32_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t bytes_b);
// "0a1b2c3d": how run.json writes a crc32.
std::string crc32_hex(std::uint32_t crc);

struct FileChecksum {
  std::uint64_t bytes = 0;  // bytes covered
  std::uint32_t crc32 = 0;
};
// The first `limit` bytes of a file (all of it by default), read in 1 MiB
// pieces. Throws mha::Error (input) naming the file when it cannot be read.
FileChecksum file_checksum(const std::string& path, std::uint64_t limit = ~std::uint64_t{0});
// The same from an open descriptor, with pread (the file offset is unchanged).
FileChecksum fd_checksum(int fd, const std::string& name, std::uint64_t limit = ~std::uint64_t{0});

}  // namespace mha
