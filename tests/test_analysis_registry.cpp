// The analyses' registry (mha/analysis/analysis.hpp): every entry is complete
// (a name, what it is, a way to run), documented in docs/analyses.md's table,
// and exactly the methods `mha analyze --help` lists and run_analyze accepts.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "mha/analysis/analysis.hpp"
#include "mha/analysis/analyze.hpp"
#include "mha/base/error.hpp"
#include "test_util.hpp"

namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string command_output(const std::string& command) {
  std::string out;
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(command.c_str(), "r"), pclose);
  REQUIRE(p);
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p.get())) out.append(buf, n);
  return out;
}

}  // namespace

TEST_CASE("analysis.registry: every entry named, documented, runnable and listed by --help") {
  const auto& all = mha::analyses();
  REQUIRE(all.size() >= 9);
  const std::string docs = read_text(std::string(MHA_SOURCE_DIR) + "/docs/analyses.md");
  REQUIRE_FALSE(docs.empty());
  std::set<std::string> names;
  for (const mha::Analysis* a : all) {
    INFO(a->name);
    REQUIRE(a->name != nullptr);
    CHECK(std::string(a->name).size() > 0);
    CHECK(names.insert(a->name).second);  // one entry a name
    CHECK(a->what != nullptr);
    CHECK(std::string(a->what).size() > 0);
    // Exactly one way to run: on the shared pass (rows) or passes of its own.
    CHECK((a->ask != nullptr) != (a->run != nullptr));
    // Only a method of the rows asks for the shared pass over them.
    if (a->ask) CHECK(a->input == mha::AnalysisInput::rows);
    CHECK(mha::find_analysis(a->name) == a);
    // docs/analyses.md's table has its row, with its phrase.
    const std::string row = "| `" + std::string(a->name) + "` |";
    CHECK(docs.find(row) != std::string::npos);
    CHECK(docs.find(a->what) != std::string::npos);
    for (const char* option : a->options) CHECK(docs.find(option) != std::string::npos);
  }
  CHECK(mha::find_analysis("nothing") == nullptr);
  std::vector<std::string> in_order;
  for (const mha::Analysis* a : all) in_order.push_back(a->name);
  CHECK(mha::analysis_methods() == in_order);

  // `mha analyze --help`'s --method line lists exactly the registry's names, in its order.
  const std::string help =
      command_output(mha::test::sh_quote(mha::test::mha_binary()) + " analyze --help 2>&1");
  std::smatch m;
  REQUIRE(std::regex_search(help, m, std::regex(R"(--method NAME[^\n]*\n?[^\n]*)")));
  std::string listed = m.str();
  const std::size_t from = listed.find("NAME") + 4;
  listed = std::regex_replace(listed.substr(from), std::regex(R"(\s+)"), " ");
  std::string expected;
  for (const std::string& n : in_order) expected += (expected.empty() ? "" : ", ") + n;
  CHECK(listed.find(expected + " (repeatable)") != std::string::npos);

  // An unknown method's refusal lists them the same way.
  mha::AnalyzeConfig c;
  c.model = "nowhere";
  c.methods = {"nothing"};
  c.check_only = true;
  try {
    mha::run_analyze(c);
    FAIL("an unknown method was accepted");
  } catch (const mha::Error& e) {
    CHECK(std::string(e.what()).find(expected.substr(0, expected.rfind(", ")) + " or " +
                                     in_order.back()) != std::string::npos);
  }
}
