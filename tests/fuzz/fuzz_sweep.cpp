// Fuzz target for sweep files: mha::parse_sweep (the JSON, the grid and zip
// axes, the run count, the name template, the expansion) on the bytes, with a
// fixed out_dir and nothing read from or written to disk. A sweep accepted
// must hold as many runs as its axes multiply to, at most the documented
// 100,000, each with a distinct non-empty name and its config's out_dir its
// directory; a refusal is mha::Error of kind invalid_input. The seeds hold the
// grid of 1000 x 1000 runs (once expanded whole: 1.3 GB), a list of 200,000
// values, and nesting past the JSON depth limit.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_common.hpp"
#include "mha/base/error.hpp"
#include "mha/run/sweep.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  mha::Sweep sweep;
  try {
    sweep = mha::parse_sweep(text, "fuzz.json", std::string("fuzz_out"));
  } catch (const mha::Error& e) {
    FUZZ_CHECK(e.kind() == mha::ErrorKind::invalid_input);
    return 0;
  }
  std::size_t product = 1;
  for (const std::size_t n : sweep.axis_sizes) product *= n;
  FUZZ_CHECK(sweep.runs.size() == product);
  FUZZ_CHECK(sweep.runs.size() <= 100000);
  FUZZ_CHECK(sweep.out_dir == "fuzz_out");
  std::set<std::string> names;
  for (std::size_t i = 0; i < sweep.runs.size(); ++i) {
    const mha::SweepRun& run = sweep.runs[i];
    FUZZ_CHECK(run.index == i);
    FUZZ_CHECK(!run.name.empty() && names.insert(run.name).second);
    FUZZ_CHECK(run.config.is_object() && run.config.contains("out_dir"));
    FUZZ_CHECK(run.config["out_dir"] == run.dir);
    for (const std::string& key : sweep.swept_keys) FUZZ_CHECK(run.values.contains(key));
  }
  return 0;
}
