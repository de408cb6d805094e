#include "comm/communicator.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "comm/gloo/gloo_communicator.h"
#include "comm/shm/shm_communicator.h"
#if COHORT_HAVE_NCCL
#include "comm/nccl/nccl_communicator.h"
#include "common/cuda_status.h"
#endif

namespace cohort::comm {

size_t SizeOf(DataType type) {
  switch (type) {
    case DataType::kFloat32: return 4;
    case DataType::kBFloat16: return 2;
    case DataType::kFloat16: return 2;
    case DataType::kInt32: return 4;
    case DataType::kInt64: return 8;
  }
  return 0;
}

std::string_view DataTypeName(DataType type) {
  switch (type) {
    case DataType::kFloat32: return "float32";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kFloat16: return "float16";
    case DataType::kInt32: return "int32";
    case DataType::kInt64: return "int64";
  }
  return "unknown";
}

std::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "unknown";
}

namespace {

// Backend "auto": shm when every rank has this host's key (CommOptions::host_key, by
// default ShmHostKey), else gloo, whose splits inside one host are shm. Every rank sets
// "<prefix>/auto/host/<rank>"; rank 0 reads them all and sets "<prefix>/auto/choice" to the
// backend and every rank's key, one per line, which the others read: every rank picks
// the same and knows where each rank is.
struct HostChoice {
  std::string backend;
  std::vector<std::string> keys;  // per rank
};

Result<HostChoice> PickHostBackend(const CommOptions& options) {
  if (options.world_size == 1) return HostChoice{"shm", {}};
  const std::string at = options.prefix + "/auto/";
  const std::string mine = options.host_key.empty() ? ShmHostKey() : options.host_key;
  if (mine.find('\n') != std::string::npos) {
    return FieldError("host_key", "must be one line, got '{}'", mine);
  }
  auto failed = [&](const Error& e) {
    return Errorf(e.code, "choosing the backend (auto) for rank {} of {}: {}", options.rank,
                  options.world_size, e.message);
  };
  if (auto set = options.store->Set(at + "host/" + std::to_string(options.rank), mine); !set) {
    return failed(set.error());
  }
  HostChoice out;
  if (options.rank != 0) {
    auto choice = options.store->Get(at + "choice", options.timeout);
    if (!choice) return failed(choice.error());
    std::vector<std::string> lines;
    size_t from = 0;
    while (from <= choice->size()) {
      const size_t nl = std::min(choice->find('\n', from), choice->size());
      lines.push_back(choice->substr(from, nl - from));
      from = nl + 1;
    }
    if (lines.size() != static_cast<size_t>(options.world_size) + 1) {
      return failed(Error(ErrorCode::kInvalidArgument,
                          fmt::format("rank 0 decided for {} ranks; every rank must pass the same "
                                      "world_size ({} here)",
                                      lines.size() - 1, options.world_size)));
    }
    out.backend = lines[0];
    out.keys.assign(lines.begin() + 1, lines.end());
    return out;
  }
  out.keys.push_back(mine);
  for (int r = 1; r < options.world_size; ++r) {
    auto key = options.store->Get(at + "host/" + std::to_string(r), options.timeout);
    if (!key) return failed(key.error());
    out.keys.push_back(*key);
  }
  const bool one_host = !mine.empty() && std::all_of(out.keys.begin(), out.keys.end(),
                                                     [&](const std::string& k) { return k == mine; });
  // Too little room in /dev/shm for a job's groups (a container's 64 MB default): gloo,
  // without shm splits, as if the ranks were apart.
  const bool room = ShmFreeBytes("/dev/shm") >= kShmRoomForAuto;
  if (!room) std::fill(out.keys.begin(), out.keys.end(), std::string());
  out.backend = one_host && room ? "shm" : "gloo";
  std::string choice = out.backend;
  for (const auto& k : out.keys) choice += "\n" + k;
  if (auto set = options.store->Set(at + "choice", choice); !set) return failed(set.error());
  return out;
}

}  // namespace

std::vector<std::string> AvailableBackends() {
  std::vector<std::string> out = {"gloo", "shm"};
#if COHORT_HAVE_NCCL
  if (CudaDeviceCount().has_value()) out.push_back("nccl");  // built in and a GPU present
#endif
  return out;
}

Result<std::unique_ptr<Communicator>> CreateCommunicator(const CommOptions& options) {
  if (options.world_size < 1) {
    return FieldError("world_size", "must be at least 1, got {}", options.world_size);
  }
  if (options.rank < 0 || options.rank >= options.world_size) {
    return FieldError("rank", "must be in [0, {}) for world_size {}, got {}", options.world_size,
                      options.world_size, options.rank);
  }
  if (options.timeout.count() <= 0) {
    return FieldError("timeout", "must be positive, got {}ms", options.timeout.count());
  }
  if (options.world_size > 1 && options.store == nullptr) {
    return FieldError("store", "a rendezvous store is required when world_size > 1 (got {})",
                      options.world_size);
  }
  if (options.backend == "auto") {
    HostChoice choice = COHORT_TRY(PickHostBackend(options));
    CommOptions picked = options;
    picked.backend = choice.backend;
    if (choice.backend == "gloo") return CreateGlooCommunicator(picked, std::move(choice.keys));
    return CreateCommunicator(picked);
  }
  if (options.backend == "gloo") return CreateGlooCommunicator(options);
  if (options.backend == "shm") return CreateShmCommunicator(options);
  if (options.backend == "nccl") {
#if COHORT_HAVE_NCCL
    return CreateNcclCommunicator(options);
#else
    return Errorf(ErrorCode::kUnavailable,
                  "the nccl backend is not built into this binary (it was built without "
                  "CUDA/NCCL)");
#endif
  }
  return FieldError("backend", "unknown backend '{}' (available: {}; auto picks shm when every rank is on this host, else gloo)", options.backend,
                    fmt::join(AvailableBackends(), ", "));
}

}  // namespace cohort::comm
