// A .npy array read a range of elements at a time, for readers that draw or
// summarise arrays larger than memory (mha plot, mha view):
//
//   mha::NpyReader r("attention.npy");           // the header only
//   std::vector<float> row(r.header().shape.back());
//   r.read(0, row.size(), row.data());            // the first row, as float
//
// A C-order regular file is read with pread, byte-swapped when its byte order
// is not the host's, so memory stays at the range asked for. Fortran-order
// arrays (with more than one axis longer than 1), pipes and devices (held in
// memory anyway, stream_input.hpp) and arrays given in memory are read whole
// once, with read_npy.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mha/io/npy.hpp"

namespace mha {

class NpyReader {
 public:
  // Reads and checks the header as read_npy_header does; throws mha::Error
  // (invalid_input) naming `path`.
  explicit NpyReader(const std::string& path);
  ~NpyReader();
  NpyReader(const NpyReader&) = delete;
  NpyReader& operator=(const NpyReader&) = delete;

  const NpyHeaderInfo& header() const { return header_; }
  const std::string& path() const { return path_; }

  // Elements [first, first + count) in C order, converted to V (float or
  // double) as convert() does; the array must be a float array (float16/32/64).
  template <class V>
  void read(std::uint64_t first, std::size_t count, V* out);

 private:
  std::string path_;
  NpyHeaderInfo header_;
  int fd_ = -1;                        // a C-order regular file
  std::unique_ptr<NpyArray> whole_;    // otherwise: the whole array, C order, native order
  std::vector<unsigned char> buffer_;  // the bytes of one read from fd_
};

}  // namespace mha
