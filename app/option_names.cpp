#include "option_names.hpp"

#include <algorithm>

#include "mha/base/error.hpp"

namespace mha::cli {

const std::vector<DeprecatedOption>& deprecated_options() {
  static const std::vector<DeprecatedOption> list{
      {"plot", "batch", "batch_index"},   // `run --batch` is the batch size
      {"plot", "heads", "head_indices"},  // `--h` is the number of heads
      {"plot", "average", "average_heads"},
      {"plot", "scale", "color_scale"},  // `run --scale` is the logit scale
      {"inspect", "heads_axis", "head_axis"},
      {"run", "print_json", "json"},  // `--json` prints JSON in bench and inspect too
  };
  return list;
}

namespace {

void collect(const CLI::App& app, std::set<std::string>& names) {
  for (const CLI::Option* opt : app.get_options())
    for (const std::string& name : opt->get_lnames()) names.insert(name);
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    collect(*sub, names);
}

}  // namespace

std::set<std::string> long_option_names(const CLI::App& app) {
  std::set<std::string> names;
  collect(app, names);
  return names;
}

std::vector<std::string> normalize_option_names(std::vector<std::string>& args,
                                                const std::set<std::string>& known) {
  std::vector<std::string> warnings;
  // The subcommand is the first word that is not an option (-v/-q may come first).
  std::string command;
  for (const auto& a : args)
    if (!a.empty() && a[0] != '-') {
      command = a;
      break;
    }
  for (auto& a : args) {
    if (a == "--") break;
    if (a.size() < 3 || a.compare(0, 2, "--") != 0) continue;
    const std::size_t eq = a.find('=');
    std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    std::string underscored = name;
    std::replace(underscored.begin(), underscored.end(), '-', '_');
    for (const auto& d : deprecated_options()) {
      if (command == d.command && underscored == d.old_name) {
        warnings.push_back("mha " + command + ": --" + name +
                           " is deprecated and will be removed; use --" + d.new_name);
        underscored = d.new_name;
        name = underscored;
      }
    }
    if (underscored != name && known.count(underscored)) name = underscored;
    a = "--" + name + (eq == std::string::npos ? std::string() : a.substr(eq));
  }
  return warnings;
}

void refuse_options(std::initializer_list<GivenOption> options, const std::string& before,
                    const std::string& after) {
  bool any = false;
  for (const GivenOption& o : options) any = any || o.given;
  if (!any) return;
  std::string names;
  std::size_t i = 0;
  for (const GivenOption& o : options) {
    names += i == 0 ? "" : i + 1 == options.size() ? " and " : ", ";
    names += std::string("--") + o.name;
    ++i;
  }
  fail_input(before + names + after);
}

}  // namespace mha::cli
