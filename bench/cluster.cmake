# Benchmarks that drive real head and agent processes.
foreach(b e2e_jobs head_scale metrics_scale)
  add_executable(bench_${b} ${CMAKE_CURRENT_LIST_DIR}/${b}.cc)
  target_link_libraries(bench_${b} PRIVATE cohort_common cohort_api)
  cohort_build_paths(bench_${b} COHORT_BINARY $<TARGET_FILE:cohort>)
  add_dependencies(bench_${b} cohort)
endforeach()

# Container start overhead against a bare process (Podman; issue 20).
add_executable(bench_container_start ${CMAKE_CURRENT_LIST_DIR}/container_start.cc)
target_link_libraries(bench_container_start PRIVATE cohort_common cohort_api)
cohort_build_paths(bench_container_start COHORT_BINARY $<TARGET_FILE:cohort>)
add_dependencies(bench_container_start cohort)

# Job arrays: a 100,000-element submit and the head's memory; elements through 64 GPUs
# against the ideal (issue 20).
add_executable(bench_job_arrays ${CMAKE_CURRENT_LIST_DIR}/job_arrays.cc)
target_link_libraries(bench_job_arrays PRIVATE cohort_common cohort_api)
cohort_build_paths(bench_job_arrays COHORT_BINARY $<TARGET_FILE:cohort>)
add_dependencies(bench_job_arrays cohort)

# The HTTP layer alone, plain against mTLS (issue 13's cost of security, without the head).
add_executable(bench_http_server ${CMAKE_CURRENT_LIST_DIR}/http_server.cc)
target_link_libraries(bench_http_server PRIVATE cohort_common)

# The agent's /proc pass with and without a container's PID namespace to read (issue 18).
add_executable(bench_proc_usage ${CMAKE_CURRENT_LIST_DIR}/proc_usage.cc)
target_link_libraries(bench_proc_usage PRIVATE cohort_task_shim)

# CPU binding: two OpenMP tasks on one executor unbound and bound, and the launch cost.
find_package(OpenMP REQUIRED)
add_executable(bench_cpu_bind ${CMAKE_CURRENT_LIST_DIR}/cpu_bind.cc)
target_link_libraries(bench_cpu_bind PRIVATE cohort_agent_exec OpenMP::OpenMP_CXX)
cohort_build_paths(bench_cpu_bind COHORT_TASK_SHIM $<TARGET_FILE:cohort-task-shim>)
add_dependencies(bench_cpu_bind cohort-task-shim)
