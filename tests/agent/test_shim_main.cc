// The task shim as its own small program, for tests. With "executor-helper WORK_DIR
// PIDFILE" it instead plays an agent: it starts an Executor whose shim is this binary,
// launches `sleep 1000` as a task that writes its pid to PIDFILE, and waits to be killed
// (the agent-death test SIGKILLs it and checks that the sleep dies).
#include <unistd.h>

#include <string_view>

#include "agent/executor.h"
#include "agent/task_shim.h"
#include "common/subprocess.h"

namespace {

int RunExecutorHelper(const char* work_dir, const char* pid_file) {
  using cohort::agent::Executor;
  Executor::Options opts;
  opts.work_dir = work_dir;
  opts.shim_path = cohort::SelfExePath();
  Executor executor(opts);
  cohort::agent::TaskSpec spec;
  spec.key = {1, 0, 0};
  spec.command = {"sh", "-c", "echo $$ > \"$PIDFILE.tmp\" && mv \"$PIDFILE.tmp\" \"$PIDFILE\" && exec sleep 1000"};
  spec.env = {{"PIDFILE", pid_file}};
  if (!executor.Launch(spec)) return 1;
  while (true) pause();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::string_view(argv[1]) == "executor-helper") {
    return RunExecutorHelper(argv[2], argv[3]);
  }
  return cohort::agent::RunTaskShim(argc, argv);
}
