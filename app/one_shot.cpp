#include "one_shot.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "mha/base/error.hpp"
#include "mha/io/json_text.hpp"
#include "mha/run/run_json.hpp"

extern char** environ;

namespace mha::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// A fresh directory under $TMPDIR (or /tmp), removed with the object.
struct TempDir {
  std::string path;
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/mha_oneshot_XXXXXX";
    if (!::mkdtemp(pattern.data()))
      fail_runtime(pattern + ": cannot create a temporary directory for --one_shot");
    path = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

}  // namespace

json one_shot_config(const BenchShape& shape, const std::string& variant, int threads,
                     const json& base) {
  const Dims& d = shape.dims;
  json c = base.is_object() ? base : json::object();
  c["h"] = d.h;
  c["d_model"] = d.d_model;
  c["batch"] = d.B;
  c["seq_len"] = d.T;
  if (d.S != d.T) c["kv_seq_len"] = d.S;
  if (!c.contains("seed")) c["seed"] = 0;
  c["threads"] = threads;
  if (variant == "weights") c["save_attention"] = true;
  if (variant == "plain") c["save_attention"] = false;
  if (variant == "causal" || variant == "window" || variant == "alibi") c["causal"] = true;
  if (variant == "window") c["window"] = 256;
  if (variant == "alibi") c["alibi"] = true;
  if (variant == "softcap") c["softcap"] = 50.0;
  if (variant == "gqa") c["kv_heads"] = d.h % 4 == 0 ? d.h / 4 : 1;
  c.erase("plot");
  c.erase("repeat");  // each process is one cold sample: bench's --repeat counts them
  c.erase("warmup");
  return c;
}

json OneShot::to_json() const {
  return {{"repeat", repeat},
          {"wall_ms_median", wall_ms},
          {"load_ms_median", load_ms},
          {"compute_ms_median", compute_ms},
          {"write_ms_median", write_ms}};
}

OneShot time_one_shot(const std::string& exe, const json& config, int repeat) {
  TempDir dir;
  json c = config;
  c["out_dir"] = dir.path + "/out";
  const std::string config_path = dir.path + "/config.json";
  {
    std::ofstream f(config_path);
    f << dump_json(c, 2) << "\n";
    if (!f) fail_runtime(config_path + ": cannot write the one-shot config");
  }
  std::vector<std::string> args = {exe, "run", "--config", config_path};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, (dir.path + "/run.log").c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<double> wall, load, compute, write;
  for (int i = 0; i < repeat; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    pid_t pid = 0;
    const int err = ::posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), environ);
    if (err != 0) {
      posix_spawn_file_actions_destroy(&actions);
      fail_runtime(exe + ": cannot start it for --one_shot: " + std::strerror(err));
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    wall.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      posix_spawn_file_actions_destroy(&actions);
      std::ifstream log(dir.path + "/run.log");
      std::string line, last;
      while (std::getline(log, line))
        if (!line.empty()) last = line;
      fail_runtime("--one_shot: `mha run` of " + dump_json(c) + " failed (" +
                   (WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                      : "signal " + std::to_string(WTERMSIG(status))) +
                   "): " + last);
    }
    StageTimes t;
    try {
      t = read_run_report(dir.path + "/out/run.json").timings;
    } catch (const Error&) {
      fail_runtime("--one_shot: " + dir.path + "/out/run.json is missing or unreadable");
    }
    load.push_back(t.load_ms);
    compute.push_back(t.compute_ms);
    write.push_back(t.write_ms);
  }
  posix_spawn_file_actions_destroy(&actions);
  OneShot r;
  r.repeat = repeat;
  r.wall_ms = median(wall);
  r.load_ms = median(load);
  r.compute_ms = median(compute);
  r.write_ms = median(write);
  return r;
}

}  // namespace mha::cli
