# cohort_task_shim: the task shim and the lease file it watches, all that the lean
# cohort-task-shim program links besides cohort_common's pieces it calls.
add_library(cohort_task_shim
  ${CMAKE_CURRENT_LIST_DIR}/task_shim.cc
  ${CMAKE_CURRENT_LIST_DIR}/lease.cc
  ${CMAKE_CURRENT_LIST_DIR}/wakeup_lateness.cc
)
target_link_libraries(cohort_task_shim PUBLIC cohort_common)

# cohort-task-shim: the program the executor starts for every task (task_shim_main.cc),
# placed next to `cohort`, where FindTaskShim looks. cohort_common names libraries the shim
# never calls (spdlog, cpp-httplib and OpenSSL, yaml-cpp): --as-needed leaves them out of
# its NEEDED list, so a task start loads libstdc++, fmt and libc, and no CUDA library.
add_executable(cohort-task-shim ${CMAKE_CURRENT_LIST_DIR}/task_shim_main.cc)
target_link_libraries(cohort-task-shim PRIVATE cohort_task_shim)
target_link_options(cohort-task-shim PRIVATE LINKER:--as-needed)
set_target_properties(cohort-task-shim PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
install(TARGETS cohort-task-shim RUNTIME DESTINATION bin)

# cohort_agent_exec: the agent's process execution layer (executor, lease keeper) and GPU
# discovery. Included from src/agent/CMakeLists.txt.
add_library(cohort_agent_exec
  ${CMAKE_CURRENT_LIST_DIR}/executor.cc
  ${CMAKE_CURRENT_LIST_DIR}/lease_keeper.cc
  ${CMAKE_CURRENT_LIST_DIR}/proc_usage.cc
  ${CMAKE_CURRENT_LIST_DIR}/gpu/nvml.cc
  ${CMAKE_CURRENT_LIST_DIR}/gpu/simulated.cc
)
target_link_libraries(cohort_agent_exec PUBLIC cohort_task_shim cohort_common PRIVATE ${CMAKE_DL_LIBS})
