#include "sweep_command.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "mha/error.hpp"
#include "mha/output_set.hpp"
#include "mha/sweep.hpp"
#include "progress.hpp"

extern char** environ;

namespace mha::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// Signals the parent got; the loop reads them between waits.
volatile sig_atomic_t g_interrupts = 0;
volatile sig_atomic_t g_terminate = 0;  // the signal number of SIGTERM/SIGHUP

extern "C" void on_interrupt(int) {
  g_interrupts = g_interrupts + 1;
}
extern "C" void on_terminate(int sig) {
  g_terminate = sig;
}
extern "C" void on_child(int) {}  // only to cut the loop's sleep short

// No SA_RESTART: a signal cuts the loop's sleep short so it reacts at once.
void install_handlers() {
  struct sigaction sa {};
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = on_interrupt;
  sigaction(SIGINT, &sa, nullptr);
  sa.sa_handler = on_terminate;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  sa.sa_handler = on_child;
  sigaction(SIGCHLD, &sa, nullptr);
}

// Temporaries ".NAME.tmp.PID.N" that a killed run (SIGKILL, power loss) left
// in its directory, when process PID is gone; a run directory belongs to one
// shard, so nobody else is writing there.
void remove_stale_temporaries(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    const auto tmp = name.rfind(".tmp.");
    if (name.empty() || name[0] != '.' || tmp == std::string::npos) continue;
    const std::string rest = name.substr(tmp + 5);  // "PID.N"
    const auto dot = rest.find('.');
    if (dot == std::string::npos || dot == 0 || dot > 9 ||
        !std::all_of(rest.begin(), rest.begin() + dot, ::isdigit))
      continue;
    const pid_t pid = static_cast<pid_t>(std::stol(rest.substr(0, dot)));
    if (::kill(pid, 0) != 0 && errno == ESRCH) fs::remove(entry.path(), ec);
  }
}

// CPUs this process may use: Slurm and taskset narrow the affinity mask.
int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  return std::string(buf) + "." + std::to_string(1000 + ms).substr(1) + "Z";
}

// The last line a failed child wrote to its log, without the "mha: error: " prefix.
std::string last_error(const std::string& log_path) {
  std::ifstream f(log_path);
  std::string line, last;
  while (std::getline(f, line))
    if (!line.empty()) last = line;
  for (const char* prefix : {"mha: error: ", "mha: critical: "})
    if (last.rfind(prefix, 0) == 0) return last.substr(std::strlen(prefix));
  return last.empty() ? "no message (see " + log_path + ")" : last;
}

struct Child {
  std::size_t run = 0;
  Clock::time_point start;
  std::string log;
};

class Runner {
 public:
  Runner(Sweep& sweep, const Shard& shard, int threads, Progress& progress)
      : sweep_(sweep), shard_(shard), threads_(threads), progress_(progress) {
    exe_ = fs::read_symlink("/proc/self/exe").string();
  }

  // Starts `mha run --config DIR/config.json` with stderr to DIR/run.log.
  // Returns false when the run could not even start (its directory cannot
  // be made, ...): it is recorded as failed and the sweep goes on.
  bool start(std::size_t index) {
    try {
      launch(index);
      return true;
    } catch (const Error& e) {
      const SweepRun& run = sweep_.runs[index];
      json extra = {{"wall_ms", 0.0}, {"finished_at", utc_now()}, {"shard", shard_.str()}};
      append_row(shard_results_path(sweep_, shard_),
                 failed_row(sweep_, run, e.exit_code(), e.what(), extra));
      progress_.finished(run.name, false, std::string("could not start: ") + e.what());
      return false;
    }
  }

  std::size_t running() const { return children_.size(); }

  // Reaps finished children without blocking; returns how many failed.
  std::size_t reap() {
    std::size_t failures = 0;
    for (;;) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      const auto it = children_.find(pid);
      if (it == children_.end()) continue;
      const Child child = it->second;
      children_.erase(it);
      if (!record(child, status)) ++failures;
    }
    return failures;
  }

  void terminate_all() {
    for (const auto& [pid, child] : children_) ::kill(-pid, SIGTERM);
  }

  // Waits for every child, recording none of them (they were stopped).
  void wait_all() {
    while (!children_.empty()) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, 0);
      if (pid < 0 && errno != EINTR) break;
      if (pid > 0) children_.erase(pid);
    }
  }

 private:
  void launch(std::size_t index) {
    SweepRun& run = sweep_.runs[index];
    json config = run.config;
    if (!config.contains("threads") || config["threads"].is_null() || config["threads"] == 0)
      config["threads"] = threads_;
    const int threads = config["threads"].get<int>();
    {
      OutputSet staged(run.dir);  // creates the directory; config.json lands atomically
      staged.stage_bytes("config.json", config.dump(2) + "\n");
      staged.commit();
    }
    remove_stale_temporaries(run.dir);
    const std::string config_path = (fs::path(run.dir) / "config.json").string();
    const std::string log = (fs::path(run.dir) / "run.log").string();
    const int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) fail_runtime(log + ": cannot create run log: " + std::strerror(errno));
    const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);

    // Everything the child needs is built before fork: after it, only
    // async-signal-safe calls (the parent has OpenBLAS's threads).
    std::vector<std::string> args = {exe_, "run", "--config", config_path};
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      const std::string var = *e;
      if (var.rfind("OMP_NUM_THREADS=", 0) == 0 || var.rfind("OPENBLAS_NUM_THREADS=", 0) == 0)
        continue;
      env.push_back(var);
    }
    env.push_back("OMP_NUM_THREADS=" + std::to_string(threads));
    env.push_back("OPENBLAS_NUM_THREADS=" + std::to_string(threads));
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const pid_t parent = ::getpid();

    const pid_t pid = ::fork();
    if (pid == 0) {
      // Its own process group: Ctrl-C reaches only the sweep, which lets the
      // current runs finish. If the sweep dies (even by SIGKILL), the child
      // gets SIGTERM and removes its temporaries.
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(128 + SIGTERM);
      ::dup2(null_fd, STDIN_FILENO);
      ::dup2(null_fd, STDOUT_FILENO);
      ::dup2(log_fd, STDERR_FILENO);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(log_fd);
    if (null_fd >= 0) ::close(null_fd);
    if (pid > 0) ::setpgid(pid, pid);  // also here: a signal may come before the child runs
    if (pid < 0)
      fail_runtime("cannot start a run: fork failed: " + std::string(std::strerror(errno)));
    children_[pid] = {index, Clock::now(), log};
    progress_.started(run.name);
  }

  bool record(const Child& child, int status) {
    const SweepRun& run = sweep_.runs[child.run];
    const double wall_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - child.start).count();
    json extra = {{"wall_ms", wall_ms}, {"finished_at", utc_now()}, {"shard", shard_.str()}};
    const std::string results = shard_results_path(sweep_, shard_);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::string error;
    if (WIFSIGNALED(status)) {
      error = std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
              strsignal(WTERMSIG(status)) + ")";
    } else if (code != 0) {
      error = last_error(child.log);
    } else if (!run_is_complete(run)) {
      code = 1;
      error = run.dir + "/run.json is missing or incomplete after the run exited 0";
    }
    if (error.empty()) {
      const json report = read_run_json(run.dir);
      append_row(results, result_row(sweep_, run, report, extra));
      progress_.finished(run.name, true,
                         fmt::format("ok in {:.2f} s, {:.1f} GFLOP/s", wall_ms / 1000,
                                     report.value("gflops_per_s", 0.0)));
      return true;
    }
    append_row(results, failed_row(sweep_, run, code, error, extra));
    progress_.finished(run.name, false, "failed (exit " + std::to_string(code) + "): " + error);
    return false;
  }

  Sweep& sweep_;
  Shard shard_;
  int threads_;
  Progress& progress_;
  std::string exe_;
  std::map<pid_t, Child> children_;
};

void print_dry_run(const Sweep& sweep, const Shard& shard) {
  std::string axes;
  for (auto n : sweep.axis_sizes) axes += (axes.empty() ? "" : " x ") + std::to_string(n);
  std::cout << sweep.path << ": " << sweep.runs.size() << " run(s)"
            << (axes.empty() ? "" : " (" + axes + ")") << ", out_dir " << sweep.out_dir
            << ", shard " << shard.str() << "\n";
  std::size_t width = 4;
  for (const auto& run : sweep.runs) width = std::max(width, run.name.size());
  std::cout << fmt::format("{:>6}  {:<{}}  {:<5}  {}\n", "index", "name", width, "shard", "status");
  for (const auto& run : sweep.runs) {
    const bool mine = shard.contains(run.index);
    std::string status = run.invalid            ? "invalid: " + *run.invalid
                         : !mine                ? "valid (another shard)"
                         : run_is_complete(run) ? "valid, done (--resume skips it)"
                                                : "valid";
    std::cout << fmt::format("{:>6}  {:<{}}  {:<5}  {}\n", run.index, run.name, width,
                             mine ? "yes" : "-", status);
  }
}

}  // namespace

void add_sweep_command(CLI::App& app, SweepArgs& args) {
  CLI::App* sweep = app.add_subcommand(
      "sweep", "Run every config of a sweep file (grid, zip), resumable and shardable");
  sweep->fallthrough();
  sweep->add_option("file", args.file, "sweep JSON file (see README, Sweeps)")->required();
  sweep->add_option("--jobs,-j", args.jobs, "runs at once on this machine, sharing its cores")
      ->check(CLI::Range(1, 1024));
  sweep
      ->add_option("--shard", args.shard,
                   "run only runs with index = I mod N (default: the Slurm array task, else 0/1)")
      ->each([&args](const std::string&) { args.shard_given = true; });
  sweep->add_flag("--resume", args.resume, "skip runs whose run.json says complete");
  sweep->add_flag("--dry-run", args.dry_run,
                  "list the runs and whether each is valid; run nothing");
  sweep->add_flag("--collect", args.collect,
                  "merge every shard's results into results.jsonl and results.csv");
  sweep->add_flag("--skip-invalid", args.skip_invalid,
                  "run the valid runs even if some are invalid (they are listed)");
  sweep->add_option("--out_dir,--out-dir", args.out_dir, "override the sweep file's out_dir");
}

int do_sweep(const SweepArgs& args) {
  std::optional<std::string> out_dir;
  if (!args.out_dir.empty()) out_dir = args.out_dir;
  Sweep sweep = load_sweep(args.file, out_dir);

  if (args.collect) {
    validate_sweep(sweep);
    const CollectSummary s = collect_results(sweep);
    for (const auto& f : s.files) spdlog::info("wrote {}", f);
    spdlog::info("{} run(s): {} ok, {} failed, {} invalid, {} without a result yet",
                 sweep.runs.size(), s.ok, s.failed, s.invalid, s.missing);
    return 0;
  }

  Shard shard;
  if (args.shard_given) {
    shard = parse_shard(args.shard, "--shard");
  } else if (auto slurm = shard_from_slurm()) {
    shard = *slurm;
    spdlog::info("shard {} from the Slurm array task", shard.str());
  }
  const int cores = available_cores();
  if (args.jobs > cores)
    fail_input("--jobs " + std::to_string(args.jobs) + ": this machine has " +
               std::to_string(cores) + " core(s) for this process; expected at most that");
  const int threads = std::max(1, cores / args.jobs);

  const std::size_t invalid = validate_sweep(sweep);
  if (args.dry_run) {
    print_dry_run(sweep, shard);
    return invalid && !args.skip_invalid ? 2 : 0;
  }
  std::vector<std::size_t> todo;
  std::size_t skipped = 0, listed = 0;
  for (const auto& run : sweep.runs) {
    if (!shard.contains(run.index)) continue;
    if (run.invalid) {
      // Every invalid run is reported before anything runs.
      if (args.skip_invalid)
        spdlog::warn("skipping invalid run {} ({}): {}", run.index, run.name, *run.invalid);
      else
        spdlog::error("run {} ({}): {}", run.index, run.name, *run.invalid);
      ++listed;
      continue;
    }
    // Explicit threads in the config must fit beside the other jobs.
    const json& t = run.config.contains("threads") ? run.config["threads"] : json(nullptr);
    if (t.is_number_integer() && t.get<long>() > 0 && t.get<long>() * args.jobs > cores)
      fail_input(args.file + ": run " + run.name + ": threads = " + t.dump() + " with --jobs " +
                 std::to_string(args.jobs) + " needs more than the " + std::to_string(cores) +
                 " core(s) available; expected jobs x threads <= cores");
    if (args.resume && run_is_complete(run)) {
      ++skipped;
      continue;
    }
    todo.push_back(run.index);
  }
  if (listed && !args.skip_invalid)
    fail_input(args.file + ": " + std::to_string(listed) + " of the runs in shard " + shard.str() +
               " are invalid (listed above); fix the sweep or pass --skip-invalid");
  spdlog::info("{}: {} run(s) in shard {}, {} to do{}, {} at a time with {} thread(s) each, in {}",
               args.file, todo.size() + skipped + listed, shard.str(), todo.size(),
               skipped ? " (" + std::to_string(skipped) + " already complete)" : "", args.jobs,
               threads, sweep.out_dir);

  install_handlers();
  Progress progress(todo.size(), skipped);
  Runner runner(sweep, shard, threads, progress);
  std::size_t next = 0, failures = 0;
  bool draining = false;
  while (next < todo.size() || runner.running() > 0) {
    if (g_terminate || g_interrupts >= 2) {
      progress.message("stopping: terminating " + std::to_string(runner.running()) +
                       " running run(s); they are redone by --resume");
      runner.terminate_all();
      runner.wait_all();
      progress.done();
      return 128 + (g_terminate ? static_cast<int>(g_terminate) : SIGINT);
    }
    if (g_interrupts == 1 && !draining) {
      draining = true;
      progress.message("interrupted: finishing " + std::to_string(runner.running()) +
                       " running run(s), starting no more (Ctrl-C again to stop them now)");
    }
    while (!draining && next < todo.size() &&
           runner.running() < static_cast<std::size_t>(args.jobs))
      if (!runner.start(todo[next++])) ++failures;
    failures += runner.reap();
    progress.tick();
    if (runner.running() > 0 || draining) {
      struct timespec pause {
        0, 50 * 1000 * 1000
      };  // a signal cuts it short
      ::nanosleep(&pause, nullptr);
    }
    if (draining && runner.running() == 0) break;
  }
  progress.done();
  if (shard.count == 1) {
    const CollectSummary s = collect_results(sweep);
    spdlog::info("wrote {} and {} ({} ok, {} failed, {} invalid, {} without a result)",
                 s.files.at(0), s.files.at(1), s.ok, s.failed, s.invalid, s.missing);
  } else {
    spdlog::info(
        "shard {} finished; after every shard, `mha sweep {} --collect` writes "
        "results.jsonl and results.csv",
        shard.str(), args.file);
  }
  if (draining) {
    spdlog::warn("stopped by SIGINT after {} of {} run(s); rerun with --resume to finish", next,
                 todo.size());
    return 128 + SIGINT;
  }
  if (failures) {
    spdlog::error("{} of {} run(s) failed; see their run.log (rerun with --resume to retry them)",
                  failures, todo.size());
    return 1;
  }
  return 0;
}

}  // namespace mha::cli
