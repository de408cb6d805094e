// The node's image cache: the container images its runtimes hold (`cohort images`), which
// of them tasks use, and their removal, on request or by policy (unused for longer than
// --image-max-unused).
//
// The runtime's own store is the cache: an image a job names is pulled (or was imported)
// by the runtime when the first task runs in it and stays for the next. ImageCache lists
// it with `RUNTIME images --format json` (Podman: one JSON array; Docker: one object a
// line), marks each image with the container tasks now running in it and when a task last
// started in it on this node (since the agent started), and removes one with `RUNTIME rmi
// ID`, never one a running task uses (and the runtime refuses one any container uses).
//
// Thread-safe: NoteStarted runs on the heartbeat thread, List/Remove/Prune on HTTP threads
// and the prune timer; the runtime commands run without the lock.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "agent/runtime_call.h"
#include "api/types.h"
#include "common/error.h"
#include "common/json.h"
#include "common/mutex.h"

namespace cohort::agent {

struct NodeImage {
  std::string runtime;             // podman or docker
  std::string id;                  // the runtime's image id
  std::vector<std::string> names;  // "localhost/trainer:1.0", ...
  int64_t size_bytes = 0;
  int64_t created_ms = 0;          // 0: unknown
  int64_t last_used_ms = 0;        // a task last started in it (0: none since the agent started)
  int running_tasks = 0;           // container tasks running in it now
};
json ToJson(const NodeImage& i);

// Parses the output of ImageListArgv for `runtime`. kInternal naming what is malformed.
Result<std::vector<NodeImage>> ParseImageList(std::string_view runtime, std::string_view text);
std::vector<std::string> ImageListArgv(std::string_view runtime, const std::string& command);
std::vector<std::string> ImageRemoveArgv(const std::string& command, const std::string& id);

// Whether `ref` (as a job names it) is `image`: one of its names, with ":latest" when it
// has no tag, and "docker.io/library/" or "localhost/" prefixes as the runtimes add them; or
// its id or an id prefix of 12 or more characters.
bool ImageMatches(const NodeImage& image, const std::string& ref);

class ImageCache {
 public:
  // `runtimes`: kind → command (AgentConfig::container_runtimes); `scratch_dir` holds the
  // runtime's captured output; `calls` (null: none), which outlives the cache, cuts its
  // runtime calls short when cancelled (runtime_call.h).
  ImageCache(std::map<std::string, std::string> runtimes, std::string scratch_dir, RuntimeCalls* calls = nullptr);

  // A container task started in `image` under `runtime` at `now_ms`.
  void NoteStarted(const std::string& runtime, const std::string& image, int64_t now_ms) EXCLUDES(mu_);

  // Every image of every runtime, with `running` (the images of the container tasks running
  // now, as (runtime, reference)) counted in. A runtime not installed here is skipped
  // (kFailedPrecondition when none is); one that fails is an error naming it.
  Result<std::vector<NodeImage>> List(const std::vector<std::pair<std::string, std::string>>& running) EXCLUDES(mu_);

  // Removes the images `ref` names (kNotFound if none; kFailedPrecondition, removing
  // nothing, if a running task uses one). Returns those removed.
  Result<std::vector<NodeImage>> Remove(const std::string& ref,
                                        const std::vector<std::pair<std::string, std::string>>& running) EXCLUDES(mu_);

  // Removes every image no running task uses and none started in for `unused_for_ms`,
  // counted from the latest of the last start in it, its creation and the agent's start
  // (this agent cannot know of uses before it started). Returns those removed; one the runtime refuses
  // (a stopped container holds it) is left and logged.
  Result<std::vector<NodeImage>> Prune(int64_t unused_for_ms, int64_t now_ms,
                                       const std::vector<std::pair<std::string, std::string>>& running) EXCLUDES(mu_);

 private:
  Result<std::string> RunCapture(const std::vector<std::string>& argv) const;

  const std::map<std::string, std::string> runtimes_;
  const std::string scratch_dir_;
  RuntimeCalls* const calls_;
  const int64_t started_ms_;
  mutable Mutex mu_;
  std::map<std::pair<std::string, std::string>, int64_t> last_used_ GUARDED_BY(mu_);  // (runtime, ref) → ms
};

}  // namespace cohort::agent
