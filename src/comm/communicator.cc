#include "comm/communicator.h"

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

// Backend "auto": shm when every rank shares this host's /dev/shm and PID namespace
// (ShmHostKey), else gloo. Every rank sets "<prefix>/auto/host/<rank>"; rank 0 reads them
// all and sets "<prefix>/auto/choice", which the others read: every rank picks the same.
Result<std::string> PickHostBackend(const CommOptions& options) {
  if (options.world_size == 1) return std::string("shm");
  const std::string at = options.prefix + "/auto/";
  const std::string mine = ShmHostKey();
  auto failed = [&](const Error& e) {
    return Errorf(e.code, "choosing the backend (auto) for rank {} of {}: {}", options.rank,
                  options.world_size, e.message);
  };
  if (auto set = options.store->Set(at + "host/" + std::to_string(options.rank), mine); !set) {
    return failed(set.error());
  }
  if (options.rank != 0) {
    auto choice = options.store->Get(at + "choice", options.timeout);
    if (!choice) return failed(choice.error());
    return *choice;
  }
  std::string choice = mine.empty() ? "gloo" : "shm";
  for (int r = 1; r < options.world_size && choice == "shm"; ++r) {
    auto key = options.store->Get(at + "host/" + std::to_string(r), options.timeout);
    if (!key) return failed(key.error());
    if (*key != mine) choice = "gloo";
  }
  if (auto set = options.store->Set(at + "choice", choice); !set) return failed(set.error());
  return choice;
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
    CommOptions picked = options;
    picked.backend = COHORT_TRY(PickHostBackend(options));
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
