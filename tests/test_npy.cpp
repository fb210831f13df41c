#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "mha/io/npy.hpp"
#include "test_util.hpp"

using mha::DType;
using mha::NpyArray;
using namespace mha::test;  // test_util.hpp

namespace {}  // namespace

TEST_CASE("npy round trip of every dtype", "[npy]") {
  const std::vector<std::vector<std::size_t>> shapes = {{2, 3}, {5},       {},
                                                        {0},    {2, 0, 3}, {1, 2, 1, 2}};
  for (const auto& shape : shapes) {
    std::size_t n = 1;
    for (auto d : shape) n *= d;
    SECTION("shape " + mha::shape_str(shape)) {
      std::vector<float> f(n);
      std::vector<double> d(n);
      std::unique_ptr<bool[]> b(new bool[n + 1]);
      std::vector<std::int32_t> i32(n);
      std::vector<std::int64_t> i64(n);
      std::vector<std::uint8_t> u8(n);
      for (std::size_t i = 0; i < n; ++i) {
        f[i] = 0.5f * static_cast<float>(i) - 1.0f;
        d[i] = 1e300 / static_cast<double>(i + 1);
        b[i] = i % 3 == 0;
        i32[i] = -static_cast<std::int32_t>(i) * 1000003;
        i64[i] = static_cast<std::int64_t>(i) << 40;
        u8[i] = static_cast<std::uint8_t>(250 + i);
      }
      const std::vector<std::pair<NpyArray, DType>> arrays = {
          {NpyArray::of(f.data(), shape), DType::f4},
          {NpyArray::of(d.data(), shape), DType::f8},
          {NpyArray::of(b.get(), shape), DType::b1},
          {NpyArray::of(i32.data(), shape), DType::i4},
          {NpyArray::of(i64.data(), shape), DType::i8},
          {NpyArray::of(u8.data(), shape), DType::u1},
      };
      for (const auto& [a, dtype] : arrays) {
        CHECK(a.dtype == dtype);
        CHECK(a.shape == shape);
        CHECK(a.data.size() == n * mha::itemsize(dtype));
        const std::string bytes = mha::encode_npy(a);
        CHECK(bytes.size() % 64 == a.data.size() % 64);
        const NpyArray back = mha::parse_npy(bytes, "x.npy");
        CHECK(back.dtype == a.dtype);
        CHECK(back.shape == a.shape);
        CHECK(back.data == a.data);
      }
    }
  }
}

TEST_CASE("npy round trip of dtypes without an of<T>", "[npy]") {
  for (DType dtype : {DType::f2, DType::i1, DType::i2, DType::u2, DType::u4, DType::u8}) {
    NpyArray a;
    a.dtype = dtype;
    a.shape = {3, 2};
    for (std::size_t i = 0; i < 6 * mha::itemsize(dtype); ++i)
      a.data.push_back(static_cast<unsigned char>(i * 37 + 1));
    const NpyArray back = mha::parse_npy(mha::encode_npy(a), "x.npy");
    CHECK(back.dtype == dtype);
    CHECK(back.shape == a.shape);
    CHECK(back.data == a.data);
  }
}

TEST_CASE("npy header has NumPy's exact layout", "[npy]") {
  const std::string h = mha::npy_header(DType::f4, {2, 3});
  const std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  REQUIRE(h.size() == 128);
  CHECK(h.compare(0, 8, std::string("\x93NUMPY\x01\x00", 8)) == 0);
  CHECK(static_cast<unsigned char>(h[8]) == 118);
  CHECK(h[9] == 0);
  CHECK(h.compare(10, dict.size(), dict) == 0);
  CHECK(h.find_first_not_of(' ', 10 + dict.size()) == h.size() - 1);
  CHECK(h.back() == '\n');

  CHECK(mha::npy_header(DType::b1, {3})
            .find("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }") == 10);
  CHECK(mha::npy_header(DType::f8, {}).find("'shape': (), }") != std::string::npos);
  for (std::size_t d = 1; d <= 40; ++d) {
    const std::string hd = mha::npy_header(DType::f8, std::vector<std::size_t>(d, 7));
    CHECK(hd.size() % 64 == 0);
    CHECK(hd.back() == '\n');
  }
}

TEST_CASE("npy header switches to version 2.0 only when it must", "[npy]") {
  const std::vector<std::size_t> shape(6000, 1);  // a dict of about 18 KB still fits 1.0
  CHECK(mha::npy_header(DType::f4, shape)[6] == 1);
  const std::vector<std::size_t> huge(30000, 1);
  const std::string h = mha::npy_header(DType::f4, huge);
  CHECK(h[6] == 2);
  CHECK(h.size() % 64 == 0);
  NpyArray a;
  a.shape = huge;
  a.data.resize(4);
  const NpyArray back = mha::parse_npy(mha::encode_npy(a), "x.npy");
  CHECK(back.shape == huge);
}

TEST_CASE("npy big-endian data is converted to native order", "[npy]") {
  SECTION(">f8") {
    const std::vector<double> v = {1.5, -2.25, 1e-300};
    const NpyArray a = mha::parse_npy(raw_npy(dict(">f8", "(3,)"), bytes_of(v, true)), "x.npy");
    CHECK(a.dtype == DType::f8);
    CHECK(values_of<double>(a) == v);
  }
  SECTION(">i4, >u2, >i8, >f4") {
    const std::vector<std::int32_t> i4 = {1, -2, 0x12345678};
    CHECK(values_of<std::int32_t>(
              mha::parse_npy(raw_npy(dict(">i4", "(3,)"), bytes_of(i4, true)), "x")) == i4);
    const std::vector<std::uint16_t> u2 = {1, 0xabcd};
    CHECK(values_of<std::uint16_t>(
              mha::parse_npy(raw_npy(dict(">u2", "(2,)"), bytes_of(u2, true)), "x")) == u2);
    const std::vector<std::int64_t> i8 = {-1, 0x0102030405060708};
    CHECK(values_of<std::int64_t>(
              mha::parse_npy(raw_npy(dict(">i8", "(2,)"), bytes_of(i8, true)), "x")) == i8);
    const std::vector<float> f4 = {3.0f, -0.125f};
    CHECK(values_of<float>(mha::parse_npy(raw_npy(dict(">f4", "(2,)"), bytes_of(f4, true)), "x")) ==
          f4);
  }
  SECTION(">f2 converts") {
    const std::vector<std::uint16_t> half = {0x3c00, 0xc100};
    const NpyArray a = mha::parse_npy(raw_npy(dict(">f2", "(2,)"), bytes_of(half, true)), "x");
    float out[2];
    mha::convert(a, out, "x");
    CHECK(out[0] == 1.0f);
    CHECK(out[1] == -2.5f);
  }
  SECTION("'=' and '|' mean native; one-byte types accept any order character") {
    const std::vector<float> f4 = {7.0f};
    CHECK(values_of<float>(mha::parse_npy(raw_npy(dict("=f4", "(1,)"), bytes_of(f4)), "x")) == f4);
    for (const char* descr : {"|u1", "<u1", ">u1", "=u1"}) {
      const NpyArray a = mha::parse_npy(raw_npy(dict(descr, "(2,)"), "\x01\xff"), "x");
      CHECK(a.dtype == DType::u1);
      CHECK(a.data == std::vector<unsigned char>{1, 255});
    }
  }
}

TEST_CASE("npy bool bytes are normalised to 0 and 1", "[npy]") {
  const NpyArray a =
      mha::parse_npy(raw_npy(dict("|b1", "(3,)"), std::string("\x00\x02\x01", 3)), "m");
  CHECK(a.dtype == DType::b1);
  CHECK(a.data == std::vector<unsigned char>{0, 1, 1});
}

TEST_CASE("npy Fortran order is converted to C order", "[npy]") {
  SECTION("2-d") {
    // C-order [[0, 1, 2], [3, 4, 5]] stored column by column.
    const std::vector<float> fortran = {0, 3, 1, 4, 2, 5};
    const NpyArray a = mha::parse_npy(raw_npy(dict("<f4", "(2, 3)", true), bytes_of(fortran)), "x");
    CHECK(a.shape == std::vector<std::size_t>{2, 3});
    CHECK(values_of<float>(a) == std::vector<float>{0, 1, 2, 3, 4, 5});
  }
  SECTION("4-d, big-endian") {
    const std::size_t s0 = 2, s1 = 3, s2 = 4, s3 = 5;
    std::vector<double> fortran(s0 * s1 * s2 * s3), expected(fortran.size());
    for (std::size_t i = 0; i < s0; ++i)
      for (std::size_t j = 0; j < s1; ++j)
        for (std::size_t k = 0; k < s2; ++k)
          for (std::size_t l = 0; l < s3; ++l) {
            const double v = 1000.0 * i + 100.0 * j + 10.0 * k + l;
            fortran[i + s0 * (j + s1 * (k + s2 * l))] = v;
            expected[((i * s1 + j) * s2 + k) * s3 + l] = v;
          }
    const NpyArray a =
        mha::parse_npy(raw_npy(dict(">f8", "(2, 3, 4, 5)", true), bytes_of(fortran, true)), "x");
    CHECK(values_of<double>(a) == expected);
  }
  SECTION("1-d and 0-d are the same in both orders") {
    const std::vector<std::int64_t> v = {4, 5, 6};
    CHECK(values_of<std::int64_t>(
              mha::parse_npy(raw_npy(dict("<i8", "(3,)", true), bytes_of(v)), "x")) == v);
    const std::vector<std::int64_t> s = {9};
    CHECK(values_of<std::int64_t>(
              mha::parse_npy(raw_npy(dict("<i8", "()", true), bytes_of(s)), "x")) == s);
    CHECK(mha::parse_npy(raw_npy(dict("<i8", "(0, 3)", true), ""), "x").size() == 0);
  }
}

TEST_CASE("npy versions 2.0 and 3.0 are read", "[npy]") {
  const std::vector<float> v = {1, 2, 3, 4};
  for (int major : {2, 3}) {
    const NpyArray a = mha::parse_npy(raw_npy(dict("<f4", "(2, 2)"), bytes_of(v), major), "x");
    CHECK(a.shape == std::vector<std::size_t>{2, 2});
    CHECK(values_of<float>(a) == v);
  }
}

TEST_CASE("npy header dict syntax variants", "[npy]") {
  const std::vector<float> v = {1, 2, 3, 4, 5, 6};
  const std::string data = bytes_of(v);
  const std::vector<std::string> dicts = {
      "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}",
      "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2,3)}",
      "{ 'fortran_order' : False ,\n\t'shape' : ( 2 , 3 , ) , 'descr' : '<f4' , }" +
          std::string(300, ' ') + "\n",
      "  {'descr':'<f4','fortran_order':False,'shape':(2,3),}\r\n",
  };
  for (const auto& d : dicts) {
    INFO(d);
    const NpyArray a = mha::parse_npy(raw_npy(d, data), "x");
    CHECK(a.dtype == DType::f4);
    CHECK(a.shape == std::vector<std::size_t>{2, 3});
    CHECK(values_of<float>(a) == v);
  }
}

TEST_CASE("npy 0-d and empty arrays", "[npy]") {
  const double pi = 3.25;
  const NpyArray scalar =
      mha::parse_npy(raw_npy(dict("<f8", "()"), bytes_of(std::vector<double>{pi})), "s");
  CHECK(scalar.shape.empty());
  CHECK(scalar.size() == 1);
  CHECK(values_of<double>(scalar) == std::vector<double>{pi});
  CHECK(scalar.describe() == "float64 array of shape ()");

  const NpyArray empty = mha::parse_npy(raw_npy(dict("<f4", "(0, 4)"), ""), "e");
  CHECK(empty.size() == 0);
  CHECK(empty.data.empty());
  CHECK(empty.describe() == "float32 array of shape (0, 4)");
  std::vector<float> none;
  mha::convert(empty, none.data(), "e");
}

TEST_CASE("npy describe and dtype names", "[npy]") {
  NpyArray a;
  a.dtype = DType::f4;
  a.shape = {2, 3};
  CHECK(a.describe() == "float32 array of shape (2, 3)");
  a.dtype = DType::b1;
  a.shape = {7};
  CHECK(a.describe() == "bool array of shape (7,)");
  CHECK(std::string(mha::dtype_name(DType::u8)) == "uint64");
  CHECK(mha::is_float(DType::f2));
  CHECK_FALSE(mha::is_float(DType::b1));
  CHECK(mha::is_integer(DType::u1));
  CHECK_FALSE(mha::is_integer(DType::b1));
  CHECK_FALSE(mha::is_integer(DType::f8));
}

TEST_CASE("npy float16 conversion", "[npy]") {
  struct Case {
    std::uint16_t bits;
    double value;
  };
  const Case cases[] = {
      {0x3c00, 1.0},
      {0xc100, -2.5},
      {0x7bff, 65504.0},
      {0x0001, std::ldexp(1.0, -24)},         // smallest subnormal
      {0x03ff, 1023 * std::ldexp(1.0, -24)},  // largest subnormal
      {0x0400, std::ldexp(1.0, -14)},         // smallest normal
      {0x3555, 0.333251953125},
      {0x0000, 0.0},
      {0x7c00, std::numeric_limits<double>::infinity()},
      {0xfc00, -std::numeric_limits<double>::infinity()},
  };
  std::vector<std::uint16_t> bits;
  for (const auto& c : cases) bits.push_back(c.bits);
  bits.push_back(0x8000);  // -0
  bits.push_back(0x7e00);  // NaN
  bits.push_back(0xfd01);  // NaN with sign and payload
  const NpyArray a = mha::parse_npy(raw_npy(dict("<f2", "(13,)"), bytes_of(bits)), "h");
  std::vector<float> f(a.size());
  std::vector<double> d(a.size());
  mha::convert(a, f.data(), "h");
  mha::convert(a, d.data(), "h");
  for (std::size_t i = 0; i < std::size(cases); ++i) {
    INFO("bits " << cases[i].bits);
    CHECK(f[i] == static_cast<float>(cases[i].value));
    CHECK(d[i] == cases[i].value);
  }
  CHECK(f[10] == 0.0f);
  CHECK(std::signbit(f[10]));
  CHECK(std::isnan(f[11]));
  CHECK(std::isnan(d[12]));
}

TEST_CASE("npy convert from float32 and float64", "[npy]") {
  const std::vector<float> f = {1.5f, -3.0f, 1e30f};
  const NpyArray a = NpyArray::of(f.data(), {3});
  std::vector<double> d(3);
  mha::convert(a, d.data(), "a");
  CHECK(d == std::vector<double>{1.5, -3.0, static_cast<double>(1e30f)});
  const std::vector<double> dd = {0.1, 2.0};
  std::vector<float> ff(2);
  mha::convert(NpyArray::of(dd.data(), {2}), ff.data(), "b");
  CHECK(ff == std::vector<float>{0.1f, 2.0f});
}

TEST_CASE("npy convert refuses non-float arrays", "[npy]") {
  const std::vector<std::int64_t> v = {1, 2};
  const NpyArray a = NpyArray::of(v.data(), {2});
  float out[2];
  require_invalid(
      [&] { mha::convert(a, out, "mask.npy"); },
      "mask.npy: expected a float array (float16/32/64), got int64 array of shape (2,)");
  const bool b[1] = {true};
  double dout[1];
  require_invalid([&] { mha::convert(NpyArray::of(b, {1}), dout, "m"); }, "got bool array");
}

TEST_CASE("npy malformed files are refused", "[npy]") {
  const std::string f6 = bytes_of(std::vector<float>(6, 1.0f));
  auto parse = [](const std::string& bytes) {
    return [bytes] { mha::parse_npy(bytes, "query.npy"); };
  };
  auto with_dict = [&](const std::string& d) { return parse(raw_npy(d, f6)); };

  require_invalid(parse("PK\x03\x04 not npy at all"), "query.npy: not a .npy file");
  require_invalid(parse(""), "query.npy: file is 0 bytes, too short");
  require_invalid(parse(std::string("\x93NUMPY\x01", 7)), "too short");
  require_invalid(parse(std::string("\x93NUMPY\x02\x00\x10", 9)), "too short");
  require_invalid(parse(raw_npy(dict("<f4", "(2, 3)"), f6, 4)),
                  "unsupported .npy format version 4.0 (expected 1.0, 2.0 or 3.0)");
  require_invalid(parse(std::string("\x93NUMPY\x01\x01\x00\x00", 10)), "version 1.1");
  require_invalid(parse(std::string("\x93NUMPY\x01\x00\xc8\x00{}", 12)),
                  "header length 200 exceeds the file size (12 bytes)");
  require_invalid(parse(std::string("\x93NUMPY\x02\x00\x00\x00\x00\x01", 12)),
                  "header length 16777216 exceeds the 1048576-byte limit");
  require_invalid(parse(std::string("\x93NUMPY\x03\x00\xff\xff\xff\xff", 12)),
                  "header length 4294967295 exceeds the 1048576-byte limit");

  require_invalid(with_dict(""), "expected the header to start with '{', found end of header");
  require_invalid(with_dict("['descr', '<f4']"),
                  "expected the header to start with '{', found '['");
  require_invalid(with_dict("{'descr': '<f4', 'fortran_order': False}"), "missing key 'shape'");
  require_invalid(with_dict("{'shape': (6,), 'fortran_order': False}"), "missing key 'descr'");
  require_invalid(with_dict("{'descr': '<f4', 'shape': (6,)}"), "missing key 'fortran_order'");
  require_invalid(with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'extra': 1}"),
                  "unexpected key 'extra'");
  require_invalid(
      with_dict("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,)}"),
      "duplicate key 'descr'");
  require_invalid(with_dict("{descr: '<f4'}"), "expected a quoted key or '}', found 'd'");
  require_invalid(with_dict("{'descr' '<f4'}"), "expected ':' after key 'descr'");
  require_invalid(with_dict("{'descr': '<f4' 'shape': (6,)}"),
                  "expected ',' or '}' after the value of 'descr'");
  require_invalid(with_dict("{'descr': '<f4, 'fortran_order': False, 'shape': (6,)}"),
                  "unsupported dtype '<f4, '");
  require_invalid(with_dict("{'descr': '<f4"), "unterminated string");
  require_invalid(with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (6,)"),
                  "expected ',' or '}' after the value of 'shape', found end of header");
  require_invalid(with_dict("{'descr': '<f4', 'fortran_order': False, 'shape': (6,)} x"),
                  "unexpected 'x' after the closing '}'");
  require_invalid(
      with_dict(std::string("{'descr': '<f4', 'fortran_order': False, 'shape': (6,)}\0", 56)),
      "unexpected byte 0x00 after the closing '}'");

  require_invalid(with_dict(dict("<f4", "(6,)").replace(dict("<f4", "(6,)").find("False"), 5, "0")),
                  "expected True or False as the value of 'fortran_order', found '0'");
  require_invalid(with_dict("{'descr': '<f4', 'fortran_order': 'False', 'shape': (6,)}"),
                  "expected True or False as the value of 'fortran_order', found '''");
  require_invalid(with_dict(dict("<f4", "(-6,)")),
                  "expected a non-negative integer in 'shape', found '-'");
  require_invalid(with_dict(dict("<f4", "(2.5,)")),
                  "expected a non-negative integer in 'shape', found '2.5'");
  require_invalid(with_dict(dict("<f4", "(6L,)")), "found '6L'");
  require_invalid(with_dict(dict("<f4", "(None,)")), "found 'N'");
  require_invalid(with_dict(dict("<f4", "(2,, 3)")), "found ','");
  require_invalid(with_dict(dict("<f4", "(2 3)")), "expected ',' or ')' in 'shape', found '3'");
  require_invalid(with_dict(dict("<f4", "[2, 3]")),
                  "expected a tuple as the value of 'shape', found '['");
  require_invalid(with_dict(dict("<f4", "6")), "expected a tuple as the value of 'shape'");
  require_invalid(with_dict(dict("<f4", "(6)")),
                  "'shape' (6) is not a tuple; a 1-d shape is written (6,)");
  require_invalid(with_dict(dict("<f4", "(123456789012345678901234567890,)")),
                  "dimension 123456789012345678901234567890 in 'shape' is too large");
  require_invalid(with_dict(dict("<f4", "(4294967296, 4294967296)")),
                  "float32 array of shape (4294967296, 4294967296) is too large (size overflows)");

  require_invalid(with_dict(dict("|O", "(6,)")),
                  "query.npy: dtype '|O' holds pickled Python objects");
  require_invalid(with_dict("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,)}"),
                  "query.npy: structured dtypes (a list as 'descr') are not supported");
  require_invalid(with_dict("{'descr': 4, 'fortran_order': False, 'shape': (6,)}"),
                  "expected a string as the value of 'descr', found '4'");
  require_invalid(with_dict(dict("<U8", "(6,)")), "query.npy: unsupported dtype '<U8' (strings)");
  require_invalid(with_dict(dict("|S3", "(6,)")), "unsupported dtype '|S3' (strings)");
  require_invalid(with_dict(dict("<c8", "(6,)")), "unsupported dtype '<c8' (complex)");
  require_invalid(with_dict(dict("<M8[s]", "(6,)")), "unsupported dtype '<M8[s]' (datetime)");
  require_invalid(with_dict(dict("|V4", "(6,)")), "unsupported dtype '|V4'");
  require_invalid(with_dict(dict("<f16", "(6,)")), "unsupported dtype '<f16'");
  require_invalid(with_dict(dict("|f4", "(6,)")), "unsupported dtype '|f4'");
  require_invalid(with_dict(dict("f4", "(6,)")), "unsupported dtype 'f4'");
  require_invalid(with_dict(dict("<b2", "(6,)")), "unsupported dtype '<b2'");
  require_invalid(with_dict(dict("", "(6,)")), "unsupported dtype ''");

  require_invalid(parse(raw_npy(dict("<f4", "(2, 3)"), f6.substr(0, 12))),
                  "query.npy: data is 12 bytes, expected 24 for float32 array of shape (2, 3)");
  require_invalid(parse(raw_npy(dict("<f4", "(2, 3)"), f6 + "xxxx")),
                  "query.npy: data is 28 bytes, expected 24 for float32 array of shape (2, 3)");
  require_invalid(parse(raw_npy(dict("<f8", "()"), "")),
                  "data is 0 bytes, expected 8 for float64 array of shape ()");
  require_invalid(parse(raw_npy(dict("<f4", "(0,)"), "x")), "data is 1 bytes, expected 0");
}

TEST_CASE("read_npy reads files and checks sizes before allocating", "[npy]") {
  TempDir tmp("npy");
  const std::vector<float> v = {1, 2, 3, 4, 5, 6};
  write_file(tmp / "a.npy", mha::encode_npy(NpyArray::of(v.data(), {3, 2})));
  const NpyArray a = mha::read_npy(tmp / "a.npy");
  CHECK(a.shape == std::vector<std::size_t>{3, 2});
  CHECK(values_of<float>(a) == v);

  write_file(tmp / "fortran.npy", raw_npy(dict(">f4", "(2, 3)", true),
                                          bytes_of(std::vector<float>{0, 3, 1, 4, 2, 5}, true)));
  CHECK(values_of<float>(mha::read_npy(tmp / "fortran.npy")) ==
        std::vector<float>{0, 1, 2, 3, 4, 5});

  // A header claiming ~1 EB of data in a file of a few bytes.
  write_file(tmp / "hostile.npy", raw_npy(dict("<f8", "(1000000000, 100000000)"), "abcd"));
  require_invalid([&] { mha::read_npy(tmp / "hostile.npy"); },
                  "hostile.npy: data is 4 bytes, expected 800000000000000000 for float64 array");
  write_file(tmp / "bighdr.npy", std::string("\x93NUMPY\x02\x00\xff\xff\xff\x7f", 12));
  require_invalid([&] { mha::read_npy(tmp / "bighdr.npy"); },
                  "header length 2147483647 exceeds the 1048576-byte limit");
  write_file(tmp / "short.npy", std::string("\x93NUMPY\x01\x00\x40\x00{'descr'", 18));
  require_invalid([&] { mha::read_npy(tmp / "short.npy"); },
                  "short.npy: header length 64 exceeds the file size (18 bytes)");
  write_file(tmp / "tiny.npy", "\x93NU");
  require_invalid([&] { mha::read_npy(tmp / "tiny.npy"); },
                  "tiny.npy: file is 3 bytes, too short for a .npy header");
  write_file(tmp / "long.npy", mha::encode_npy(NpyArray::of(v.data(), {6})) + "!");
  require_invalid([&] { mha::read_npy(tmp / "long.npy"); },
                  "long.npy: data is 25 bytes, expected 24");

  require_invalid([&] { mha::read_npy(tmp / "missing.npy"); },
                  "missing.npy: cannot open: No such file or directory");
  require_invalid([&] { mha::read_npy(tmp.path.string()); }, ": is a directory");
}

TEST_CASE("npy files interoperate with NumPy", "[npy][numpy]") {
  if (!have_numpy()) {
    MHA_SKIP("numpy",
             "/usr/bin/python3 with numpy not found (scripts/setup.sh --test installs it)");
  }
  TempDir tmp("npy");
  const std::string script = tmp / "make.py";
  write_file(script, R"(
import sys, numpy as np
d = sys.argv[1]
np.save(d + '/f2.npy', np.array([1.0, -2.5, 65504, 2.0**-24, np.inf], dtype=np.float16))
np.save(d + '/be.npy', np.arange(6, dtype='>f8').reshape(2, 3) / 4)
np.save(d + '/fortran.npy', np.asfortranarray(np.arange(24, dtype=np.float32).reshape(2, 3, 4)))
np.save(d + '/mask.npy', np.array([[True, False], [False, True]]))
np.save(d + '/i8.npy', np.array([-5, 1 << 40], dtype=np.int64))
np.save(d + '/scalar.npy', np.float64(2.5))
np.save(d + '/empty.npy', np.zeros((0, 3), np.float32))
for name, a in [('ref_23', np.arange(6, dtype=np.float32).reshape(2, 3)),
                ('ref_long', np.zeros((123456789012, 0, 5), np.float64)),
                ('ref_3d', np.ones((4, 5, 6), np.float64)),
                ('ref_1', np.array([7], np.int32)),
                ('ref_0d', np.array(1.5, np.float32)),
                ('ref_u8', np.arange(10, dtype=np.uint8)),
                ('ref_bool', np.array([True]))]:
    np.save(d + '/' + name + '.npy', a)
)");
  REQUIRE(run_python(script, tmp.path.string()) == 0);

  std::vector<float> f(5);
  mha::convert(mha::read_npy(tmp / "f2.npy"), f.data(), "f2.npy");
  CHECK(f == std::vector<float>{1.0f, -2.5f, 65504.0f, std::ldexp(1.0f, -24),
                                std::numeric_limits<float>::infinity()});
  const NpyArray be = mha::read_npy(tmp / "be.npy");
  CHECK(be.shape == std::vector<std::size_t>{2, 3});
  CHECK(values_of<double>(be) == std::vector<double>{0, 0.25, 0.5, 0.75, 1.0, 1.25});
  const NpyArray fo = mha::read_npy(tmp / "fortran.npy");
  CHECK(fo.shape == std::vector<std::size_t>{2, 3, 4});
  std::vector<float> expected(24);
  for (int i = 0; i < 24; ++i) expected[i] = static_cast<float>(i);
  CHECK(values_of<float>(fo) == expected);
  CHECK(mha::read_npy(tmp / "mask.npy").data == std::vector<unsigned char>{1, 0, 0, 1});
  CHECK(values_of<std::int64_t>(mha::read_npy(tmp / "i8.npy")) ==
        std::vector<std::int64_t>{-5, 1LL << 40});
  CHECK(values_of<double>(mha::read_npy(tmp / "scalar.npy")) == std::vector<double>{2.5});
  CHECK(mha::read_npy(tmp / "empty.npy").shape == std::vector<std::size_t>{0, 3});

  // What we write must be byte-identical to what NumPy writes.
  for (const char* name :
       {"ref_23", "ref_long", "ref_3d", "ref_1", "ref_0d", "ref_u8", "ref_bool"}) {
    INFO(name);
    const std::string theirs = read_file(tmp / (std::string(name) + ".npy"));
    const NpyArray a = mha::parse_npy(theirs, name);
    CHECK(mha::encode_npy(a) == theirs);
  }

  // And NumPy must load what we write.
  const std::vector<double> d = {0.5, -1.0, 3.0, 4.0};
  write_file(tmp / "ours.npy", mha::encode_npy(NpyArray::of(d.data(), {2, 2})));
  const std::string check = tmp / "check.py";
  write_file(check, R"(
import sys, numpy as np
a = np.load(sys.argv[1] + '/ours.npy')
assert a.dtype == np.float64 and a.shape == (2, 2), (a.dtype, a.shape)
assert (a == np.array([[0.5, -1.0], [3.0, 4.0]])).all(), a
)");
  CHECK(run_python(check, tmp.path.string()) == 0);
}
