// The HDF5 reader and writer (mha/io/hdf5.hpp) on files in memory: what the
// CLI tests (tests/cli/test_keras_files.py) do not reach through Keras
// layouts: float16 datasets, scalars, the child order, string attributes,
// and the refusals of a path that is not there.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "mha/base/error.hpp"
#include "mha/io/hdf5.hpp"

using mha::DType;
using mha::NpyArray;

namespace {

NpyArray array_of(DType dtype, std::vector<std::size_t> shape, std::uint64_t seed) {
  NpyArray a;
  a.dtype = dtype;
  a.shape = std::move(shape);
  a.data.resize(a.size() * mha::itemsize(dtype));
  for (std::size_t i = 0; i < a.data.size(); ++i)  // bit patterns of finite values
    a.data[i] = static_cast<unsigned char>((seed * 131 + i * 7) % 61);
  return a;
}

}  // namespace

TEST_CASE("hdf5 writes and reads back float16/32/64 datasets bit for bit", "[hdf5]") {
  const NpyArray f2 = array_of(DType::f2, {3, 2}, 1), f4 = array_of(DType::f4, {2, 2, 5}, 2),
                 f8 = array_of(DType::f8, {4}, 3), scalar = array_of(DType::f4, {}, 4);
  auto image = std::make_shared<const std::string>(
      mha::encode_hdf5({{"a/vars/0", f2}, {"a/vars/1", f4}, {"b_10/x", f8}, {"b_2/x", scalar}},
                       {{"a/vars", "name", "layer \xc3\xa9"}}, "test"));
  const mha::Hdf5File f(image, "mem.h5");
  REQUIRE(f.is_group("a"));
  REQUIRE(f.is_dataset("a/vars/0"));
  REQUIRE_FALSE(f.is_dataset("a/vars"));
  CHECK(f.children("") == std::vector<std::string>{"a", "b_10", "b_2"});  // HDF5's name order
  CHECK(f.dataset("a/vars/1").shape == std::vector<std::size_t>{2, 2, 5});
  CHECK(f.dataset("a/vars/0").type == "float16");
  CHECK(f.dataset("b_10/x").bytes == 32);
  for (const auto& [path, want] : std::vector<std::pair<std::string, const NpyArray*>>{
           {"a/vars/0", &f2}, {"a/vars/1", &f4}, {"b_10/x", &f8}, {"b_2/x", &scalar}}) {
    const NpyArray got = f.read(path);
    CHECK(got.dtype == want->dtype);
    CHECK(got.shape == want->shape);
    CHECK(got.data == want->data);
  }
  const auto name = f.strings("a/vars", "name");
  REQUIRE(name);
  CHECK(*name == std::vector<std::string>{"layer \xc3\xa9"});
  CHECK_FALSE(f.strings("a/vars", "other"));
  CHECK_THROWS_WITH(f.read("a/none"), Catch::Contains("mem.h5") && Catch::Contains("/a/none"));
  CHECK_THROWS_WITH(f.children("a/vars/0"), Catch::Contains("not a group"));
}

TEST_CASE("hdf5 refuses what is not an HDF5 file", "[hdf5]") {
  auto junk = std::make_shared<const std::string>("not hdf5 at all");
  CHECK_THROWS_WITH(mha::Hdf5File(junk, "junk.h5"),
                    Catch::Contains("junk.h5") && Catch::Contains("HDF5 signature"));
  // The signature, then nothing: HDF5 refuses it, and says nothing of its own.
  auto cut = std::make_shared<const std::string>(std::string("\x89HDF\r\n\x1a\n", 8) +
                                                 std::string(40, '\0'));
  CHECK_THROWS_WITH(mha::Hdf5File(cut, "cut.h5"), Catch::Contains("cut.h5"));
  CHECK_THROWS_WITH(mha::Hdf5File("/nonexistent/x.h5"), Catch::Contains("no such file"));
}
