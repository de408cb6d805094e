# Checkpoints and safetensors import/export.
# zlib: the test rewrites a MANIFEST's CRC-32 as a tool editing a checkpoint would.
find_package(ZLIB REQUIRED)
cohort_test(engine_checkpoint_test SOURCES checkpoint_test.cc
            LIBS cohort_engine_checkpoint ZLIB::ZLIB LABELS engine)
# Checkpoints written by range from several ranks (threads) and the first format's loading.
cohort_test(engine_checkpoint_ranges_test SOURCES checkpoint_ranges_test.cc
            LIBS cohort_engine_checkpoint ZLIB::ZLIB LABELS engine)
cohort_test(engine_safetensors_test SOURCES safetensors_test.cc
            LIBS cohort_engine_checkpoint LABELS engine)
cohort_build_paths(engine_safetensors_test
  COHORT_ENGINE_TESTDATA ${CMAKE_CURRENT_SOURCE_DIR}/testdata)
