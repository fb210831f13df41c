// How options are spelled on the command line, in one place for every
// subcommand (docs/interface.md has the table):
//
// - Each option is declared once, with underscores (`--d_model`, `--dry_run`),
//   the spelling of the config keys and of the paper's names.
// - Dashes are accepted for underscores everywhere (`--d-model`, `--dry-run`):
//   normalize_option_names rewrites them before CLI11 parses.
// - Old names of renamed options (`mha plot --batch`, now `--batch_index`)
//   still work for one release: they are rewritten to the new name and a
//   deprecation warning is returned for the caller to log.
// - A message names several options as "--y, --x and --group".
#pragma once

#include <initializer_list>
#include <set>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace mha::cli {

// One old spelling of an option: `mha <command> --<old>` is `--<now>`.
struct DeprecatedOption {
  const char* command;
  const char* old_name;
  const char* new_name;
};

// Every renamed option; they are removed in the release after 0.2.
const std::vector<DeprecatedOption>& deprecated_options();

// The long option names (without "--") of `app` and all its subcommands.
std::set<std::string> long_option_names(const CLI::App& app);

// Rewrites `args` (the command line after the program name) in place: an
// option's dashes become underscores when that names a known option, and a
// deprecated name becomes its new one. Values (after '=' or in the next
// token) and everything after a bare "--" are left alone. Returns one
// warning per deprecated name used.
std::vector<std::string> normalize_option_names(std::vector<std::string>& args,
                                                const std::set<std::string>& known);

// An option (its name without "--") and whether the command line gave it.
struct GivenOption {
  const char* name;
  bool given;
};

// Options that belong to another mode of a command (`mha view`'s sweep
// options on a run, `mha sweep --y` without --report): if any of `options`
// was given, fails (invalid input, exit 2) with `before`, every one of them
// named ("--y, --x and --group"), then `after`.
void refuse_options(std::initializer_list<GivenOption> options, const std::string& before,
                    const std::string& after);

}  // namespace mha::cli
