# One full scheduling pass on a large synthetic cluster (1,000 nodes x 8 GPUs, 10,000
# pending jobs); prints the median and p90 time of ~20 passes.
add_executable(bench_sched_pass ${CMAKE_CURRENT_LIST_DIR}/sched_pass.cc)
target_link_libraries(bench_sched_pass PRIVATE cohort_sched)

# The same pass with issue 18's requests (fractions, GPU types, NVLink islands, switches,
# topology required) on 1,000 nodes x 8 GPUs and 10,000 pending jobs, beside the plain pass.
add_executable(bench_sched_gpu_pass ${CMAKE_CURRENT_LIST_DIR}/sched_gpu_pass.cc)
target_link_libraries(bench_sched_gpu_pass PRIVATE cohort_sched)
