// mha::Config: every key through apply (JSON) and apply_flag (command-line
// text), null resets, type and range errors with their exact wording,
// unknown keys with suggestions, layering, to_json, and read_config_file.
#include <catch2/catch.hpp>
#include <cstdint>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "mha/base/error.hpp"
#include "mha/config/config.hpp"
#include "test_util.hpp"

using Catch::Contains;
using Catch::EndsWith;
using Catch::Equals;
using Catch::StartsWith;
using json = nlohmann::json;
using mha::Causal;
using mha::ComputeType;
using mha::Config;
using mha::MaskedRows;
using namespace mha::test;  // test_util.hpp

namespace {

// Applies {key: value} from "run.json".
void set(Config& c, const std::string& key, const json& value) {
  c.apply(json::object({{key, value}}), "run.json");
}

// The message of the error that applying {key: value} to a default config throws.
std::string error_of(const std::string& key, const json& value) {
  Config c;
  try {
    set(c, key, value);
  } catch (const mha::Error& e) {
    CHECK(e.kind() == mha::ErrorKind::invalid_input);
    return e.what();
  }
  FAIL("no error for " << key << " = " << value.dump());
  return "";
}

std::string flag_error_of(const std::string& key, const std::string& text) {
  Config c;
  try {
    c.apply_flag(key, text);
  } catch (const mha::Error& e) {
    CHECK(e.kind() == mha::ErrorKind::invalid_input);
    return e.what();
  }
  FAIL("no error for --" << key << " " << text);
  return "";
}

const char* const kSizeKeys[] = {"h",    "d_model", "d_k",   "d_v",     "kdim",
                                 "vdim", "d_out",   "batch", "seq_len", "kv_seq_len"};

std::optional<std::int64_t>& size_field(Config& c, const std::string& key) {
  if (key == "h") return c.h;
  if (key == "d_model") return c.d_model;
  if (key == "d_k") return c.d_k;
  if (key == "d_v") return c.d_v;
  if (key == "kdim") return c.kdim;
  if (key == "vdim") return c.vdim;
  if (key == "d_out") return c.d_out;
  if (key == "batch") return c.batch;
  if (key == "seq_len") return c.seq_len;
  if (key == "kv_seq_len") return c.kv_seq_len;
  FAIL("not a size key: " << key);
  return c.h;
}

}  // namespace

TEST_CASE("defaults", "[config]") {
  const Config c;
  CHECK_FALSE(c.h);
  CHECK_FALSE(c.d_model);
  CHECK_FALSE(c.scale);
  CHECK_FALSE(c.use_bias);  // unset: follows the weights file, else true
  CHECK(c.weights_format == mha::WeightsFormat::auto_detect);
  CHECK(c.mask_true_means == mha::MaskTrueMeans::attend);
  CHECK_FALSE(c.key_padding_mask);
  CHECK(c.dtype == ComputeType::float32);
  CHECK(c.seed == 0);
  CHECK(c.causal == Causal::none);
  CHECK(c.masked_rows == MaskedRows::zero);
  CHECK(c.out_dir == "out");
  CHECK_FALSE(c.save_attention);
  CHECK_FALSE(c.average_heads);
  CHECK_FALSE(c.save_weights);
  CHECK_FALSE(c.save_inputs);
  CHECK_FALSE(c.key_lengths);
  CHECK_FALSE(c.key_lengths_file);
}

TEST_CASE("size keys: values, null, wrong types and ranges", "[config]") {
  for (const char* key : kSizeKeys) {
    INFO("key " << key);
    Config c;
    set(c, key, 8);
    CHECK(size_field(c, key) == 8);
    set(c, key, 1);
    CHECK(size_field(c, key) == 1);
    set(c, key, 1 << 30);  // the largest size allowed
    CHECK(size_field(c, key) == (std::int64_t{1} << 30));
    set(c, key, nullptr);
    CHECK_FALSE(size_field(c, key));

    const std::string where = std::string("run.json: key '") + key + "': ";
    const std::string range = "expected an integer in [1, 1073741824], got ";
    CHECK_THAT(error_of(key, "8"), Equals(where + range + "\"8\""));
    CHECK_THAT(error_of(key, 8.0), Equals(where + range + "8.0"));
    CHECK_THAT(error_of(key, 8.5), Equals(where + range + "8.5"));
    CHECK_THAT(error_of(key, true), Equals(where + range + "true"));
    CHECK_THAT(error_of(key, json::array({8})), Equals(where + range + "[8]"));
    CHECK_THAT(error_of(key, 0), Equals(where + range + "0"));
    CHECK_THAT(error_of(key, -1), Equals(where + range + "-1"));
    CHECK_THAT(error_of(key, (std::int64_t{1} << 30) + 1), Equals(where + range + "1073741825"));
    CHECK_THAT(error_of(key, 3000000000u), Equals(where + range + "3000000000"));
    CHECK_THAT(error_of(key, std::int64_t{3000000000}), Equals(where + range + "3000000000"));
    CHECK_THAT(error_of(key, ~std::uint64_t{0}), Equals(where + range + "18446744073709551615"));

    CHECK_THAT(flag_error_of(key, "8.0"),
               Equals("--" + std::string(key) + ": expected an integer, got '8.0'"));
    CHECK_THAT(flag_error_of(key, "0"), Equals("--" + std::string(key) + ": " + range + "0"));
    CHECK_THAT(flag_error_of(key, "-1"), Equals("--" + std::string(key) + ": " + range + "-1"));
    CHECK_THAT(flag_error_of(key, "3000000000"),
               Equals("--" + std::string(key) + ": " + range + "3000000000"));
    Config f;
    f.apply_flag(key, "12");
    CHECK(size_field(f, key) == 12);
  }
  // Flag text must be a plain decimal integer.
  for (const char* text : {"", "-", "+8", " 8", "8 ", "8x", "0x8", "1e3", "eight", "8,"}) {
    INFO("text '" << text << "'");
    CHECK_THAT(flag_error_of("h", text),
               Equals(std::string("--h: expected an integer, got '") + text + "'"));
  }
  CHECK_THAT(flag_error_of("h", "99999999999999999999"),
             StartsWith("--h: expected an integer in [1, 1073741824], got "));
}

TEST_CASE("boolean keys", "[config]") {
  struct Key {
    const char* name;
    bool Config::*field;
    bool default_value;
  };
  for (const Key& k : {Key{"save_attention", &Config::save_attention, false},
                       Key{"average_heads", &Config::average_heads, false},
                       Key{"save_inputs", &Config::save_inputs, false}}) {
    INFO("key " << k.name);
    Config c;
    CHECK(c.*k.field == k.default_value);
    set(c, k.name, !k.default_value);
    CHECK(c.*k.field == !k.default_value);
    set(c, k.name, nullptr);  // null restores the default
    CHECK(c.*k.field == k.default_value);
    const std::string where = std::string("run.json: key '") + k.name + "': ";
    CHECK_THAT(error_of(k.name, 1), Equals(where + "expected true or false, got 1"));
    CHECK_THAT(error_of(k.name, "true"), Equals(where + "expected true or false, got \"true\""));
    for (const char* t : {"true", "1", "yes", "on"}) {
      Config f;
      f.*k.field = false;
      f.apply_flag(k.name, t);
      CHECK(f.*k.field);
    }
    for (const char* t : {"false", "0", "no", "off"}) {
      Config f;
      f.*k.field = true;
      f.apply_flag(k.name, t);
      CHECK_FALSE(f.*k.field);
    }
    CHECK_THAT(flag_error_of(k.name, "maybe"),
               Equals(std::string("--") + k.name + ": expected true or false, got 'maybe'"));
    CHECK_THAT(flag_error_of(k.name, ""),
               Equals(std::string("--") + k.name + ": expected true or false, got ''"));
  }
}

TEST_CASE("use_bias is unset until given", "[config]") {
  Config c;
  set(c, "use_bias", false);
  CHECK(c.use_bias == false);
  set(c, "use_bias", true);
  CHECK(c.use_bias == true);
  set(c, "use_bias", nullptr);
  CHECK_FALSE(c.use_bias.has_value());
  c.apply_flag("use_bias", "no");
  CHECK(c.use_bias == false);
  CHECK_THAT(error_of("use_bias", 1),
             Equals("run.json: key 'use_bias': expected true or false, got 1"));
}

TEST_CASE("save_weights takes a bool or a layout", "[config]") {
  Config c;
  set(c, "save_weights", true);
  CHECK(c.save_weights);
  CHECK(c.save_weights_format == mha::WeightsFormat::native);
  set(c, "save_weights", "torch");
  CHECK(c.save_weights);
  CHECK(c.save_weights_format == mha::WeightsFormat::torch);
  set(c, "save_weights", false);
  CHECK_FALSE(c.save_weights);
  c.apply_flag("save_weights", "keras");
  CHECK(c.save_weights);
  CHECK(c.save_weights_format == mha::WeightsFormat::keras);
  c.apply_flag("save_weights", "off");
  CHECK_FALSE(c.save_weights);
  c.apply_flag("save_weights", "1");
  CHECK(c.save_weights);
  CHECK(c.save_weights_format == mha::WeightsFormat::native);
  CHECK_THAT(error_of("save_weights", 1),
             Equals("run.json: key 'save_weights': expected true, false, 'native', 'torch' or "
                    "'keras', got 1"));
  CHECK_THAT(flag_error_of("save_weights", "onnx"), Contains("'native', 'torch' or 'keras'"));
  CHECK(c.to_json()["save_weights"] == "native");
}

TEST_CASE("interop keys: weights_format, mask_true_means, key_padding_mask", "[config]") {
  Config c;
  for (const char* f : {"auto", "native", "torch", "keras"}) {
    set(c, "weights_format", f);
    CHECK(std::string(mha::to_string(c.weights_format)) == f);
  }
  // A model family or model_type names a checkpoint preset; run.json keeps the name given.
  for (const char* f : {"gpt2", "gpt_neox", "gemma2", "opt", "xlm-roberta"}) {
    set(c, "weights_format", f);
    CHECK(c.weights_format == mha::WeightsFormat::preset);
    CHECK(c.weights_preset == f);
    CHECK(c.to_json()["weights_format"] == f);
  }
  CHECK_THAT(error_of("weights_format", "preset"), Contains("or a model family"));
  // The families listed are the registry's (checkpoint/families/registry.def).
  CHECK_THAT(error_of("weights_format", "onnx"),
             StartsWith("run.json: key 'weights_format': expected 'auto', 'native', 'torch', "
                        "'keras' or a model family (bert, gpt2, llama, ") &&
                 EndsWith(") or model_type, got \"onnx\""));
  set(c, "mask_true_means", "ignore");
  CHECK(c.mask_true_means == mha::MaskTrueMeans::ignore);
  set(c, "mask_true_means", nullptr);
  CHECK(c.mask_true_means == mha::MaskTrueMeans::attend);
  CHECK_THAT(error_of("mask_true_means", "masked"), Contains("'attend' or 'ignore'"));
  c.apply_flag("key_padding_mask", "pad.npy");
  CHECK(c.key_padding_mask == "pad.npy");
  CHECK(c.to_json()["key_padding_mask"] == "pad.npy");
}

TEST_CASE("scale", "[config]") {
  Config c;
  set(c, "scale", 0.125);
  CHECK(c.scale == 0.125);
  set(c, "scale", 2);  // an integer is a number too
  CHECK(c.scale == 2.0);
  set(c, "scale", -0.5);
  CHECK(c.scale == -0.5);
  set(c, "scale", nullptr);
  CHECK_FALSE(c.scale);
  const std::string e = "run.json: key 'scale': expected a finite non-zero number, got ";
  CHECK_THAT(error_of("scale", 0), Equals(e + "0"));
  CHECK_THAT(error_of("scale", 0.0), Equals(e + "0.0"));
  CHECK_THAT(error_of("scale", "0.5"), Equals(e + "\"0.5\""));
  CHECK_THAT(error_of("scale", true), Equals(e + "true"));

  c.apply_flag("scale", "0.25");
  CHECK(c.scale == 0.25);
  c.apply_flag("scale", "1e-3");
  CHECK(c.scale == 1e-3);
  CHECK_THAT(flag_error_of("scale", "abc"), Equals("--scale: expected a number, got 'abc'"));
  CHECK_THAT(flag_error_of("scale", "0.5x"), Equals("--scale: expected a number, got '0.5x'"));
  CHECK_THAT(flag_error_of("scale", ""), Equals("--scale: expected a number, got ''"));
  for (const char* text : {"0", "inf", "nan"}) {
    INFO("text '" << text << "'");
    CHECK_THAT(flag_error_of("scale", text),
               StartsWith("--scale: expected a finite non-zero number, got "));
  }
}

TEST_CASE("seed", "[config]") {
  Config c;
  set(c, "seed", 123);
  CHECK(c.seed == 123);
  set(c, "seed", ~std::uint64_t{0});
  CHECK(c.seed == ~std::uint64_t{0});
  set(c, "seed", nullptr);
  CHECK(c.seed == 0);
  const std::string e = "run.json: key 'seed': expected a non-negative integer below 2^64, got ";
  CHECK_THAT(error_of("seed", -1), Equals(e + "-1"));
  CHECK_THAT(error_of("seed", 1.5), Equals(e + "1.5"));
  CHECK_THAT(error_of("seed", "7"), Equals(e + "\"7\""));
  c.apply_flag("seed", "18446744073709551615");
  CHECK(c.seed == 18446744073709551615ull);
  c.apply_flag("seed", "0");
  CHECK(c.seed == 0);
  CHECK_THAT(flag_error_of("seed", "-1"),
             Equals("--seed: expected a non-negative integer below 2^64, got -1"));
  CHECK_THAT(flag_error_of("seed", "18446744073709551616"),
             StartsWith("--seed: expected a non-negative integer below 2^64, got "));
}

TEST_CASE("enumerations: dtype and masked_rows", "[config]") {
  Config c;
  set(c, "dtype", "float64");
  CHECK(c.dtype == ComputeType::float64);
  set(c, "dtype", nullptr);
  CHECK(c.dtype == ComputeType::float32);
  c.apply_flag("dtype", "float64");
  CHECK(c.dtype == ComputeType::float64);
  CHECK_THAT(
      error_of("dtype", "float16"),
      Equals(
          "run.json: key 'dtype': expected 'float32', 'float64' or 'bfloat16', got \"float16\""));
  CHECK_THAT(error_of("dtype", 32),
             Equals("run.json: key 'dtype': expected 'float32', 'float64' or 'bfloat16', got 32"));
  CHECK_THAT(flag_error_of("dtype", "double"),
             Equals("--dtype: expected 'float32', 'float64' or 'bfloat16', got \"double\""));

  for (auto [name, value] : {std::pair<const char*, MaskedRows>{"zero", MaskedRows::zero},
                             {"uniform", MaskedRows::uniform},
                             {"nan", MaskedRows::nan}}) {
    Config m;
    set(m, "masked_rows", name);
    CHECK(m.masked_rows == value);
    CHECK(std::string(mha::to_string(value)) == name);
    Config f;
    f.apply_flag("masked_rows", name);
    CHECK(f.masked_rows == value);
  }
  set(c, "masked_rows", "nan");
  set(c, "masked_rows", nullptr);
  CHECK(c.masked_rows == MaskedRows::zero);
  CHECK_THAT(error_of("masked_rows", "NaN"),
             Equals("run.json: key 'masked_rows': expected 'zero', 'uniform' or 'nan', got "
                    "\"NaN\""));
}

TEST_CASE("path keys", "[config]") {
  struct Key {
    const char* name;
    std::optional<std::string> Config::*field;
  };
  for (const Key& k :
       {Key{"query", &Config::query}, Key{"key", &Config::key}, Key{"value", &Config::value},
        Key{"weights", &Config::weights}, Key{"mask", &Config::mask}}) {
    INFO("key " << k.name);
    Config c;
    set(c, k.name, "data/x.npy");
    CHECK(c.*k.field == "data/x.npy");
    set(c, k.name, nullptr);
    CHECK_FALSE(c.*k.field);
    c.apply_flag(k.name, "y.npy");
    CHECK(c.*k.field == "y.npy");
    const std::string where = std::string("run.json: key '") + k.name + "': ";
    CHECK_THAT(error_of(k.name, ""), Equals(where + "expected a file path (string), got \"\""));
    CHECK_THAT(error_of(k.name, 5), Equals(where + "expected a file path (string), got 5"));
    CHECK_THAT(flag_error_of(k.name, ""),
               Equals(std::string("--") + k.name + ": expected a file path (string), got \"\""));
  }
  Config c;
  set(c, "out_dir", "results");
  CHECK(c.out_dir == "results");
  set(c, "out_dir", nullptr);
  CHECK(c.out_dir == "out");
  CHECK_THAT(error_of("out_dir", ""),
             Equals("run.json: key 'out_dir': expected a directory path (string), got \"\""));
  CHECK_THAT(error_of("out_dir", false),
             Equals("run.json: key 'out_dir': expected a directory path (string), got false"));
  // A long value is shortened in the message.
  const std::string long_value(100, 'x');
  CHECK_THAT(error_of("h", long_value),
             Equals("run.json: key 'h': expected an integer in [1, 1073741824], got \"" +
                    std::string(36, 'x') + "..."));
}

TEST_CASE("causal", "[config]") {
  Config c;
  set(c, "causal", true);
  CHECK(c.causal == Causal::top_left);
  set(c, "causal", false);
  CHECK(c.causal == Causal::none);
  set(c, "causal", "bottom-right");
  CHECK(c.causal == Causal::bottom_right);
  set(c, "causal", "top-left");
  CHECK(c.causal == Causal::top_left);
  set(c, "causal", nullptr);
  CHECK(c.causal == Causal::none);

  const std::string e =
      "run.json: key 'causal': expected true, false, 'top-left' or 'bottom-right', got ";
  CHECK_THAT(error_of("causal", "bottom_right"), Equals(e + "\"bottom_right\""));
  CHECK_THAT(error_of("causal", 1), Equals(e + "1"));
  CHECK_THAT(error_of("causal", json::array()), Equals(e + "[]"));

  Config f;
  f.apply_flag("causal", "true");
  CHECK(f.causal == Causal::top_left);
  f.apply_flag("causal", "bottom-right");
  CHECK(f.causal == Causal::bottom_right);
  f.apply_flag("causal", "top-left");
  CHECK(f.causal == Causal::top_left);
  f.apply_flag("causal", "false");
  CHECK(f.causal == Causal::none);
  CHECK_THAT(flag_error_of("causal", "diagonal"),
             Equals("--causal: expected true, false, 'top-left' or 'bottom-right', got "
                    "\"diagonal\""));
  // The boolean spellings of the other bool flags work for causal too.
  f.apply_flag("causal", "yes");
  CHECK(f.causal == Causal::top_left);
  f.apply_flag("causal", "0");
  CHECK(f.causal == Causal::none);
}

TEST_CASE("key_lengths: inline list or .npy path", "[config]") {
  Config c;
  set(c, "key_lengths", json::array({3, 0, 5}));
  CHECK(c.key_lengths == std::vector<std::int64_t>{3, 0, 5});
  CHECK_FALSE(c.key_lengths_file);
  set(c, "key_lengths", "lengths.npy");  // a path replaces the list
  CHECK(c.key_lengths_file == "lengths.npy");
  CHECK_FALSE(c.key_lengths);
  set(c, "key_lengths", json::array({1}));  // and a list replaces the path
  CHECK(c.key_lengths == std::vector<std::int64_t>{1});
  CHECK_FALSE(c.key_lengths_file);
  set(c, "key_lengths", nullptr);
  CHECK_FALSE(c.key_lengths);
  CHECK_FALSE(c.key_lengths_file);

  const std::string where = "run.json: key 'key_lengths'";
  CHECK_THAT(error_of("key_lengths", json::array()),
             Equals(where + ": expected a non-empty list of integers or a .npy path, got []"));
  CHECK_THAT(error_of("key_lengths", 4),
             Equals(where + ": expected a non-empty list of integers or a .npy path, got 4"));
  CHECK_THAT(error_of("key_lengths", json::array({1, -1})),
             Equals(where + "[1]: expected an integer in [0, 1073741824], got -1"));
  CHECK_THAT(error_of("key_lengths", json::array({1.5})),
             Equals(where + "[0]: expected an integer in [0, 1073741824], got 1.5"));
  CHECK_THAT(error_of("key_lengths", json::array({"2"})),
             Equals(where + "[0]: expected an integer in [0, 1073741824], got \"2\""));
  CHECK_THAT(error_of("key_lengths", ""), Equals(where + ": expected a .npy path, got \"\""));

  Config f;
  f.apply_flag("key_lengths", "3,0,5");
  CHECK(f.key_lengths == std::vector<std::int64_t>{3, 0, 5});
  f.apply_flag("key_lengths", "7");
  CHECK(f.key_lengths == std::vector<std::int64_t>{7});
  f.apply_flag("key_lengths", "dir/lengths.npy");
  CHECK(f.key_lengths_file == "dir/lengths.npy");
  CHECK_FALSE(f.key_lengths);
  CHECK_THAT(flag_error_of("key_lengths", "3,x"),
             Equals("--key_lengths: expected an integer, got 'x'"));
  CHECK_THAT(flag_error_of("key_lengths", "3,,5"),
             Equals("--key_lengths: expected an integer, got ''"));
  CHECK_THAT(flag_error_of("key_lengths", "3,-1"),
             Equals("--key_lengths[1]: expected an integer in [0, 1073741824], got -1"));
  // Flag lists: every item an integer, no empty items.
  Config g;
  g.apply_flag("key_lengths", "8,5,3");
  CHECK(g.key_lengths == std::vector<std::int64_t>{8, 5, 3});
  CHECK_THROWS_WITH(g.apply_flag("key_lengths", "3,5,"), Catch::Contains("comma-separated"));
  CHECK_THROWS_WITH(g.apply_flag("key_lengths", "3,,5"), Catch::Contains("expected an integer"));
  // Leading zeros are plain decimal on the command line.
  g.apply_flag("h", "08");
  CHECK(g.h == 8);
}

TEST_CASE("unknown keys suggest the nearest known key", "[config]") {
  CHECK_THAT(error_of("dmodel", 8),
             Equals("run.json: key 'dmodel': unknown key (did you mean 'd_model'?)"));
  CHECK_THAT(error_of("seqlen", 8), EndsWith("unknown key (did you mean 'seq_len'?)"));
  CHECK_THAT(error_of("kv-seq-len", 8), EndsWith("unknown key (did you mean 'kv_seq_len'?)"));
  CHECK_THAT(error_of("masked_row", "nan"), EndsWith("unknown key (did you mean 'masked_rows'?)"));
  CHECK_THAT(error_of("completely_unrelated", 1),
             Equals("run.json: key 'completely_unrelated': unknown key"));
  CHECK_THAT(flag_error_of("dmodel", "8"),
             Equals("--dmodel: unknown option (did you mean --d_model?)"));
  CHECK_THAT(flag_error_of("completely_unrelated", "8"),
             Equals("--completely_unrelated: unknown option"));
  CHECK(mha::nearest_key("dmodel") == "d_model");
  CHECK(mha::nearest_key("d-model") == "d_model");
  CHECK(mha::nearest_key("H") == "h");
  CHECK(mha::nearest_key("save_atention") == "save_attention");
  // Up to a third of the name (at least 2 edits) may differ.
  CHECK(mha::nearest_key("kvseqlen") == "kv_seq_len");         // 2 edits
  CHECK(mha::nearest_key("sve_atntion") == "save_attention");  // 3 edits of 14
  CHECK(mha::nearest_key("save_attn") == "");                  // 5 edits of 14
  CHECK(mha::nearest_key("qqquery") == "query");               // 2 edits of 5
  CHECK(mha::nearest_key("qqqquery") == "");                   // 3 edits of 5
  CHECK(mha::nearest_key("zzzzzzzzzzzz") == "");
  for (const auto& k : mha::config_keys()) CHECK(mha::nearest_key(k.name) == k.name);
}

TEST_CASE("apply needs an object and names the source", "[config]") {
  Config c;
  REQUIRE_INPUT_ERROR(c.apply(json::array({1, 2}), "a.json"),
                      Equals("a.json: expected a JSON object of config keys, got [1,2]"));
  REQUIRE_INPUT_ERROR(c.apply(json(3), "b.json"),
                      Equals("b.json: expected a JSON object of config keys, got 3"));
  REQUIRE_INPUT_ERROR(c.apply(json::parse(R"({"h": "8"})"), "configs/x.json"),
                      StartsWith("configs/x.json: key 'h': ") && Contains("\"8\""));
  c.apply(json::object(), "empty.json");  // nothing to do
  CHECK_FALSE(c.h);
}

TEST_CASE("layers: later files and flags override earlier values", "[config]") {
  Config c;
  c.apply(json::parse(R"({"h": 4, "d_model": 32, "causal": true, "key_lengths": [1, 2],
                          "dtype": "float64", "save_attention": true})"),
          "base.json");
  c.apply(json::parse(R"({"d_model": 64, "causal": "bottom-right"})"), "override.json");
  CHECK(c.h == 4);
  CHECK(c.d_model == 64);
  CHECK(c.causal == Causal::bottom_right);
  c.apply_flag("h", "8");
  c.apply_flag("causal", "false");
  c.apply_flag("key_lengths", "lengths.npy");
  c.apply_flag("dtype", "float32");
  c.apply_flag("save_attention", "false");
  CHECK(c.h == 8);
  CHECK(c.d_model == 64);
  CHECK(c.causal == Causal::none);
  CHECK_FALSE(c.key_lengths);
  CHECK(c.key_lengths_file == "lengths.npy");
  CHECK(c.dtype == ComputeType::float32);
  CHECK_FALSE(c.save_attention);
  // A file applied after a flag is just another layer.
  c.apply(json::parse(R"({"h": null})"), "late.json");
  CHECK_FALSE(c.h);
}

TEST_CASE("to_json lists every key and round-trips through apply", "[config]") {
  Config c;
  const json defaults = c.to_json();
  std::set<std::string> keys;
  for (const auto& k : mha::config_keys()) keys.insert(k.name);
  std::set<std::string> dumped;
  for (const auto& [key, value] : defaults.items()) dumped.insert(key);
  CHECK(dumped == keys);
  // Every documented key is accepted, with null as "back to the default".
  for (const auto& k : mha::config_keys()) {
    INFO("key " << k.name);
    Config n;
    CHECK_NOTHROW(set(n, k.name, nullptr));
    CHECK(n.to_json() == defaults);
  }

  c.apply(json::parse(R"({"h": 3, "d_model": 12, "d_k": 5, "d_v": 6, "kdim": 7, "vdim": 8,
      "d_out": 9, "batch": 2, "seq_len": 10, "kv_seq_len": 11, "use_bias": false,
      "scale": 0.5, "dtype": "float64", "seed": 99, "query": "q.npy", "key": "k.npy",
      "value": "v.npy", "weights": "w.npz", "causal": "bottom-right", "mask": "m.npy",
      "key_lengths": [4, 5], "masked_rows": "uniform", "out_dir": "o",
      "save_attention": true, "average_heads": true, "save_weights": true,
      "save_inputs": true})"),
          "full.json");
  const json full = c.to_json();
  CHECK(full["causal"] == "bottom-right");
  CHECK(full["key_lengths"] == json::array({4, 5}));
  CHECK(full["scale"] == 0.5);
  Config again;
  again.apply(full, "dump.json");
  CHECK(again.to_json() == full);

  Config t;
  t.apply(json::parse(R"({"causal": true, "key_lengths": "l.npy"})"), "t.json");
  CHECK(t.to_json()["causal"] == "top-left");
  CHECK(t.to_json()["key_lengths"] == "l.npy");
  CHECK(defaults["causal"] == false);
  CHECK(defaults["key_lengths"].is_null());
}

TEST_CASE("config_keys: bare-flag keys are the booleans, causal, save_weights and rope",
          "[config]") {
  for (const auto& k : mha::config_keys()) {
    INFO("key " << k.name);
    const std::string hint = k.value_hint;
    const std::string name = k.name;
    CHECK(k.is_bool ==
          (hint == "BOOL" || name == "causal" || name == "save_weights" || name == "rope"));
    CHECK(std::string(k.help).size() > 0);
  }
}

TEST_CASE("read_config_file", "[config]") {
  TempDir dir("config");
  const std::string good = dir.write("good.json", R"({"h": 2, "causal": "top-left"})");
  const json j = mha::read_config_file(good);
  CHECK(j["h"] == 2);
  Config c;
  c.apply(j, good);
  CHECK(c.causal == Causal::top_left);

  // Line 3, column 14 is the ',' where a value should be.
  const std::string bad =
      dir.write("bad.json", "{\n  \"h\": 8,\n  \"d_model\": ,\n  \"seq_len\": 4\n}\n");
  REQUIRE_INPUT_ERROR(mha::read_config_file(bad),
                      StartsWith(bad + ":3:14: invalid JSON: syntax error while parsing value") &&
                          Contains("unexpected ','"));
  // The message keeps only nlohmann's description, not its exception prefix.
  REQUIRE_THROWS_WITH(mha::read_config_file(bad), !Contains("[json.exception"));

  const std::string first = dir.write("first.json", "x");
  REQUIRE_INPUT_ERROR(mha::read_config_file(first), StartsWith(first + ":1:1: invalid JSON: "));

  // End of input after the last newline is the start of the next line.
  const std::string eof = dir.write("eof.json", "{\n  \"h\": 8,\n");
  REQUIRE_INPUT_ERROR(mha::read_config_file(eof),
                      StartsWith(eof + ":3:1: invalid JSON: ") && Contains("end of input"));
  // CRLF line ends: the '\r' belongs to the line before.
  const std::string crlf = dir.write("crlf.json", "{\r\n\"h\": 8,\r\n\"d\": ,\r\n}");
  REQUIRE_INPUT_ERROR(mha::read_config_file(crlf), StartsWith(crlf + ":3:6: invalid JSON: "));

  const std::string col = dir.write("col.json", "{\"h\": 2,,}");
  REQUIRE_INPUT_ERROR(mha::read_config_file(col), StartsWith(col + ":1:9: invalid JSON: "));

  const std::string missing = dir / "missing.json";
  REQUIRE_INPUT_ERROR(
      mha::read_config_file(missing),
      Equals(missing + ": cannot open (No such file or directory); expected a JSON config"));
}
