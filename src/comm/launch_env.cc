#include "comm/launch_env.h"

#include <charconv>
#include <cstdlib>
#include <optional>

#include <fmt/format.h>

namespace cohort::comm {

namespace {

class Env {
 public:
  explicit Env(const EnvLookup& lookup) : lookup_(lookup) {}

  bool Has(const char* name) const {
    const char* v = lookup_(name);
    return v && *v;
  }
  std::string Str(const char* name, std::string def = {}) const {
    const char* v = lookup_(name);
    return v && *v ? std::string(v) : def;
  }
  // An integer variable in [min, max]; `def` when unset.
  Result<int> Int(const char* name, std::optional<int> def, int min, int max) const {
    const char* v = lookup_(name);
    if (!v || !*v) {
      if (def) return *def;
      return Errorf(ErrorCode::kInvalidArgument, "{} is not set", name);
    }
    std::string_view s(v);
    int x = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
    if (ec != std::errc() || p != s.data() + s.size() || x < min || x > max) {
      return MakeError(ErrorCode::kInvalidArgument,
                       fmt::format("{}={} must be an integer from {} to {}", name, s, min, max), name);
    }
    return x;
  }

 private:
  const EnvLookup& lookup_;
};

// "4(x2),3" → 4: the count for the first node, which is enough when every node in the
// step runs the same number of tasks.
Result<int> FirstTaskCount(const std::string& s, const char* name) {
  int x = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  if (ec != std::errc() || x < 1) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("{}={} does not start with a task count", name, s), name);
  }
  return x;
}

Result<void> CheckRanks(const LaunchEnv& e, const char* rank_var, const char* world_var) {
  if (e.rank >= e.world_size) {
    return MakeError(ErrorCode::kInvalidArgument,
                     fmt::format("{}={} is not below {}={}", rank_var, e.rank, world_var, e.world_size), rank_var);
  }
  if (e.local_rank >= e.local_world_size) {
    return Errorf(ErrorCode::kInvalidArgument, "local rank {} is not below the local world size {}", e.local_rank,
                  e.local_world_size);
  }
  return {};
}

}  // namespace

Result<std::string> FirstSlurmHost(const std::string& nodelist) {
  if (nodelist.empty()) return MakeError(ErrorCode::kInvalidArgument, "SLURM_NODELIST is empty", "SLURM_NODELIST");
  size_t bracket = nodelist.find('[');
  size_t comma = nodelist.find(',');
  if (bracket == std::string::npos || (comma != std::string::npos && comma < bracket)) {
    return nodelist.substr(0, comma);
  }
  size_t close = nodelist.find(']', bracket);
  if (close == std::string::npos) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("SLURM_NODELIST={} has an unclosed '['", nodelist),
                     "SLURM_NODELIST");
  }
  std::string inner = nodelist.substr(bracket + 1, close - bracket - 1);
  size_t end = inner.find_first_of(",-");
  std::string first = inner.substr(0, end);  // keeps zero padding: "07"
  if (first.empty() || first.find_first_not_of("0123456789") != std::string::npos) {
    return MakeError(ErrorCode::kInvalidArgument, fmt::format("SLURM_NODELIST={} has a malformed range", nodelist),
                     "SLURM_NODELIST");
  }
  return nodelist.substr(0, bracket) + first;
}

Result<LaunchEnv> DetectLaunchEnv(const EnvLookup& lookup) {
  Env env(lookup);
  LaunchEnv e;
  if (env.Has("RANK") || env.Has("WORLD_SIZE")) {
    e.source = "cohort";
    e.world_size = COHORT_TRY(env.Int("WORLD_SIZE", std::nullopt, 1, 1 << 20));
    e.rank = COHORT_TRY(env.Int("RANK", std::nullopt, 0, 1 << 20));
    e.local_world_size = COHORT_TRY(env.Int("LOCAL_WORLD_SIZE", 1, 1, 1 << 20));
    e.local_rank = COHORT_TRY(env.Int("LOCAL_RANK", 0, 0, 1 << 20));
    // torchrun sets GROUP_RANK; Cohort sets both.
    const char* node_var = env.Has("NODE_RANK") ? "NODE_RANK" : "GROUP_RANK";
    e.node_rank = COHORT_TRY(env.Int(node_var, 0, 0, 1 << 20));
    COHORT_TRY_VOID(CheckRanks(e, "RANK", "WORLD_SIZE"));
  } else if (env.Has("SLURM_PROCID")) {
    e.source = "slurm";
    e.world_size = COHORT_TRY(env.Int("SLURM_NTASKS", std::nullopt, 1, 1 << 20));
    e.rank = COHORT_TRY(env.Int("SLURM_PROCID", std::nullopt, 0, 1 << 20));
    e.local_rank = COHORT_TRY(env.Int("SLURM_LOCALID", 0, 0, 1 << 20));
    e.node_rank = COHORT_TRY(env.Int("SLURM_NODEID", 0, 0, 1 << 20));
    const char* per_node = env.Has("SLURM_NTASKS_PER_NODE") ? "SLURM_NTASKS_PER_NODE" : "SLURM_TASKS_PER_NODE";
    e.local_world_size = env.Has(per_node) ? COHORT_TRY(FirstTaskCount(env.Str(per_node), per_node)) : 1;
    COHORT_TRY_VOID(CheckRanks(e, "SLURM_PROCID", "SLURM_NTASKS"));
    if (!env.Has("MASTER_ADDR")) {
      std::string list = env.Str("SLURM_STEP_NODELIST", env.Str("SLURM_JOB_NODELIST", env.Str("SLURM_NODELIST")));
      e.master_addr = COHORT_TRY(FirstSlurmHost(list));
    }
    if (!env.Has("MASTER_PORT")) {
      int job = COHORT_TRY(env.Int("SLURM_JOB_ID", 0, 0, INT32_MAX));
      e.master_port = 20000 + job % 20000;  // every rank derives the same port
    }
  } else if (env.Has("OMPI_COMM_WORLD_RANK")) {
    e.source = "openmpi";
    e.world_size = COHORT_TRY(env.Int("OMPI_COMM_WORLD_SIZE", std::nullopt, 1, 1 << 20));
    e.rank = COHORT_TRY(env.Int("OMPI_COMM_WORLD_RANK", std::nullopt, 0, 1 << 20));
    e.local_world_size = COHORT_TRY(env.Int("OMPI_COMM_WORLD_LOCAL_SIZE", 1, 1, 1 << 20));
    e.local_rank = COHORT_TRY(env.Int("OMPI_COMM_WORLD_LOCAL_RANK", 0, 0, 1 << 20));
    e.node_rank = COHORT_TRY(env.Int("OMPI_COMM_WORLD_NODE_RANK", e.rank / e.local_world_size, 0, 1 << 20));
    COHORT_TRY_VOID(CheckRanks(e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"));
    if (e.world_size > 1 && !env.Has("MASTER_ADDR") && !env.Has("COHORT_RENDEZVOUS")) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "under Open MPI set MASTER_ADDR to rank 0's host (mpirun -x MASTER_ADDR=...)", "MASTER_ADDR");
    }
  } else {
    e.source = "single";
    return e;
  }
  if (env.Has("MASTER_ADDR")) e.master_addr = env.Str("MASTER_ADDR");
  if (env.Has("MASTER_PORT")) e.master_port = COHORT_TRY(env.Int("MASTER_PORT", std::nullopt, 1, 65535));
  if (env.Has("COHORT_RENDEZVOUS")) {
    e.store_url = env.Str("COHORT_RENDEZVOUS");
  } else if (e.world_size > 1) {
    if (e.master_addr.empty() || e.master_port == 0) {
      return MakeError(ErrorCode::kInvalidArgument,
                       "no rendezvous: set COHORT_RENDEZVOUS, or MASTER_ADDR and MASTER_PORT", "MASTER_ADDR");
    }
    e.store_url = fmt::format("tcp://{}:{}", e.master_addr, e.master_port);
  }
  return e;
}

Result<LaunchEnv> DetectLaunchEnv() {
  return DetectLaunchEnv([](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace cohort::comm
