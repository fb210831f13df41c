// Times ONNX graphs in ONNX Runtime's CPU provider (onnxruntime-node), for bench/ort_mha.py.
//
// Usage: node bench/ort/run.mjs JOB.json
//
// JOB.json: {"threads": N, "repeat": N, "warmup": 2, "runs": [{"model": "a.onnx",
//   "inputs": [{"name": "x", "path": "x.bin", "dims": [B, T, d_model]}, ...],
//   "output": "out.bin"}, ...]}; every .bin is raw little-endian float32, C order.
// Each run gets its own session (intra-op threads = threads, inter-op 1, sequential, every graph
// optimization), `warmup` untimed calls, then `repeat` timed calls of session.run; the first
// output of the last call is written to `output`. Prints one JSON object on stdout:
//   {"ort_version": "...", "runs": [{"model", "ms": [...], "ms_median", "ms_min", "output_dims"}]}
import { readFileSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';

const require = createRequire(import.meta.url);
let ort;
try {
  ort = require('onnxruntime-node');
} catch (e) {
  console.error('run.mjs: onnxruntime-node is not installed (run: bash bench/ort/setup.sh)');
  process.exit(3);
}

function median(values) {
  const v = [...values].sort((a, b) => a - b);
  const n = v.length;
  return n % 2 ? v[(n - 1) / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

function readFloats(path, dims) {
  const bytes = readFileSync(path);
  const count = dims.reduce((a, b) => a * b, 1);
  if (bytes.length !== 4 * count)
    throw new Error(`${path}: ${bytes.length} bytes, expected ${4 * count} for [${dims}]`);
  // Copy into an aligned buffer of its own (a Buffer may sit at any offset of a shared pool).
  const data = new Float32Array(count);
  new Uint8Array(data.buffer).set(bytes);
  return new ort.Tensor('float32', data, dims);
}

async function timeRun(run, job) {
  const session = await ort.InferenceSession.create(run.model, {
    executionProviders: ['cpu'],
    intraOpNumThreads: job.threads,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all',
  });
  const feeds = {};
  for (const input of run.inputs) feeds[input.name] = readFloats(input.path, input.dims);
  let result;
  for (let i = 0; i < (job.warmup ?? 2); i++) result = await session.run(feeds);
  const ms = [];
  for (let i = 0; i < job.repeat; i++) {
    const t0 = performance.now();
    result = await session.run(feeds);
    ms.push(performance.now() - t0);
  }
  const out = result[session.outputNames[0]];
  if (run.output) {
    const data = out.data;
    writeFileSync(run.output, Buffer.from(data.buffer, data.byteOffset, data.byteLength));
  }
  await session.release();
  return { model: run.model, ms, ms_median: median(ms), ms_min: Math.min(...ms),
           output_dims: out.dims };
}

const job = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const runs = [];
for (const run of job.runs) runs.push(await timeRun(run, job));
process.stdout.write(JSON.stringify({ ort_version: ort.env.versions.node, runs }) + '\n');
