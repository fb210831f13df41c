// Fuzz target for the config parser: mha::parse_config_text, then
// mha::Config::apply on the whole object, then each key on its own (so keys
// after the first bad one are reached too) and each value again as command-
// line flag text through apply_flag. A Config, however it was reached, must
// survive to_json -> apply -> to_json unchanged, also through the JSON text.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_common.hpp"
#include "mha/base/error.hpp"
#include "mha/config/config.hpp"

namespace {

using json = nlohmann::json;

void check_round_trip(const mha::Config& c) {
  const json out = c.to_json();
  mha::Config again;
  again.apply(out, "to_json");  // must not throw
  FUZZ_CHECK(again.to_json() == out);

  const json reparsed = mha::parse_config_text(out.dump(2), "to_json text");
  mha::Config from_text;
  from_text.apply(reparsed, "to_json text");
  FUZZ_CHECK(from_text.to_json() == out);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  json parsed;
  try {
    parsed = mha::parse_config_text(text, "fuzz.json");
  } catch (const mha::Error& e) {
    FUZZ_CHECK(e.kind() == mha::ErrorKind::invalid_input);
    return 0;
  }

  mha::Config whole;
  try {
    whole.apply(parsed, "fuzz.json");
  } catch (const mha::Error& e) {
    FUZZ_CHECK(e.kind() == mha::ErrorKind::invalid_input);
  }
  // Also after a partial apply: whatever was set before the error is valid.
  check_round_trip(whole);

  if (!parsed.is_object()) return 0;
  // Values are moved, not copied, and only flat ones are dumped: copying and
  // dumping recurse, and a deeply nested value must only ever reach the
  // library's own code (see the deep-nesting regression input).
  for (auto it = parsed.begin(); it != parsed.end(); ++it) {
    const std::string key = it.key();
    json& value = it.value();

    std::string flag_text;
    bool as_flag = true;
    if (value.is_string()) {
      flag_text = value.get<std::string>();
    } else if (value.is_primitive()) {
      flag_text = value.dump();
    } else if (value.is_array()) {
      // The flag spelling of a list: key_lengths takes "3,5,2".
      for (std::size_t i = 0; i < value.size() && as_flag; ++i) {
        as_flag = value[i].is_primitive();
        if (as_flag) flag_text += (i ? "," : "") + value[i].dump();
      }
    } else {
      as_flag = false;
    }
    if (as_flag) {
      mha::Config flag;
      try {
        flag.apply_flag(key, flag_text);
      } catch (const mha::Error& e) {
        FUZZ_CHECK(e.kind() == mha::ErrorKind::invalid_input);
      }
      check_round_trip(flag);
    }

    json single = json::object();
    single[key] = std::move(value);
    mha::Config one;
    try {
      one.apply(single, "fuzz.json");
    } catch (const mha::Error& e) {
      FUZZ_CHECK(e.kind() == mha::ErrorKind::invalid_input);
    }
    check_round_trip(one);
  }
  return 0;
}
