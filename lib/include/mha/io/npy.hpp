// NumPy .npy files: read any version (1.0, 2.0, 3.0), byte order and memory
// order; write version 1.0 (2.0 when the header needs it), little-endian,
// C order. Arrays are held as raw bytes in C order and native byte order,
// tagged with their dtype, so that a mask can stay bool and a tensor can be
// converted to the compute dtype in one place.
//
//   mha::NpyArray a = mha::read_npy("query.npy");      // any f2/f4/f8/b1/int
//   std::vector<float> q(a.size());
//   mha::convert(a, q.data(), "query.npy");              // f2/f4/f8 -> float
//   mha::write_npy("out.npy", mha::NpyArray::of(q.data(), {2, 5, 8}));
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mha {

enum class DType { f2, f4, f8, b1, i1, i2, i4, i8, u1, u2, u4, u8 };

std::size_t itemsize(DType dtype);
const char* dtype_name(DType dtype);  // "float32", "bool", "int64", ...
bool is_float(DType dtype);
bool is_integer(DType dtype);

struct NpyArray {
  DType dtype = DType::f4;
  std::vector<std::size_t> shape;   // empty shape = 0-d array with one element
  std::vector<unsigned char> data;  // size() * itemsize(dtype) bytes, C order, native order

  std::size_t size() const;      // number of elements
  std::string describe() const;  // "float32 array of shape (2, 3)"

  // Copies a C-order buffer of float, double, bool, int32 or int64.
  template <class T>
  static NpyArray of(const T* values, std::vector<std::size_t> shape);
};

// Parses the bytes of a whole .npy file. `name` (a path, or "weights.npz:W_q")
// starts every error message. Throws mha::Error (invalid_input) on anything
// malformed: bad magic, unknown version, header that is not a dict, missing or
// extra keys, unsupported dtype (objects, structured, strings, complex),
// shape/size overflow, data shorter or longer than the header says.
NpyArray parse_npy(const std::string& bytes, const std::string& name);
NpyArray read_npy(const std::string& path);

// What a .npy header says, as written, for tools that report it or stream the
// data themselves (mha inspect). The data are data_bytes bytes at offset
// header_bytes, in the file's byte order and memory order; the file holds
// exactly that many bytes after the header.
struct NpyHeaderInfo {
  int major = 1, minor = 0;  // format version: 1.0, 2.0 or 3.0
  std::string descr;         // as the file spells it: "<f4", ">f8", "|b1", "=i8"
  DType dtype = DType::f4;
  bool big_endian = false;         // the data's byte order ('=' is the host's)
  bool fortran_order = false;      // column-major data
  std::vector<std::size_t> shape;  // empty shape = 0-d array with one element
  std::size_t header_bytes = 0;    // magic, version, length and dict: the data's offset
  std::size_t data_bytes = 0;      // size() * itemsize(dtype)

  std::size_t size() const;  // number of elements
};

// The header alone, with every check, cap and message of parse_npy and
// read_npy (the data's size included), without reading or allocating the data.
NpyHeaderInfo parse_npy_header(const std::string& bytes, const std::string& name);
NpyHeaderInfo read_npy_header(const std::string& path);

// The header of a .npy of `file_size` bytes from its first bytes (at least
// its whole header: npy_stream_size says how many), with parse_npy_header's
// checks and messages, the data's size checked against `file_size`. For
// members of an .npz, judged before they are inflated.
NpyHeaderInfo parse_npy_header(const std::string& first_bytes, std::uint64_t file_size,
                               const std::string& name);

// The length in bytes a .npy must have, judged from its first bytes: 0 until
// its whole header is there. Throws as read_npy would on a bad magic string,
// version or header. read_npy uses it on pipes (mha/io/stream_input.hpp) to
// stop reading where the array ends and to refuse a non-.npy stream at once.
std::uint64_t npy_stream_size(const std::string& so_far, const std::string& name);

// The bytes of a .npy file holding `array`.
std::string encode_npy(const NpyArray& array);
// The header (magic, version, length, dict, padding) for a C-order
// little-endian array; the data follows it. Used to stream large tensors.
std::string npy_header(DType dtype, const std::vector<std::size_t>& shape);

// Refuses a non-float array named `name` (a path, or path:tensor) with
// "NAME: expected a float array (float16/32/64), got int32 array of shape (2, 3)".
void check_float_array(DType dtype, const std::vector<std::size_t>& shape, const std::string& name);

// Converts a float array (f2, f4, f8) to T. Integers and bools are refused
// with a message naming `name`, as is any non-float dtype.
template <class T>
void convert(const NpyArray& array, T* out, const std::string& name);

// An IEEE binary16 value (float16's bits, native order) as float, exactly.
float half_to_float(std::uint16_t bits);

// True on a big-endian host (arrays are held in the host's byte order).
bool host_is_big_endian();

}  // namespace mha
