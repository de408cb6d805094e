// Containers left behind (issue 18): the agent removes its task containers that no task of
// its own runs any more.
//
// A container task's shim removes its container after the task (task_shim.h), including
// when the agent dies (the shim's parent-death signal). A container outlives its task only
// when the shim dies with the agent, unable to clean up: the whole process tree SIGKILLed
// (`systemctl kill`, a service stop in control-group mode, the OOM killer), or the node's
// agent restarted over tasks it no longer knows. Docker's containers are the Docker
// daemon's children and keep running then; Podman's keep their record. So the agent sweeps:
// once as it starts and then every AgentConfig::container_sweep_interval_ms (0: never, no
// sweep at all; `cohort agent --container-sweep-interval`), each runtime
// it offers lists its containers (`RUNTIME ps --all --format {{.Names}}`), and every name
// that is this agent's (ContainerName: "cohort-" and the hash of the agent's work
// directory, then exactly "jJOB-aATTEMPT-rRANK") and not one of the tasks it runs now is
// removed (`RUNTIME rm --force`, the processes with it). Another agent's containers, of
// this cluster or another on the same runtime, carry another hash and are never touched;
// neither is anything not named like a task's. The running tasks are read after the list:
// a container listed belongs to a task launched before the list, which the executor
// already holds as running (Executor::Launch), so a task that is starting is never swept;
// one that ended between the two is swept, as its shim would have removed it.
//
// ContainerSweeper::Sweep runs on the agent's sweep thread only; the free functions are
// plain.
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "agent/runtime_call.h"
#include "common/clock.h"

namespace cohort::agent {

// "cohort-HASH-": how every container name of the agent on `agent_work_dir` starts.
std::string ContainerNamePrefix(const std::string& agent_work_dir);
// `RUNTIME ps --all --format {{.Names}}`: every container, any state, one name a line.
std::vector<std::string> ContainerListArgv(const std::string& runtime_command);
// The names in `ps_output` (one a line) that are `prefix` followed by exactly
// "jJOB-aATTEMPT-rRANK" (decimal numbers) and are not in `keep`.
std::vector<std::string> LeftoverContainers(std::string_view ps_output, std::string_view prefix,
                                            const std::set<std::string>& keep);

class ContainerSweeper {
 public:
  struct Options {
    std::map<std::string, std::string> runtimes;  // kind -> command (AgentConfig::container_runtimes)
    std::string work_dir;                         // the agent's: the names' prefix; scratch under it
    // The container names of the tasks running now (ContainerName of each), read after
    // each list.
    std::function<std::set<std::string>()> running;
    Millis timeout{60'000};  // each runtime call
    // Cuts the calls short when cancelled (the agent stops; runtime_call.h); null: none.
    RuntimeCalls* calls = nullptr;
  };
  struct Swept {
    std::vector<std::string> removed;   // "KIND NAME"
    std::vector<std::string> problems;  // a runtime that failed, once per new failure
  };

  explicit ContainerSweeper(Options options);
  // One sweep over every runtime (above). A runtime that is not installed is skipped in
  // silence; one that fails is reported in `problems` the first time it fails so (not
  // again until it has answered once), and the others are still swept. Once
  // Options::calls is cancelled the sweep returns what it did, reporting nothing more.
  Swept Sweep();

 private:
  const Options options_;
  const std::string prefix_;
  std::map<std::string, std::string> failing_;  // kind -> its last problem; sweep thread only
};

}  // namespace cohort::agent
