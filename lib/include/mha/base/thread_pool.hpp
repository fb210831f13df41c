// The kernel's threads: one process-wide pool of workers that run numbered
// tasks, with the calling thread taking part. OpenBLAS runs single-threaded
// inside the tasks (blas.hpp), so this pool is the only one in the process.
//
// Why not OpenMP: libgomp's idle threads spin between parallel regions unless
// OMP_WAIT_POLICY is set in the environment before the process starts, and on
// the small virtual machines this tool runs on a spinning vCPU slows the one
// doing the work (a one-shot `mha run` of the default config: 33 ms with
// spinning, 24 ms without; docs/benchmarks.md). Workers here spin only
// briefly (about 50 us) before they sleep on a condition variable.
#pragma once

#include <cstddef>
#include <functional>

namespace mha {

// The CPUs this process may use: those in its affinity mask (taskset, Slurm
// with CPU binding), and no more than SLURM_CPUS_PER_TASK when set (Slurm
// without binding, TaskPlugin=task/none, leaves the mask at the whole node).
int available_cpus();

// Threads a run uses when it asks for 0: OMP_NUM_THREADS if set (the first
// number of it), else available_cpus().
int default_threads();

// `threads` if positive, else default_threads().
int resolve_threads(int threads);

// Runs body(task, thread) for every task in [0, n), on min(threads, n)
// threads: the caller is thread 0, pool workers are 1, 2, ... Tasks are
// handed out in increasing order, one at a time, to whichever thread is free,
// so a thread that starts late takes fewer. Returns when every task has
// finished; the first exception a task threw is rethrown then (no new tasks
// start after it). A call from inside a task runs its tasks inline on the
// calling thread (thread index 0 of the inner call).
void parallel_for(std::size_t n, int threads,
                  const std::function<void(std::size_t task, int thread)>& body);

}  // namespace mha
