// Helpers shared by the unit tests (one copy each): a self-removing temporary
// directory, whole-file read and write, assertions on mha::Error
// (REQUIRE_INPUT_ERROR, require_error and its two shorthands), the elements of
// an NpyArray as a vector, random operands for the GEMM kernels' tests, and
// running Python for the NumPy interop tests.
#pragma once

#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "mha/base/error.hpp"
#include "mha/io/npy.hpp"

namespace mha::test {

// n floats uniform in [-1, 1) from a seed (the GEMM kernels' operands).
inline std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = u(rng);
  return x;
}

#ifdef MHA_BIN_PATH
// The binary under test: $MHA_BIN, else the one this build made.
inline std::string mha_binary() {
  const char* env = std::getenv("MHA_BIN");
  return env && *env ? std::string(env) : std::string(MHA_BIN_PATH);
}
#endif

// Single-quoted for /bin/sh.
inline std::string sh_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Hand-made .npy files (test_npy.cpp, test_inspect.cpp): raw_npy puts the
// magic, version and length before `dict`, used verbatim without padding;
// bytes_of lays values out in either byte order; dict writes a header dict.
// A .npy file assembled by hand: the dict is used verbatim, without padding.
inline std::string raw_npy(const std::string& dict, const std::string& data, int major = 1) {
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  for (std::size_t i = 0; i < len_bytes; ++i)
    out += static_cast<char>((dict.size() >> (8 * i)) & 0xff);
  return out + dict + data;
}

template <class T>
std::string bytes_of(const std::vector<T>& values, bool big_endian = false) {
  std::string out;
  for (const T& v : values) {
    char b[sizeof(T)];
    std::memcpy(b, &v, sizeof(T));
    if (big_endian) std::reverse(b, b + sizeof(T));  // tests run on little-endian hosts
    out.append(b, sizeof(T));
  }
  return out;
}

inline std::string dict(const std::string& descr, const std::string& shape, bool fortran = false) {
  return "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
         ", 'shape': " + shape + ", }\n";
}

// Writes `bytes` to `path`, replacing what was there.
inline void write_file(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// The whole content of `path` ("" if it cannot be opened).
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A fresh directory <system temp dir>/mha_test_<tag>_XXXXXX, removed with
// everything in it when the TempDir goes out of scope.
struct TempDir {
  std::filesystem::path path;

  explicit TempDir(const std::string& tag) {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / ("mha_test_" + tag + "_XXXXXX")).string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    namespace fs = std::filesystem;
    std::error_code ec;
    // A test may have taken away write permission; removal needs it back.
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // The path of `name` inside the directory.
  std::string operator/(const std::string& name) const { return (path / name).string(); }

  // Writes `bytes` to the file `name` inside the directory and returns its path.
  std::string write(const std::string& name, const std::string& bytes) const {
    std::string p = *this / name;
    write_file(p, bytes);
    return p;
  }

  // Writes `array` as a .npy file with a fresh name (stem + a counter) and
  // returns its path.
  std::string write_npy(const mha::NpyArray& array, const std::string& stem = "t") {
    return write(stem + std::to_string(counter_++) + ".npy", mha::encode_npy(array));
  }

 private:
  int counter_ = 0;
};

// The one way a C++ test skips (as tests/skips.py for the Python ones): for
// something the machine lacks (a CPU feature), never for a failure. It prints
// "MHA-SKIP: GROUP: REASON", which ctest reports as skipped
// (SKIP_REGULAR_EXPRESSION, tests/CMakeLists.txt); under MHA_REQUIRE_ALL
// (.ci/run) it fails instead, unless MHA_ALLOW_SKIPS lists GROUP (or a shell
// pattern matching it), as .ci/run does for the ISAs the CPU lacks.
//   if (!cpu_has_avx512_bf16()) MHA_SKIP("isa.avx512_bf16", "the CPU has no AVX512_BF16");
inline bool skip_allowed(const std::string& group) {
  const char* allow = std::getenv("MHA_ALLOW_SKIPS");
  std::istringstream patterns(allow ? allow : "");
  for (std::string p; patterns >> p;)
    if (::fnmatch(p.c_str(), group.c_str(), 0) == 0) return true;
  return false;
}
inline bool report_skip(const std::string& group, const std::string& reason) {
  const char* required = std::getenv("MHA_REQUIRE_ALL");
  if (required && *required && std::string(required) != "0" && !skip_allowed(group)) {
    FAIL("cannot run on this machine (" << group << "): " << reason
                                        << "; MHA_REQUIRE_ALL is set and MHA_ALLOW_SKIPS does "
                                           "not list "
                                        << group);
  }
  std::cout << "MHA-SKIP: " << group << ": " << reason << std::endl;
  return true;
}
#define MHA_SKIP(group, reason)                        \
  do {                                                 \
    if (mha::test::report_skip(group, reason)) return; \
  } while (false)

// An mha::Error of kind invalid_input with exit code 2 (the message is checked
// separately with REQUIRE_THROWS_WITH).
class IsInputError : public Catch::MatcherBase<mha::Error> {
 public:
  bool match(const mha::Error& e) const override {
    return e.kind() == mha::ErrorKind::invalid_input && e.exit_code() == 2;
  }
  std::string describe() const override { return "is an mha::Error of kind invalid_input"; }
};

// `expr` throws an input error (IsInputError) whose message matches `message_matcher`.
#define REQUIRE_INPUT_ERROR(expr, message_matcher)                       \
  do {                                                                   \
    REQUIRE_THROWS_MATCHES(expr, mha::Error, mha::test::IsInputError()); \
    REQUIRE_THROWS_WITH(expr, message_matcher);                          \
  } while (false)

// f() throws a one-line mha::Error of `kind` whose message contains `fragment`.
template <class F>
void require_error(F&& f, const std::string& fragment, mha::ErrorKind kind) {
  INFO("expecting an error containing: " << fragment);
  REQUIRE_THROWS_WITH(f(), Catch::Contains(fragment));
  try {
    f();
  } catch (const mha::Error& e) {
    CHECK(e.kind() == kind);
    CHECK(std::string(e.what()).find('\n') == std::string::npos);
    return;
  }
  FAIL("expected mha::Error");
}

// require_error with kind invalid_input.
template <class F>
void require_invalid(F&& f, const std::string& fragment) {
  require_error(f, fragment, mha::ErrorKind::invalid_input);
}

// require_error with kind runtime.
template <class F>
void require_runtime(F&& f, const std::string& fragment) {
  require_error(f, fragment, mha::ErrorKind::runtime);
}

// The elements of `a` as T, whose size must be a's item size.
template <class T>
std::vector<T> values_of(const mha::NpyArray& a) {
  REQUIRE(a.data.size() == a.size() * sizeof(T));
  std::vector<T> v(a.size());
  if (!v.empty()) std::memcpy(v.data(), a.data.data(), a.data.size());
  return v;
}

// Whether /usr/bin/python3 can import numpy; the interop tests skip without it.
inline bool have_numpy() {
  return std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
}

// Runs `/usr/bin/python3 <script> <arg>` and returns std::system's status.
inline int run_python(const std::string& script, const std::string& arg) {
  return std::system(("/usr/bin/python3 " + script + " " + arg).c_str());
}

}  // namespace mha::test
