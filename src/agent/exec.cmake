# cohort_task_shim: the task shim, the identity it gives a task, the lease file it watches,
# the container runtime's command lines and a Docker container's init it publishes (with
# the /proc reading that checks it): all that the lean cohort-task-shim program
# links besides cohort_common's pieces it calls.
add_library(cohort_task_shim
  ${CMAKE_CURRENT_LIST_DIR}/container.cc
  ${CMAKE_CURRENT_LIST_DIR}/container_root.cc
  ${CMAKE_CURRENT_LIST_DIR}/proc_usage.cc
  ${CMAKE_CURRENT_LIST_DIR}/task_shim.cc
  ${CMAKE_CURRENT_LIST_DIR}/task_identity.cc
  ${CMAKE_CURRENT_LIST_DIR}/lease.cc
  ${CMAKE_CURRENT_LIST_DIR}/output_file.cc
  ${CMAKE_CURRENT_LIST_DIR}/wakeup_lateness.cc
)
target_link_libraries(cohort_task_shim PUBLIC cohort_common)

# cohort-task-shim: the program the executor starts for every task (task_shim_main.cc),
# placed next to `cohort`, where FindTaskShim looks. Built from its own sources and the
# five pieces of cohort_common it calls, with fmt header-only, and linked statically where
# the toolchain can: a task start then maps one file and runs no dynamic linker (ld.so
# relocating libstdc++ and fmt was over a third of the shim's CPU, ~1.5 ms a task on the
# 2-core development VM). Elsewhere it links dynamically, loading libstdc++, fmt and libc
# and no CUDA library.
set(COHORT_TASK_SHIM_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/task_shim_main.cc
  ${CMAKE_CURRENT_LIST_DIR}/container.cc
  ${CMAKE_CURRENT_LIST_DIR}/container_root.cc
  ${CMAKE_CURRENT_LIST_DIR}/proc_usage.cc
  ${CMAKE_CURRENT_LIST_DIR}/task_shim.cc
  ${CMAKE_CURRENT_LIST_DIR}/task_identity.cc
  ${CMAKE_CURRENT_LIST_DIR}/lease.cc
  ${CMAKE_CURRENT_LIST_DIR}/output_file.cc
  ${CMAKE_CURRENT_LIST_DIR}/wakeup_lateness.cc
  ${PROJECT_SOURCE_DIR}/src/common/clock.cc
  ${PROJECT_SOURCE_DIR}/src/common/cpu_set.cc
  ${PROJECT_SOURCE_DIR}/src/common/error.cc
  ${PROJECT_SOURCE_DIR}/src/common/json.cc
  ${PROJECT_SOURCE_DIR}/src/common/subprocess.cc
)
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_LINK_OPTIONS -static)
check_cxx_source_compiles("#include <string>\nint main() { return static_cast<int>(std::string(\"x\").size()) - 1; }"
                          COHORT_CAN_LINK_STATIC)
unset(CMAKE_REQUIRED_LINK_OPTIONS)
add_executable(cohort-task-shim ${COHORT_TASK_SHIM_SOURCES})
target_include_directories(cohort-task-shim PRIVATE ${PROJECT_SOURCE_DIR}/src)
if(COHORT_CAN_LINK_STATIC)
  target_compile_definitions(cohort-task-shim PRIVATE FMT_HEADER_ONLY)
  target_link_libraries(cohort-task-shim PRIVATE nlohmann_json::nlohmann_json Threads::Threads)
  target_link_options(cohort-task-shim PRIVATE -static)
else()
  target_link_libraries(cohort-task-shim PRIVATE nlohmann_json::nlohmann_json fmt::fmt Threads::Threads)
endif()
set_target_properties(cohort-task-shim PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR})
install(TARGETS cohort-task-shim RUNTIME DESTINATION bin)

# cohort_agent_exec: the agent's process execution layer (executor, lease keeper) and GPU
# discovery. Included from src/agent/CMakeLists.txt.
add_library(cohort_agent_exec
  ${CMAKE_CURRENT_LIST_DIR}/cpu_allocator.cc
  ${CMAKE_CURRENT_LIST_DIR}/executor.cc
  ${CMAKE_CURRENT_LIST_DIR}/lease_keeper.cc
  ${CMAKE_CURRENT_LIST_DIR}/task_user.cc
  ${CMAKE_CURRENT_LIST_DIR}/gpu/nvml.cc
  ${CMAKE_CURRENT_LIST_DIR}/gpu/sharing.cc
  ${CMAKE_CURRENT_LIST_DIR}/gpu/simulated.cc
  ${CMAKE_CURRENT_LIST_DIR}/gpu/task_memory.cc
)
target_link_libraries(cohort_agent_exec PUBLIC cohort_task_shim cohort_api cohort_common PRIVATE ${CMAKE_DL_LIBS})
