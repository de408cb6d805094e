# Benchmarks of the data plane's communication.
add_executable(bench_rendezvous ${CMAKE_CURRENT_LIST_DIR}/rendezvous.cc)
target_link_libraries(bench_rendezvous PRIVATE cohort_comm_store cohort_common)
cohort_build_paths(bench_rendezvous COHORT_BINARY $<TARGET_FILE:cohort>)
add_dependencies(bench_rendezvous cohort)
