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

# The server's GPU backend in process (continuous batching, bf16 KV cache) beside PyTorch
# eager generation on the same GPU (torch_generate.py --device cuda): bench/gpu/run.sh runs
# it on a lent device (issue 21 item 4).
if(COHORT_HAVE_CUDA)
  add_executable(bench_serve_gpu ${CMAKE_CURRENT_LIST_DIR}/serve_gpu.cc)
  target_link_libraries(bench_serve_gpu PRIVATE cohort_serve cohort_engine_model cohort_common)
endif()
