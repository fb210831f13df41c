// What mha::GgufFile reads from a GGUF file, for tests/gguf/test_gguf.py (a
// test tool: built with the tests, never installed).
//
//   gguf_dump FILE                          the header, metadata and tensor infos as JSON
//   gguf_dump FILE TENSOR OUT.npy           the tensor, dequantized: float32 of its shape
//   gguf_dump FILE TENSOR OUT.npy ROW0 ROWS rows [ROW0, ROW0 + ROWS): float32 (ROWS, row_size)
//
// An mha::Error prints "gguf_dump: error: MESSAGE" and exits with its exit code (2 for a bad
// file), as the mha binary does.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mha/base/error.hpp"
#include "mha/io/gguf.hpp"
#include "mha/io/npy.hpp"

namespace {

using nlohmann::json;

json values_of(const mha::GgufValue& v) {
  json out = std::visit(
      [](const auto& values) {
        json a = json::array();
        for (const auto& x : values) a.push_back(x);
        return a;
      },
      v.values);
  return v.is_array ? out : out.at(0);
}

json info(const mha::GgufFile& f) {
  json metadata = json::array();
  for (const auto& [key, v] : f.metadata())
    metadata.push_back({{"key", key},
                        {"type", mha::gguf_value_type_name(v.type)},
                        {"array", v.is_array},
                        {"value", values_of(v)}});
  json tensors = json::array();
  for (const mha::GgufTensor& t : f.tensors())
    tensors.push_back({{"name", t.name},
                       {"type", mha::ggml_type_info(t.type).name},
                       {"dims", t.dims},
                       {"shape", t.shape()},
                       {"offset", t.offset},
                       {"bytes", t.bytes},
                       {"rows", t.rows()},
                       {"row_size", t.row_size()}});
  return {{"version", f.version()},
          {"alignment", f.alignment()},
          {"data_offset", f.data_offset()},
          {"metadata", metadata},
          {"tensors", tensors}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && argc != 4 && argc != 6) {
    std::fprintf(stderr, "usage: %s FILE [TENSOR OUT.npy [ROW0 ROWS]]\n", argv[0]);
    return 2;
  }
  try {
    const mha::GgufFile f(argv[1]);
    if (argc == 2) {
      // Invalid UTF-8 in a string is replaced, not thrown on: the test writes valid UTF-8.
      std::cout << info(f).dump(1, ' ', false, json::error_handler_t::replace) << "\n";
      return 0;
    }
    const std::string name = argv[2];
    const mha::GgufTensor* t = f.find_tensor(name);
    if (!t) mha::fail_input(f.path() + ": has no tensor '" + name + "'");
    std::vector<std::size_t> shape = t->shape();
    std::vector<float> values;
    if (argc == 4) {
      values.resize(t->size());
      f.read(name, values.data());
    } else {
      const std::size_t row0 = std::stoull(argv[4]), rows = std::stoull(argv[5]);
      values.resize(rows * t->row_size());
      f.read_rows(name, row0, rows, values.data());
      shape = {rows, t->row_size()};
    }
    std::ofstream out(argv[3], std::ios::binary);
    out << mha::encode_npy(mha::NpyArray::of(values.data(), shape));
    if (!out.flush()) mha::fail_runtime(std::string(argv[3]) + ": cannot write");
    return 0;
  } catch (const mha::Error& e) {
    std::fprintf(stderr, "gguf_dump: error: %s\n", e.what());
    return e.exit_code();
  }
}
