#!/usr/bin/python3
"""`mha sweep` on a real Slurm: a single-node cluster on localhost (munged, slurmctld and slurmd
from Debian's packages, started here and stopped afterwards), the sbatch scripts of
docs/cluster.md (scripts/slurm/) submitted as they are.

    MHA_BIN=build/bin/mha /usr/bin/python3 tests/slurm/test_slurm.py [TestCase ...]

Needs root (slurmd runs the jobs) and the packages slurmctld, slurmd, slurm-client and munge
(scripts/setup.sh --test installs them). Without them, or when the cluster does not start, the
script says why and exits 77, which ctest reports as skipped (1 under MHA_REQUIRE_ALL unless
MHA_ALLOW_SKIPS lists slurm.arrays: tests/skips.py).
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import skips  # noqa: E402  (tests/skips.py)

MHA = os.path.abspath(os.environ.get("MHA_BIN", "build/bin/mha"))
ROOT = os.path.abspath(os.environ.get("MHA_SOURCE_DIR", os.path.join(os.path.dirname(__file__),
                                                                      "..", "..")))
SWEEP_SCRIPT = os.path.join(ROOT, "scripts", "slurm", "sweep.sbatch")
COLLECT_SCRIPT = os.path.join(ROOT, "scripts", "slurm", "collect.sbatch")
DEADLINE = 180  # seconds for one array to finish
# The sweep of the issue that found the mapping bug: 16 tiny runs.
SWEEP = {"base": {"h": 2, "d_model": 8, "seq_len": 4}, "grid": {"seed": list(range(16))}}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """munged, slurmctld and slurmd in a temporary directory, with their own socket and ports."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="mha_slurm_")
        self.env = dict(os.environ, SLURM_CONF=os.path.join(self.dir, "slurm.conf"))
        for k in [k for k in self.env if k.startswith("SLURM_") and k != "SLURM_CONF"]:
            del self.env[k]  # the suite itself may run inside a Slurm job
        self.pid_files = []

    def why_not(self):
        """Why a cluster cannot run here, or None."""
        if os.geteuid() != 0:
            return "not root: slurmd must run jobs as their users"
        for tool in ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "scancel"):
            if not shutil.which(tool) and not os.path.exists("/usr/sbin/" + tool):
                return f"{tool} is not installed (scripts/setup.sh --test installs slurmctld, " \
                       "slurmd, slurm-client and munge)"
        return None

    def tool(self, name):
        return shutil.which(name) or "/usr/sbin/" + name

    def start(self):
        d = self.dir
        for sub in ("state", "spool"):
            os.makedirs(os.path.join(d, sub))
        key = os.path.join(d, "munge.key")
        with open(key, "wb") as f:
            f.write(os.urandom(1024))
        os.chmod(key, 0o600)
        sock = os.path.join(d, "munge.sock")
        subprocess.run([self.tool("munged"), "--force", "--key-file", key, "--socket", sock,
                        "--pid-file", os.path.join(d, "munged.pid"),
                        "--log-file", os.path.join(d, "munged.log"),
                        "--seed-file", os.path.join(d, "munged.seed")],
                       check=True, capture_output=True, timeout=30)
        self.pid_files.append(os.path.join(d, "munged.pid"))
        cpus = os.cpu_count() or 1
        # The node offers the machine's memory (the scripts ask for --mem=4G).
        with open("/proc/meminfo") as f:
            mem_mb = int(f.readline().split()[1]) // 1024
        conf = f"""ClusterName=mhatest
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={sock}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
NodeName=localhost NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={mem_mb} State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
"""
        with open(self.env["SLURM_CONF"], "w") as f:
            f.write(conf)
        subprocess.run([self.tool("slurmctld"), "-c"], env=self.env, check=True,
                       capture_output=True, timeout=30)
        self.pid_files.append(os.path.join(d, "slurmctld.pid"))
        subprocess.run([self.tool("slurmd"), "-N", "localhost"], env=self.env, check=True,
                       capture_output=True, timeout=30)
        self.pid_files.append(os.path.join(d, "slurmd.pid"))
        end = time.time() + 60
        while time.time() < end:
            p = subprocess.run(["sinfo", "-h", "-o", "%t"], env=self.env, capture_output=True,
                               text=True)
            if p.returncode == 0 and p.stdout.strip() == "idle":
                return
            time.sleep(0.5)
        raise RuntimeError("the node did not become idle in 60 s; " + self.log_tail())

    def log_tail(self):
        out = []
        for name in ("slurmctld.log", "slurmd.log", "munged.log"):
            try:
                with open(os.path.join(self.dir, name)) as f:
                    out.append(name + ": " + " | ".join(f.read().splitlines()[-5:]))
            except OSError:
                pass
        return "; ".join(out)

    def stop(self):
        subprocess.run(["scancel", "--full", "--user", "root"], env=self.env, capture_output=True)
        for pid_file in reversed(self.pid_files):  # slurmd, slurmctld, munged
            try:
                with open(pid_file) as f:
                    pid = int(f.read().split()[0])
                os.kill(pid, signal.SIGTERM)
                end = time.time() + 15
                while time.time() < end:
                    os.kill(pid, 0)
                    time.sleep(0.1)
            except (OSError, ValueError, IndexError):
                pass
        shutil.rmtree(self.dir, ignore_errors=True)

    def sbatch(self, *args, cwd):
        p = subprocess.run(["sbatch", "--parsable", "--export=ALL,MHA=" + MHA] + list(args),
                           env=self.env, cwd=cwd, capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            raise AssertionError(f"sbatch {' '.join(args)} failed: {p.stderr}")
        return p.stdout.strip().split(";")[0]

    def wait(self, *job_ids):
        end = time.time() + DEADLINE
        while time.time() < end:
            p = subprocess.run(["squeue", "-h", "-j", ",".join(job_ids), "-o", "%i %r"],
                               env=self.env, capture_output=True, text=True)
            if p.returncode == 0 and not p.stdout.strip():
                return
            if "DependencyNeverSatisfied" in p.stdout:  # a task it waits for failed
                subprocess.run(["scancel"] + list(job_ids), env=self.env, capture_output=True)
                raise AssertionError("a job's dependency can never be satisfied (a task it "
                                     f"waits for failed): {p.stdout.strip()}")
            time.sleep(0.5)
        raise AssertionError(f"jobs {job_ids} still queued after {DEADLINE} s; " +
                             self.log_tail())


CLUSTER = None


def start_cluster():
    """The running cluster, or the reason it cannot run here."""
    c = Cluster()
    reason = c.why_not()
    if reason:
        shutil.rmtree(c.dir, ignore_errors=True)
        return None, reason
    try:
        c.start()
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, RuntimeError) as e:
        detail = getattr(e, "stderr", b"") or b""
        if isinstance(detail, bytes):
            detail = detail.decode(errors="replace")
        c.stop()
        return None, f"the single-node Slurm did not start: {e} {detail.strip()} " + c.log_tail()
    return c, None


def setUpModule():
    global CLUSTER
    if CLUSTER is None:  # not run as a script (python3 -m unittest ...)
        CLUSTER, reason = start_cluster()
        if reason:
            raise RuntimeError(reason)


def tearDownModule():
    if CLUSTER:
        CLUSTER.stop()


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class SlurmCase(unittest.TestCase):
    def setUp(self):
        self.c = CLUSTER
        self.tmp = tempfile.mkdtemp(prefix="mha_slurm_case_")
        self.sweep_file = os.path.join(self.tmp, "sweep.json")
        self.out = os.path.join(self.tmp, "out")
        with open(self.sweep_file, "w") as f:
            json.dump(dict(SWEEP, out_dir=self.out), f)

    def tearDown(self):
        shutil.rmtree(getattr(self, "tmp", ""), ignore_errors=True)

    def submit_array(self, array):
        # From the repository root, as docs/cluster.md shows; outputs in the case's directory.
        return self.c.sbatch(f"--array={array}", f"--output={self.tmp}/slurm-%A_%a.out",
                             SWEEP_SCRIPT, self.sweep_file, cwd=ROOT)

    def task_outputs(self):
        texts = {}
        for name in sorted(os.listdir(self.tmp)):
            if name.startswith("slurm-") and name.endswith(".out"):
                with open(os.path.join(self.tmp, name)) as f:
                    texts[name] = f.read()
        return texts

    def collect(self, code=0):
        p = subprocess.run([MHA, "sweep", self.sweep_file, "--collect"], capture_output=True,
                           text=True, timeout=120, env=self.c.env)
        self.assertEqual(p.returncode, code, p.stderr)
        return p.stderr

    def assert_every_run_once(self):
        rows = read_jsonl(os.path.join(self.out, "results.jsonl"))
        self.assertEqual([r["index"] for r in rows], list(range(16)),
                         f"results.jsonl: {[r['index'] for r in rows]}; " +
                         json.dumps(self.task_outputs())[:2000])
        self.assertTrue(all(r["status"] == "ok" for r in rows), rows)
        shard_rows = []
        for name in os.listdir(os.path.join(self.out, "results")):
            shard_rows += [r["index"] for r in
                           read_jsonl(os.path.join(self.out, "results", name))]
        self.assertEqual(sorted(shard_rows), list(range(16)), "a run was done or listed twice")


class Arrays(SlurmCase):
    def run_array(self, array, tasks):
        job = self.submit_array(array)
        collect = self.c.sbatch(f"--dependency=afterok:{job}",
                                f"--output={self.tmp}/slurm-%j-collect.out", COLLECT_SCRIPT,
                                self.sweep_file, cwd=ROOT)
        self.c.wait(job, collect)
        outs = self.task_outputs()
        self.assertEqual(len([n for n in outs if not n.endswith("-collect.out")]), tasks, outs)
        collect_out = [t for n, t in outs.items() if n.endswith("-collect.out")]
        self.assertEqual(len(collect_out), 1, f"the collect job did not run: {outs}")
        self.assertIn("16 run(s): 16 ok, 0 failed, 0 invalid, 0 without a result yet",
                      collect_out[0])
        self.assert_every_run_once()
        return outs

    def test_step(self):
        """--array=0-14:2: 8 tasks, shards 0/8 ... 7/8 (the mapping bug ran 8 of 16 runs)."""
        outs = self.run_array("0-14:2", 8)
        shards = sorted(t.split("shard ")[1].split(" ")[0] for n, t in outs.items()
                        if "from the Slurm array task" in t)
        self.assertEqual(shards, [f"{i}/8" for i in range(8)])

    def test_offset_and_limit(self):
        """--array=5-12%2: 8 tasks starting at 5, at most 2 at once."""
        self.run_array("5-12%2", 8)

    def test_list_is_refused(self):
        """--array=1,3,8-10: a task cannot know its rank; every task says so and runs nothing."""
        job = self.submit_array("1,3,8-10")
        self.c.wait(job)
        outs = self.task_outputs()
        self.assertEqual(len(outs), 5, outs)
        for name, text in outs.items():
            self.assertIn("is not an evenly spaced range", text, name)
            self.assertIn("--shard I/5", text, name)
        self.assertFalse(os.path.exists(os.path.join(self.out, "results")))


class CancelAndResubmit(SlurmCase):
    def test_cancelled_task_then_resubmitted_array(self):
        """scancel of one array element: --collect names its runs and fails; the array
        resubmitted as it was (the script has --resume) runs only those, and every run is listed
        exactly once."""
        job = self.c.sbatch("--array=0-7%1", "--hold", f"--output={self.tmp}/slurm-%A_%a.out",
                            SWEEP_SCRIPT, self.sweep_file, cwd=ROOT)
        subprocess.run(["scancel", f"{job}_3"], env=self.c.env, check=True, timeout=30)
        subprocess.run(["scontrol", "release", job], env=self.c.env, check=True, timeout=30)
        self.c.wait(job)
        err = self.collect(code=1)
        self.assertIn("14 ok, 0 failed, 0 invalid, 2 without a result", err)
        self.assertIn("2 run(s) have no result: seed=3, seed=11;", err)
        for n in os.listdir(self.tmp):
            if n.startswith("slurm-"):
                os.remove(os.path.join(self.tmp, n))
        again = self.submit_array("0-7")
        self.c.wait(again)
        texts = self.task_outputs()
        done = [t for t in texts.values() if "(2 already complete)" in t]
        self.assertEqual(len(done), 7, texts)  # every shard but 3 had nothing left to do
        self.assertIn("16 ok", self.collect())
        self.assert_every_run_once()


class ModelSweep(SlurmCase):
    def test_models_by_texts_over_an_array(self):
        """A sweep of whole models (random GPT-2 and LLaMA checkpoints x 4 texts, loss) over
        --array=0-3 and a collect job: every run once, each with its perplexity."""
        sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
        import checkpoints  # noqa: E402  (tests/models)
        import tokenizer_files  # noqa: E402
        texts = ["the cat sat on the mat", "a dog ran", "the mat sat", "the dog and the cat"]
        tok, _, vocab = tokenizer_files.byte_level_bpe(texts)
        models = []
        for family in ("gpt2", "llama"):
            config, tensors = checkpoints.make(family, vocab=vocab)
            d = os.path.join(self.tmp, family)
            checkpoints.write(d, config, tensors)
            with open(os.path.join(d, "tokenizer.json"), "w") as f:
                json.dump(tok, f)
            models.append(d)
        with open(self.sweep_file, "w") as f:
            json.dump({"base": {"method": "loss"}, "grid": {"model": models, "text": texts},
                       "out_dir": self.out}, f)
        job = self.submit_array("0-3")
        collect = self.c.sbatch(f"--dependency=afterok:{job}",
                                f"--output={self.tmp}/slurm-%j-collect.out", COLLECT_SCRIPT,
                                self.sweep_file, cwd=ROOT)
        self.c.wait(job, collect)
        outs = self.task_outputs()
        collect_out = [t for n, t in outs.items() if n.endswith("-collect.out")]
        self.assertEqual(len(collect_out), 1, f"the collect job did not run: {outs}")
        self.assertIn("8 run(s): 8 ok, 0 failed, 0 invalid, 0 without a result yet",
                      collect_out[0])
        rows = read_jsonl(os.path.join(self.out, "results.jsonl"))
        self.assertEqual([r["index"] for r in rows], list(range(8)))
        self.assertEqual(sorted(r["shard"] for r in rows), sorted(f"{i % 4}/4" for i in range(8)))
        for r in rows:
            self.assertEqual((r["status"], r["mode"]), ("ok", "analyze"))
            self.assertGreater(r["perplexity"], 1)


if __name__ == "__main__":
    CLUSTER, reason = start_cluster()
    if reason:
        skips.skip(["slurm.arrays"], reason)
    result = unittest.main(exit=False, argv=[sys.argv[0]] + sys.argv[1:]).result
    sys.exit(0 if result.wasSuccessful() else 1)
