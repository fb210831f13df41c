// Weight layouts: PyTorch and Keras arrays to native and back, element by
// element against index formulas written out here (W_torch[j, i] = W[i, j];
// kernel_keras[i, head, c] = W[i, head * d + c]).
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mha/config/weight_formats.hpp"
#include "mha/io/float16.hpp"
#include "mha/io/npz.hpp"
#include "test_util.hpp"

using mha::NpyArray;
using mha::WeightsFormat;
using namespace mha::test;

namespace {

// A float32 array whose element at flat index i is base + i.
NpyArray counting(std::vector<std::size_t> shape, float base) {
  std::size_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i);
  return NpyArray::of(v.data(), shape);
}

float at(const NpyArray& a, std::size_t i) {
  return values_of<float>(a)[i];
}

std::map<std::string, NpyArray> as_map(const std::vector<std::pair<std::string, NpyArray>>& v) {
  return {v.begin(), v.end()};
}

// A PyTorch state_dict with E = 4 and packed in_proj_weight.
std::map<std::string, NpyArray> torch_packed(std::size_t E) {
  return {{"in_proj_weight", counting({3 * E, E}, 0)},
          {"in_proj_bias", counting({3 * E}, 1000)},
          {"out_proj.weight", counting({E, E}, 2000)},
          {"out_proj.bias", counting({E}, 3000)}};
}

}  // namespace

TEST_CASE("torch packed in_proj_weight becomes transposed W_q, W_k, W_v", "[weights]") {
  const std::size_t E = 4;
  auto native = mha::to_native(torch_packed(E), WeightsFormat::auto_detect, "sd.npz");
  CHECK(native.format == WeightsFormat::torch);
  CHECK_FALSE(native.h);
  const auto& a = native.arrays;
  REQUIRE(a.at("W_q").shape == std::vector<std::size_t>{E, E});
  for (std::size_t i = 0; i < E; ++i) {
    for (std::size_t j = 0; j < E; ++j) {
      // in_proj_weight[r, c] = r * E + c; W_q = in_proj_weight[0:E].T, W_k = [E:2E].T, ...
      CHECK(at(a.at("W_q"), i * E + j) == static_cast<float>(j * E + i));
      CHECK(at(a.at("W_k"), i * E + j) == static_cast<float>((E + j) * E + i));
      CHECK(at(a.at("W_v"), i * E + j) == static_cast<float>((2 * E + j) * E + i));
      CHECK(at(a.at("W_o"), i * E + j) == static_cast<float>(2000 + j * E + i));
    }
    CHECK(at(a.at("b_q"), i) == 1000 + i);
    CHECK(at(a.at("b_k"), i) == 1000 + E + i);
    CHECK(at(a.at("b_v"), i) == 1000 + 2 * E + i);
    CHECK(at(a.at("b_o"), i) == 3000 + i);
  }
  // And back, bit for bit, with the packed layout chosen again.
  auto back = as_map(mha::from_native(a, WeightsFormat::torch, std::nullopt, "n"));
  auto original = torch_packed(E);
  REQUIRE(back.size() == original.size());
  for (const auto& [name, array] : original) {
    INFO(name);
    CHECK(back.at(name).shape == array.shape);
    CHECK(back.at(name).data == array.data);
  }
}

TEST_CASE("torch separate projections, prefixes and refusals", "[weights]") {
  const std::size_t E = 6, kdim = 3, vdim = 5;
  std::map<std::string, NpyArray> sd = {{"enc.attn.q_proj_weight", counting({E, E}, 0)},
                                        {"enc.attn.k_proj_weight", counting({E, kdim}, 100)},
                                        {"enc.attn.v_proj_weight", counting({E, vdim}, 200)},
                                        {"enc.attn.out_proj.weight", counting({E, E}, 300)}};
  auto native = mha::to_native(sd, WeightsFormat::torch, "sd.npz");
  CHECK(native.arrays.at("W_k").shape == std::vector<std::size_t>{kdim, E});
  CHECK(at(native.arrays.at("W_k"), 2 * E + 1) == 100 + 1 * kdim + 2);  // W_k[2, 1] = k[1, 2]
  CHECK(native.arrays.count("b_q") == 0);
  auto back = as_map(mha::from_native(native.arrays, WeightsFormat::torch, std::nullopt, "n"));
  CHECK(back.count("k_proj_weight") == 1);
  CHECK(back.at("k_proj_weight").data == sd.at("enc.attn.k_proj_weight").data);
  CHECK(back.count("in_proj_bias") == 0);

  auto with_kv = torch_packed(4);
  with_kv["bias_k"] = counting({1, 1, 4}, 0);
  require_invalid([&] { mha::to_native(with_kv, WeightsFormat::auto_detect, "sd.npz"); },
                  "add_bias_kv=True");
  auto half_bias = torch_packed(4);
  half_bias.erase("out_proj.bias");
  require_invalid([&] { mha::to_native(half_bias, WeightsFormat::torch, "sd.npz"); },
                  "in_proj_bias but not out_proj.bias");
  auto bad = torch_packed(4);
  bad["in_proj_weight"] = counting({11, 4}, 0);
  require_invalid([&] { mha::to_native(bad, WeightsFormat::torch, "sd.npz"); },
                  "in_proj_weight has shape (11, 4), expected (12, 4)");
}

TEST_CASE("keras kernels reshape to native and back", "[weights]") {
  const std::size_t d_model = 5, h = 3, d_k = 2, d_v = 4, kdim = 7, d_out = 6;
  std::map<std::string, NpyArray> k = {
      {"mha/query/kernel:0", counting({d_model, h, d_k}, 0)},
      {"mha.query.bias", counting({h, d_k}, 100)},
      {"mha/key/kernel", counting({kdim, h, d_k}, 200)},
      {"mha/key/bias", counting({h, d_k}, 300)},
      {"mha/value/kernel", counting({kdim, h, d_v}, 400)},
      {"mha/value/bias", counting({h, d_v}, 500)},
      {"mha/attention_output/kernel", counting({h, d_v, d_out}, 600)},
      {"mha/attention_output/bias", counting({d_out}, 700)}};
  REQUIRE(mha::detect_weights_format(k, "k.npz") == WeightsFormat::keras);
  auto native = mha::to_native(k, WeightsFormat::auto_detect, "k.npz");
  REQUIRE(native.h == h);
  const auto& a = native.arrays;
  CHECK(a.at("W_q").shape == std::vector<std::size_t>{d_model, h * d_k});
  CHECK(a.at("W_o").shape == std::vector<std::size_t>{h * d_v, d_out});
  // query/kernel[i, head, c] = W_q[i, head * d_k + c]: C-order reshape keeps flat indices.
  CHECK(at(a.at("W_q"), 4 * h * d_k + 2 * d_k + 1) == 4 * h * d_k + 2 * d_k + 1);
  CHECK(at(a.at("b_v"), 1 * d_v + 3) == 500 + 1 * d_v + 3);
  auto back = as_map(mha::from_native(a, WeightsFormat::keras, h, "n"));
  CHECK(back.at("query/kernel").shape == std::vector<std::size_t>{d_model, h, d_k});
  CHECK(back.at("attention_output/kernel").data == k.at("mha/attention_output/kernel").data);
  // The torch layout needs d_model = h*d_k = h*d_v = d_out; this layer has none of that.
  require_invalid([&] { mha::from_native(a, WeightsFormat::torch, h, "layer"); },
                  "needs d_model = h*d_k = h*d_v = d_out");
  require_invalid([&] { mha::from_native(a, WeightsFormat::keras, std::nullopt, "layer"); },
                  "needs the number of heads");

  auto mismatched = k;
  mismatched["mha/key/kernel"] = counting({kdim, h + 1, d_k}, 0);
  require_invalid([&] { mha::to_native(mismatched, WeightsFormat::keras, "k.npz"); },
                  "key/kernel has shape (7, 4, 2), expected (7, 3, 2)");
  auto three_biases = k;
  three_biases.erase("mha/key/bias");
  require_invalid([&] { mha::to_native(three_biases, WeightsFormat::keras, "k.npz"); },
                  "holds 3 of the 4 bias tensors");
}

TEST_CASE("layout detection and native names", "[weights]") {
  std::map<std::string, NpyArray> native = {{"W_q", counting({2, 2}, 0)}};
  CHECK(mha::detect_weights_format(native, "w") == WeightsFormat::native);
  std::map<std::string, NpyArray> mixed = {{"W_q", counting({2, 2}, 0)},
                                           {"in_proj_weight", counting({6, 2}, 0)}};
  require_invalid([&] { mha::detect_weights_format(mixed, "w.npz"); },
                  "cannot tell the weights layout");
  require_invalid([&] { mha::to_native(mixed, WeightsFormat::native, "w.npz"); },
                  "unknown weight tensor 'in_proj_weight'");
  require_invalid([&] { mha::to_native(native, WeightsFormat::keras, "w.npz"); },
                  "unknown tensor 'W_q' in Keras");
}

TEST_CASE("convert_weights_file refuses non-float tensors and output paths it cannot write",
          "[weights]") {
  namespace fs = std::filesystem;
  TempDir dir("convert");
  // Native weights, d_model = 4, h = 2, no biases.
  std::vector<std::pair<std::string, NpyArray>> native = {{"W_q", counting({4, 4}, 0)},
                                                          {"W_k", counting({4, 4}, 100)},
                                                          {"W_v", counting({4, 4}, 200)},
                                                          {"W_o", counting({4, 4}, 300)}};
  const std::string in = dir / "w.npz";
  mha::write_npz(in, native);

  SECTION("float16 and float64 convert; int32 and bool are refused, naming the tensor") {
    for (const mha::DType dtype : {mha::DType::f2, mha::DType::f8}) {
      auto members = native;
      for (auto& [name, a] : members) {  // the values do not matter here, only the dtype
        a.dtype = dtype;
        a.data.resize(16 * mha::itemsize(dtype));
      }
      mha::write_npz(dir / "f.npz", members);
      mha::convert_weights_file(dir / "f.npz", WeightsFormat::auto_detect, WeightsFormat::torch,
                                std::nullopt, dir / "f_torch.npz");
      CHECK(fs::exists(dir / "f_torch.npz"));
      fs::remove(dir / "f_torch.npz");
    }
    for (const mha::DType dtype : {mha::DType::i4, mha::DType::b1}) {
      auto members = native;
      NpyArray& w_v = members[2].second;
      w_v.dtype = dtype;
      w_v.data.resize(16 * mha::itemsize(dtype));
      mha::write_npz(dir / "i.npz", members);
      require_invalid(
          [&] {
            mha::convert_weights_file(dir / "i.npz", WeightsFormat::auto_detect,
                                      WeightsFormat::torch, std::nullopt, dir / "i_torch.npz");
          },
          dir / "i.npz" + ": tensor 'W_v' has dtype " + mha::dtype_name(dtype) +
              "; expected float16, float32 or float64 weights");
      CHECK_FALSE(fs::exists(dir / "i_torch.npz"));
    }
  }
  SECTION("an existing directory, or a path under a file, before the input is read") {
    fs::create_directory(dir / "out");
    const std::string missing = dir / "missing.npz";  // reading it would fail: it is never read
    require_invalid(
        [&] {
          mha::convert_weights_file(missing, WeightsFormat::auto_detect, WeightsFormat::torch,
                                    std::nullopt, dir / "out");
        },
        dir / "out" + ": is a directory; expected the path of the file to write");
    require_invalid(
        [&] {
          mha::convert_weights_file(missing, WeightsFormat::auto_detect, WeightsFormat::torch,
                                    std::nullopt, dir / "out/");
        },
        ": is a directory");
    require_invalid(
        [&] {
          mha::convert_weights_file(in, WeightsFormat::auto_detect, WeightsFormat::torch,
                                    std::nullopt, in + "/sub/torch.npz");
        },
        in + "/sub/torch.npz: " + in + " is a file; expected a directory to write into");
    CHECK(fs::is_empty(dir / "out"));
    // A parent that does not exist yet is made, as for every output.
    mha::convert_weights_file(in, WeightsFormat::auto_detect, WeightsFormat::torch, std::nullopt,
                              dir / "new/sub/torch.npz");
    CHECK(fs::exists(dir / "new/sub/torch.npz"));
  }
}

TEST_CASE("to torch: projections stored in different float dtypes are widened, exactly",
          "[weights]") {
  // W_q in float16 (values exact there), W_k and W_v in float32: in_proj_weight is float32
  // and holds each transposed projection's values unchanged.
  TempDir dir("mixed");
  std::vector<float> q(16);
  for (std::size_t i = 0; i < 16; ++i) q[i] = 0.25f * static_cast<float>(i);
  NpyArray w_q = NpyArray::of(q.data(), {4, 4});
  NpyArray w_q16;
  w_q16.dtype = mha::DType::f2;
  w_q16.shape = {4, 4};
  for (float v : q) {  // 0.25 * i for i < 16: exact in float16 (sign 0, exponent and 10 bits)
    const mha::float16 h = mha::to_float16(v);
    const auto* bytes = reinterpret_cast<const unsigned char*>(&h.bits);
    w_q16.data.insert(w_q16.data.end(), bytes, bytes + 2);
  }
  const std::string in = dir / "w.npz";
  mha::write_npz(in, {{"W_q", w_q16},
                      {"W_k", counting({4, 4}, 100)},
                      {"W_v", counting({4, 4}, 200)},
                      {"W_o", counting({4, 4}, 300)}});
  mha::convert_weights_file(in, WeightsFormat::auto_detect, WeightsFormat::torch, std::nullopt,
                            dir / "t.npz");
  const auto out = mha::read_npz(dir / "t.npz");
  const NpyArray& packed = out.at("in_proj_weight");
  REQUIRE(packed.dtype == mha::DType::f4);
  REQUIRE(packed.shape == std::vector<std::size_t>{12, 4});
  const NpyArray w_k = counting({4, 4}, 100);
  for (std::size_t i = 0; i < 4; ++i)
    for (std::size_t j = 0; j < 4; ++j) {
      CHECK(at(packed, j * 4 + i) == at(w_q, i * 4 + j));        // rows 0-3: W_q^T
      CHECK(at(packed, (4 + j) * 4 + i) == at(w_k, i * 4 + j));  // rows 4-7: W_k^T
    }
}
