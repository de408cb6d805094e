// cohort-task-shim: the task shim as a program of its own (task_shim.h). It links only the
// shim and the few common pieces it uses, never the CUDA libraries or the CLI, so that every
// task start costs a small exec rather than loading the whole cohort binary.
#include "agent/task_shim.h"

int main(int argc, char** argv) { return cohort::agent::RunTaskShim(argc, argv); }
