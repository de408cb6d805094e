# One full scheduling pass on a large synthetic cluster (1,000 nodes x 8 GPUs, 10,000
# pending jobs); prints the median and p90 time of ~20 passes.
add_executable(bench_sched_pass ${CMAKE_CURRENT_LIST_DIR}/sched_pass.cc)
target_link_libraries(bench_sched_pass PRIVATE cohort_sched)
