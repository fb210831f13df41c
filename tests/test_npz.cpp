#include <zip.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "mha/base/error.hpp"
#include "mha/base/shared_library.hpp"
#include "mha/io/npz.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using mha::DType;
using mha::NpyArray;
using namespace mha::test;  // test_util.hpp

namespace {

// Builds a zip with arbitrary member names and contents, bypassing write_npz.
void write_zip(const std::string& path,
               const std::vector<std::pair<std::string, std::string>>& members) {
  int code = 0;
  zip_t* za = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code);
  REQUIRE(za != nullptr);
  for (const auto& [name, bytes] : members) {
    zip_source_t* src = zip_source_buffer(za, bytes.data(), bytes.size(), 0);
    REQUIRE(src != nullptr);
    REQUIRE(zip_file_add(za, name.c_str(), src, 0) >= 0);
  }
  REQUIRE(zip_close(za) == 0);
}

}  // namespace

TEST_CASE("npz write then read back", "[npz]") {
  TempDir tmp("npz");
  const std::vector<float> f = {1, 2, 3, 4, 5, 6};
  const std::vector<double> d = {-0.5};
  const bool mask[4] = {true, false, false, true};
  const std::vector<std::int64_t> i8 = {1LL << 50, -3};
  const std::vector<std::pair<std::string, NpyArray>> members = {
      {"W_q", NpyArray::of(f.data(), {2, 3})},   {"scale", NpyArray::of(d.data(), {})},
      {"mask", NpyArray::of(mask, {2, 2})},      {"ids", NpyArray::of(i8.data(), {2})},
      {"empty", NpyArray::of(f.data(), {0, 5})},
  };
  const std::string path = tmp / "weights.npz";
  mha::write_npz(path, members);
  const auto arrays = mha::read_npz(path);
  REQUIRE(arrays.size() == members.size());
  for (const auto& [name, a] : members) {
    INFO(name);
    REQUIRE(arrays.count(name) == 1);
    const NpyArray& b = arrays.at(name);
    CHECK(b.dtype == a.dtype);
    CHECK(b.shape == a.shape);
    CHECK(b.data == a.data);
  }
  CHECK(values_of<float>(arrays.at("W_q")) == f);

  // Members are stored uncompressed under NAME.npy, as numpy.savez does.
  int code = 0;
  zip_t* za = zip_open(path.c_str(), ZIP_RDONLY, &code);
  REQUIRE(za != nullptr);
  zip_stat_t st;
  REQUIRE(zip_stat(za, "W_q.npy", 0, &st) == 0);
  CHECK(st.comp_method == ZIP_CM_STORE);
  CHECK(st.size == mha::encode_npy(members[0].second).size());
  zip_discard(za);
}

TEST_CASE("npz with no members round trips", "[npz]") {
  TempDir tmp("npz");
  mha::write_npz(tmp / "none.npz", {});
  CHECK(fs::file_size(tmp / "none.npz") == 22);
  CHECK(mha::read_npz(tmp / "none.npz").empty());
}

TEST_CASE("npz overwrites an existing file", "[npz]") {
  TempDir tmp("npz");
  const std::vector<float> a = {1}, b = {2, 3};
  mha::write_npz(tmp / "x.npz", {{"a", NpyArray::of(a.data(), {1})}});
  mha::write_npz(tmp / "x.npz", {{"b", NpyArray::of(b.data(), {2})}});
  const auto arrays = mha::read_npz(tmp / "x.npz");
  REQUIRE(arrays.size() == 1);
  CHECK(values_of<float>(arrays.at("b")) == b);
}

TEST_CASE("npz malformed archives are refused", "[npz]") {
  TempDir tmp("npz");
  const auto input = mha::ErrorKind::invalid_input;
  const std::vector<float> f = {1, 2};
  const std::string good = mha::encode_npy(NpyArray::of(f.data(), {2}));

  write_zip(tmp / "notes.npz", {{"a.npy", good}, {"notes.txt", "hello"}});
  require_error([&] { mha::read_npz(tmp / "notes.npz"); },
                "notes.npz: member 'notes.txt': expected only .npy members", input);

  write_zip(tmp / "dir.npz", {{"sub/", ""}});
  require_error([&] { mha::read_npz(tmp / "dir.npz"); },
                "member 'sub/': expected only .npy members", input);

  write_zip(tmp / "bad.npz", {{"a.npy", good}, {"W_k.npy", good.substr(0, good.size() - 1)}});
  require_error([&] { mha::read_npz(tmp / "bad.npz"); },
                "bad.npz:W_k: data is 7 bytes, expected 8 for float32 array of shape (2,)", input);

  const std::string pickle_header = "{'descr': '|O', 'fortran_order': False, 'shape': (1,)}";
  const std::string pickle = std::string("\x93NUMPY\x01\x00", 8) +
                             static_cast<char>(pickle_header.size()) + '\0' + pickle_header;
  write_zip(tmp / "pickle.npz", {{"obj.npy", pickle}});
  require_error([&] { mha::read_npz(tmp / "pickle.npz"); },
                "pickle.npz:obj: dtype '|O' holds pickled", input);

  write_file(tmp / "garbage.npz", std::string(1000, 'x'));
  require_error([&] { mha::read_npz(tmp / "garbage.npz"); },
                "garbage.npz: not a valid .npz (zip) archive: Not a zip archive", input);

  write_file(tmp / "empty.npz", "");
  require_error([&] { mha::read_npz(tmp / "empty.npz"); },
                "empty.npz: not a valid .npz (zip) archive", input);

  // A real archive cut short loses its central directory.
  mha::write_npz(tmp / "full.npz", {{"a", NpyArray::of(f.data(), {2})}});
  const std::string bytes = read_file(tmp / "full.npz");
  write_file(tmp / "cut.npz", bytes.substr(0, bytes.size() / 2));
  require_error([&] { mha::read_npz(tmp / "cut.npz"); }, "cut.npz: not a valid .npz (zip) archive",
                input);

  // Corrupt the stored data so that its CRC no longer matches.
  const std::size_t at = bytes.find("\x93NUMPY");
  REQUIRE(at != std::string::npos);
  std::string flipped = bytes;
  flipped[at + good.size() - 1] ^= 0x40;
  write_file(tmp / "crc.npz", flipped);
  require_error([&] { mha::read_npz(tmp / "crc.npz"); },
                "crc.npz: member 'a.npy': cannot read: CRC error", input);

  require_error([&] { mha::read_npz(tmp / "missing.npz"); }, "missing.npz: no such file", input);
  require_error([&] { mha::read_npz(tmp.path.string()); }, ": is a directory", input);
}

TEST_CASE("npz members' headers are read and checked before any member is inflated", "[npz]") {
  TempDir tmp("npz");
  const auto input = mha::ErrorKind::invalid_input;
  const std::vector<float> f = {1, 2, 3, 4, 5, 6};
  mha::write_npz(tmp / "w.npz", {{"W_q", NpyArray::of(f.data(), {2, 3})}});
  // Corrupt the data (its CRC no longer matches): only reading it all finds out.
  std::string bytes = read_file(tmp / "w.npz");
  const std::size_t at = bytes.find("\x93NUMPY");
  REQUIRE(at != std::string::npos);
  const std::string header = mha::npy_header(DType::f4, {2, 3});
  bytes[at + header.size() + 5] ^= 0x40;
  write_file(tmp / "crc.npz", bytes);

  const std::vector<mha::NpzMember> members = mha::read_npz_members(tmp / "crc.npz");
  REQUIRE(members.size() == 1);
  CHECK(members[0].key == "W_q");
  CHECK(members[0].name == (tmp / "crc.npz") + ":W_q");
  CHECK(members[0].bytes == header.size() + 24);
  CHECK(members[0].header.shape == std::vector<std::size_t>{2, 3});
  CHECK(members[0].header.dtype == DType::f4);
  CHECK(members[0].header.data_bytes == 24);

  // The caller's check comes before any data is inflated: its error, not the CRC's.
  require_error(
      [&] {
        mha::read_npz(tmp / "crc.npz", [](const std::string& path, const auto& m) {
          mha::fail_input(path + ": checked " + m.at(0).key + " first");
        });
      },
      "crc.npz: checked W_q first", input);
  require_error([&] { mha::read_npz(tmp / "crc.npz"); }, "member 'W_q.npy': cannot read: CRC error",
                input);

  // Streamed: a member read to its end is CRC-checked there; one read in part is not.
  require_error(
      [&] {
        mha::for_each_npz_member_streamed(
            tmp / "crc.npz", [](const mha::NpzMember& m, const mha::NpzMemberRead& read) {
              std::string all(m.bytes, '\0');
              read(all.size(), reinterpret_cast<unsigned char*>(all.data()));
            });
      },
      "member 'W_q.npy': cannot read: CRC error", input);
  std::string first;
  mha::for_each_npz_member_streamed(
      tmp / "w.npz", [&](const mha::NpzMember& m, const mha::NpzMemberRead& read) {
        first.resize(m.header.header_bytes + 8);
        read(first.size(), reinterpret_cast<unsigned char*>(first.data()));
      });
  float two[2];
  std::memcpy(two, first.data() + header.size(), sizeof two);
  CHECK(two[0] == 1);
  CHECK(two[1] == 2);

  // A header that declares more data than the member holds, named by archive and member.
  const std::string big = mha::npy_header(DType::f4, {1, 32768, 16384}) + std::string(128, '\0');
  write_zip(tmp / "big.npz", {{"W_q.npy", big}});
  require_error([&] { mha::read_npz_members(tmp / "big.npz"); },
                "big.npz:W_q: data is 128 bytes, expected 2147483648 for float32 array of shape "
                "(1, 32768, 16384): the .npy header declares more data than the member holds",
                input);
}

TEST_CASE("npz write errors are runtime errors naming the path", "[npz]") {
  TempDir tmp("npz");
  const std::vector<float> f = {1};
  const std::string path = tmp / "no/such/dir/out.npz";
  require_error(
      [&] {
        mha::write_npz(path, {{"a", NpyArray::of(f.data(), {1})}});
      },
      path + ": ", mha::ErrorKind::runtime);
  require_error(
      [&] {
        mha::write_npz(tmp / "dup.npz",
                       {{"a", NpyArray::of(f.data(), {1})}, {"a", NpyArray::of(f.data(), {1})}});
      },
      "dup.npz: member 'a.npy'", mha::ErrorKind::runtime);
  CHECK_FALSE(fs::exists(tmp / "dup.npz"));
}

TEST_CASE("npz files interoperate with NumPy", "[npz][numpy]") {
  if (!have_numpy()) {
    MHA_SKIP("numpy",
             "/usr/bin/python3 with numpy not found (scripts/setup.sh --test installs it)");
  }
  TempDir tmp("npz");
  const std::string script = tmp / "make.py";
  write_file(script, R"(
import sys, numpy as np
d = sys.argv[1]
arrays = dict(
    W_q=np.arange(12, dtype=np.float32).reshape(3, 4),
    half=np.array([1.0, -2.5, 65504], dtype=np.float16),
    big=np.arange(4, dtype='>f8'),
    fortran=np.asfortranarray(np.arange(6, dtype=np.float64).reshape(2, 3)),
    mask=np.array([[True, False, True]]),
    scalar=np.float32(0.5),
)
np.savez(d + '/plain.npz', **arrays)
np.savez_compressed(d + '/compressed.npz', **arrays)
np.savez(d + '/positional.npz', np.ones(3, np.float32), np.zeros(2, np.float32))
)");
  REQUIRE(run_python(script, tmp.path.string()) == 0);

  for (const char* file : {"plain.npz", "compressed.npz"}) {
    INFO(file);
    const auto arrays = mha::read_npz(tmp / file);
    REQUIRE(arrays.size() == 6);
    std::vector<float> expected(12);
    for (int i = 0; i < 12; ++i) expected[i] = static_cast<float>(i);
    CHECK(arrays.at("W_q").shape == std::vector<std::size_t>{3, 4});
    CHECK(values_of<float>(arrays.at("W_q")) == expected);
    std::vector<double> half(3);
    mha::convert(arrays.at("half"), half.data(), "half");
    CHECK(half == std::vector<double>{1.0, -2.5, 65504.0});
    CHECK(values_of<double>(arrays.at("big")) == std::vector<double>{0, 1, 2, 3});
    CHECK(values_of<double>(arrays.at("fortran")) == std::vector<double>{0, 1, 2, 3, 4, 5});
    CHECK(arrays.at("mask").dtype == DType::b1);
    CHECK(arrays.at("mask").data == std::vector<unsigned char>{1, 0, 1});
    CHECK(arrays.at("scalar").shape.empty());
    CHECK(values_of<float>(arrays.at("scalar")) == std::vector<float>{0.5f});
  }
  const auto positional = mha::read_npz(tmp / "positional.npz");
  CHECK(positional.count("arr_0") == 1);
  CHECK(positional.count("arr_1") == 1);

  // NumPy must load what we write.
  const std::vector<double> d = {1.5, 2.5, 3.5, 4.5, 5.5, 6.5};
  const bool mask[2] = {false, true};
  mha::write_npz(tmp / "ours.npz",
                 {{"out", NpyArray::of(d.data(), {3, 2})}, {"mask", NpyArray::of(mask, {2})}});
  mha::write_npz(tmp / "ours_empty.npz", {});
  const std::string check = tmp / "check.py";
  write_file(check, R"(
import sys, numpy as np
d = sys.argv[1]
with np.load(d + '/ours.npz') as z:
    assert sorted(z.files) == ['mask', 'out'], z.files
    assert z['out'].dtype == np.float64 and z['out'].shape == (3, 2)
    assert (z['out'] == np.arange(6).reshape(3, 2) + 1.5).all()
    assert (z['mask'] == np.array([False, True])).all()
with np.load(d + '/ours_empty.npz') as z:
    assert z.files == []
)");
  CHECK(run_python(check, tmp.path.string()) == 0);
}

// libzip (and FreeType) are loaded with dlopen when first used; a library
// that is missing or lacks a function is a runtime error naming it.
TEST_CASE("SharedLibrary: a missing library or function is a one-line runtime error") {
  try {
    mha::SharedLibrary("libmha-no-such-library.so.9", "the test library", "install it");
    FAIL("expected an error");
  } catch (const mha::Error& e) {
    CHECK(e.exit_code() == 1);
    const std::string what = e.what();
    CHECK(what.rfind("cannot load the test library (", 0) == 0);
    CHECK(what.find("libmha-no-such-library.so.9") != std::string::npos);
    CHECK(what.find("); install it") != std::string::npos);
  }
  const mha::SharedLibrary libz("libz.so.1", "zlib", "install it");
  const char* (*version)() = nullptr;
  libz.bind(version, "zlibVersion");
  REQUIRE(version != nullptr);
  CHECK(std::string(version()).size() > 0);
  int (*missing)() = nullptr;
  CHECK_THROWS_WITH(libz.bind(missing, "mha_no_such_function"),
                    "libz.so.1: has no function mha_no_such_function; is it too old a version?");
}
