# cohort_agent_exec: the agent's process execution layer (task shim, executor) and GPU
# discovery. Included from src/agent/CMakeLists.txt.
add_library(cohort_agent_exec
  ${CMAKE_CURRENT_LIST_DIR}/executor.cc
  ${CMAKE_CURRENT_LIST_DIR}/task_shim.cc
  ${CMAKE_CURRENT_LIST_DIR}/proc_usage.cc
  ${CMAKE_CURRENT_LIST_DIR}/gpu/nvml.cc
  ${CMAKE_CURRENT_LIST_DIR}/gpu/simulated.cc
)
target_link_libraries(cohort_agent_exec PUBLIC cohort_common PRIVATE ${CMAKE_DL_LIBS})
