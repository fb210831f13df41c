// echo() and one_line() (mha/base/message.hpp), and mha::Error's message
// through them: one line of valid UTF-8, bounded, whatever a file put in it.
#include <string>

#include "mha/base/message.hpp"
#include "test_util.hpp"

namespace {

using Catch::Matchers::Equals;

// Whether `s` is valid UTF-8 with no control characters (as a terminal shows it on one line).
bool one_clean_line(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c == 0x7f) return false;
    const std::size_t n = c < 0x80         ? 1
                          : (c >> 5) == 6  ? 2
                          : (c >> 4) == 14 ? 3
                          : (c >> 3) == 30 ? 4
                                           : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    i += n;
  }
  return true;
}

std::size_t characters(const std::string& s) {
  std::size_t n = 0;
  for (const char c : s) n += (static_cast<unsigned char>(c) & 0xc0) != 0x80;
  return n;
}

}  // namespace

TEST_CASE("echo quotes and escapes what could forge or break a line", "[message]") {
  CHECK_THAT(mha::echo("bert"), Equals("\"bert\""));
  CHECK_THAT(mha::echo("a\nmha: error: b"), Equals("\"a\\nmha: error: b\""));
  CHECK_THAT(mha::echo("tab\there\r"), Equals("\"tab\\there\\r\""));
  CHECK_THAT(mha::echo(std::string("nul\0x", 5)), Equals("\"nul\\x00x\""));
  CHECK_THAT(mha::echo("\x1b[31mred"), Equals("\"\\x1b[31mred\""));
  // Bytes that are not UTF-8: a lone 0xff, a cut sequence, an overlong '/', a surrogate.
  CHECK_THAT(mha::echo("\xff"), Equals("\"\\xff\""));
  CHECK_THAT(mha::echo("\xe2\x82"), Equals("\"\\xe2\\x82\""));
  CHECK_THAT(mha::echo("\xc0\xaf"), Equals("\"\\xc0\\xaf\""));
  CHECK_THAT(mha::echo("\xed\xa0\x80"), Equals("\"\\xed\\xa0\\x80\""));
  // Valid UTF-8 stays as it is; C1 controls and U+2028 are escaped.
  CHECK_THAT(mha::echo("Ġé日本😀"), Equals("\"Ġé日本😀\""));
  CHECK_THAT(mha::echo("a\xc2\x85"
                       "b\xe2\x80\xa8"),
             Equals("\"a\\u0085b\\u2028\""));
}

TEST_CASE("echo cuts a long value at a character boundary and gives its size", "[message]") {
  const std::string long_ascii(100000, 'x');
  CHECK_THAT(mha::echo(long_ascii), Equals("\"" + std::string(60, 'x') + "\"… (100000 bytes)"));
  // 59 ASCII characters, then two-byte characters: the cut falls between characters, never
  // inside one (the byte-60 cut the tokenizer's messages used to make).
  std::string mixed(59, 'a');
  for (int i = 0; i < 10; ++i) mixed += "é";
  const std::string e = mha::echo(mixed);
  CHECK_THAT(e, Equals("\"" + std::string(59, 'a') + "é\"… (79 bytes)"));
  CHECK(one_clean_line(e));
}

TEST_CASE("one_line keeps a long message's head and tail", "[message]") {
  std::string m = "config.json: ";
  for (int i = 0; i < 100; ++i) m += "normalizers[0].";
  m += " expected a string";
  const std::string line = mha::one_line(m);
  CHECK(characters(line) <= mha::kMessageChars);
  CHECK_THAT(line, Catch::StartsWith("config.json: normalizers[0]."));
  CHECK_THAT(line, Catch::EndsWith(" expected a string"));
  CHECK_THAT(line, Catch::Contains(" … "));
  CHECK_THAT(mha::one_line("short\nmessage"), Equals("short\\nmessage"));
}

TEST_CASE("mha::Error's message is one clean line whatever it was built from", "[message]") {
  std::string hostile = "x.json: model_type ";
  hostile += std::string(100000, 'A') + "\n\xff\xfe\x1b[2J";
  const mha::Error e(mha::ErrorKind::invalid_input, hostile);
  const std::string what = e.what();
  CHECK(one_clean_line(what));
  CHECK(characters(what) <= mha::kMessageChars);
  CHECK_THAT(what, Catch::StartsWith("x.json: model_type AAAA"));
  CHECK_THAT(what, Catch::EndsWith("\\n\\xff\\xfe\\x1b[2J"));
}
