#include "mha/io/stream_input.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "mha/base/error.hpp"

namespace mha {

namespace {

std::string read_capped(const std::string& path, const ExpectedSize& expected) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_input(path + ": cannot open: " + std::strerror(errno));
  std::string bytes;
  std::uint64_t size = 0;  // expected's answer, once it has one
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  for (;;) {
    const std::size_t old = bytes.size();
    bytes.resize(old + kChunk);
    const ssize_t got = ::read(fd, bytes.data() + old, kChunk);
    if (got < 0 && errno == EINTR) {
      bytes.resize(old);
      continue;
    }
    if (got < 0) {
      const int err = errno;
      ::close(fd);
      fail_input(path + ": cannot read: " + std::strerror(err));
    }
    bytes.resize(old + static_cast<std::size_t>(got));
    if (got == 0) break;
    if (expected && size == 0) {
      try {
        size = expected(bytes);
      } catch (...) {
        ::close(fd);
        throw;
      }
    }
    if (size != 0 && bytes.size() > size) {
      ::close(fd);
      fail_input(path + ": holds more than the " + std::to_string(size) +
                 " bytes its header describes");
    }
    if (bytes.size() > kMaxStreamInputBytes) {
      ::close(fd);
      fail_input(path + ": a pipe or device with more than " +
                 std::to_string(kMaxStreamInputBytes) +
                 " bytes (4 GiB); such inputs are held in memory and capped there (save it to a "
                 "regular file instead)");
    }
  }
  ::close(fd);
  bytes.shrink_to_fit();
  return bytes;
}

}  // namespace

bool is_stream_input(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
}

const std::string& stream_input_bytes(const std::string& path, const ExpectedSize& expected) {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<std::string>> read;  // path -> its bytes
  std::lock_guard<std::mutex> lock(mutex);
  auto it = read.find(path);
  if (it == read.end())
    it = read.emplace(path, std::make_unique<std::string>(read_capped(path, expected))).first;
  return *it->second;
}

}  // namespace mha
