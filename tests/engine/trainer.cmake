# The trainer's pieces in one process: config decoding (train.device too), data-parallel
# bucket reduction over real Gloo communicators (one thread per rank; the per-bucket wait a
# GPU model plugs in), ZeRO's sharded optimizer and reduce-scatter, sampling and its
# generator, and the rank's thread count (its CPU affinity).
cohort_test(engine_trainer_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/train_config_test.cc ${CMAKE_CURRENT_LIST_DIR}/ddp_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/ddp_wait_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/zero_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/train_device_config_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/sampling_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/threads_test.cc
          ${PROJECT_SOURCE_DIR}/tests/comm/comm_test_util.cc
          ${PROJECT_SOURCE_DIR}/tests/comm/device_buffer.cc
  LIBS cohort_engine_trainer cohort_comm
  LABELS engine)
target_include_directories(engine_trainer_test PRIVATE ${PROJECT_SOURCE_DIR}/tests/comm)

# `cohort train` end to end (real processes through `cohort run`): data parallel on 1, 2
# and 4 ranks equals 1 rank, bitwise resume, resharding 2 -> 1 and 1 -> 4, a damaged
# newest checkpoint, and bad configs and data.
cohort_test(engine_train_cli_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/train_cli_test.cc
  LIBS cohort_common
  LABELS engine integration)
cohort_build_paths(engine_train_cli_test COHORT_BINARY $<TARGET_FILE:cohort>)
target_compile_definitions(engine_train_cli_test PRIVATE
  COHORT_CUDA_ENGINE_BUILT=$<BOOL:${COHORT_HAVE_CUDA}>)
add_dependencies(engine_train_cli_test cohort)

# Tensor and pipeline parallelism: the layout and the schedules (pure), parity with one
# rank for every layout up to 8 ranks (one thread per rank, gloo on loopback), the
# data-parallel reduction overlapped with the backward against the reduction after it, and
# ZeRO 2 and 3 inside layouts (zero_layout_test.cc).
cohort_test(engine_parallel_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/parallel_layout_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/parallel_parity_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/parallel_overlap_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/parallel_fault_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/checkpoint_runs_test.cc
          ${CMAKE_CURRENT_LIST_DIR}/zero_layout_test.cc
          ${PROJECT_SOURCE_DIR}/tests/comm/comm_test_util.cc
          ${PROJECT_SOURCE_DIR}/tests/comm/device_buffer.cc
  LIBS cohort_engine_trainer cohort_comm
  LABELS engine)
target_include_directories(engine_parallel_test PRIVATE ${PROJECT_SOURCE_DIR}/tests/comm)

# `cohort train` with tensor and pipeline parallelism end to end (real processes): layouts
# train the 1-rank model, checkpoints resume across layouts, a killed rank's job resumes,
# impossible layouts fail before writing anything.
cohort_test(engine_train_parallel_cli_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/train_parallel_cli_test.cc
  LIBS cohort_common
  LABELS engine integration)
cohort_build_paths(engine_train_parallel_cli_test COHORT_BINARY $<TARGET_FILE:cohort>)
add_dependencies(engine_train_parallel_cli_test cohort)
