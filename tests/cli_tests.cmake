# End-to-end tests: the real binary, driven from Python with NumPy checks.
# Debian's interpreter is used on purpose: it is the one python3-numpy serves.
find_program(MHA_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(NOT MHA_PYTHON)
  message(FATAL_ERROR "tests need /usr/bin/python3 with NumPy (scripts/setup.sh --test installs it)")
endif()

set(MHA_TEST_ENV "MHA_BIN=$<TARGET_FILE:mha>" "MHA_SOURCE_DIR=${PROJECT_SOURCE_DIR}")

foreach(group DefaultConfig Precedence Reproducibility ThreadCounts BlasKernels Bench CrashSafety
              Errors)
  add_test(NAME cli.${group}
           COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_cli.py ${group}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(cli.${group} PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}")
endforeach()

# `mha sweep` end to end: one ctest test per TestCase class of test_sweep.py, so that they run in
# parallel. Signals and Resume kill processes on purpose; TIMEOUT catches a hang.
foreach(group Expansion Shards Concurrency Resume Signals Validity Jobs Results SweepFileErrors)
  add_test(NAME cli.sweep.${group}
           COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_sweep.py ${group}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(cli.sweep.${group} PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}" TIMEOUT 300)
endforeach()

# `mha inspect` end to end: NumPy-written files, run's attention.npy against run.json, a real
# PyTorch attention map, the text report and errors; one ctest test per TestCase class.
foreach(group NumpyFiles RunAttention Torch TextReport Errors)
  add_test(NAME cli.inspect.${group}
           COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_inspect.py ${group}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(cli.inspect.${group} PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}")
endforeach()

# Reduced precision end to end (output_dtype, dtype bfloat16, in run, sweep and bench).
foreach(group Float16Output Bfloat16 PrecisionSweep PrecisionBench)
  add_test(NAME cli.precision.${group}
           COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_precision.py ${group}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(cli.precision.${group} PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}" TIMEOUT 300)
endforeach()

# Attention plots end to end: `mha run --plot`, `mha plot` on NumPy and PyTorch files (PNGs
# decoded with the standard library), and its errors; `mha plot` and `mha view` on a sparse
# 30000 x 30000 map in bounded memory (LargeMaps); one ctest test per TestCase class.
foreach(group RunPlot PlotCommand PlotErrors LargeMaps)
  add_test(NAME cli.plot.${group}
           COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_plot.py ${group}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(cli.plot.${group} PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}" TIMEOUT 300)
endforeach()

# The command line's spelling against docs/interface.md; the README's and --help's examples.
foreach(group Spelling RunGroups Aliases ProgressLine)
  add_test(NAME cli.interface.${group}
           COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_interface.py ${group}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(cli.interface.${group} PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}")
endforeach()

# repeat: timed calls of the compute, in run.json, sweep rows and the report (docs/config.md).
foreach(group RunRepeat SweepRepeat SweepWarmup)
  add_test(NAME cli.repeat.${group}
           COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_repeat.py ${group}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(cli.repeat.${group} PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}" TIMEOUT 300)
endforeach()

# run.json and results rows against schemas/ (python3-jsonschema).
foreach(group RunJson ResultsRows)
  add_test(NAME cli.schemas.${group}
           COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_schemas.py ${group}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(cli.schemas.${group} PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}")
endforeach()

foreach(group Readme Help)
  add_test(NAME cli.examples.${group}
           COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_examples.py ${group}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(cli.examples.${group} PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}" TIMEOUT 600)
endforeach()

# Pipes, FIFOs and devices as inputs (mha/io/stream_input.hpp).
add_test(NAME cli.streams COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_streams.py
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(cli.streams PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}")

# Transformer layers end to end (docs/layers.md).
add_test(NAME cli.layers COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_layers.py
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(cli.layers PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}")

# Weights from and to .safetensors.
add_test(NAME cli.safetensors COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_safetensors.py
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(cli.safetensors PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}")

# Keras' own weight files (.weights.h5, .keras, tf.keras .h5) written with h5py in Keras'
# layouts, against the .npz keras route; weights convert to and from them; hostile HDF5 files.
foreach(group Attention Choice Encoder Convert Hostile)
  add_test(NAME cli.keras.${group}
           COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_keras_files.py ${group}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(cli.keras.${group} PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}")
endforeach()

# Rotary position embeddings against NumPy transcriptions of LLaMA's and GPT-J's.
add_test(NAME cli.rope COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_rope.py
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(cli.rope PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}")

# One layer of BERT, GPT-2 and LLaMA-style checkpoints by their own names (presets).
add_test(NAME cli.presets COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_presets.py
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(cli.presets PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}")

# Whole Hugging Face-layout checkpoints (`mha run --model`) against the float64 PyTorch
# references of tests/models/reference.py on random checkpoints of every model_type
# (tests/models/checkpoints.py); one ctest test per TestCase class.
foreach(group Families Bfloat16 Features Presets Selections Layouts Text Options Memory Errors)
  add_test(NAME models.${group}
           COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/models/test_models.py ${group}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(models.${group} PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}" TIMEOUT 600)
endforeach()
# Encoder-decoders (T5, BART) teacher-forced against reference.seq2seq: the encoder, decoder and
# cross-attention maps, the output and top k, from ids and from text, and the refusals
# (tests/models/test_seq2seq.py).
# The view's labels of the three map kinds in headless Chromium are view.CrossAttention.
foreach(group Families Text Analyze Errors)
  add_test(NAME models.seq2seq.${group}
           COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/models/test_seq2seq.py ${group}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(models.seq2seq.${group} PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}" TIMEOUT 600)
endforeach()
add_test(NAME view.CrossAttention
         COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/models/test_seq2seq.py View
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(view.CrossAttention PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}" TIMEOUT 600
                     SKIP_RETURN_CODE 77)
# Images through ViT (tests/models/test_vit.py): the forward from PNG files against
# reference.vit, the preprocessing against PIL's steps (and PIL), the refusals, images from FIFOs
# (read once), the classifier's top-k classes and head ablation on its output; the view's
# overlay is view.ImageOverlay
# (tests/CMakeLists.txt).
foreach(group Forward Preprocess Refusals Streams Analyze Classifier Ablation)
  add_test(NAME models.vit.${group}
           COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/models/test_vit.py ${group}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(models.vit.${group} PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}" TIMEOUT 600)
endforeach()
# DeiT (tests/models/test_vit.py Deit*): the distillation token and the teacher's heads against
# reference.deit, DeiTImageProcessor's centre crop against its transcription and PIL, the
# refusals, rollout and ablation; the view's overlay of its patches is in view.ImageOverlay.
foreach(group Forward Preprocess Classifier Refusals Analyze)
  add_test(NAME models.deit.${group}
           COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/models/test_vit.py Deit${group}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(models.deit.${group} PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}" TIMEOUT 600)
endforeach()
# `mha analyze` against the references (tests/models/test_analyze.py): loss and logit lens,
# rollout, value-weighted norms and head detectors, ablation and patching, refusals.
foreach(group Summary Lens Maps Interventions Corpus Errors)
  add_test(NAME models.analyze.${group}
           COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/models/test_analyze.py ${group}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(models.analyze.${group} PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}" TIMEOUT 600)
endforeach()
# --save_sites against the references' activation sites (tests/models/test_sites.py; the module's
# run_with_cache and run_with_hooks: tests/CMakeLists.txt).
add_test(NAME models.sites.Cli
         COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/models/test_sites.py Cli
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(models.sites.Cli PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}" TIMEOUT 600)
# --save_qk's q.npy and k.npy against the references' queries and keys, and run.json's rule for
# the weights applied to them (tests/models/test_qk.py).
foreach(group Families Errors)
  add_test(NAME models.qk.${group}
           COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/models/test_qk.py ${group}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(models.qk.${group} PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}" TIMEOUT 600)
endforeach()
# Model directories as untrusted input: hostile config.json, safetensors headers, indexes,
# tokenizer files, out_dirs and options, each refused in one line and bounded memory
# (tests/models/test_hostile.py); PythonCalls needs the Python module (tests/CMakeLists.txt).
foreach(group DeepJson Bounded NpzShapes Messages Outputs Valid Nonsense Refusals)
  add_test(NAME models.hostile.${group}
           COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/models/test_hostile.py ${group}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(models.hostile.${group} PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}" TIMEOUT 600)
endforeach()
# GGUF files (tests/models/test_gguf.py), written as llama.cpp's converter writes them from the
# random checkpoints, against the safetensors runs: F32 of every architecture, every quantized
# type mha reads, and the refusals.
foreach(group Float32 Quantized Errors)
  add_test(NAME models.gguf.${group}
           COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/models/test_gguf.py ${group}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(models.gguf.${group} PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}" TIMEOUT 600)
endforeach()
# The tokenizer of a GGUF file's metadata (tests/models/test_gguf_tokenizer.py): the npm
# packages' vocabularies converted as llama.cpp converts them, every id equal to their
# tokenizer.json's on the tokenizer corpus; `mha run --text` on a GGUF file; the refusals.
foreach(group Vocabularies Run Hostile)
  add_test(NAME models.gguf_tokenizer.${group}
           COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/models/test_gguf_tokenizer.py ${group}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(models.gguf_tokenizer.${group} PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}"
                       TIMEOUT 600)
endforeach()
# The references themselves against torch.nn.functional, nn.TransformerEncoderLayer and the
# NumPy LLaMA attention of tests/cli/test_rope.py (no binary involved).
add_test(NAME models.reference
         COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/models/check_reference.py
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
add_test(NAME models.safetensors_write
         COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/models/safetensors_write.py
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(models.safetensors_write PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}")

# An out_dir belongs to one run: stale outputs removed, checksums checked by the readers, the
# out_dir lock (two processes at once), and links planted at every name a command writes.
foreach(group StaleOutputs Checksums Locks Links)
  add_test(NAME cli.out_dir.${group}
           COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_out_dir.py ${group}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(cli.out_dir.${group} PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}" TIMEOUT 600)
endforeach()

# `mha compare` against numpy.allclose: NaN and infinities at the same and different indices,
# with and without --equal_nan, and the refused tolerances.
foreach(group Verdicts Tolerances)
  add_test(NAME cli.compare.${group}
           COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/cli/test_compare.py ${group}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(cli.compare.${group} PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}")
endforeach()
# `mha sweep` of whole models (tests/models/test_model_sweep.py): grids of checkpoints x texts x
# methods run as `mha analyze` and `mha run --model`, resumed, sharded, collected, charted.
foreach(group Grid ModelRuns Resume Shards Corpus Errors)
  add_test(NAME models.sweep.${group}
           COMMAND ${MHA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/models/test_model_sweep.py ${group}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(models.sweep.${group} PROPERTIES ENVIRONMENT "${MHA_TEST_ENV}" TIMEOUT 600)
endforeach()
