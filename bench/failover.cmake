# Failover: kill -9 of an agent running part of a 2-node training job; time until its node
# is DOWN, the job runs again elsewhere, and training progresses again.
add_executable(bench_failover ${CMAKE_CURRENT_LIST_DIR}/failover.cc)
target_link_libraries(bench_failover PRIVATE cohort_common cohort_api)
cohort_build_paths(bench_failover COHORT_BINARY $<TARGET_FILE:cohort>)
add_dependencies(bench_failover cohort)
