// The lease file: how long an agent's tasks may run without hearing from it again.
//
// One file per agent (LeaseKeeper writes it, lease_keeper.h); every task shim of that
// agent reads it (task_shim.h) and stops its task once the lease has run out, so a
// stopped, hung or cut-off agent's tasks end by themselves. One JSON object, written
// atomically (FILE.tmp, then rename):
//   {"expires_ms": E, "deadline_ms": D, "timeout_ms": T}
// E and D are times on CLOCK_MONOTONIC (std::chrono::steady_clock, the same in every
// process of the machine) in milliseconds. E is the expiry: the send time of the agent's
// last successful heartbeat plus the fence timeout. D >= E is the latest a task may run
// under this lease, whatever the node's load: E plus (failure timeout - fence timeout),
// so never past the moment the head may declare the node DOWN and place the gang
// elsewhere (wakeup_lateness.h argues the bound). T is the renewal period granted, for
// messages. A file without "deadline_ms" allows nothing past E.
//
// Where the file lives: LeaseDirectory. Every function may be called from any thread; they
// share no state.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/error.h"

namespace cohort::agent {

struct Lease {
  SteadyTime expires{};
  SteadyTime deadline{};  // >= expires
  Millis granted{0};

  // When a task under this lease is to be killed, given the recent lateness of the
  // killer's own wake-ups: the expiry plus what that lateness explains, never past the
  // deadline (LapseAllowance).
  SteadyTime KillAt(Millis recent_lateness) const;
};

// Writes `lease` to `path` atomically. kInternal naming the path if it cannot.
Result<void> WriteLeaseFile(const std::string& path, const Lease& lease);

// Reads a lease file; std::nullopt if it is missing or malformed.
std::optional<Lease> ReadLeaseFile(const std::string& path);

// The directory for the lease of the agent whose work directory is `work_dir`: a directory
// of this user's, mode 0700, under `memory_root` (the agent passes /dev/shm when it is a
// tmpfs), named after this user and `work_dir` so that a restarted agent writes the lease
// its running shims read. Kept out of the work directory because a rename there is a
// file-system journal transaction: on a node writing a checkpoint, or under builds, one
// took 55 ms at the 99th percentile here (ext4, fsync-heavy writers) and stalls of
// 700-860 ms were seen in tests, long enough for a 600 ms lease to lapse and kill healthy
// tasks; on a tmpfs it takes 0.1 ms. `work_dir` itself when `memory_root` is empty, or
// when the name there is taken by anything but such a directory (another user's, a
// symbolic link, a file): a warning says why.
std::string LeaseDirectory(const std::string& work_dir, const std::string& memory_root);

// The name LeaseDirectory uses under `memory_root` for `work_dir` (nothing is created): a
// test harness that kills its agents removes their lease directories by it, hence inline
// (the harnesses link no agent code). FNV-1a of `work_dir`: a name that stays the same
// across builds and versions (a restarted agent of a newer version must find the lease
// its predecessor's shims read).
inline std::string LeaseDirectoryName(const std::string& work_dir, const std::string& memory_root) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : work_dir) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return fmt::format("{}/cohort-agent-{}-{:016x}", memory_root, geteuid(), h);
}

// Whether `path` is on a tmpfs (memory, no journal).
bool OnTmpfs(const std::string& path);

// The agent's lease file: tasks.lease in LeaseDirectory(work_dir, "/dev/shm") when
// /dev/shm is a tmpfs, else in `work_dir`.
std::string AgentLeasePath(const std::string& work_dir);

}  // namespace cohort::agent
