# The web dashboard's data request (GET /v1/dashboard) against a head at scale.
add_executable(bench_dashboard_scale ${CMAKE_CURRENT_LIST_DIR}/dashboard_scale.cc)
target_link_libraries(bench_dashboard_scale PRIVATE cohort_common cohort_api)
cohort_build_paths(bench_dashboard_scale COHORT_BINARY $<TARGET_FILE:cohort>)
add_dependencies(bench_dashboard_scale cohort)
