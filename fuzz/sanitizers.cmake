# Compile flags of the fuzz build (COHORT_BUILD_FUZZ): every library is instrumented for
# libFuzzer's coverage and built with AddressSanitizer and UndefinedBehaviorSanitizer, so
# an overflow, a use after free or undefined behaviour in a decoder stops the fuzzer with
# a report. Only clang has libFuzzer; scripts/fuzz.sh configures with clang++-16.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "COHORT_BUILD_FUZZ needs clang (libFuzzer), not ${CMAKE_CXX_COMPILER_ID}; "
                      "run scripts/fuzz.sh")
endif()
# libstdc++ 12 hides std::expected unless __cpp_concepts >= 202002L, which clang 16-18
# support but do not announce (the same work-around as scripts/check_thread_safety.py).
if(CMAKE_CXX_COMPILER_VERSION VERSION_LESS 19)
  add_compile_options(-U__cpp_concepts -D__cpp_concepts=202002L)
endif()
# -O1 with line tables only: about twice as fast to compile as -O2 -g and fast enough to
# run; NDEBUG stays off, so the libraries' own assertions (nlohmann's among them) count.
set(CMAKE_CXX_FLAGS_RELWITHDEBINFO "-O1 -gline-tables-only")
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all
                    -fno-omit-frame-pointer)
add_link_options(-fsanitize=address,undefined)
