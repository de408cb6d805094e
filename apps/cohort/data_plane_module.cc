// libcohort-data.so's entry (data_plane_module.h): the data plane's commands by name.
#include "apps/cohort/data_plane_module.h"

#include <cstdio>
#include <string_view>

#include "comm/bench/bench_command.h"
#include "engine/trainer/tokenize_command.h"
#include "engine/trainer/train_command.h"
#include "serve/serve_command.h"

extern "C" [[gnu::visibility("default")]] int cohort_data_plane_run(const char* name, int argc, char** argv) {
  const cohort::ExternalCommand commands[] = {cohort::comm::BenchCommand(), cohort::engine::TrainCommand(),
                                              cohort::engine::TokenizeCommand(), cohort::serve::ServeCommand()};
  for (const auto& cmd : commands) {
    if (cmd.name == std::string_view(name)) return cmd.run(argc, argv);
  }
  std::fprintf(stderr, "cohort: error: the data-plane module has no command '%s'\n", name);
  return 127;
}
