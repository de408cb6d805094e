# Fused CUDA attention (engine/kernels/cuda/attention.cuh) against the float32 CPU
# reference. The parity tests skip without a GPU; the shape-validation tests in the same
# binary need no device and run everywhere.
if(TARGET cohort_engine_kernels_cuda)
  cohort_test(engine_cuda_attention_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_attention_test.cc
    LIBS cohort_engine_kernels_cuda cohort_engine_kernels_cpu cohort_common
    LABELS engine gpu)
endif()
