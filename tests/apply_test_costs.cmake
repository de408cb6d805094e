# Read by ctest (each test executable's costs file, tests/CMakeLists.txt) and at configure
# time: gives every test of the list its COST from test_costs.cmake, its seconds, so that
# ctest -j starts the longest first even without its own cost data (a fresh clone; see
# scripts/test_costs.py). Tests not listed keep cost 0.
if(NOT COHORT_TEST_COSTS_READ)
  include("${CMAKE_CURRENT_LIST_DIR}/test_costs.cmake")
  set(COHORT_TEST_COSTS_READ TRUE)
endif()
function(cohort_apply_test_costs)
  foreach(t IN LISTS ARGN)
    string(MAKE_C_IDENTIFIER "${t}" key)
    if(DEFINED _cohort_cost_${key})
      set_tests_properties("${t}" PROPERTIES COST ${_cohort_cost_${key}})
    endif()
  endforeach()
endfunction()
