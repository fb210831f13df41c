// mha::GgufFile (the container) and mha::dequantize on bytes these tests build
// by hand: metadata of every value type, tensor infos, alignment, reading, and
// hostile files refused in one line naming the file and the key or tensor,
// before anything is sized by them. The dequantizers of every type are held
// bit for bit to an independent NumPy reference in tests/gguf/test_gguf.py.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "mha/io/ggml_quants.hpp"
#include "mha/io/gguf.hpp"
#include "test_util.hpp"

namespace {

using mha::GgmlType;
using mha::GgufValueType;
using mha::test::require_invalid;
using mha::test::TempDir;

// Little-endian bytes (the tests run on little-endian hosts).
struct Bytes {
  std::string s;
  template <class T>
  Bytes& le(T v) {
    char b[sizeof v];
    std::memcpy(b, &v, sizeof v);
    s.append(b, sizeof v);
    return *this;
  }
  Bytes& u8(std::uint8_t v) { return le(v); }
  Bytes& u32(std::uint32_t v) { return le(v); }
  Bytes& u64(std::uint64_t v) { return le(v); }
  Bytes& str(const std::string& x) {
    u64(x.size());
    s += x;
    return *this;
  }
  Bytes& type(GgufValueType t) { return u32(static_cast<std::uint32_t>(t)); }
};

// A key and a value of type t whose bytes follow.
Bytes kv(const std::string& key, GgufValueType t) {
  Bytes b;
  b.str(key).type(t);
  return b;
}
// A key holding an array of `count` elements of type t whose bytes follow.
Bytes kv_array(const std::string& key, GgufValueType t, std::uint64_t count) {
  Bytes b;
  b.str(key).type(GgufValueType::array).type(t).u64(count);
  return b;
}

struct Info {
  std::string name;
  std::vector<std::uint64_t> dims;
  GgmlType type;
  std::uint64_t offset;
};

// A whole file: the header, the key-value pairs as given, the tensor infos,
// padding to `alignment`, then `data`.
std::string gguf(const std::vector<Bytes>& kvs, const std::vector<Info>& tensors,
                 const std::string& data, std::uint64_t alignment = 32, std::uint32_t version = 3) {
  Bytes b;
  b.s = "GGUF";
  b.u32(version).u64(tensors.size()).u64(kvs.size());
  for (const Bytes& k : kvs) b.s += k.s;
  for (const Info& t : tensors) {
    b.str(t.name).u32(static_cast<std::uint32_t>(t.dims.size()));
    for (std::uint64_t d : t.dims) b.u64(d);
    b.u32(static_cast<std::uint32_t>(t.type)).u64(t.offset);
  }
  if (!tensors.empty()) b.s.append((alignment - b.s.size() % alignment) % alignment, '\0');
  return b.s + data;
}

Bytes alignment_kv(std::uint32_t a) {
  return kv("general.alignment", GgufValueType::uint32).u32(a);
}

std::string f32_bytes(const std::vector<float>& v) {
  return mha::test::bytes_of(v);
}

// A Q8_0 block: d = 0.5 (float16 0x3800), quants -16..15 (+ `shift`).
std::string q8_0_block(int shift = 0) {
  Bytes b;
  b.u8(0x00).u8(0x38);
  for (int j = 0; j < 32; ++j)
    b.u8(static_cast<std::uint8_t>(static_cast<std::int8_t>(j - 16 + shift)));
  return b.s;
}

std::vector<float> read_all(const mha::GgufFile& f, const std::string& name) {
  std::vector<float> v(f.find_tensor(name)->size());
  f.read(name, v.data());
  return v;
}

}  // namespace

TEST_CASE("gguf: metadata of every value type, scalar and array", "[gguf]") {
  TempDir dir("gguf");
  const std::vector<Bytes> kvs = {
      kv("u8", GgufValueType::uint8).u8(200),
      kv("i8", GgufValueType::int8).le(std::int8_t{-100}),
      kv("u16", GgufValueType::uint16).le(std::uint16_t{60000}),
      kv("i16", GgufValueType::int16).le(std::int16_t{-30000}),
      kv("u32", GgufValueType::uint32).u32(4000000000u),
      kv("i32", GgufValueType::int32).le(std::int32_t{-2000000000}),
      kv("f32", GgufValueType::float32).le(1.5f),
      kv("b", GgufValueType::boolean).u8(1),
      kv("s", GgufValueType::string).str("h\xc3\xa9llo"),
      kv("u64", GgufValueType::uint64).u64(std::numeric_limits<std::uint64_t>::max()),
      kv("i64", GgufValueType::int64).le(std::numeric_limits<std::int64_t>::min()),
      kv("f64", GgufValueType::float64).le(0.1),
      kv_array("a.u8", GgufValueType::uint8, 3).u8(1).u8(2).u8(3),
      kv_array("a.i8", GgufValueType::int8, 1).le(std::int8_t{-1}),
      kv_array("a.u16", GgufValueType::uint16, 2).le(std::uint16_t{1}).le(std::uint16_t{65535}),
      kv_array("a.i16", GgufValueType::int16, 1).le(std::int16_t{-2}),
      kv_array("a.u32", GgufValueType::uint32, 1).u32(7),
      kv_array("a.i32", GgufValueType::int32, 2).le(std::int32_t{-7}).le(std::int32_t{8}),
      kv_array("a.f32", GgufValueType::float32, 2).le(0.25f).le(-2.0f),
      kv_array("a.bool", GgufValueType::boolean, 2).u8(1).u8(0),
      kv_array("a.str", GgufValueType::string, 3).str("a").str("").str(std::string("c\0c", 3)),
      kv_array("a.u64", GgufValueType::uint64, 1).u64(std::uint64_t{1} << 63),
      kv_array("a.i64", GgufValueType::int64, 1).le(std::int64_t{-5}),
      kv_array("a.f64", GgufValueType::float64, 1).le(1e300),
      kv_array("a.empty", GgufValueType::int32, 0),
  };
  for (std::uint32_t version : {2u, 3u}) {
    const std::string path = dir.write("m.gguf", gguf(kvs, {}, "", 32, version));
    const mha::GgufFile f(path);
    CHECK(f.version() == version);
    CHECK(f.alignment() == 32);
    CHECK(f.tensors().empty());
    REQUIRE(f.metadata().size() == kvs.size());
    CHECK(f.metadata()[0].first == "u8");
    CHECK(f.metadata().back().first == "a.empty");

    const mha::GgufValue* u8 = f.find("u8");
    REQUIRE(u8);
    CHECK(u8->type == GgufValueType::uint8);
    CHECK(!u8->is_array);
    CHECK(std::get<std::vector<std::uint8_t>>(u8->values) == std::vector<std::uint8_t>{200});
    CHECK(std::get<std::vector<std::int16_t>>(f.find("i16")->values)[0] == -30000);
    CHECK(std::get<std::vector<float>>(f.find("f32")->values)[0] == 1.5f);
    CHECK(!f.find("absent"));

    CHECK(f.get_u64("u8") == 200);
    CHECK(f.get_u64("u16") == 60000);
    CHECK(f.get_u64("u32") == 4000000000u);
    CHECK(f.get_u64("u64") == std::numeric_limits<std::uint64_t>::max());
    CHECK(f.get_i64("i8") == -100);
    CHECK(f.get_i64("i16") == -30000);
    CHECK(f.get_i64("i32") == -2000000000);
    CHECK(f.get_i64("i64") == std::numeric_limits<std::int64_t>::min());
    CHECK(f.get_i64("u32") == 4000000000);
    CHECK(f.get_f64("f32") == 1.5);
    CHECK(f.get_f64("f64") == 0.1);
    CHECK(f.get_bool("b"));
    CHECK(f.get_string("s") == "h\xc3\xa9llo");

    CHECK(f.find("a.u8")->describe() == "array of 3 uint8");
    CHECK(f.find("a.str")->describe() == "array of 3 string");
    CHECK(f.find("u32")->describe() == "uint32");
    CHECK(f.get_array_strings("a.str") ==
          std::vector<std::string>{"a", "", std::string("c\0c", 3)});
    CHECK(f.get_array_i64("a.u8") == std::vector<std::int64_t>{1, 2, 3});
    CHECK(f.get_array_i64("a.i8") == std::vector<std::int64_t>{-1});
    CHECK(f.get_array_i64("a.u16") == std::vector<std::int64_t>{1, 65535});
    CHECK(f.get_array_i64("a.i16") == std::vector<std::int64_t>{-2});
    CHECK(f.get_array_i64("a.u32") == std::vector<std::int64_t>{7});
    CHECK(f.get_array_i64("a.i32") == std::vector<std::int64_t>{-7, 8});
    CHECK(f.get_array_i64("a.i64") == std::vector<std::int64_t>{-5});
    CHECK(f.get_array_i64("a.empty").empty());
    CHECK(f.get_array_f64("a.f32") == std::vector<double>{0.25, -2.0});
    CHECK(f.get_array_f64("a.f64") == std::vector<double>{1e300});
    CHECK(std::get<std::vector<bool>>(f.find("a.bool")->values) == std::vector<bool>{true, false});

    // The wrong kind, or no such key: one line naming the file and the key.
    require_invalid([&] { f.get_string("u32"); },
                    path + ": metadata key \"u32\" is uint32, expected a string");
    require_invalid([&] { f.get_u64("i8"); },
                    "metadata key \"i8\" is -100, expected an unsigned integer");
    require_invalid([&] { f.get_u64("f32"); }, "\"f32\" is float32, expected an unsigned integer");
    require_invalid([&] { f.get_i64("u64"); },
                    "\"u64\" is 18446744073709551615, over the largest int64");
    require_invalid([&] { f.get_array_i64("a.u64"); },
                    "\"a.u64\": element 0 is 9223372036854775808, over");
    require_invalid([&] { f.get_f64("u8"); }, "\"u8\" is uint8, expected float32 or float64");
    require_invalid([&] { f.get_bool("a.bool"); },
                    "\"a.bool\" is array of 2 bool, expected a bool");
    require_invalid([&] { f.get_array_strings("s"); },
                    "\"s\" is string, expected an array of strings");
    require_invalid([&] { f.get_array_f64("a.i32"); }, "expected an array of float32 or float64");
    require_invalid([&] { f.get_u64("missing"); }, path + ": has no metadata key \"missing\"");
  }
}

TEST_CASE("gguf: tensor infos, the data's alignment, read and read_rows", "[gguf]") {
  TempDir dir("gguf");
  // a: F32 (2, 3); q: Q8_0 (2, 64), two blocks a row; h: F16 (4,); b: BF16 (2,).
  const std::string a = f32_bytes({0, 1, 2, 3, 4, 5});
  const std::string q = q8_0_block() + q8_0_block(1) + q8_0_block(2) + q8_0_block(3);
  const std::string h("\x00\x3c\x00\xc0\x01\x00\xff\x7b", 8);  // 1, -2, 2^-24, 65504
  const std::string bf("\x80\x3f\xc0\xc0", 4);                 // 1, -6
  for (std::uint64_t alignment : {32u, 1u, 64u, 4096u}) {
    auto pad = [&](const std::string& s) {
      return s + std::string((alignment - s.size() % alignment) % alignment, '\0');
    };
    const std::uint64_t qa = pad(a).size(), ha = qa + pad(q).size(), ba = ha + pad(h).size();
    std::vector<Bytes> kvs = {kv("general.architecture", GgufValueType::string).str("test")};
    if (alignment != 32) kvs.push_back(alignment_kv(static_cast<std::uint32_t>(alignment)));
    const std::string path = dir.write("t.gguf", gguf(kvs,
                                                      {{"a", {3, 2}, GgmlType::F32, 0},
                                                       {"q", {64, 2}, GgmlType::Q8_0, qa},
                                                       {"h", {4}, GgmlType::F16, ha},
                                                       {"b", {2}, GgmlType::BF16, ba}},
                                                      pad(a) + pad(q) + pad(h) + bf, alignment));
    const mha::GgufFile f(path);
    CHECK(f.alignment() == alignment);
    CHECK(f.data_offset() % alignment == 0);
    REQUIRE(f.tensors().size() == 4);
    const mha::GgufTensor* t = f.find_tensor("q");
    REQUIRE(t);
    CHECK(t == &f.tensors()[1]);
    CHECK(t->type == GgmlType::Q8_0);
    CHECK(t->dims == std::vector<std::uint64_t>{64, 2});
    CHECK(t->shape() == std::vector<std::size_t>{2, 64});
    CHECK(t->size() == 128);
    CHECK(t->rows() == 2);
    CHECK(t->row_size() == 64);
    CHECK(t->bytes == 4 * 34);
    CHECK(t->offset == qa);
    CHECK(!f.find_tensor("absent"));

    CHECK(read_all(f, "a") == std::vector<float>{0, 1, 2, 3, 4, 5});
    CHECK(read_all(f, "h") == std::vector<float>{1, -2, 0x1p-24f, 65504});
    CHECK(read_all(f, "b") == std::vector<float>{1, -6});
    const std::vector<float> values = read_all(f, "q");
    for (int k = 0; k < 4; ++k)
      for (int j = 0; j < 32; ++j)
        CHECK(values[32 * k + j] == 0.5f * static_cast<float>(j - 16 + k));
    std::vector<float> row(64);
    f.read_rows("q", 1, 1, row.data());
    CHECK(std::vector<float>(values.begin() + 64, values.end()) == row);
    std::vector<float> a_row(3);
    f.read_rows("a", 1, 1, a_row.data());
    CHECK(a_row == std::vector<float>{3, 4, 5});
  }
}

TEST_CASE("gguf: versions 2 and 3 only, little-endian only", "[gguf]") {
  TempDir dir("gguf");
  const std::string good = gguf({}, {{"w", {4}, GgmlType::F32, 0}}, f32_bytes({1, 2, 3, 4}));
  auto with_version = [&](std::uint32_t v) {
    std::string s = good;
    std::memcpy(&s[4], &v, 4);
    return dir.write("v.gguf", s);
  };
  for (std::uint32_t v : {2u, 3u}) CHECK(mha::GgufFile(with_version(v)).version() == v);
  require_invalid([&] { mha::GgufFile f(with_version(1)); }, "GGUF version 1 (the 2023 draft");
  require_invalid([&] { mha::GgufFile f(with_version(0x03000000)); },
                  "a big-endian GGUF file (its version reads 50331648 little-endian)");
  require_invalid([&] { mha::GgufFile f(with_version(4)); },
                  "GGUF version 4 is not read; expected version 2 or 3");
  require_invalid([&] { mha::GgufFile f(with_version(0)); }, "GGUF version 0 is not read");
  std::string not_gguf = good;
  not_gguf[3] = 'X';
  require_invalid([&] { mha::GgufFile f(dir.write("x.gguf", not_gguf)); },
                  "not a GGUF file: it starts with \"GGUX\", expected \"GGUF\"");
  require_invalid([&] { mha::GgufFile f(dir.write("s.gguf", std::string("GGUF\3\0\0\0", 8))); },
                  "too short for a GGUF file (8 bytes; the header alone is 24)");
  require_invalid([&] { mha::GgufFile f(dir / "absent.gguf"); }, "absent.gguf: cannot open");
  require_invalid([&] { mha::GgufFile f(dir.path.string()); }, "not a regular file");
}

TEST_CASE("gguf: general.alignment is a uint32 power of two up to 1 MiB", "[gguf]") {
  TempDir dir("gguf");
  auto file = [&](const Bytes& alignment, std::uint64_t padding = 32) {
    return dir.write("a.gguf", gguf({alignment}, {{"w", {8}, GgmlType::F32, 0}},
                                    std::string(32, '\0'), padding));
  };
  CHECK(mha::GgufFile(file(alignment_kv(1u << 20), 1u << 20)).alignment() == (1u << 20));
  CHECK(mha::GgufFile(file(alignment_kv(1), 1)).data_offset() == 24 + 33 + 33);
  require_invalid([&] { mha::GgufFile f(file(alignment_kv(24))); },
                  "general.alignment 24 is not a power of two");
  require_invalid([&] { mha::GgufFile f(file(alignment_kv(0))); },
                  "general.alignment 0 is not a power of two");
  require_invalid([&] { mha::GgufFile f(file(alignment_kv(1u << 21))); },
                  "general.alignment 2097152 is over 1048576 (1 MiB)");
  require_invalid(
      [&] { mha::GgufFile f(file(kv("general.alignment", GgufValueType::uint64).u64(32))); },
      "general.alignment is uint64, expected uint32");
  require_invalid(
      [&] {
        mha::GgufFile f(file(kv_array("general.alignment", GgufValueType::uint32, 1).u32(32)));
      },
      "general.alignment is array of 1 uint32, expected uint32");
}

TEST_CASE("gguf: hostile sizes and counts refused before anything is sized by them", "[gguf]") {
  TempDir dir("gguf");
  auto refused = [&](const std::string& bytes, const std::string& fragment) {
    const std::string path = dir.write("h.gguf", bytes);
    require_invalid([&] { mha::GgufFile f(path); }, path + ": " + fragment);
  };
  const std::uint64_t huge = std::uint64_t{1} << 63;
  refused(
      gguf({kv("k", GgufValueType::string).u64(huge)}, {}, ""),
      "metadata key \"k\" (a string of 9223372036854775808 bytes) runs past the end of the file");
  refused(gguf({kv_array("k", GgufValueType::string, 2).str("a").u64(huge)}, {}, ""),
          "metadata key \"k\": string 1 (a string of 9223372036854775808 bytes) runs past");
  Bytes huge_key;
  huge_key.u64(huge).s += std::string(16, '\0');
  refused(gguf({huge_key}, {}, ""),
          "metadata key 0 is 9223372036854775808 bytes long; GGUF keys are at most 65535");
  refused(gguf({Bytes().str(std::string(70000, 'k'))}, {}, ""),
          "metadata key 0 is 70000 bytes long");
  refused(gguf({kv_array("k", GgufValueType::uint8, std::uint64_t{1} << 40)}, {}, ""),
          "metadata key \"k\": an array of 1099511627776 uint8 needs 1099511627776 bytes, more "
          "than the 0 left in the file");
  refused(
      gguf({kv_array("k", GgufValueType::string, std::uint64_t{1} << 40)}, {}, ""),
      "metadata key \"k\": an array of 1099511627776 string needs at least 8796093022208 bytes");
  refused(gguf({kv_array("k", GgufValueType::float64, huge)}, {}, ""),
          "metadata key \"k\": an array of 9223372036854775808 float64 needs more than 2^64 bytes");
  {
    Bytes b;
    b.s = "GGUF";
    b.u32(3).u64(std::uint64_t{1} << 60).u64(0).s += std::string(100, '\0');
    refused(b.s,
            "tensor_count 1152921504606846976 needs at least 24 bytes each, more than the "
            "100 bytes left in the file");
  }
  {
    Bytes b;
    b.s = "GGUF";
    b.u32(3).u64(0).u64(std::uint64_t{1} << 60).s += std::string(100, '\0');
    refused(b.s, "metadata_kv_count 1152921504606846976 needs at least 14 bytes each");
  }
  refused(gguf({}, {{std::string(100, 'n'), {4}, GgmlType::F32, 0}}, ""),
          "the name of tensor 0 is 100 bytes long; GGUF tensor names are at most 64");
  refused(gguf({}, {{"w", {std::uint64_t{1} << 32, std::uint64_t{1} << 31}, GgmlType::F32, 0}}, ""),
          "tensor \"w\": dims (4294967296, 2147483648) hold more than 2^62 elements");
  refused(gguf({}, {{"w", {huge}, GgmlType::F32, 0}}, ""),
          "tensor \"w\": dims (9223372036854775808,) hold more than 2^62 elements");
  refused(gguf({}, {{"w", {std::uint64_t{1} << 62}, GgmlType::Q8_K, 0}}, ""),
          "tensor \"w\": its 5260204364768739328 bytes at offset 0 run past the end of the data");
}

TEST_CASE("gguf: hostile metadata refused by key", "[gguf]") {
  TempDir dir("gguf");
  auto refused = [&](const std::vector<Bytes>& kvs, const std::string& fragment) {
    const std::string path = dir.write("k.gguf", gguf(kvs, {}, ""));
    require_invalid([&] { mha::GgufFile f(path); }, path + ": " + fragment);
  };
  refused({kv("k", GgufValueType::uint8).u8(1), kv("k", GgufValueType::uint8).u8(2)},
          "metadata key \"k\" appears twice");
  refused({kv("", GgufValueType::uint16).le(std::uint16_t{1})}, "metadata key 0 is empty");
  refused({Bytes().str("k").u32(13).u8(0)},
          "metadata key \"k\": value type 13 is not a GGUF value type");
  refused({Bytes().str("k").type(GgufValueType::array).u32(99).u64(0)},
          "metadata key \"k\": element type 99 is not a GGUF value type");
  refused({kv_array("k", GgufValueType::array, 1).type(GgufValueType::uint8).u64(0)},
          "metadata key \"k\" is an array of arrays, which mha does not read");
  refused({kv("k", GgufValueType::boolean).u8(2)}, "metadata key \"k\": bool 2, expected 0 or 1");
  refused({kv_array("k", GgufValueType::boolean, 3).u8(0).u8(1).u8(255)},
          "metadata key \"k\": element 2: bool 255, expected 0 or 1");
  refused({kv("k", GgufValueType::uint32).u8(1)},
          "metadata key \"k\": uint32 needs 4 bytes, more than the 1 left in the file");
  // Keys are echoed escaped: no file forges a second line.
  refused({kv("k\n\xff", GgufValueType::uint64)},
          "metadata key \"k\\n\\xff\": uint64 needs 8 bytes, more than the 0 left");
}

TEST_CASE("gguf: float metadata is finite or refused by key", "[gguf]") {
  TempDir dir("gguf");
  const double inf = std::numeric_limits<double>::infinity();
  const std::string path = dir.write(
      "m.gguf",
      gguf({kv("nan32", GgufValueType::float32).le(std::numeric_limits<float>::quiet_NaN()),
            kv("inf32", GgufValueType::float32).le(std::numeric_limits<float>::infinity()),
            kv("minus_inf64", GgufValueType::float64).le(-inf),
            kv("big64", GgufValueType::float64).le(1e308)},
           {}, "", 32, 3));
  const mha::GgufFile f(path);  // read as they are; refused when a float is asked of them
  require_invalid([&] { f.get_f64("nan32"); },
                  path + ": metadata key \"nan32\" is nan, expected a finite number");
  require_invalid([&] { f.get_f64("inf32"); }, "\"inf32\" is inf, expected a finite number");
  require_invalid([&] { f.get_f64("minus_inf64"); },
                  "\"minus_inf64\" is -inf, expected a finite number");
  CHECK(f.get_f64("big64") == 1e308);
}

TEST_CASE("gguf: hostile tensor infos refused by tensor", "[gguf]") {
  TempDir dir("gguf");
  auto refused = [&](const std::vector<Info>& infos, const std::string& data,
                     const std::string& fragment, std::uint64_t alignment = 32) {
    std::vector<Bytes> kvs;
    if (alignment != 32) kvs.push_back(alignment_kv(static_cast<std::uint32_t>(alignment)));
    const std::string path = dir.write("t.gguf", gguf(kvs, infos, data, alignment));
    require_invalid([&] { mha::GgufFile f(path); }, path + ": " + fragment);
  };
  const std::string data(256, '\0');
  refused({{"w", {4}, GgmlType::F32, 0}, {"w", {4}, GgmlType::F32, 32}}, data,
          "tensor \"w\" appears twice");
  refused({{"w", {1, 2, 3, 4, 5}, GgmlType::F32, 0}}, data,
          "tensor \"w\" has 5 dimensions; GGUF tensors have at most 4");
  refused(
      {{"w", {4}, GgmlType::F32, 512}}, data,
      "tensor \"w\": its 16 bytes at offset 512 run past the end of the data (256 bytes from byte");
  refused({{"w", {72}, GgmlType::F32, 0}}, data,
          "tensor \"w\": its 288 bytes at offset 0 run past the end of the data (256 bytes");
  refused({{"w", {4}, GgmlType::F32, 16}}, data,
          "tensor \"w\": offset 16 is not a multiple of the alignment 32");
  refused({{"w", {4}, GgmlType::F32, 8}}, data,
          "tensor \"w\": offset 8 is not a multiple of the alignment 16", 16);
  refused({{"a", {16}, GgmlType::F32, 0}, {"b", {4}, GgmlType::F32, 32}}, data,
          "tensors \"a\" (bytes 0 to 64 of the data) and \"b\" (from byte 32) overlap");
  refused({{"b", {4}, GgmlType::F32, 64}, {"a", {32}, GgmlType::F32, 0}}, data,
          "tensors \"a\" (bytes 0 to 128 of the data) and \"b\" (from byte 64) overlap");
  refused({{"w", {33}, GgmlType::Q4_0, 0}}, data,
          "tensor \"w\": its rows of 33 values are not whole blocks of 32 (Q4_0)");
  refused({{"w", {300, 2}, GgmlType::Q4_K, 0}}, data,
          "tensor \"w\": its rows of 300 values are not whole blocks of 256 (Q4_K)");
  refused({{"w", {4}, static_cast<GgmlType>(4), 0}}, data,
          "tensor \"w\" has type 4 (Q4_2, removed from ggml), which GGUF files do not hold");
  refused({{"w", {4}, static_cast<GgmlType>(31), 0}}, data,
          "tensor \"w\" has type 31 (Q4_0_4_4, removed from ggml)");
  refused({{"w", {4}, static_cast<GgmlType>(1000), 0}}, data,
          "tensor \"w\" has type 1000 (not a ggml type)");
  // The tensor infos end at byte 24 + 8 + 1 + 4 + 8 + 4 + 8 = 57: the data would start at 64.
  const std::string unpadded =
      dir.write("u.gguf", gguf({}, {{"w", {1}, GgmlType::F32, 0}}, "").substr(0, 57));
  require_invalid([&] { mha::GgufFile f(unpadded); },
                  "the tensor data would start at byte 64 (the header's end aligned to 32), past "
                  "the end of the file (57 bytes)");
  // Empty tensors hold no bytes, so share offsets with anything.
  const std::string path = dir.write(
      "e.gguf", gguf({}, {{"e", {0, 5}, GgmlType::Q4_0, 0}, {"w", {4}, GgmlType::F32, 0}}, data));
  const mha::GgufFile f(path);
  CHECK(f.find_tensor("e")->size() == 0);
  CHECK(f.find_tensor("e")->rows() == 5);
  std::vector<float> none;
  f.read("e", none.data());
}

TEST_CASE("gguf: every truncation of a valid file is refused in one line", "[gguf]") {
  TempDir dir("gguf");
  const std::string good =
      gguf({kv("s", GgufValueType::string).str("abc"),
            kv_array("a", GgufValueType::int16, 2).le(std::int16_t{1}).le(std::int16_t{2}),
            alignment_kv(16)},
           {{"w", {4}, GgmlType::F32, 0}, {"q", {32}, GgmlType::Q8_0, 16}},
           f32_bytes({1, 2, 3, 4}) + q8_0_block(), 16);
  CHECK(mha::GgufFile(dir.write("g.gguf", good)).tensors().size() == 2);
  for (std::size_t n = 0; n < good.size(); ++n) {
    INFO("the first " << n << " bytes");
    const std::string path = dir.write("t.gguf", good.substr(0, n));
    require_invalid([&] { mha::GgufFile f(path); }, path + ": ");
  }
}

TEST_CASE("gguf: types listed but not read, absent tensors and rows", "[gguf]") {
  TempDir dir("gguf");
  const std::string path = dir.write("l.gguf", gguf({},
                                                    {{"iq", {256}, GgmlType::IQ2_XXS, 0},
                                                     {"i8", {4}, GgmlType::I8, 96},
                                                     {"f64", {1}, GgmlType::F64, 128},
                                                     {"w", {4}, GgmlType::F32, 160}},
                                                    std::string(192, '\0')));
  const mha::GgufFile f(path);
  CHECK(f.find_tensor("iq")->bytes == 66);
  CHECK(f.find_tensor("iq")->type == GgmlType::IQ2_XXS);
  std::vector<float> out(256);
  require_invalid([&] { f.read("iq", out.data()); },
                  path + ": tensor \"iq\" has type IQ2_XXS (16), which mha does not read");
  require_invalid([&] { f.read("i8", out.data()); },
                  "tensor \"i8\" has type I8 (24), which mha does not read");
  require_invalid([&] { f.read("f64", out.data()); }, "has type F64 (28), which mha does not read");
  require_invalid([&] { f.read("absent", out.data()); }, path + ": has no tensor \"absent\"");
  require_invalid([&] { f.read_rows("w", 1, 1, out.data()); },
                  "tensor \"w\" has 1 rows, not 1 + 1");
  require_invalid([&] { f.read_rows("w", 2, 0, out.data()); },
                  "tensor \"w\" has 1 rows, not 2 + 0");
  f.read_rows("w", 1, 0, out.data());
}

TEST_CASE("gguf: ggml types' sizes and dequantize on blocks worked by hand", "[gguf]") {
  // Sizes from ggml-common.h's static_asserts.
  struct Size {
    GgmlType type;
    std::size_t elements, bytes;
  };
  for (const Size& s : {Size{GgmlType::Q4_0, 32, 18}, Size{GgmlType::Q5_1, 32, 24},
                        Size{GgmlType::Q2_K, 256, 84}, Size{GgmlType::Q3_K, 256, 110},
                        Size{GgmlType::Q4_K, 256, 144}, Size{GgmlType::Q5_K, 256, 176},
                        Size{GgmlType::Q6_K, 256, 210}, Size{GgmlType::Q8_K, 256, 292},
                        Size{GgmlType::IQ3_S, 256, 110}, Size{GgmlType::TQ1_0, 256, 54},
                        Size{GgmlType::MXFP4, 32, 17}, Size{GgmlType::BF16, 1, 2}}) {
    CHECK(mha::ggml_type_info(s.type).block_elements == s.elements);
    CHECK(mha::ggml_type_info(s.type).block_bytes == s.bytes);
  }
  // dequantize() reads exactly the types marked `dequantized`: F32, F16, BF16, Q4_0 ... Q8_K.
  int dequantized = 0;
  for (std::uint32_t number = 0; number < 64; ++number) {
    const mha::GgmlTypeInfo* info = mha::ggml_type_info(number);
    if (!info) continue;
    INFO(info->name);
    const std::string zeros(info->block_bytes, '\0');
    std::vector<float> block(info->block_elements, 1.0f);
    const auto type = static_cast<GgmlType>(number);
    if (info->dequantized) {
      ++dequantized;
      mha::dequantize(type, zeros.data(), block.size(), block.data());
      CHECK(block == std::vector<float>(block.size(), 0.0f));
    } else {
      require_invalid([&] { mha::dequantize(type, zeros.data(), block.size(), block.data()); },
                      "is not one mha reads");
    }
  }
  CHECK(dequantized == 14);
  CHECK(!mha::ggml_type_info(5u));
  CHECK(!mha::ggml_type_info(43u));
  CHECK(mha::ggml_type_label(16) == "IQ2_XXS (16)");
  CHECK(mha::ggml_type_label(36) == "36 (IQ4_NL_4_4, removed from ggml)");

  // Q4_0: d = 2 (0x4000); low nibbles 0..15 are values 0..15, high nibbles 15..0 values 16..31.
  Bytes q4;
  q4.u8(0x00).u8(0x40);
  for (int j = 0; j < 16; ++j) q4.u8(static_cast<std::uint8_t>(16 * (15 - j) + j));
  std::vector<float> y(32);
  mha::dequantize(GgmlType::Q4_0, q4.s.data(), 32, y.data());
  for (int j = 0; j < 16; ++j) {
    CHECK(y[j] == 2.0f * static_cast<float>(j - 8));
    CHECK(y[16 + j] == 2.0f * static_cast<float>(7 - j));
  }
  // Q8_K: a float32 d, int8 quants.
  Bytes q8k;
  q8k.le(0.25f);
  for (int j = 0; j < 256; ++j) q8k.u8(static_cast<std::uint8_t>(j));
  q8k.s += std::string(32, '\0');
  std::vector<float> z(256);
  mha::dequantize(GgmlType::Q8_K, q8k.s.data(), 256, z.data());
  for (int j = 0; j < 256; ++j)
    CHECK(z[j] == 0.25f * static_cast<float>(static_cast<std::int8_t>(j)));

  require_invalid([&] { mha::dequantize(GgmlType::Q4_0, q4.s.data(), 16, y.data()); },
                  "16 values of type Q4_0 are not whole blocks of 32");
  require_invalid([&] { mha::dequantize(GgmlType::IQ2_XXS, q4.s.data(), 256, y.data()); },
                  "type IQ2_XXS (16) is not one mha reads");
}
