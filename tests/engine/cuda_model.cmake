# The GPU model against the CPU reference (issue 5): forward/backward and the ready slices,
# a whole AdamW step, 100 training steps, `cohort train` with train.device cuda (stopped and
# resumed; checkpoints moving between CPU and GPU), and two ranks over NCCL. GPU tests skip
# without a device; the memory plan and the shape errors run everywhere.
if(TARGET cohort_engine_kernels_cuda)
  cohort_test(engine_cuda_model_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_model_test.cc
            ${PROJECT_SOURCE_DIR}/tests/comm/comm_test_util.cc
            ${PROJECT_SOURCE_DIR}/tests/comm/device_buffer.cc
    LIBS cohort_engine_model_cuda cohort_engine_model cohort_engine_optim cohort_engine_parallel
         cohort_comm cohort_common
    LABELS engine gpu)
  target_include_directories(engine_cuda_model_test PRIVATE ${PROJECT_SOURCE_DIR}/tests/comm)
  cohort_build_paths(engine_cuda_model_test COHORT_BINARY $<TARGET_FILE:cohort>)
  add_dependencies(engine_cuda_model_test cohort)

  # The shard model (tensor and pipeline parallelism) on a real GPU, tensor groups over NCCL
  # (2 GPUs; skips with fewer). Also on the emulator over gloo (cuda_emu.cmake).
  cohort_test(engine_cuda_shard_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_shard_test.cc
            ${PROJECT_SOURCE_DIR}/tests/comm/comm_test_util.cc
            ${PROJECT_SOURCE_DIR}/tests/comm/device_buffer.cc
    LIBS cohort_engine_model_shard_cuda cohort_engine_model_cuda cohort_engine_model_shard
         cohort_engine_parallel cohort_comm cohort_common
    LABELS engine gpu)
  target_include_directories(engine_cuda_shard_test PRIVATE ${PROJECT_SOURCE_DIR}/tests/comm)

  # The trainer with train.device cuda in process (also run on the CPU emulator in CI,
  # cuda_emu.cmake).
  cohort_test(engine_cuda_trainer_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_trainer_test.cc
    LIBS cohort_engine_trainer cohort_engine_kernels_cuda cohort_common
    LABELS engine gpu)

  # The trainer with train.device cuda and tensor/pipeline layouts in process, each rank a
  # thread on its own GPU over NCCL (skips with too few GPUs; also on the emulator,
  # cuda_emu.cmake).
  cohort_test(engine_cuda_parallel_trainer_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_parallel_trainer_test.cc
    LIBS cohort_engine_trainer cohort_engine_kernels_cuda cohort_common
    LABELS engine gpu)

  # Pipeline messages device to device over NCCL send/recv against the host path (2 GPUs),
  # the overlapped data-parallel reduction and ZeRO 1 and 2 inside tensor/pipeline layouts
  # (4 GPUs); skips with fewer. Also on the emulator over gloo (cuda_emu.cmake).
  cohort_test(engine_cuda_parallel_step_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_parallel_step_test.cc
            ${PROJECT_SOURCE_DIR}/tests/comm/comm_test_util.cc
            ${PROJECT_SOURCE_DIR}/tests/comm/device_buffer.cc
    LIBS cohort_engine_trainer cohort_engine_kernels_cuda cohort_comm cohort_common
    LABELS engine gpu)
  target_include_directories(engine_cuda_parallel_step_test PRIVATE ${PROJECT_SOURCE_DIR}/tests/comm)

  # ZeRO-1/2/3 and the offloads on the CUDA TrainModel, 2 ranks over NCCL (2 GPUs; skips
  # with fewer). Also on the emulator over gloo (cuda_emu.cmake).
  cohort_test(engine_cuda_zero_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_zero_test.cc
            ${PROJECT_SOURCE_DIR}/tests/comm/comm_test_util.cc
            ${PROJECT_SOURCE_DIR}/tests/comm/device_buffer.cc
    LIBS cohort_engine_trainer cohort_engine_kernels_cuda cohort_comm cohort_common
    LABELS engine gpu)
  target_include_directories(engine_cuda_zero_test PRIVATE ${PROJECT_SOURCE_DIR}/tests/comm)
endif()
