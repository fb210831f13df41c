#include "sweep_command.hpp"
#include "view_command.hpp"

#include "cli.hpp"

#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <thread>

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include "mha/analysis/analyze.hpp"
#include "mha/base/error.hpp"
#include "mha/base/thread_pool.hpp"
#include "mha/io/dir_lock.hpp"
#include "mha/io/json_text.hpp"
#include "mha/io/output_set.hpp"
#include "mha/run/run_json.hpp"
#include "mha/run/sweep.hpp"
#include "option_names.hpp"
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

// A run's directory inside the sweep's out_dir: never a link to elsewhere.
void check_run_dir(const std::string& dir) {
  std::error_code ec;
  if (fs::is_symlink(dir, ec))
    fail_input(dir +
               ": is a symbolic link; a sweep writes its runs only into directories of "
               "its own out_dir (remove the link)");
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

// A run handed to a worker: which run, since when, where its log goes.
struct Child {
  std::size_t run = 0;
  Clock::time_point start;
  std::string log;
  std::string started_at;  // UTC, when it was handed to its worker
};

// A long-lived `mha sweep-worker` process: reads one run at a time from its
// stdin ("INDEX\tCONFIG\tLOG\n"), runs it in-process exactly as `mha run
// --config CONFIG` would, with stderr to LOG, and answers "INDEX\tEXIT\n" on
// its stdout. Starting a process per run cost about 8 ms of the 20 ms a
// small run takes (exec, dynamic linking, loading OpenBLAS); a worker pays it
// once. A crash or OOM kill still costs only the run in progress: the worker
// dies, its run is recorded with the signal, and a new worker takes the next.
struct Worker {
  pid_t pid = -1;
  int to = -1;    // its stdin
  int from = -1;  // its stdout
  std::string buffer;
  std::optional<Child> child;  // the run in progress
};

class Runner {
 public:
  Runner(Sweep& sweep, const Shard& shard, int threads, int jobs, Progress& progress)
      : sweep_(sweep), shard_(shard), threads_(threads), progress_(progress) {
    exe_ = fs::read_symlink("/proc/self/exe").string();
    workers_.resize(static_cast<std::size_t>(jobs));
  }

  ~Runner() {
    for (auto& w : workers_) close_worker(w);
  }

  // Hands run `index` to an idle worker (starting one if needed). Returns
  // false when the run could not even start (its directory cannot be made,
  // ...): it is recorded as failed and the sweep goes on.
  bool start(std::size_t index) {
    try {
      launch(index);
      return true;
    } catch (const Error& e) {
      const SweepRun& run = sweep_.runs[index];
      const std::string now = utc_now();
      json extra = {
          {"wall_ms", 0.0}, {"started_at", now}, {"finished_at", now}, {"shard", shard_.str()}};
      append_row(shard_results_path(sweep_, shard_),
                 failed_row(sweep_, run, e.exit_code(), e.what(), extra));
      progress_.finished(run.name, false, std::string("could not start: ") + e.what());
      return false;
    }
  }

  std::size_t running() const {
    std::size_t n = 0;
    for (const auto& w : workers_) n += w.child.has_value();
    return n;
  }

  // Waits up to `timeout_ms` for a worker to answer or die (a signal cuts
  // the wait short), records what finished, and returns how many failed.
  std::size_t wait_and_reap(int timeout_ms) {
    std::vector<pollfd> fds;
    std::vector<Worker*> owners;
    for (auto& w : workers_)
      if (w.child && w.from >= 0) {
        fds.push_back({w.from, POLLIN, 0});
        owners.push_back(&w);
      }
    if (fds.empty()) return 0;
    const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
    std::size_t failures = 0;
    if (ready <= 0) return 0;
    for (std::size_t i = 0; i < fds.size(); ++i)
      if (fds[i].revents) failures += read_worker(*owners[i]);
    return failures;
  }

  void terminate_all() {
    for (auto& w : workers_)
      if (w.pid > 0) ::kill(-w.pid, SIGTERM);
  }

  // Waits for every worker, recording none of their runs (they were stopped).
  void wait_all() {
    for (auto& w : workers_) {
      close_worker(w);
      w.child.reset();
    }
  }

 private:
  void launch(std::size_t index) {
    SweepRun& run = sweep_.runs[index];
    json config = run.config;
    if (!config.contains("threads") || config["threads"].is_null() || config["threads"] == 0)
      config["threads"] = threads_;
    check_run_dir(run.dir);
    {
      OutputSet staged(run.dir);  // creates the directory; config.json lands atomically
      staged.stage_bytes("config.json", dump_json(config, 2) + "\n");
      staged.commit();
    }
    remove_stale_temporaries(run.dir);
    const std::string config_path = (fs::path(run.dir) / "config.json").string();
    const std::string log = (fs::path(run.dir) / "run.log").string();
    Worker* idle = nullptr;
    for (auto& w : workers_)
      if (!w.child) {
        idle = &w;
        break;
      }
    if (!idle) fail_runtime("internal: no idle worker");  // the loop keeps at most jobs running
    if (idle->pid <= 0) spawn(*idle);
    const std::string line = std::to_string(index) + "\t" + config_path + "\t" + log + "\n";
    if (!write_all(idle->to, line)) {
      // It died between runs: start another and hand it the run.
      close_worker(*idle);
      spawn(*idle);
      if (!write_all(idle->to, line))
        fail_runtime("cannot hand the run to a worker: " + std::string(std::strerror(errno)));
    }
    idle->child = Child{index, Clock::now(), log, utc_now()};
    progress_.started(run.name);
  }

  static bool write_all(int fd, const std::string& data) {
    const char* p = data.data();
    std::size_t left = data.size();
    while (left > 0) {
      const ssize_t n = ::write(fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      p += n, left -= static_cast<std::size_t>(n);
    }
    return true;
  }

  // Starts `mha sweep-worker` with pipes to its stdin and stdout.
  void spawn(Worker& w) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0) fail_runtime("cannot start a worker: pipe failed");
    if (::pipe2(out, O_CLOEXEC) != 0) {
      ::close(in[0]), ::close(in[1]);
      fail_runtime("cannot start a worker: pipe failed");
    }
    const int null_fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    // Everything the child needs is built before fork: after it, only
    // async-signal-safe calls.
    std::vector<std::string> args = {exe_, "sweep-worker"};
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      const std::string var = *e;
      if (var.rfind("OMP_NUM_THREADS=", 0) == 0 || var.rfind("OPENBLAS_NUM_THREADS=", 0) == 0)
        continue;
      env.push_back(var);
    }
    env.push_back("OMP_NUM_THREADS=" + std::to_string(threads_));
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    const pid_t parent = ::getpid();
    // SIGPIPE would kill the sweep if a worker died before reading its run.
    ::signal(SIGPIPE, SIG_IGN);

    const pid_t pid = ::fork();
    if (pid == 0) {
      // Its own process group: Ctrl-C reaches only the sweep, which lets the
      // current runs finish. If the sweep dies (even by SIGKILL), the worker
      // gets SIGTERM and removes its temporaries.
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(128 + SIGTERM);
      ::signal(SIGPIPE, SIG_DFL);
      ::dup2(in[0], STDIN_FILENO);
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(null_fd, STDERR_FILENO);  // each run's stderr goes to its run.log
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    if (null_fd >= 0) ::close(null_fd);
    if (pid < 0) {
      ::close(in[1]), ::close(out[0]);
      fail_runtime("cannot start a worker: fork failed: " + std::string(std::strerror(errno)));
    }
    ::setpgid(pid, pid);  // also here: a signal may come before the child runs
    w.pid = pid;
    w.to = in[1];
    w.from = out[0];
    w.buffer.clear();
  }

  void close_worker(Worker& w) {
    if (w.to >= 0) ::close(w.to);  // EOF: an idle worker exits
    if (w.from >= 0) ::close(w.from);
    w.to = w.from = -1;
    if (w.pid > 0) {
      int status = 0;
      while (::waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    w.pid = -1;
  }

  // Reads what a worker wrote; records its run when it answered or died.
  std::size_t read_worker(Worker& w) {
    char buf[256];
    const ssize_t n = ::read(w.from, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return 0;
    if (n > 0) {
      w.buffer.append(buf, static_cast<std::size_t>(n));
      const auto nl = w.buffer.find('\n');
      if (nl == std::string::npos) return 0;
      const std::string line = w.buffer.substr(0, nl);
      w.buffer.erase(0, nl + 1);
      const auto tab = line.find('\t');
      int code = 1;
      try {
        code = std::stoi(line.substr(tab == std::string::npos ? 0 : tab + 1));
      } catch (const std::exception&) {
      }
      const Child child = *w.child;
      w.child.reset();
      return record(child, code, 0) ? 0 : 1;
    }
    // EOF: the worker died during the run (crash, OOM kill, signal).
    ::close(w.from);
    w.from = -1;
    if (w.to >= 0) ::close(w.to);
    w.to = -1;
    int status = 0;
    while (::waitpid(w.pid, &status, 0) < 0 && errno == EINTR) {
    }
    w.pid = -1;
    const Child child = *w.child;
    w.child.reset();
    if (WIFSIGNALED(status)) return record(child, 128 + WTERMSIG(status), WTERMSIG(status)) ? 0 : 1;
    return record(child, WIFEXITED(status) && WEXITSTATUS(status) ? WEXITSTATUS(status) : 1, 0) ? 0
                                                                                                : 1;
  }

  // `code`: the run's exit code; `signal`: the signal that killed its worker, or 0.
  bool record(const Child& child, int code, int signal) {
    const SweepRun& run = sweep_.runs[child.run];
    const double wall_ms =
        std::chrono::duration<double, std::milli>(Clock::now() - child.start).count();
    // Recorded before its worker takes another run: a worker's runs have disjoint
    // [started_at, finished_at] intervals, so the rows show how many ran at once.
    json extra = {{"wall_ms", wall_ms},
                  {"started_at", child.started_at},
                  {"finished_at", utc_now()},
                  {"shard", shard_.str()}};
    const std::string results = shard_results_path(sweep_, shard_);
    std::string error;
    std::optional<nlohmann::ordered_json> row;
    if (signal) {
      error = std::string("killed by signal ") + std::to_string(signal) + " (" + strsignal(signal) +
              ")";
    } else if (code != 0) {
      error = last_error(child.log);
    } else if (!(row = complete_row(sweep_, run, extra))) {
      code = 1;
      error = run.dir + "/run.json is missing or incomplete after the run exited 0";
    }
    if (error.empty()) {
      append_row(results, *row);
      std::string done = fmt::format("ok in {:.2f} s", wall_ms / 1000);
      if (row->contains("gflops_per_s") && (*row)["gflops_per_s"].is_number())
        done += fmt::format(", {:.1f} GFLOP/s", (*row)["gflops_per_s"].get<double>());
      if (row->contains("perplexity") && (*row)["perplexity"].is_number())
        done += fmt::format(", perplexity {:.3f}", (*row)["perplexity"].get<double>());
      progress_.finished(run.name, true, done);
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
  std::vector<Worker> workers_;
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
    std::string status = run.invalid                   ? "invalid: " + *run.invalid
                         : !mine                       ? "valid (another shard)"
                         : run_is_complete(sweep, run) ? "valid, done (--resume skips it)"
                                                       : "valid";
    std::cout << fmt::format("{:>6}  {:<{}}  {:<5}  {}\n", run.index, run.name, width,
                             mine ? "yes" : "-", status);
  }
}

}  // namespace

int do_sweep_worker() {
  // Runs follow each other with buffers of the same sizes: keep freed memory
  // for the next run rather than returning it to the kernel and faulting it
  // in again (glibc's default thresholds trimmed the heap after every run of
  // the default config, about 640 page faults a run).
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 256 << 20);
  // The sweep reads answers from stdout; nothing else may write there.
  const int answers = ::dup(STDOUT_FILENO);
  const int null_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  ::dup2(null_fd, STDOUT_FILENO);
  std::string line;
  while (std::getline(std::cin, line)) {
    const auto t1 = line.find('\t'), t2 = line.find('\t', t1 + 1);
    if (t1 == std::string::npos || t2 == std::string::npos) return 2;
    const std::string index = line.substr(0, t1), config = line.substr(t1 + 1, t2 - t1 - 1),
                      log = line.substr(t2 + 1);
    // Never through a link: one planted at run.log is replaced by the log.
    int log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (log_fd < 0 && errno == ELOOP && ::unlink(log.c_str()) == 0)
      log_fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (log_fd >= 0) {
      ::dup2(log_fd, STDERR_FILENO);
      ::dup2(log_fd, STDOUT_FILENO);
      ::close(log_fd);
    }
    // Each run's peak RSS is its own: reset the process's high-water mark
    // (Linux: "5" to clear_refs), which report.cpp reads back as VmHWM.
    if (std::FILE* f = std::fopen("/proc/self/clear_refs", "w")) {
      std::fputs("5", f);
      std::fclose(f);
    }
    int code = 1;
    try {
      // A model job with "method" is an analysis; any other config, a run.
      const nlohmann::json job = read_config_file(config);
      const bool analysis = job.is_object() && job.contains("model") && job.contains("method");
      code = mha::cli::main({analysis ? "analyze" : "run", "--config", config});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "mha: error: %s\n", e.what());
      code = 1;
    } catch (...) {
      std::fprintf(stderr, "mha: error: unknown failure in the sweep worker\n");
      code = 1;
    }
    std::fflush(stdout);
    std::fflush(stderr);
    std::cerr.flush();
    // Between runs nothing points at the last run's log.
    ::dup2(null_fd, STDOUT_FILENO);
    ::dup2(null_fd, STDERR_FILENO);
    const std::string answer = index + "\t" + std::to_string(code) + "\n";
    if (::write(answers, answer.data(), answer.size()) != static_cast<ssize_t>(answer.size()))
      return 1;
  }
  return 0;
}

void add_sweep_command(CLI::App& app, SweepArgs& args) {
  CLI::App* sweep = app.add_subcommand(
      "sweep", "Run every config of a sweep file (grid, zip), resumable and shardable");
  sweep->fallthrough();
  sweep->footer(
      "Examples (docs/sweeps.md has the file format, docs/cluster.md Slurm and GNU parallel):\n"
      "  mha sweep configs/sweeps/seeds.json --dry_run --out_dir out/seeds\n"
      "  mha sweep configs/sweeps/seeds.json --jobs 2 --out_dir out/seeds\n"
      "  mha sweep configs/sweeps/seeds.json --resume --out_dir out/seeds");
  sweep->add_option("file", args.file, "sweep JSON file (docs/sweeps.md)")->required();
  sweep->add_option("--jobs,-j", args.jobs, "runs at once on this machine, sharing its cores")
      ->check(CLI::Range(1, 1024));
  sweep
      ->add_option("--shard", args.shard,
                   "run only runs with index = I mod N (default: the Slurm array task, else 0/1)")
      ->each([&args](const std::string&) { args.shard_given = true; });
  sweep->add_flag("--resume", args.resume, "skip runs whose run.json says complete");
  sweep->add_flag("--dry_run", args.dry_run,
                  "list the runs and whether each is valid; run nothing");
  sweep->add_flag("--collect", args.collect,
                  "merge every shard's results into results.jsonl and results.csv");
  sweep->add_flag("--skip_invalid", args.skip_invalid,
                  "run the valid runs even if some are invalid (they are listed)");
  sweep->add_option("--out_dir", args.out_dir, "override the sweep file's out_dir");
  sweep->add_flag("--report", args.report,
                  "after collecting, write report.html (interactive charts) and report.png "
                  "(`mha view OUT_DIR` writes them later)");
  sweep->add_option("--y", args.report_y, "--report: the results column to chart (compute_ms)");
  sweep->add_option("--x", args.report_x, "--report: the swept key along x");
  sweep->add_option("--group", args.report_group, "--report: one line per value of this key");
  sweep->add_option("--mean", args.report_mean,
                    "--report: average the runs that differ only in this swept key (default: "
                    "none, each is its own line)");
}

// --report: the sweep's report.html and report.png from the results just collected.
// False (and one error line) when the report cannot be made, for instance
// when no run finished: the sweep's own results stand, and it exits 2.
static bool report(const SweepArgs& args, const Sweep& sweep) {
  if (!args.report) return true;
  ViewArgs view;
  view.y = args.report_y;
  view.x = args.report_x;
  view.group = args.report_group;
  view.mean = args.report_mean;
  const std::filesystem::path dir(sweep.out_dir);
  try {
    write_sweep_report(sweep.out_dir, view, (dir / "report.html").string(),
                       (dir / "report.png").string());
    return true;
  } catch (const Error& e) {
    spdlog::error("--report: {}", e.what());
    return false;
  }
}

// --x and --group name swept keys, checked before anything runs.
static void check_report_options(const SweepArgs& args, const Sweep& sweep) {
  if (!args.report) {
    refuse_options({{"y", !args.report_y.empty()},
                    {"x", !args.report_x.empty()},
                    {"group", !args.report_group.empty()},
                    {"mean", !args.report_mean.empty()}},
                   "", " choose the chart of --report; give --report too");
    return;
  }
  std::string keys;
  for (const auto& k : sweep.swept_keys) keys += (keys.empty() ? "" : ", ") + k;
  const auto swept = [&](const std::string& k) {
    return std::find(sweep.swept_keys.begin(), sweep.swept_keys.end(), k) != sweep.swept_keys.end();
  };
  if (!args.report_x.empty() && args.report_x != "index" && !swept(args.report_x))
    fail_input("--x " + args.report_x + ": not a swept key of " + args.file + "; expected one of " +
               keys + " (or index)");
  if (!args.report_group.empty() && args.report_group != "none" &&
      (!swept(args.report_group) || args.report_group == args.report_x))
    fail_input("--group " + args.report_group + ": not a swept key of " + args.file +
               " other than --x; expected one of " + keys + " (or none)");
  if (!args.report_mean.empty() && args.report_mean != "none" &&
      (!swept(args.report_mean) || args.report_mean == args.report_x ||
       args.report_mean == args.report_group))
    fail_input("--mean " + args.report_mean + ": not a swept key of " + args.file +
               " other than --x and --group; expected one of " + keys);
}

namespace {

// --collect: every shard's rows merged into results.jsonl and results.csv.
int collect_sweep(const SweepArgs& args, Sweep& sweep) {
  validate_sweep(sweep, check_model_job);
  const CollectSummary s = collect_results(sweep);
  for (const auto& f : s.files) spdlog::info("wrote {}", f);
  const bool reported = report(args, sweep);
  spdlog::info("{} run(s): {} ok, {} failed, {} invalid, {} without a result yet",
               sweep.runs.size(), s.ok, s.failed, s.invalid, s.missing);
  if (s.missing) {
    // A shard that never ran (or was cancelled) must not pass for a complete sweep.
    std::string names;
    const std::size_t shown = std::min<std::size_t>(s.missing_names.size(), 20);
    for (std::size_t i = 0; i < shown; ++i) names += (i ? ", " : "") + s.missing_names[i];
    if (shown < s.missing_names.size())
      names += ", ... (" + std::to_string(s.missing_names.size() - shown) + " more)";
    spdlog::error(
        "{} run(s) have no result: {}; run their shards (or the sweep with --resume) "
        "and collect again",
        s.missing, names);
    return 1;
  }
  return reported ? 0 : 2;
}

// --shard, else the Slurm array task's, else the whole sweep.
Shard sweep_shard(const SweepArgs& args) {
  if (args.shard_given) return parse_shard(args.shard, "--shard");
  if (auto slurm = shard_from_slurm()) {
    spdlog::info("shard {} from the Slurm array task", slurm->str());
    return *slurm;
  }
  return Shard{};
}

// The shard's runs to start, in order; `skipped` were complete (--resume),
// `invalid` were reported (every one of them before anything runs).
struct ShardRuns {
  std::vector<std::size_t> todo;
  std::size_t skipped = 0, invalid = 0;
};

ShardRuns shard_runs(const SweepArgs& args, const Sweep& sweep, const Shard& shard, int cores) {
  ShardRuns r;
  for (const auto& run : sweep.runs) {
    if (!shard.contains(run.index)) continue;
    if (run.invalid) {
      if (args.skip_invalid)
        spdlog::warn("skipping invalid run {} ({}): {}", run.index, run.name, *run.invalid);
      else
        spdlog::error("run {} ({}): {}", run.index, run.name, *run.invalid);
      ++r.invalid;
      continue;
    }
    // Explicit threads in the config must fit beside the other jobs.
    const json& t = run.config.contains("threads") ? run.config["threads"] : json(nullptr);
    if (t.is_number_integer() && t.get<long>() > 0 && t.get<long>() * args.jobs > cores)
      fail_input(args.file + ": run " + run.name + ": threads = " + t.dump() + " with --jobs " +
                 std::to_string(args.jobs) + " needs more than the " + std::to_string(cores) +
                 " core(s) available; expected jobs x threads <= cores");
    if (args.resume && run_is_complete(sweep, run)) {
      ++r.skipped;
      continue;
    }
    r.todo.push_back(run.index);
  }
  if (r.invalid && !args.skip_invalid)
    fail_input(args.file + ": " + std::to_string(r.invalid) + " of the runs in shard " +
               shard.str() + " are invalid (listed above); fix the sweep or pass --skip_invalid");
  return r;
}

// How the shard's runs went: how many were started and failed, and whether
// a first Ctrl-C drained them (`stopped`: the exit code of a stop by signal).
struct ShardOutcome {
  std::size_t started = 0, failures = 0;
  bool drained = false;
  std::optional<int> stopped;
};

// Keeps --jobs workers busy with `runs.todo` until every run finished or a
// signal stops the sweep.
ShardOutcome run_shard(const SweepArgs& args, Sweep& sweep, const Shard& shard, int threads,
                       const ShardRuns& runs) {
  const std::vector<std::size_t>& todo = runs.todo;
  install_handlers();
  Progress progress(todo.size(), runs.skipped);
  Runner runner(sweep, shard, threads, args.jobs, progress);
  ShardOutcome o;
  std::size_t& next = o.started;
  while (next < todo.size() || runner.running() > 0) {
    if (g_terminate || g_interrupts >= 2) {
      progress.message("stopping: terminating " + std::to_string(runner.running()) +
                       " running run(s); they are redone by --resume");
      runner.terminate_all();
      runner.wait_all();
      progress.done();
      o.stopped = 128 + (g_terminate ? static_cast<int>(g_terminate) : SIGINT);
      return o;
    }
    if (g_interrupts == 1 && !o.drained) {
      o.drained = true;
      progress.message("interrupted: finishing " + std::to_string(runner.running()) +
                       " running run(s), starting no more (Ctrl-C again to stop them now)");
    }
    while (!o.drained && next < todo.size() &&
           runner.running() < static_cast<std::size_t>(args.jobs))
      if (!runner.start(todo[next++])) ++o.failures;
    progress.tick();
    // Wakes when a worker answers or dies; a signal or 50 ms cut it short.
    if (runner.running() > 0) o.failures += runner.wait_and_reap(50);
    if (o.drained && runner.running() == 0) break;
  }
  progress.done();
  return o;
}

}  // namespace

int do_sweep(const SweepArgs& args) {
  std::optional<std::string> out_dir;
  if (!args.out_dir.empty()) out_dir = args.out_dir;
  Sweep sweep = load_sweep(args.file, out_dir);
  check_report_options(args, sweep);
  if (args.collect) return collect_sweep(args, sweep);

  const Shard shard = sweep_shard(args);
  const int cores = available_cpus();
  if (args.jobs > cores)
    fail_input("--jobs " + std::to_string(args.jobs) + ": this machine has " +
               std::to_string(cores) + " core(s) for this process; expected at most that");
  const int threads = std::max(1, cores / args.jobs);

  const std::size_t invalid = validate_sweep(sweep, check_model_job);
  if (args.dry_run) {
    print_dry_run(sweep, shard);
    return invalid && !args.skip_invalid ? 2 : 0;
  }
  // One sweep process per shard and out_dir; other shards run side by side.
  const DirLock lock(sweep.out_dir, ".mha.shard-" + std::to_string(shard.index) + "-of-" +
                                        std::to_string(shard.count) + ".lock");
  const ShardRuns runs = shard_runs(args, sweep, shard, cores);
  for (const std::size_t i : runs.todo) check_run_dir(sweep.runs[i].dir);
  const std::vector<std::size_t>& todo = runs.todo;
  spdlog::info("{}: {} run(s) in shard {}, {} to do{}, {} at a time with {} thread(s) each, in {}",
               args.file, todo.size() + runs.skipped + runs.invalid, shard.str(), todo.size(),
               runs.skipped ? " (" + std::to_string(runs.skipped) + " already complete)" : "",
               args.jobs, threads, sweep.out_dir);

  const ShardOutcome o = run_shard(args, sweep, shard, threads, runs);
  if (o.stopped) return *o.stopped;
  bool reported = true;
  if (shard.count == 1) {
    const CollectSummary s = collect_results(sweep);
    spdlog::info("wrote {} and {} ({} ok, {} failed, {} invalid, {} without a result)",
                 s.files.at(0), s.files.at(1), s.ok, s.failed, s.invalid, s.missing);
    reported = report(args, sweep);
  } else {
    if (args.report)
      spdlog::warn("--report: a shard has only its own rows; give --report to --collect");
    spdlog::info(
        "shard {} finished; after every shard, `mha sweep {} --collect` writes "
        "results.jsonl and results.csv",
        shard.str(), args.file);
  }
  if (o.drained) {
    spdlog::warn("stopped by SIGINT after {} of {} run(s); rerun with --resume to finish",
                 o.started, todo.size());
    return 128 + SIGINT;
  }
  if (o.failures) {
    spdlog::error("{} of {} run(s) failed; see their run.log (rerun with --resume to retry them)",
                  o.failures, todo.size());
    return 1;
  }
  return reported ? 0 : 2;
}

}  // namespace mha::cli
