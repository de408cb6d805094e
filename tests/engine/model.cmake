# Engine model, kernels and optimizer tests (CPU reference).
# The PyTorch parity test needs the Python that has Debian's python3-torch: /usr/bin/python3
# when present (a pyenv/venv python3 on PATH usually lacks torch), else python3 on PATH.
if(EXISTS /usr/bin/python3)
  set(_cohort_torch_python /usr/bin/python3)
else()
  find_program(_cohort_torch_python NAMES python3 REQUIRED)
endif()
set(COHORT_TORCH_PYTHON ${_cohort_torch_python} CACHE FILEPATH "Python with torch for the engine parity tests")

cohort_test(engine_torch_parity_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/torch_parity_test.cc
  LIBS cohort_engine_model cohort_engine_optim cohort_common
  LABELS engine)
target_compile_definitions(engine_torch_parity_test PRIVATE
  COHORT_TORCH_PYTHON="${COHORT_TORCH_PYTHON}")
cohort_build_paths(engine_torch_parity_test
  COHORT_TORCH_REFERENCE ${CMAKE_CURRENT_LIST_DIR}/torch_reference.py)

cohort_test(engine_kernels_grad_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/kernels_grad_test.cc
  LIBS cohort_engine_kernels_cpu cohort_common
  LABELS engine)

cohort_test(engine_invariant_matmul_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/invariant_matmul_test.cc
  LIBS cohort_engine_kernels_cpu cohort_common
  LABELS engine)

cohort_test(engine_kv_attention_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/kv_attention_test.cc
  LIBS cohort_engine_kernels_cpu cohort_common
  LABELS engine)

cohort_test(engine_gpt_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/gpt_test.cc
  LIBS cohort_engine_model cohort_common
  LABELS engine)

cohort_test(engine_optim_test
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/optim_test.cc
  LIBS cohort_engine_optim cohort_common
  LABELS engine)
