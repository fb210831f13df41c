// mha: multi-head attention (Vaswani et al. 2017) on the CPU.
//
// The whole run, as `mha run` does it:
//
//   mha::Config config;
//   config.h = 8;              // heads
//   config.d_model = 512;      // d_k = d_v = 512 / 8 = 64
//   config.batch = 64;
//   config.seq_len = 5;        // random inputs and weights from config.seed
//   config.save_attention = true;
//   mha::RunResult r = mha::run(config);  // out/output.npy (64, 5, 512),
//                                         // out/attention.npy (64, 8, 5, 5), out/run.json
//   double ms = r.report.timings.compute_ms;  // run.json as a struct (run/report.hpp)
//
// Or just the kernel, on tensors you already hold:
//
//   mha::Dims d;  d.B = 2; d.T = d.S = 10; d.h = 4; d.d_model = d.kdim = d.vdim = d.d_out = 32;
//                 d.d_k = d.d_v = 8;
//   auto w = mha::random_weights<float>(d, /*use_bias=*/true, /*seed=*/0);
//   mha::multi_head_attention<float>(d, x, x, x, w, mha::Mask<float>{}, 1 / std::sqrt(8.f),
//                                    mha::MaskedRows::zero, out, /*attention=*/nullptr,
//                                    /*attention_mean=*/nullptr);
//
// Every function reports failure by throwing mha::Error, whose message names
// the file, key or tensor and what was expected.
#pragma once

#include "mha/base/error.hpp"
#include "mha/config/config.hpp"
#include "mha/config/dims.hpp"
#include "mha/config/inputs.hpp"
#include "mha/config/mask_file.hpp"
#include "mha/config/rng.hpp"
#include "mha/config/weights.hpp"
#include "mha/inspect/attention_stats.hpp"
#include "mha/io/npy.hpp"
#include "mha/io/npy_reader.hpp"
#include "mha/io/npz.hpp"
#include "mha/kernel/attention.hpp"
#include "mha/kernel/mask.hpp"
#include "mha/run/run.hpp"
#include "mha/text/tokenizer.hpp"
