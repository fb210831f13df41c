// `mha sweep FILE`: runs every config of a sweep file (lib/include/mha/run/sweep.hpp)
// as `mha run` does, in N long-lived worker processes, one shard of a cluster job.
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace mha::cli {

struct SweepArgs {
  std::string file, shard, out_dir;
  int jobs = 1;
  bool resume = false, dry_run = false, collect = false, skip_invalid = false;
  bool shard_given = false;  // --shard "" is an error, not "no shard"
  bool report = false;       // report.html and report.png after collecting
  std::string report_y, report_x, report_group, report_mean;
};

void add_sweep_command(CLI::App& app, SweepArgs& args);

// Exit codes: 0 every run of this shard succeeded (or was already done), 1 a
// run failed, 2 bad sweep file, flags or invalid runs, 130/143/129 stopped by
// SIGINT/SIGTERM/SIGHUP.
int do_sweep(const SweepArgs& args);

// `mha sweep-worker` (internal, started by do_sweep): runs the sweep's runs
// one at a time as they arrive on stdin, each exactly as `mha run --config`,
// and answers each with its exit code on stdout.
int do_sweep_worker();

}  // namespace mha::cli
