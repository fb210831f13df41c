// The one JSON reader (mha/io/json_file.hpp): size, depth and duplicate-key
// limits, nothing after the document, regular files only for a model's files,
// and messages that name the file and echo nothing whole.
#include <sys/stat.h>

#include <string>

#include <nlohmann/json.hpp>

#include "mha/io/json_file.hpp"
#include "test_util.hpp"

namespace {

using mha::test::require_invalid;

std::string nested(std::size_t depth, const std::string& open = "[",
                   const std::string& close = "]") {
  std::string s;
  for (std::size_t i = 0; i < depth; ++i) s += open;
  s += "1";
  for (std::size_t i = 0; i < depth; ++i) s += close;
  return s;
}

}  // namespace

TEST_CASE("parse_json takes a document within every limit", "[json_file]") {
  const auto j = mha::parse_json(R"({"a": [1, {"b": null}], "c": "é"} )"
                                 "\n",
                                 "c.json", mha::json_kind::model_config);
  CHECK(j["a"][1]["b"].is_null());
  CHECK(j["c"] == "é");
  // 64 levels are the limit, and are read.
  CHECK(mha::parse_json(nested(64), "d.json", mha::json_kind::model_config).is_array());
  // Comments only where the kind allows them (the tool's own configs).
  CHECK(mha::parse_json("{\"h\": 2 // two\n}", "t.json", mha::json_kind::tool_config)["h"] == 2);
  require_invalid(
      [] { mha::parse_json("{\"h\": 2 // two\n}", "c.json", mha::json_kind::model_config); },
      "c.json:1:9: invalid JSON");
}

TEST_CASE("parse_json refuses depth as the parser reaches it", "[json_file]") {
  require_invalid([] { mha::parse_json(nested(65), "d.json", mha::json_kind::model_config); },
                  "d.json: JSON nested more than 64 levels deep (expected a config.json)");
  // A million levels, as a hostile config.json's n_layer holds: refused at level 65, no crash.
  const std::string deep = "{\"n_layer\": " + nested(1000000) + "}";
  require_invalid([&] { mha::parse_json(deep, "config.json", mha::json_kind::model_config); },
                  "config.json: JSON nested more than 64 levels deep");
  require_invalid(
      [&] {
        mha::parse_json(nested(100000, "{\"a\":", "}"), "h", mha::json_kind::safetensors_header);
      },
      "h: JSON nested more than 64 levels deep (expected a safetensors header)");
  // 20 MB of '[' (a safetensors header): refused at once.
  const std::string brackets(20u << 20, '[');
  require_invalid([&] { mha::parse_json(brackets, "h", mha::json_kind::safetensors_header); },
                  "nested more than 64 levels deep");
}

TEST_CASE("parse_json refuses duplicate keys at any depth", "[json_file]") {
  require_invalid(
      [] { mha::parse_json(R"({"a": 1, "a": 2})", "c.json", mha::json_kind::model_config); },
      "c.json: duplicate key \"a\"; each key may appear once");
  require_invalid(
      [] {
        mha::parse_json(R"({"x": {"a": 1, "b": {}, "a": 2}})", "c.json",
                        mha::json_kind::shard_index);
      },
      "duplicate key \"a\"");
  // The same key in two objects is not a duplicate.
  CHECK(mha::parse_json(R"([{"a": 1}, {"a": 2}])", "c.json", mha::json_kind::model_config).size() ==
        2);
  // A key echoed in a message is cut and escaped.
  const std::string key = std::string(1000, 'k') + "\n";
  const std::string doc =
      "{\"" + key.substr(0, 1000) + "\\n\": 1, \"" + key.substr(0, 1000) + "\\n\": 2}";
  try {
    mha::parse_json(doc, "c.json", mha::json_kind::model_config);
    FAIL("expected an error");
  } catch (const mha::Error& e) {
    const std::string what = e.what();
    CHECK(what.find('\n') == std::string::npos);
    CHECK(what.size() < 300);
    CHECK_THAT(what, Catch::Contains("… (1001 bytes)"));
  }
}

TEST_CASE("parse_json refuses anything after the document but whitespace", "[json_file]") {
  require_invalid(
      [] {
        mha::parse_json(std::string("{\"a\": 1}\0garbage", 16), "c.json",
                        mha::json_kind::model_config);
      },
      "c.json: a NUL byte at offset 8 (line 1); expected a config.json, which holds none");
  require_invalid([] { mha::parse_json("{} {}", "c.json", mha::json_kind::model_config); },
                  "c.json:1:4: invalid JSON");
  CHECK(mha::parse_json("{}  \n\t ", "c.json", mha::json_kind::safetensors_header).empty());
}

TEST_CASE("read_json_file bounds the file before reading it", "[json_file]") {
  mha::test::TempDir dir("json_file");
  // Larger than a config.json may be: refused by its size, before a byte is read.
  const std::string big = dir / "config.json";
  {
    std::ofstream out(big, std::ios::binary);
    out.seekp((4 << 20) + 1);
    out.put('\0');
  }
  require_invalid([&] { mha::read_json_file(big, mha::json_kind::model_config); },
                  big + ": 4194306 bytes, over the limit of 4194304 for a config.json");
  // A FIFO nobody writes to is refused by name, not waited on.
  const std::string fifo = dir / "tokenizer.json";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  require_invalid([&] { mha::read_json_file(fifo, mha::json_kind::tokenizer_config); },
                  fifo +
                      ": is not a regular file (a FIFO, socket or device); expected a "
                      "tokenizer_config.json");
  require_invalid([&] { mha::require_regular_file(fifo, "a tokenizer.json"); },
                  "is not a regular file");
  require_invalid([&] { mha::read_json_file(dir / "none.json", mha::json_kind::shard_index); },
                  "none.json: cannot open (No such file or directory); expected a "
                  "model.safetensors.index.json");
  require_invalid([&] { mha::read_json_file(dir.path.string(), mha::json_kind::model_config); },
                  ": is a directory; expected a config.json");
  // A stream where the kind allows one (--texts <(...)) is read up to its limit, and named.
  require_invalid([] { mha::read_json_file("/dev/zero", mha::json_kind::text_list); },
                  "/dev/zero: over 67108864 bytes, the limit for a JSON array of strings");
  CHECK(mha::read_json_file(dir.write("ok.json", "{\"n\": 3}"),
                            mha::json_kind::model_config)["n"] == 3);
}
