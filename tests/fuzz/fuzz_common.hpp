// Shared by the fuzz targets: invariant checks that abort (so libFuzzer and
// the replay driver both report them), a per-process scratch file for the
// file-based readers, and the checks every successfully parsed array must pass.
#pragma once

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "mha/base/error.hpp"
#include "mha/base/message.hpp"
#include "mha/io/npy.hpp"

// Not assert(): it must stay on in Release builds.
#define FUZZ_CHECK(cond)                                                                     \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: fuzz invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

namespace mha_fuzz {

// A scratch path unique to this process, in /dev/shm when it is there (no
// disk traffic), else the system temp directory. Removed at exit.
inline std::string scratch_path(const std::string& suffix) {
  std::error_code ec;
  std::filesystem::path dir = "/dev/shm";
  if (!std::filesystem::is_directory(dir, ec) || access(dir.c_str(), W_OK) != 0)
    dir = std::filesystem::temp_directory_path();
  return (dir / ("mha_fuzz_" + std::to_string(getpid()) + suffix)).string();
}

inline void write_file(const std::string& path, const std::uint8_t* data, std::size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  FUZZ_CHECK(f != nullptr);
  FUZZ_CHECK(size == 0 || std::fwrite(data, 1, size, f) == size);
  FUZZ_CHECK(std::fclose(f) == 0);
}

// A refusal is one line of invalid_input, at most kMessageChars characters.
inline void check_message(const mha::Error& e) {
  FUZZ_CHECK(e.kind() == mha::ErrorKind::invalid_input);
  const std::string what = e.what();
  FUZZ_CHECK(what.find('\n') == std::string::npos);
  std::size_t chars = 0;
  for (const char c : what) chars += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
  FUZZ_CHECK(chars <= mha::kMessageChars);
}

// A scratch file that is removed when the process exits normally.
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& suffix) : path_(scratch_path(suffix)) {}
  ~ScratchFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline bool same_array(const mha::NpyArray& a, const mha::NpyArray& b) {
  return a.dtype == b.dtype && a.shape == b.shape && a.data == b.data;
}

// What every array a reader returns must satisfy; also converts float arrays
// to float and double (and checks that other dtypes are refused).
inline void check_array(const mha::NpyArray& a, const std::string& name) {
  const std::size_t n = a.size();
  FUZZ_CHECK(a.data.size() == n * mha::itemsize(a.dtype));
  if (a.dtype == mha::DType::b1)
    for (unsigned char b : a.data) FUZZ_CHECK(b == 0 || b == 1);
  FUZZ_CHECK(!a.describe().empty());

  if (mha::is_float(a.dtype)) {
    std::vector<float> f(n);
    std::vector<double> d(n);
    mha::convert<float>(a, f.data(), name);
    mha::convert<double>(a, d.data(), name);
    // Going through double must round the same way as converting directly.
    for (std::size_t i = 0; i < n; ++i) {
      const float via_double = static_cast<float>(d[i]);
      FUZZ_CHECK((std::isnan(f[i]) && std::isnan(via_double)) ||
                 std::memcmp(&f[i], &via_double, sizeof(float)) == 0);
    }
  } else {
    float dummy[1];
    bool refused = false;
    try {
      mha::convert<float>(a, dummy, name);
    } catch (const mha::Error&) {
      refused = true;
    }
    FUZZ_CHECK(refused);
  }

  // Writing the array and reading it back gives the same array.
  const std::string encoded = mha::encode_npy(a);
  const mha::NpyArray back = mha::parse_npy(encoded, name + " (re-encoded)");
  FUZZ_CHECK(same_array(a, back));
}

}  // namespace mha_fuzz
