# The CUDA engine on a CPU SIMT emulator (cuda_emu/emu.h), in CI without a GPU (label
# `engine`). Each kernel family's own .cu source is rewritten at build time by
# gen_cuda_emu.py: the tensor-core and shared-memory primitives are emulated, static and
# dynamic __shared__ storage becomes per-block memory whose every word is shadowed (races,
# reads of unwaited cp.async data and of unwritten memory fail the test), each CUDA thread of
# a block runs as a fiber switched at the barriers (cuda_emu/fiber.h), and everything runs
# under AddressSanitizer, which is told of every fiber switch. That is the checked build
# (cohort_cuda_emu); the trainer-level tests marked [unchecked] below run the same kernels
# on the same schedule without those checks (cohort_cuda_emu_fast, see below), their own
# code still under ASan. The CUDA runtime is stub_cudart.cc (host memory; copies checked
# against device allocations and their kind) and cuBLASLt is cublaslt_emu.cc (the
# documented semantics of the calls matmul.cc makes, on the host, epilogues included;
# cublaslt_emu.h lets a test make its heuristic decline an epilogue, so the kernels'
# fallback runs too). cub's sort is cub_shim.h (a host stable sort).
#
# The emulator's own test, engine_cuda_emu_selftest (cuda_emu/selftest.cc), injects each
# hazard it must catch into a tiny kernel and expects the report. Then the GPU tests, each
# compiled against the emulator:
#   engine_cuda_attention_emu_test  cuda_attention_test.cc (the large shapes, T=1024,
#                                   B=4097, C=768, are too slow here: cuda_emu/run.sh runs
#                                   any filter by hand);
#   engine_cuda_kernels_emu_test    cuda_kernels_test.cc: every other kernel family and
#                                   matmul.cc;
#   engine_cuda_model_emu_test      cuda_model_test.cc: GptCudaModel and GptCudaAdamW
#                                   against the CPU model, and 2-rank DDP over gloo (the
#                                   `cohort train` cases need the real binary; the
#                                   hundred-step run, ~4 s a step here, is left to
#                                   cuda_emu/run.sh by hand);
#   engine_cuda_shard_emu_test      cuda_shard_test.cc: the tensor/pipeline shard model
#                                   against the CPU shard and the single-device model;
#   engine_cuda_trainer_emu_test    cuda_trainer_test.cc: the trainer with train.device
#                                   cuda, in process [unchecked];
#   engine_cuda_parallel_trainer_emu_test
#                                   cuda_parallel_trainer_test.cc: the same with tensor and
#                                   pipeline layouts, each rank a thread [unchecked];
#   engine_cuda_parallel_step_emu_test
#                                   cuda_parallel_step_test.cc: device-to-device pipeline
#                                   messages, the overlapped data-parallel reduction, and
#                                   ZeRO 1 to 3 and the offloads inside tensor/pipeline
#                                   layouts [unchecked];
#   engine_cuda_zero_emu_test       cuda_zero_test.cc: ZeRO-1/2/3 and the offloads on the
#                                   CUDA TrainModel, 2 ranks over gloo (one process per
#                                   stage) [unchecked];
#   bench_zero_emu                  bench/zero.cc's offload and memory-cuda sections on a
#                                   tiny model (correctness only) [unchecked].
# What the emulator cannot prove: that its fragment layouts match the hardware, anything
# about memory ordering beyond barrier epochs or between streams (everything is
# synchronous here), cuBLASLt's own kernels, or anything about speed. It runs one schedule:
# each thread to its next barrier in turn (the shadow finds a race whatever the order, but a
# kernel spinning on a flag another thread of its block sets would hang here).
if(TARGET cohort_engine_kernels_cuda)
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  # The headers only: the emulated code never calls the real cudart (cohort_comm brings it for
  # NCCL, but the emulated tests' ranks communicate over gloo, which never initialises it).
  find_package(CUDAToolkit REQUIRED)
  set(_emu_dir ${CMAKE_CURRENT_LIST_DIR}/cuda_emu)
  set(_cuda_src ${PROJECT_SOURCE_DIR}/src/engine/kernels/cuda)

  # <family>.cu -> kernels_emu/<family>_emu.cc, once per family; _emu_<family> names it.
  foreach(_k attention gelu residual common layernorm cross_entropy adamw grad_norm matmul
             encoder kv_attention)
    set(_out ${CMAKE_CURRENT_BINARY_DIR}/kernels_emu/${_k}_emu.cc)
    set(_extra)
    if(_k STREQUAL "attention")
      set(_extra --expect-dynamic-smem 2)  # forward and backward
    elseif(_k STREQUAL "kv_attention")
      set(_extra --expect-dynamic-smem 0)  # the warps' partial results are static
    endif()
    add_custom_command(
      OUTPUT ${_out}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/kernels_emu
      COMMAND ${Python3_EXECUTABLE} ${_emu_dir}/gen_cuda_emu.py ${_cuda_src}/${_k}.cu ${_out}
              ${_extra}
      DEPENDS ${_emu_dir}/gen_cuda_emu.py ${_cuda_src}/${_k}.cu
      COMMENT "${_k}.cu -> ${_k}_emu.cc (CPU emulator)")
    # The generated files are the kernel sources: their launchers keep a stream they do not use.
    set_source_files_properties(${_out} PROPERTIES COMPILE_OPTIONS
                                "-Wno-unused-parameter;-Wno-unknown-pragmas;-Wno-class-memaccess")
    set(_emu_${_k} ${_out})
  endforeach()
  set(_emu_not_attention ${_emu_gelu} ${_emu_residual} ${_emu_common} ${_emu_layernorm}
      ${_emu_cross_entropy} ${_emu_adamw} ${_emu_grad_norm} ${_emu_matmul} ${_emu_encoder}
      ${_emu_kv_attention})
  # The host cuBLASLt does the products: unsanitised and optimised (-O3 vectorises its
  # products' independent rows), or the model's hundred steps take minutes.
  set_source_files_properties(${_emu_dir}/cublaslt_emu.cc PROPERTIES COMPILE_OPTIONS
                              "-O3;-fno-sanitize=all")

  # The host side of the emulated engine, built once for both emulator libraries below:
  # common/cuda_status.cc, matmul.cc on the host cuBLASLt, the runtime stand-ins and
  # GptCudaModel, under ASan/UBSan (device buffers are host allocations, so the model
  # overrunning one is reported; and ASan's memcpy checks every emulated cudaMemcpy).
  set(_emu_sanitize -O2 -g -fsanitize=address,undefined -fno-omit-frame-pointer)
  add_library(cohort_cuda_emu_host OBJECT
    ${_emu_dir}/cublaslt_emu.cc ${_emu_dir}/stub_cudart.cc
    ${PROJECT_SOURCE_DIR}/src/common/cuda_status.cc ${_cuda_src}/matmul.cc ${PROJECT_SOURCE_DIR}/src/engine/model/cuda_arena.cc
    ${PROJECT_SOURCE_DIR}/src/engine/model/cuda_adamw.cc
    ${PROJECT_SOURCE_DIR}/src/engine/model/gpt_cuda.cc
    ${PROJECT_SOURCE_DIR}/src/engine/model/gpt_shard_cuda.cc)
  target_include_directories(cohort_cuda_emu_host PUBLIC ${_emu_dir})
  target_include_directories(cohort_cuda_emu_host SYSTEM PUBLIC ${CUDAToolkit_INCLUDE_DIRS})
  target_compile_definitions(cohort_cuda_emu_host PUBLIC COHORT_HAVE_CUDA_ENGINE=1)
  target_compile_options(cohort_cuda_emu_host PRIVATE ${_emu_sanitize})
  target_link_libraries(cohort_cuda_emu_host PUBLIC cohort_engine_model cohort_engine_optim
                        cohort_engine_model_shard cohort_engine_kernels_cpu cohort_common)

  # The emulated kernels on that host side, in two builds of the same sources and schedule:
  #   cohort_cuda_emu       checked: every shared-memory word shadowed, poison, the kernels
  #                         and the emulator under ASan/UBSan (which is told of every fiber
  #                         switch). The kernel, attention, model, shard and serve tests and
  #                         the self-test, which are there to prove the kernels.
  #   cohort_cuda_emu_fast  unchecked (COHORT_EMU_UNCHECKED, emu.h): no shadow or poison, the
  #                         kernels and the emulator at -O2 without sanitizers. For the
  #                         trainer-level tests (cohort_engine_trainer_emu: trainer, parallel
  #                         trainer, parallel step, ZeRO), which prove sharding,
  #                         communication, checkpoints and bookkeeping on kernels the checked
  #                         tests have proven: they spent most of their time re-checking every
  #                         launch of every step. Their own code, the trainer's and the host
  #                         side above stay under ASan/UBSan (INTERFACE options).
  # Both are always built: the fast one adds the 13 kernel/emulator compiles.
  function(_cohort_emu_library name)
    cmake_parse_arguments(L "UNCHECKED" "" "" ${ARGN})
    # Linking the object library puts its objects into this archive (not again into its users).
    add_library(${name} STATIC ${_emu_attention} ${_emu_not_attention} ${_emu_dir}/emu.cc
                ${_emu_dir}/fiber.cc)
    target_link_libraries(${name} PUBLIC cohort_cuda_emu_host)
    if(L_UNCHECKED)
      target_compile_definitions(${name} PRIVATE COHORT_EMU_UNCHECKED=1)
      target_compile_options(${name} PRIVATE -O2 -g INTERFACE ${_emu_sanitize})
    else()
      target_compile_options(${name} PUBLIC ${_emu_sanitize})
    endif()
    target_link_options(${name} PUBLIC -fsanitize=address,undefined)
  endfunction()
  _cohort_emu_library(cohort_cuda_emu)
  _cohort_emu_library(cohort_cuda_emu_fast UNCHECKED)

  # OMP_WAIT_POLICY=passive, as tests/CMakeLists.txt gives its tests (see there): the CPU
  # reference model's OpenMP team otherwise spins at its barriers while the emulator works,
  # a fifth of a model test's CPU time (perf), taken from the test beside it.
  set(_emu_test_env ENVIRONMENT OMP_WAIT_POLICY=passive)

  # An emulated test executable: SOURCES with the hazard check, discovered with FILTER (a
  # gtest negative filter, or empty).
  # UNCHECKED: on cohort_cuda_emu_fast (a test whose LIBS bring it must say so).
  function(_cohort_emu_test name)
    cmake_parse_arguments(E "UNCHECKED" "FILTER" "SOURCES;LIBS" ${ARGN})
    add_executable(${name} ${E_SOURCES} ${_emu_dir}/emu_check.cc)
    target_include_directories(${name} PRIVATE ${CMAKE_CURRENT_LIST_DIR})
    if(E_UNCHECKED)
      set(_emu_lib cohort_cuda_emu_fast)
    else()
      set(_emu_lib cohort_cuda_emu)
    endif()
    target_link_libraries(${name} PRIVATE ${E_LIBS} ${_emu_lib} GTest::gtest GTest::gtest_main)
    set(_filter)
    if(E_FILTER)
      set(_filter TEST_FILTER "${E_FILTER}")
    endif()
    gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 TEST_PREFIX "Emu." ${_filter}
                         PROPERTIES LABELS engine TIMEOUT 900 ${_emu_test_env})
    cohort_test_costs(${name})
  endfunction()

  # The emulator's self-test: selftest_kernels.cu through the same rewrite as the engine's
  # kernels, each with one injected bug (a missing barrier, a read before a cp.async wait, ...)
  # that selftest.cc expects to be reported; without emu_check.cc, since it moves the counters.
  set(_selftest_cu ${CMAKE_CURRENT_BINARY_DIR}/kernels_emu/selftest_kernels_emu.cc)
  add_custom_command(
    OUTPUT ${_selftest_cu}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/kernels_emu
    COMMAND ${Python3_EXECUTABLE} ${_emu_dir}/gen_cuda_emu.py ${_emu_dir}/selftest_kernels.cu
            ${_selftest_cu} --expect-dynamic-smem 2
    DEPENDS ${_emu_dir}/gen_cuda_emu.py ${_emu_dir}/selftest_kernels.cu
    COMMENT "selftest_kernels.cu -> selftest_kernels_emu.cc (CPU emulator)")
  set_source_files_properties(${_selftest_cu} PROPERTIES COMPILE_OPTIONS
                              "-Wno-unused-parameter;-Wno-unknown-pragmas")
  add_executable(engine_cuda_emu_selftest ${_emu_dir}/selftest.cc ${_selftest_cu})
  target_link_libraries(engine_cuda_emu_selftest PRIVATE cohort_cuda_emu GTest::gtest
                        GTest::gtest_main)
  gtest_discover_tests(engine_cuda_emu_selftest DISCOVERY_TIMEOUT 60 TEST_PREFIX "Emu."
                       PROPERTIES LABELS engine ${_emu_test_env})
  cohort_test_costs(engine_cuda_emu_selftest)
  # The same kernels on the unchecked build: it still computes them, still aborts on a
  # deadlock and a shared index out of range, still reports cp.async work never waited for
  # and still refuses a copy past an allocation. The shadow's hazard cases are the checked
  # build's alone (they fail here), and so are ASan's (these kernels are instrumented here,
  # the fast library's are not).
  add_executable(engine_cuda_emu_unchecked_selftest ${_emu_dir}/selftest.cc ${_selftest_cu})
  target_compile_definitions(engine_cuda_emu_unchecked_selftest PRIVATE COHORT_EMU_UNCHECKED=1)
  target_link_libraries(engine_cuda_emu_unchecked_selftest PRIVATE cohort_cuda_emu_fast
                        GTest::gtest GTest::gtest_main)
  gtest_discover_tests(engine_cuda_emu_unchecked_selftest DISCOVERY_TIMEOUT 60
    TEST_PREFIX "Emu.Unchecked."
    TEST_FILTER "*CorrectKernel*:*TwoHostThreads*:*CpAsync*WaitedFor*:*SharedArrayIndex*:*BarrierNotEveryThreadReaches*:*CopyPastADeviceAllocation*"
    PROPERTIES LABELS engine ${_emu_test_env})
  cohort_test_costs(engine_cuda_emu_unchecked_selftest)

  _cohort_emu_test(engine_cuda_attention_emu_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_attention_test.cc
    FILTER "-*T1024*:*B4097*:*B2_T256_C768*")

  # The other families and matmul.cc. The slowest tests, matmul.cc's on the host cuBLASLt and
  # GradNorm's (n = 1000003, 6 launches of 1024 blocks of 256 threads), take ~6-8 s here.
  _cohort_emu_test(engine_cuda_kernels_emu_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_kernels_test.cc)
  # The emulated cuBLASLt's test controls (cublaslt_emu.h): its epilogue fallback tests.
  target_compile_definitions(engine_cuda_kernels_emu_test PRIVATE COHORT_CUDA_EMULATED=1)

  # The whole GPU model against the CPU model, and its data-parallel gradient averaging
  # (the DdpReducer on the model's gradient slices and events) with gloo standing in for
  # NCCL: emulated device memory is host memory. The `cohort train` cases, which need a
  # CUDA-built binary on a GPU, are filtered out.
  _cohort_emu_test(engine_cuda_model_emu_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_model_test.cc
            ${PROJECT_SOURCE_DIR}/tests/comm/comm_test_util.cc
            ${PROJECT_SOURCE_DIR}/tests/comm/device_buffer.cc
    LIBS cohort_engine_parallel cohort_comm
    FILTER "-GptCudaTrainCliTest.*:GptCudaModelTest.HundredStepsTrackTheCpu")
  target_include_directories(engine_cuda_model_emu_test PRIVATE ${PROJECT_SOURCE_DIR}/tests/comm)
  target_compile_definitions(engine_cuda_model_emu_test PRIVATE COHORT_CUDA_EMULATED=1
                                                               COHORT_BINARY="cohort")

  # The CUDA shard model (tensor and pipeline parallelism) against the CPU shard model and
  # the single-device CUDA model; tensor groups over gloo on the emulated device memory.
  _cohort_emu_test(engine_cuda_shard_emu_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_shard_test.cc
            ${PROJECT_SOURCE_DIR}/tests/comm/comm_test_util.cc
            ${PROJECT_SOURCE_DIR}/tests/comm/device_buffer.cc
    LIBS cohort_engine_parallel cohort_comm)
  target_include_directories(engine_cuda_shard_emu_test PRIVATE ${PROJECT_SOURCE_DIR}/tests/comm)
  target_compile_definitions(engine_cuda_shard_emu_test PRIVATE COHORT_CUDA_EMULATED=1)

  # The inference server's GPU backend (src/serve/cuda_model.cc) against its CPU backend,
  # and continuous batching on it; built from the serve sources it needs.
  _cohort_emu_test(serve_cuda_emu_test
    SOURCES ${PROJECT_SOURCE_DIR}/tests/serve/cuda_model_test.cc
            ${PROJECT_SOURCE_DIR}/src/serve/cuda_model.cc ${PROJECT_SOURCE_DIR}/src/serve/cpu_model.cc
            ${PROJECT_SOURCE_DIR}/src/serve/kv_cache.cc ${PROJECT_SOURCE_DIR}/src/serve/batcher.cc
            ${PROJECT_SOURCE_DIR}/src/serve/sampling.cc ${PROJECT_SOURCE_DIR}/src/serve/text_stream.cc
            ${PROJECT_SOURCE_DIR}/src/serve/serve_metrics.cc
    LIBS cohort_engine_data)
  target_include_directories(serve_cuda_emu_test PRIVATE ${PROJECT_SOURCE_DIR}/tests/serve
                                                         ${PROJECT_SOURCE_DIR}/tests/engine)

  # The trainer with train.device cuda, in process: cohort_engine_trainer's own sources
  # built again against the emulated CUDA engine (a single rank needs no communicator, so
  # the real cudart that cohort_comm links for NCCL is never initialised).
  get_target_property(_trainer_srcs cohort_engine_trainer SOURCES)
  list(TRANSFORM _trainer_srcs PREPEND ${PROJECT_SOURCE_DIR}/src/engine/)
  add_library(cohort_engine_trainer_emu STATIC ${_trainer_srcs})
  # Lets train.device cuda run over gloo (config.cc CheckDeviceBackend): the emulated device
  # memory is host memory, so the tensor/pipeline trainer tests run several ranks in process.
  target_compile_definitions(cohort_engine_trainer_emu PRIVATE COHORT_CUDA_EMULATED=1)
  target_link_libraries(cohort_engine_trainer_emu
    PUBLIC cohort_cuda_emu_fast cohort_engine_model cohort_engine_optim cohort_engine_data
           cohort_engine_checkpoint cohort_engine_parallel cohort_engine_model_shard cohort_comm
           cohort_common
    PRIVATE CLI11::CLI11)
  _cohort_emu_test(engine_cuda_trainer_emu_test UNCHECKED
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_trainer_test.cc
    LIBS cohort_engine_trainer_emu)
  # The trainer with train.device cuda and tensor/pipeline layouts: every rank a thread in
  # process, gloo over the emulated device memory standing in for nccl.
  _cohort_emu_test(engine_cuda_parallel_trainer_emu_test UNCHECKED
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_parallel_trainer_test.cc
    LIBS cohort_engine_trainer_emu)
  target_compile_definitions(engine_cuda_parallel_trainer_emu_test PRIVATE
                             COHORT_CUDA_EMULATED=1)

  # How a CUDA layout moves a step's data: device-to-device pipeline messages against the host
  # path, the overlapped data-parallel reduction against the one after the step (bitwise), and
  # ZeRO 1 to 3 in the data group of a tensor/pipeline layout against ZeRO-0 there.
  _cohort_emu_test(engine_cuda_parallel_step_emu_test UNCHECKED
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_parallel_step_test.cc
            ${PROJECT_SOURCE_DIR}/tests/comm/comm_test_util.cc
            ${PROJECT_SOURCE_DIR}/tests/comm/device_buffer.cc
    LIBS cohort_engine_trainer_emu)
  target_include_directories(engine_cuda_parallel_step_emu_test PRIVATE
                             ${PROJECT_SOURCE_DIR}/tests/comm)
  target_compile_definitions(engine_cuda_parallel_step_emu_test PRIVATE COHORT_CUDA_EMULATED=1)

  # ZeRO stages 1 to 3 and the offloads on the CUDA TrainModel (trainer/cuda_zero.h),
  # two ranks over gloo on the emulated device memory, against CUDA DDP and the CPU model.
  _cohort_emu_test(engine_cuda_zero_emu_test UNCHECKED
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_zero_test.cc
            ${PROJECT_SOURCE_DIR}/tests/comm/comm_test_util.cc
            ${PROJECT_SOURCE_DIR}/tests/comm/device_buffer.cc
    LIBS cohort_engine_trainer_emu)
  target_include_directories(engine_cuda_zero_emu_test PRIVATE ${PROJECT_SOURCE_DIR}/tests/comm)
  target_compile_definitions(engine_cuda_zero_emu_test PRIVATE COHORT_CUDA_EMULATED=1)

  # bench_zero against the emulated CUDA engine: its offload and memory-cuda sections on a
  # tiny model, for correctness only (the emulator says nothing about speed; bench/README.md).
  add_executable(bench_zero_emu ${PROJECT_SOURCE_DIR}/bench/zero.cc)
  target_compile_definitions(bench_zero_emu PRIVATE COHORT_CUDA_EMULATED=1)
  target_include_directories(bench_zero_emu PRIVATE ${PROJECT_SOURCE_DIR}/bench)
  target_link_libraries(bench_zero_emu PRIVATE cohort_engine_trainer_emu cohort_cuda_emu_fast)
endif()
