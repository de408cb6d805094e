# Inference: bench_serve — the server beside PyTorch eager generation (bench/
# torch_generate.py, Debian's python3-torch, COHORT_TORCH_PYTHON from engine.cmake), the
# gateway's added latency, and failover when an agent under a replica is killed.
add_executable(bench_serve ${CMAKE_CURRENT_LIST_DIR}/serve.cc)
target_link_libraries(bench_serve PRIVATE cohort_engine_kernels_cpu cohort_common)
target_compile_definitions(bench_serve PRIVATE COHORT_TORCH_PYTHON="${COHORT_TORCH_PYTHON}")
cohort_build_paths(bench_serve COHORT_BINARY $<TARGET_FILE:cohort>
  COHORT_SOURCE_DIR ${PROJECT_SOURCE_DIR}
  COHORT_TORCH_SCRIPT ${CMAKE_CURRENT_LIST_DIR}/torch_generate.py)
add_dependencies(bench_serve cohort)
