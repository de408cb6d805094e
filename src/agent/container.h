// Container tasks: how the agent runs a task inside an image (a job spec's `container:`,
// api/container_spec.h) with Podman, or Docker, which takes the same `run` flags.
//
// The task shim still owns the task: it starts `RUNTIME run ...` as the task's process
// (ContainerRunArgv), so the task's log, exit code, signals, lease and cancel work as for
// a bare process. The runtime forwards the shim's signals to the container's init
// (`--init`, which passes them to the command); a SIGKILL of the runtime leaves its
// monitor (conmon) and the container's processes reparented to the shim, a subreaper,
// which kills them like any orphan of the task. Those processes (conmon, the container's
// init and all it starts) descend from the shim, so their CPU, RSS and GPU memory count
// for the task though they leave its session (proc_usage.h). For both runtimes the shim
// finds the container's init by name and publishes it as the task's second root, whose PID
// namespace is the task's, so processes started with `RUNTIME exec` count too
// (container_root.h). Docker's container is the Docker daemon's child: the shim stops it by
// name (task_shim.h, --container-detached). After the task, the shim removes the
// container by name (ContainerRemoveArgv) so that no record or mount is left, and on the
// runtime's own failure (exit 125: image missing and not pullable, bad flags) it records
// the runtime's error line as the task's error (task_shim.h).
//
// What the container gets:
//  - the task's environment, by name only (`-e NAME` takes the value from the runtime's
//    environment, which the shim inherits from the agent): values, tokens included, never
//    appear on a command line;
//  - the host's network and IPC namespaces (MASTER_ADDR, the head and the agent's report
//    URL are host addresses; NCCL uses shared memory);
//  - the job's working directory and the directories it owns (its checkpoint directory)
//    bind-mounted at the same paths, the working directory as the container's;
//  - the job's user, when the agent runs tasks as their users: `--user UID:GID` and its
//    supplementary groups (the runtime itself runs as the agent), and
//    `--security-opt=no-new-privileges`, so no set-user-ID program of the image makes it
//    the container's root, who is the host's;
//  - its GPUs: the CDI device names the agent gives (`--device cohort.dev/gpu=0`, from the
//    CDI spec it writes for real GPUs: cdi.h); simulated GPUs pass only the environment
//    (CUDA_VISIBLE_DEVICES);
//  - its CPUs (executor.h): a Docker container `--cpuset-cpus LIST`; a Podman container
//    inherits the mask of the client the shim bound.
//
// Container names are unique per agent and task: cohort-<8 hex of the agent's work
// directory>-j<job>-a<attempt>-r<rank>, so agents sharing one runtime never collide and an
// agent restarted on the same directory finds its own containers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agent/task_identity.h"

namespace cohort::agent {

struct ContainerLaunch {
  std::string runtime_command = "podman";  // argv[0] of the runtime, looked up in PATH
  std::string runtime = "podman";          // podman or docker: which flags it takes
  std::string image;
  std::string name;
  std::vector<std::string> env_names;      // passed by name (-e NAME)
  std::vector<std::string> mounts;         // host directories, mounted at the same path
  std::string workdir;                     // empty: the image's
  std::optional<TaskIdentity> identity;    // empty: the image's user
  std::vector<std::string> devices;        // --device values (CDI names or /dev paths)
  std::string cpuset;                      // --cpuset-cpus ("0-3"); empty: none
  std::vector<std::string> command;
};

std::vector<std::string> ContainerRunArgv(const ContainerLaunch& c);
// Removes the container whatever its state (gone already is fine).
std::vector<std::string> ContainerRemoveArgv(const std::string& runtime_command, const std::string& name);
// Prints the pid of the container's init on the host (0 while it is not running);
// container_root.h.
std::vector<std::string> ContainerInitPidArgv(const std::string& runtime_command, const std::string& name);
// Sends `signal` ("TERM") to the container's init by the container's name.
std::vector<std::string> ContainerSignalArgv(const std::string& runtime_command, const std::string& name,
                                             const std::string& signal);
// Exits 0 when the image is in the node's store.
std::vector<std::string> ContainerImageExistsArgv(const std::string& runtime_command, const std::string& image);

std::string ContainerName(const std::string& agent_work_dir, int64_t job, int attempt, int rank);

}  // namespace cohort::agent
