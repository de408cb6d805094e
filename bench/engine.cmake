# Training engine benchmarks. bench_train_throughput runs the CPU reference GptModel and,
# back to back, the same model in PyTorch (bench/torch_train_throughput.py) with the same
# threads; with --device cuda, the GPU model (bench/gpu/ compares it with PyTorch on the
# GPU). The Python that has Debian's python3-torch: /usr/bin/python3 when present.
if(NOT COHORT_TORCH_PYTHON)
  if(EXISTS /usr/bin/python3)
    set(COHORT_TORCH_PYTHON /usr/bin/python3)
  else()
    find_program(COHORT_TORCH_PYTHON NAMES python3)
  endif()
endif()
add_executable(bench_train_throughput ${CMAKE_CURRENT_LIST_DIR}/train_throughput.cc)
# cohort_engine_trainer for device_peak.h (MFU); the GPU model for --device cuda.
target_link_libraries(bench_train_throughput PRIVATE cohort_engine_model cohort_engine_optim
                                                     cohort_engine_trainer cohort_common)
if(TARGET cohort_engine_model_cuda)
  target_link_libraries(bench_train_throughput PRIVATE cohort_engine_model_cuda)
endif()
target_compile_definitions(bench_train_throughput PRIVATE
  COHORT_TORCH_PYTHON="${COHORT_TORCH_PYTHON}")
cohort_build_paths(bench_train_throughput
  COHORT_TORCH_BENCH_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/torch_train_throughput.py)

# Tensor and pipeline parallelism on CPU ranks (threads, gloo on loopback): the pipeline
# bubble beside theory, memory per rank, tokens/s of several layouts beside one rank.
add_executable(bench_parallel_train ${CMAKE_CURRENT_LIST_DIR}/parallel_train.cc)
target_link_libraries(bench_parallel_train PRIVATE cohort_engine_trainer cohort_engine_parallel
                                                   cohort_comm cohort_common)

# ZeRO stages on CPU ranks (threads, gloo on loopback): model-state bytes per rank beside the
# ZeRO paper's formula, step time of stages 1 and 2 beside DDP, and checkpoints written by
# range from every rank beside one process writing the same bytes.
add_executable(bench_zero ${CMAKE_CURRENT_LIST_DIR}/zero.cc)
target_link_libraries(bench_zero PRIVATE cohort_engine_trainer cohort_engine_parallel
                                         cohort_comm cohort_common)

# The serving product (kernels/cpu/invariant_matmul.h) beside OpenBLAS on the products of one
# decode step of bench_serve's model, at 1 to 64 rows.
add_executable(bench_invariant_matmul ${CMAKE_CURRENT_LIST_DIR}/invariant_matmul.cc)
target_link_libraries(bench_invariant_matmul PRIVATE cohort_engine_kernels_cpu cohort_common)
