# The attention kernels (src/engine/kernels/cuda/attention.cu) run on a CPU SIMT emulator
# (cuda_emu/emu.h): the real cuda_attention_test.cc against the kernels' own source, with
# the tensor-core and shared-memory primitives emulated and every shared-memory word
# shadowed to report races, reads of unwaited cp.async data and unwritten memory, under
# AddressSanitizer. It needs only the CUDA headers, so it runs in CI without a GPU (label
# `engine`). The large shapes (T=1024, B=4097, C=768) are too slow to emulate and are left
# to the GPU run (cuda_emu/run.sh runs any filter by hand).
if(TARGET cohort_engine_kernels_cuda)
  find_package(Python3 REQUIRED COMPONENTS Interpreter)
  find_package(CUDAToolkit REQUIRED)  # the headers only: nothing here links cudart
  set(_emu_dir ${CMAKE_CURRENT_LIST_DIR}/cuda_emu)
  set(_emu_cc ${CMAKE_CURRENT_BINARY_DIR}/attention_emu.cc)
  add_custom_command(
    OUTPUT ${_emu_cc}
    COMMAND ${Python3_EXECUTABLE} ${_emu_dir}/gen_attention_emu.py
            ${PROJECT_SOURCE_DIR}/src/engine/kernels/cuda/attention.cu ${_emu_cc}
    DEPENDS ${_emu_dir}/gen_attention_emu.py ${_emu_dir}/gen_cuda_emu.py
            ${PROJECT_SOURCE_DIR}/src/engine/kernels/cuda/attention.cu
    COMMENT "attention.cu -> attention_emu.cc (CPU emulator)")
  add_executable(engine_cuda_attention_emu_test
    ${_emu_cc}
    ${_emu_dir}/stub_cudart.cc
    ${_emu_dir}/emu_check.cc
    ${PROJECT_SOURCE_DIR}/src/engine/kernels/cuda/status.cc
    ${CMAKE_CURRENT_LIST_DIR}/cuda_attention_test.cc)
  target_include_directories(engine_cuda_attention_emu_test PRIVATE ${_emu_dir} ${CMAKE_CURRENT_LIST_DIR})
  target_include_directories(engine_cuda_attention_emu_test SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_compile_definitions(engine_cuda_attention_emu_test PRIVATE COHORT_HAVE_CUDA_ENGINE=1)
  # The generated file is the kernel source: its launchers keep a stream they do not use.
  set_source_files_properties(${_emu_cc} PROPERTIES COMPILE_OPTIONS
                              "-Wno-unused-parameter;-Wno-unknown-pragmas;-Wno-class-memaccess")
  target_compile_options(engine_cuda_attention_emu_test PRIVATE -O1 -g -fsanitize=address,undefined
                                                                -fno-omit-frame-pointer)
  target_link_options(engine_cuda_attention_emu_test PRIVATE -fsanitize=address,undefined)
  target_link_libraries(engine_cuda_attention_emu_test PRIVATE cohort_engine_kernels_cpu cohort_common
                        GTest::gtest GTest::gtest_main)
  gtest_discover_tests(engine_cuda_attention_emu_test DISCOVERY_TIMEOUT 60
                       TEST_PREFIX "Emu."
                       TEST_FILTER "-*T1024*:*B4097*:*B2_T256_C768*"
                       PROPERTIES LABELS engine TIMEOUT 300)

  # The other kernel families the same way: cuda_kernels_test.cc against gelu, residual,
  # common, layernorm, cross_entropy, adamw, grad_norm, matmul.cu (BiasGradient) and
  # encoder.cu, each .cu rewritten by gen_cuda_emu.py (static __shared__ arrays become
  # shadowed per-block storage). Not emulated: matmul.cc (cuBLASLt; matmul_stub.cc only lets
  # the test link, and the Matmul tests are filtered out) and cub (cub_shim.h sorts on the
  # host, so the encoder backward's own kernels run but cub's sort is not the real one).
  # The slowest test, GradNorm's (n = 1000003, 6 launches of 1024 blocks), takes ~40 s here.
  set(_emu_kernel_srcs)
  foreach(_k gelu residual common layernorm cross_entropy adamw grad_norm matmul encoder)
    set(_out ${CMAKE_CURRENT_BINARY_DIR}/kernels_emu/${_k}_emu.cc)
    add_custom_command(
      OUTPUT ${_out}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/kernels_emu
      COMMAND ${Python3_EXECUTABLE} ${_emu_dir}/gen_cuda_emu.py
              ${PROJECT_SOURCE_DIR}/src/engine/kernels/cuda/${_k}.cu ${_out}
      DEPENDS ${_emu_dir}/gen_cuda_emu.py ${PROJECT_SOURCE_DIR}/src/engine/kernels/cuda/${_k}.cu
      COMMENT "${_k}.cu -> ${_k}_emu.cc (CPU emulator)")
    list(APPEND _emu_kernel_srcs ${_out})
  endforeach()
  add_executable(engine_cuda_kernels_emu_test
    ${_emu_kernel_srcs}
    ${_emu_dir}/stub_cudart.cc
    ${_emu_dir}/emu_check.cc
    ${_emu_dir}/matmul_stub.cc
    ${PROJECT_SOURCE_DIR}/src/engine/kernels/cuda/status.cc
    ${CMAKE_CURRENT_LIST_DIR}/cuda_kernels_test.cc)
  target_include_directories(engine_cuda_kernels_emu_test PRIVATE ${_emu_dir} ${CMAKE_CURRENT_LIST_DIR})
  target_include_directories(engine_cuda_kernels_emu_test SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_compile_definitions(engine_cuda_kernels_emu_test PRIVATE COHORT_HAVE_CUDA_ENGINE=1)
  set_source_files_properties(${_emu_kernel_srcs} PROPERTIES COMPILE_OPTIONS
                              "-Wno-unused-parameter;-Wno-unknown-pragmas;-Wno-class-memaccess")
  target_compile_options(engine_cuda_kernels_emu_test PRIVATE -O1 -g -fsanitize=address,undefined
                                                              -fno-omit-frame-pointer)
  target_link_options(engine_cuda_kernels_emu_test PRIVATE -fsanitize=address,undefined)
  target_link_libraries(engine_cuda_kernels_emu_test PRIVATE cohort_engine_kernels_cpu
                        cohort_engine_optim cohort_common GTest::gtest GTest::gtest_main)
  gtest_discover_tests(engine_cuda_kernels_emu_test DISCOVERY_TIMEOUT 60
                       TEST_PREFIX "Emu."
                       TEST_FILTER "-CudaMatmulTest.ForwardAndBackwardMatchCpu:CudaMatmulTest.BackwardSkipsNullDinp:CudaMatmulTest.RejectsBadShapes"
                       PROPERTIES LABELS engine TIMEOUT 300)
endif()
