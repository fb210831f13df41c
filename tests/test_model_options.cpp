// mha::model_run_keys (run/model_options.hpp): the one table of a model run's
// options. A flag's text and a file's value of every key give the same
// config; the keys of both kinds of runs are Config keys, the others are not;
// dtype is parsed once, to a ComputeType, and float64 is refused for a model.
// The binary's --help groups and refusals from this table: tests/cli/test_interface.py.
#include <catch2/catch.hpp>
#include <cstdint>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "mha/base/error.hpp"
#include "mha/checkpoint/checkpoint.hpp"
#include "mha/config/config.hpp"
#include "mha/run/model_job.hpp"
#include "mha/run/model_options.hpp"
#include "test_util.hpp"

using json = nlohmann::json;
using mha::FlagValue;
using mha::ModelRunKey;
using mha::RunKind;
using namespace mha::test;  // test_util.hpp

namespace {

// A valid flag text of each kind of value, and the JSON value a file gives for it.
std::pair<std::vector<std::string>, json> sample(const ModelRunKey& key) {
  if (std::string(key.name) == "dtype") return {{"bfloat16"}, "bfloat16"};
  switch (key.value) {
    case FlagValue::texts:
      return {{"a b", "c"}, json::array({"a b", "c"})};
    case FlagValue::indices:
      return {{"3,0"}, json::array({3, 0})};
    case FlagValue::integer:
      return {{"7"}, 7};
    case FlagValue::size:
      return {{"2KiB"}, "2KiB"};
    case FlagValue::flag:
      return {{}, true};  // bare
    default:
      return {{"some/path"}, "some/path"};
  }
}

bool is_config_key(const std::string& name) {
  for (const mha::ConfigKey& k : mha::config_keys())
    if (name == k.name) return true;
  return false;
}

}  // namespace

TEST_CASE("model run keys: a flag and a file's key give the same config") {
  std::set<std::string> names;
  for (const ModelRunKey& key : mha::model_run_keys()) {
    INFO(key.name);
    CHECK(names.insert(key.name).second);  // each once
    CHECK(mha::find_model_run_key(key.name) == &key);
    CHECK(mha::is_model_job_key(key.name));  // its JSON key is a model job's
    if (key.applies == RunKind::model)
      CHECK(*key.help);  // both: the Config's help, and maybe a note
    // Of both kinds of runs: a Config key too (its flag is the Config's); a
    // model's own is not one.
    CHECK(key.applies != RunKind::layer);
    CHECK(is_config_key(key.name) == (key.applies == RunKind::both));
    const auto [texts, value] = sample(key);
    mha::ModelRunConfig from_flag;
    from_flag.model = "m";
    key.set(from_flag, mha::model_flag_value(key, texts), std::string("--") + key.name);
    json file = {{"model", "m"}};
    file[key.name] = value;
    const mha::ModelJob from_file = mha::model_job_from_json(file, "x.json");
    REQUIRE(std::holds_alternative<mha::ModelRunConfig>(from_file));
    CHECK(mha::to_json(from_flag) == mha::to_json(from_file));
    if (std::string(key.name) != "model")  // the value given changed the default
      CHECK(mha::to_json(from_flag) !=
            mha::to_json(mha::model_job_from_json({{"model", "m"}}, "x")));
  }
  CHECK(mha::find_model_run_key("h") == nullptr);  // a layer run's only
}

TEST_CASE("model run keys: a bad flag or file value is refused naming it") {
  const auto set_flag = [](const char* name, std::vector<std::string> texts) {
    const ModelRunKey& key = *mha::find_model_run_key(name);
    mha::ModelRunConfig c;
    key.set(c, mha::model_flag_value(key, texts), std::string("--") + name);
  };
  require_invalid([&] { set_flag("top_k", {"x"}); }, "--top_k: expected an integer, got \"x\"");
  // Beyond 64 bits a flag saturates, as mha.Model's integers do: check_model_call then names
  // the same number for both.
  const ModelRunKey& top_k = *mha::find_model_run_key("top_k");
  for (const auto& [text, want] :
       {std::pair<std::string, std::int64_t>{"1180591620717411303424", INT64_MAX},
        {"9223372036854775807", INT64_MAX},
        {"-9223372036854775809", INT64_MIN},
        {"12", 12}}) {
    INFO(text);
    CHECK(mha::model_flag_value(top_k, {text}) == want);
  }
  require_invalid([&] { set_flag("threads", {"2000"}); }, "--threads: expected an integer from 0");
  require_invalid([&] { set_flag("layer_indices", {"1,"}); }, "--layer_indices: expected indices");
  require_invalid([&] { set_flag("save_qk", {"maybe"}); }, "--save_qk: expected true or false");
  require_invalid([&] { set_flag("max_memory", {"lots"}); }, "--max_memory");
  require_invalid(
      [&] {
        mha::model_job_from_json({{"model", "m"}, {"dtype", "float64"}}, "x.json");
      },
      "x.json: \"dtype\" \"float64\": expected float32 or bfloat16 for a model");
}

TEST_CASE("dtype: parsed once to a ComputeType and a model takes float32 or bfloat16") {
  CHECK(mha::parse_model_dtype("float32") == mha::ComputeType::float32);
  CHECK(mha::parse_model_dtype("bfloat16") == mha::ComputeType::bfloat16);
  for (const char* bad : {"float64", "float16", "", "BFLOAT16"}) {
    INFO(bad);
    require_invalid(
        [&] { mha::parse_model_dtype(bad); },
        "--dtype \"" + std::string(bad) + "\": expected float32 or bfloat16 for a model");
  }
  require_invalid([] { mha::parse_model_dtype("float64"); },
                  "model runs compute in float32, or in bfloat16");
  // The model job's JSON keeps the name; it reads back to the same enum.
  const mha::ModelJob job =
      mha::model_job_from_json({{"model", "m"}, {"dtype", "bfloat16"}, {"method", "loss"}}, "x");
  CHECK(std::get<mha::AnalyzeConfig>(job).dtype == mha::ComputeType::bfloat16);
  CHECK(mha::to_json(job)["dtype"] == "bfloat16");
  // A checkpoint opened for float64 is refused before any file is read.
  require_invalid([] { mha::Checkpoint("no/such/dir", mha::ComputeType::float64); },
                  "no/such/dir: a whole model computes in float32 or bfloat16, not float64");
}
