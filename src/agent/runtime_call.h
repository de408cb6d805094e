// One call of a container runtime's command line by the agent (image_cache.h,
// container_sweep.h): its output captured, bounded in time.
//
// The runtime runs as the agent, in a child process; its stdout and stderr go to files in
// `scratch_dir` (removed after) so that a large answer never fills a pipe. Plain function;
// any thread, without the caller's locks (it waits up to `timeout`).
#pragma once

#include <string>
#include <vector>

#include "common/clock.h"
#include "common/error.h"

namespace cohort::agent {

// Runs `argv` and returns its stdout. kNotFound when it cannot start (the runtime is not
// installed here); kUnavailable, naming the command, when it exits unsuccessfully (with
// the first line of its stderr) or does not finish within `timeout` (it is then killed).
Result<std::string> RunRuntimeCommand(const std::vector<std::string>& argv, const std::string& scratch_dir,
                                      Millis timeout);

}  // namespace cohort::agent
