// Reading tokenizer.json's objects with one-line errors: `where` names the file and the
// object ("tokenizer.json: normalizer.normalizers[1]"), the message what was expected.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "mha/base/error.hpp"
#include "mha/base/message.hpp"

namespace mha::text {

using json = nlohmann::json;

// A value for a message: short scalars as JSON, containers by their type only (dumping a
// deeply nested value would recurse without bound).
inline std::string describe(const json& v) {
  if (!v.is_primitive()) return std::string("an ") + v.type_name();
  return v.is_string() ? echo(v.get<std::string>()) : one_line(v.dump(), kEchoChars);
}

// Sequences may nest; deeper than this is refused rather than recursed into.
constexpr int kMaxNesting = 16;

[[noreturn]] inline void fail_at(const std::string& where, const std::string& what) {
  fail_input(where + ": " + what);
}

inline const json& object_at(const json& j, const std::string& where) {
  if (!j.is_object()) fail_at(where, "expected an object, got " + std::string(j.type_name()));
  return j;
}

// The key's value, or nullptr when it is absent or null.
inline const json* optional_field(const json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

inline std::string string_field(const json& j, const char* key, const std::string& where,
                                const char* fallback = nullptr) {
  const json* v = optional_field(j, key);
  if (!v) {
    if (fallback) return fallback;
    fail_at(where, std::string("expected a string \"") + key + "\"");
  }
  if (!v->is_string())
    fail_at(where + "." + key, std::string("expected a string, got ") + v->type_name());
  return v->get<std::string>();
}

inline bool bool_field(const json& j, const char* key, const std::string& where, bool fallback) {
  const json* v = optional_field(j, key);
  if (!v) return fallback;
  if (!v->is_boolean())
    fail_at(where + "." + key, std::string("expected true or false, got ") + describe(*v));
  return v->get<bool>();
}

inline std::int32_t id_value(const json& v, const std::string& where) {
  if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > 0x7fffffff)
    fail_at(where, "expected a token id (an integer from 0 to 2^31 - 1), got " + describe(v));
  return static_cast<std::int32_t>(v.get<std::int64_t>());
}

}  // namespace mha::text
