# CUDA kernel parity tests (issue 5): every kernel family but attention against the CPU
# reference (kernels/cpu, engine/optim) on bf16-rounded random inputs. They skip when no
# GPU exists; the CUDA status test (common/cuda_status.h: the check macro, error codes and
# device count; label `engine` only) runs everywhere.
if(TARGET cohort_engine_kernels_cuda)
  cohort_test(engine_cuda_kernels_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_kernels_test.cc
    LIBS cohort_engine_kernels_cuda cohort_engine_kernels_cpu cohort_engine_optim cohort_common
    LABELS engine gpu)
  cohort_test(engine_cuda_status_test
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/cuda_status_test.cc
    LIBS cohort_cuda_status cohort_common
    LABELS engine)
endif()
