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
#include "mha/config.hpp"
#include "mha/error.hpp"

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
  for (const auto& [key, value] : parsed.items()) {
    mha::Config one;
    try {
      one.apply(json::object({{key, value}}), "fuzz.json");
    } catch (const mha::Error& e) {
      FUZZ_CHECK(e.kind() == mha::ErrorKind::invalid_input);
    }
    check_round_trip(one);

    mha::Config flag;
    const std::string flag_text = value.is_string() ? value.get<std::string>() : value.dump();
    try {
      flag.apply_flag(key, flag_text);
    } catch (const mha::Error& e) {
      FUZZ_CHECK(e.kind() == mha::ErrorKind::invalid_input);
    }
    check_round_trip(flag);
  }
  return 0;
}
