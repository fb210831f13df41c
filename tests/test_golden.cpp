// Golden files: the real `mha` binary on the fixed problems in tests/golden/,
// against outputs that tests/golden/make_golden.py computed with an
// independent NumPy implementation in float64.
//
// Each case runs, from the repository root (config paths are relative to it),
//   mha run -q --config tests/golden/<case>/config.json --out_dir <tmp> --save_attention
// and compares output.npy and attention.npy with expected_output.npy and
// expected_attention.npy: |got - want| <= tol * (1 + |want|), tol = 1e-5 for
// float32 runs and 1e-12 for float64 runs; NaN (masked_rows nan) must appear
// exactly where the reference has it.
//
// The binary is MHA_BIN_PATH (a compile definition), or $MHA_BIN if set.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/io/npy.hpp"
#include "test_util.hpp"

#ifndef MHA_BIN_PATH
#error "test_golden.cpp needs MHA_BIN_PATH, the path of the built mha binary (compile definition)"
#endif
#ifndef MHA_SOURCE_DIR
#error "test_golden.cpp needs MHA_SOURCE_DIR, the repository root (compile definition)"
#endif
#ifndef MHA_TEST_DATA
#error "test_golden.cpp needs MHA_TEST_DATA, the tests/ source directory (compile definition)"
#endif

namespace {

namespace fs = std::filesystem;
using namespace mha::test;  // test_util.hpp

// Every case directory make_golden.py writes; the last test checks the list is complete.
const std::vector<std::string> kCases = {"self_bias",          "cross",
                                         "causal_key_lengths", "bottom_right_float_mask",
                                         "bool_mask_uniform",  "float64"};

fs::path golden_dir() {
  return fs::path(MHA_TEST_DATA) / "golden";
}

std::string shape_text(const std::vector<std::size_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

struct Tensor {
  mha::DType dtype = mha::DType::f8;
  std::vector<std::size_t> shape;
  std::vector<double> values;
};

Tensor load(const fs::path& path) {
  mha::NpyArray a = mha::read_npy(path.string());
  Tensor t;
  t.dtype = a.dtype;
  t.shape = a.shape;
  t.values.resize(a.size());
  mha::convert<double>(a, t.values.data(), path.string());
  return t;
}

// Index of element i of a C-order array of `shape`, as "(b, t, s)".
std::string index_text(std::size_t i, const std::vector<std::size_t>& shape) {
  std::vector<std::size_t> index(shape.size());
  for (std::size_t k = shape.size(); k-- > 0;) {
    index[k] = i % shape[k];
    i /= shape[k];
  }
  return shape_text(index);
}

void compare(const std::string& what, const Tensor& got, const Tensor& want, double tol) {
  if (got.shape != want.shape)
    FAIL(what << ": shape " << shape_text(got.shape) << ", expected " << shape_text(want.shape));
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < want.values.size(); ++i) {
    const double a = got.values[i], b = want.values[i];
    bool ok;
    if (std::isnan(b)) {
      ok = std::isnan(a);
    } else {
      ok = std::isfinite(a) && std::abs(a - b) <= tol * (1 + std::abs(b));
    }
    if (!ok && bad++ == 0) first = i;
  }
  if (bad > 0) {
    std::ostringstream msg;
    msg.precision(17);
    msg << what << ": " << bad << " of " << want.values.size() << " elements differ (tolerance "
        << tol << " * (1 + |expected|)); first at " << index_text(first, want.shape) << ": got "
        << got.values[first] << ", expected " << want.values[first];
    FAIL_CHECK(msg.str());
  }
}

void run_golden(const std::string& name) {
  const fs::path dir = golden_dir() / name;
  REQUIRE(fs::is_regular_file(dir / "config.json"));
  const nlohmann::json config = nlohmann::json::parse(read_file(dir / "config.json"));
  const bool f64 = config.value("dtype", std::string("float32")) == "float64";
  const double tol = f64 ? 1e-12 : 1e-5;

  TempDir tmp("golden_" + name);
  const fs::path out = tmp.path / "out";
  const std::string command =
      "cd " + sh_quote(MHA_SOURCE_DIR) + " && " + sh_quote(mha_binary()) + " run -q --config " +
      sh_quote("tests/golden/" + name + "/config.json") + " --out_dir " + sh_quote(out.string()) +
      " --save_attention 2> " + sh_quote((tmp.path / "stderr.txt").string());
  const int status = std::system(command.c_str());
  INFO("command: " << command);
  INFO("stderr: " << read_file(tmp.path / "stderr.txt"));
  REQUIRE(status == 0);

  const nlohmann::json report = nlohmann::json::parse(read_file(out / "run.json"));
  CHECK(report.value("status", std::string()) == "complete");

  const Tensor output = load(out / "output.npy");
  const Tensor attention = load(out / "attention.npy");
  const mha::DType dtype = f64 ? mha::DType::f8 : mha::DType::f4;
  CHECK(mha::dtype_name(output.dtype) == std::string(mha::dtype_name(dtype)));
  CHECK(mha::dtype_name(attention.dtype) == std::string(mha::dtype_name(dtype)));
  compare(name + "/output.npy", output, load(dir / "expected_output.npy"), tol);
  compare(name + "/attention.npy", attention, load(dir / "expected_attention.npy"), tol);
}

}  // namespace

// One test per case; what each covers is in make_golden.py's case docstrings:
//   self_bias                 self-attention, h = 4, d_model = 32, non-zero biases
//   cross                     T != S, d_k != d_v, kdim != vdim != d_model != d_out, scale,
//                             weights as a directory of .npy
//   causal_key_lengths        top-left causal + key_lengths incl. 0, use_bias false
//   bottom_right_float_mask   bottom-right causal with T < S, additive float mask, key = value
//   bool_mask_uniform         per-head bool mask (1, h, T, S), masked_rows uniform
//   float64                   dtype float64, 2-D inputs, masked_rows nan, average_heads
TEST_CASE("golden: self_bias", "[golden]") {
  run_golden("self_bias");
}
TEST_CASE("golden: cross", "[golden]") {
  run_golden("cross");
}
TEST_CASE("golden: causal_key_lengths", "[golden]") {
  run_golden("causal_key_lengths");
}
TEST_CASE("golden: bottom_right_float_mask", "[golden]") {
  run_golden("bottom_right_float_mask");
}
TEST_CASE("golden: bool_mask_uniform", "[golden]") {
  run_golden("bool_mask_uniform");
}
TEST_CASE("golden: float64", "[golden]") {
  run_golden("float64");
}

TEST_CASE("golden: every case directory has a test", "[golden]") {
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(golden_dir()))
    if (entry.is_directory() && fs::exists(entry.path() / "config.json"))
      found.push_back(entry.path().filename().string());
  std::sort(found.begin(), found.end());
  std::vector<std::string> expected = kCases;
  std::sort(expected.begin(), expected.end());
  CHECK(found == expected);
}
