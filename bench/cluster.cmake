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
