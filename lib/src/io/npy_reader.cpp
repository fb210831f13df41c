#include "mha/io/npy_reader.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "mha/base/error.hpp"
#include "mha/io/provided_input.hpp"
#include "mha/io/stream_input.hpp"

namespace mha {

namespace {

// With at most one axis longer than 1, C and Fortran order are the same layout.
bool needs_reordering(const NpyHeaderInfo& h) {
  if (!h.fortran_order) return false;
  return std::count_if(h.shape.begin(), h.shape.end(), [](std::size_t d) { return d > 1; }) > 1;
}

// `count` items of `item` bytes at `p`, in native order, as V.
template <class V>
void widen(const unsigned char* p, DType dtype, std::size_t count, V* out) {
  if (dtype == DType::f2) {
    for (std::size_t k = 0; k < count; ++k) {
      std::uint16_t bits;
      std::memcpy(&bits, p + 2 * k, 2);
      out[k] = static_cast<V>(half_to_float(bits));
    }
  } else if (dtype == DType::f4) {
    for (std::size_t k = 0; k < count; ++k) {
      float x;
      std::memcpy(&x, p + 4 * k, 4);
      out[k] = static_cast<V>(x);
    }
  } else {
    for (std::size_t k = 0; k < count; ++k) {
      double x;
      std::memcpy(&x, p + 8 * k, 8);
      out[k] = static_cast<V>(x);
    }
  }
}

}  // namespace

NpyReader::NpyReader(const std::string& path) : path_(path), header_(read_npy_header(path)) {
  const bool in_memory = provided_npy(path) || provided_view(path) || is_stream_input(path);
  if (in_memory || needs_reordering(header_)) {
    whole_ = std::make_unique<NpyArray>(read_npy(path));
    return;
  }
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) fail_input(path + ": cannot open: " + std::strerror(errno));
  ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
}

NpyReader::~NpyReader() {
  if (fd_ >= 0) ::close(fd_);
}

template <class V>
void NpyReader::read(std::uint64_t first, std::size_t count, V* out) {
  check_float_array(header_.dtype, header_.shape, path_);
  const std::size_t item = itemsize(header_.dtype);
  if (first + count > header_.size())
    fail_runtime(path_ + ": internal: elements " + std::to_string(first) + " + " +
                 std::to_string(count) + " read past the array's " +
                 std::to_string(header_.size()));
  if (whole_) return widen(whole_->data.data() + first * item, header_.dtype, count, out);
  buffer_.resize(count * item);
  const std::uint64_t pos = header_.header_bytes + first * item;
  std::size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t got =
        ::pread(fd_, buffer_.data() + done, buffer_.size() - done, static_cast<off_t>(pos + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail_input(path_ + ": cannot read: " + std::strerror(errno));
    // read_npy's message: the size was checked against the header before.
    if (got == 0)
      fail_input(path_ + ": read only " + std::to_string(first * item + done) + " of " +
                 std::to_string(header_.data_bytes) +
                 " data bytes (was the file truncated while reading?)");
    done += static_cast<std::size_t>(got);
  }
  if (item > 1 && header_.big_endian != host_is_big_endian())
    for (std::size_t k = 0; k < count; ++k)
      std::reverse(buffer_.begin() + static_cast<std::ptrdiff_t>(k * item),
                   buffer_.begin() + static_cast<std::ptrdiff_t>((k + 1) * item));
  widen(buffer_.data(), header_.dtype, count, out);
}

template void NpyReader::read<float>(std::uint64_t, std::size_t, float*);
template void NpyReader::read<double>(std::uint64_t, std::size_t, double*);

}  // namespace mha
