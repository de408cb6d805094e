#include "comm/nccl/nccl_communicator.h"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include "comm/communicator_base.h"
#include "comm/communicator_descriptor.h"
#include "comm/nccl/nccl_errors.h"
#include "comm/nccl/nccl_reduce.h"
#include "comm/nccl/nccl_store.h"
#include "comm/store_util.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "the nccl backend needs NCCL >= 2.14 (ncclCommInitRankConfig, non-blocking communicators)"
#endif

namespace cohort::comm {

namespace {

using nccl_backend::NcclError;
using nccl_backend::ShareUniqueId;
using nccl_backend::ToNccl;

// What a communicator and the sub-groups split from it share.
struct NcclShared {
  GroupConfig group;
  int device;  // the CUDA device every call runs on
};

// The store keys of group g live under "<prefix>/nccl/<g>/".
constexpr std::string_view kKeyDir = "nccl/";

// Travels before each point-to-point payload when check_consistency is on.
struct P2PHeader {
  uint64_t count = 0;
  int32_t tag = 0;
  uint32_t dtype = 0;
  bool operator==(const P2PHeader&) const = default;
};
static_assert(sizeof(P2PHeader) == 16);

// One public call in flight: what error messages name, and when it started.
struct CallContext {
  std::string op;           // "allreduce #3 (float32, 1024 elements)", "send to rank 1 (...)"
  std::optional<int> peer;  // the rank a point-to-point call waits on
  uint64_t seq = 0;         // collectives: their number; 0 for send/recv
  SteadyTime start;
};

// Sleeps a little between polls: spins (yielding) for the first 2ms, so that short
// collectives return promptly, then sleeps ~2% of the time spent so far (20us..1ms).
void PollPause(SteadyTime start) {
  const auto elapsed = SteadyClock::now() - start;
  if (elapsed < std::chrono::milliseconds(2)) {
    std::this_thread::yield();
    return;
  }
  auto pause = std::chrono::duration_cast<std::chrono::microseconds>(elapsed) / 50;
  pause = std::clamp(pause, std::chrono::microseconds(20), std::chrono::microseconds(1000));
  std::this_thread::sleep_for(pause);
}

// Fails the call in flight: the error gets the operation in front and breaks the
// communicator (used by the enqueue paths, after a CUDA or NCCL call failed).
#define COHORT_NCCL_ENQUEUE(call, ctx)                                                    \
  do {                                                                                    \
    const ncclResult_t _cohort_s = (call);                                                \
    if (_cohort_s != ncclSuccess && _cohort_s != ncclInProgress) {                        \
      return std::unexpected(Break(NcclError(_cohort_s, #call, __FILE__, __LINE__), ctx)); \
    }                                                                                     \
    if (_cohort_s == ncclInProgress) COHORT_TRY_VOID(Wait(ctx, /*drain=*/false));         \
  } while (0)

#define COHORT_CUDA_ENQUEUE(call, ctx)                                                    \
  do {                                                                                    \
    const cudaError_t _cohort_s = (call);                                                 \
    if (_cohort_s != cudaSuccess) {                                                       \
      return std::unexpected(Break(CudaError(_cohort_s, #call, __FILE__, __LINE__), ctx)); \
    }                                                                                     \
  } while (0)

class NcclCommunicator final : public CommunicatorBase {
 public:
  // Rendezvous of `world_ranks.size()` ranks under group `group_id`; this is `rank`.
  static Result<std::unique_ptr<NcclCommunicator>> Connect(std::shared_ptr<const NcclShared> shared,
                                                           std::string group_id,
                                                           std::vector<int> world_ranks, int rank);

  ~NcclCommunicator() override;

  std::string_view backend() const override { return "nccl"; }

 private:
  // CommunicatorBase: the transfers, enqueued on stream_ and waited for.
  Result<void> RunAllReduce(const CollectiveDescriptor& d, const void* send, void* recv,
                            size_t count, DataType type, ReduceOp op) override;
  Result<void> RunReduceScatter(const CollectiveDescriptor& d, const void* send, void* recv,
                                std::span<const size_t> recv_counts, DataType type,
                                ReduceOp op) override;
  Result<void> RunAllGather(const CollectiveDescriptor& d, const void* send, void* recv,
                            std::span<const size_t> counts, DataType type) override;
  Result<void> RunBroadcast(const CollectiveDescriptor& d, void* buf, size_t count, DataType type,
                            int root) override;
  Result<void> RunBarrier(const CollectiveDescriptor& d) override;
  Result<void> RunPointToPoint(const PointToPointCall& call) override;
  Result<std::unique_ptr<Communicator>> ConnectGroup(std::string group_id,
                                                     std::vector<int> world_ranks,
                                                     int rank) override;
  // Aborts the NCCL communicator: stops NCCL's kernels and proxy threads for it (peers
  // still inside the collective find out at their own timeout; NCCL cannot tell them).
  void OnBroken() override;

  NcclCommunicator(std::shared_ptr<const NcclShared> shared, std::string group_id,
                   std::vector<int> world_ranks, int rank);

  // Allocates the stream and scratch memory and creates the NCCL communicator from `id`,
  // waiting at most the timeout for every rank to join.
  Result<void> Init(const ncclUniqueId& id);

  // Runs one collective `d` (already numbered): descriptor exchange, `body(ctx)` (which
  // enqueues), then waits for it. Any failure but a mismatch breaks the communicator.
  template <typename Body>
  Result<void> RunCollective(const CollectiveDescriptor& d, Body&& body);
  // ncclAllGather of every rank's descriptor; kInvalidArgument on a mismatch.
  Result<void> ExchangeDescriptors(const CollectiveDescriptor& mine, const CallContext& ctx);

  // Polls until NCCL has accepted the work enqueued so far (no ncclInProgress) and, with
  // `drain`, until the stream has finished it; at most the timeout from ctx.start. On an
  // asynchronous NCCL error or a timeout: aborts and returns the call's error.
  Result<void> Wait(const CallContext& ctx, bool drain);
  // The timeout error for `ctx` (collectives: which ranks never reached it); breaks.
  Error TimedOut(const CallContext& ctx);
  // Prefixes the operation (and peer) to `e`, breaks the communicator, returns `e`.
  Error Break(Error e, const CallContext& ctx);

  std::string WaitingKey(int r) const {
    return GroupKeyPrefix(config(), kKeyDir, group_id()) + fmt::format("waiting/{}", r);
  }

  const std::shared_ptr<const NcclShared> shared_;
  const std::string comm_name_;  // NCCL's commName, for its logs

  ncclComm_t comm_ = nullptr;  // null once aborted
  cudaStream_t stream_ = nullptr;
  // Device scratch: the descriptors ([0] mine, [1..size] gathered, with
  // check_consistency), a barrier word, point-to-point headers ([0] out, [1] in).
  CollectiveDescriptor* desc_dev_ = nullptr;
  int32_t* barrier_dev_ = nullptr;
  P2PHeader* header_dev_ = nullptr;
  // Pinned host mirrors (so that device-to-host copies stay asynchronous and the wait
  // keeps its bound).
  CollectiveDescriptor* desc_host_ = nullptr;
  P2PHeader* header_host_ = nullptr;
};

NcclCommunicator::NcclCommunicator(std::shared_ptr<const NcclShared> shared,
                                   std::string group_id, std::vector<int> world_ranks, int rank)
    : CommunicatorBase(shared->group, std::move(group_id), std::move(world_ranks), rank),
      shared_(std::move(shared)),
      comm_name_(fmt::format("{}/{}", config().prefix, this->group_id())) {}

NcclCommunicator::~NcclCommunicator() {
  // Nothing here may throw or wait unboundedly. Errors are ignored: there is nobody
  // to report them to, and the process keeps running.
  (void)cudaSetDevice(shared_->device);
  if (comm_ != nullptr) {
    // Flush (our calls are synchronous, so this is quick), then free; abort instead when
    // finalizing does not settle within the timeout (a peer gone mid-teardown).
    bool finalized = false;
    const ncclResult_t f = ncclCommFinalize(comm_);
    if (f == ncclSuccess || f == ncclInProgress) {
      const SteadyTime start = SteadyClock::now();
      const SteadyTime deadline = start + config().timeout;
      while (SteadyClock::now() < deadline) {
        ncclResult_t state = ncclSuccess;
        if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) break;
        if (state == ncclSuccess) {
          finalized = true;
          break;
        }
        if (state != ncclInProgress) break;
        PollPause(start);
      }
    }
    if (finalized) {
      (void)ncclCommDestroy(comm_);
    } else {
      (void)ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }
  if (stream_ != nullptr) {
    (void)cudaStreamSynchronize(stream_);  // after an abort NCCL's kernels have exited
    (void)cudaStreamDestroy(stream_);
  }
  if (desc_dev_ != nullptr) (void)cudaFree(desc_dev_);
  if (barrier_dev_ != nullptr) (void)cudaFree(barrier_dev_);
  if (header_dev_ != nullptr) (void)cudaFree(header_dev_);
  if (desc_host_ != nullptr) (void)cudaFreeHost(desc_host_);
  if (header_host_ != nullptr) (void)cudaFreeHost(header_host_);
}

Result<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Connect(
    std::shared_ptr<const NcclShared> shared, std::string group_id, std::vector<int> world_ranks,
    int rank) {
  const int size = static_cast<int>(world_ranks.size());
  const std::string what = RendezvousName("nccl", group_id, rank, size);
  const GroupConfig& group = shared->group;
  const std::string key_prefix = GroupKeyPrefix(group, kKeyDir, group_id);
  // Two processes claiming one rank would both wait for a peer that never comes.
  COHORT_TRY_VOID(ClaimRank(group.store, key_prefix, rank, what));
  auto id = ShareUniqueId(group.store, key_prefix, rank == 0, group.timeout);
  if (!id) return std::unexpected(WithContext(id.error(), what));
  std::unique_ptr<NcclCommunicator> comm(
      new NcclCommunicator(std::move(shared), std::move(group_id), std::move(world_ranks), rank));
  if (auto ok = comm->Init(*id); !ok) return std::unexpected(WithContext(ok.error(), what));
  return comm;
}

Result<void> NcclCommunicator::Init(const ncclUniqueId& id) {
  COHORT_CUDA_CHECK(cudaSetDevice(shared_->device));
  // A blocking stream: it waits for work the caller queued on the legacy default stream.
  COHORT_CUDA_CHECK(cudaStreamCreate(&stream_));
  if (config().check_consistency) {
    const size_t n = static_cast<size_t>(size()) + 1;
    COHORT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&desc_dev_), n * sizeof(CollectiveDescriptor)));
    COHORT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&desc_host_), n * sizeof(CollectiveDescriptor)));
    COHORT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&header_dev_), 2 * sizeof(P2PHeader)));
    COHORT_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&header_host_), 2 * sizeof(P2PHeader)));
  }
  COHORT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&barrier_dev_), sizeof(int32_t)));
  COHORT_CUDA_CHECK(cudaMemset(barrier_dev_, 0, sizeof(int32_t)));

  ncclConfig_t nccl_config = NCCL_CONFIG_INITIALIZER;
  nccl_config.blocking = 0;  // every NCCL call returns at once; we poll with a deadline
  nccl_config.commName = comm_name_.c_str();
  const SteadyTime start = SteadyClock::now();
  const ncclResult_t r = ncclCommInitRankConfig(&comm_, size(), id, rank(), &nccl_config);
  if (r != ncclSuccess && r != ncclInProgress) {
    Error e = NcclError(r, "ncclCommInitRankConfig", __FILE__, __LINE__);
    if (comm_ != nullptr) (void)ncclCommAbort(comm_);
    comm_ = nullptr;
    return std::unexpected(e);
  }
  while (true) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(comm_, &state);
    if (q != ncclSuccess) state = q;
    if (state == ncclSuccess) return {};
    if (state != ncclInProgress) {
      Error e = NcclError(state, "ncclCommInitRankConfig", __FILE__, __LINE__);
      (void)ncclCommAbort(comm_);
      comm_ = nullptr;
      return std::unexpected(e);
    }
    if (SteadyClock::now() - start >= config().timeout) {
      (void)ncclCommAbort(comm_);
      comm_ = nullptr;
      return Errorf(ErrorCode::kDeadlineExceeded,
                    "ncclCommInitRankConfig did not finish within {} (are all {} ranks running, "
                    "each on its own GPU, and can they reach each other?)",
                    Timeout(), size());
    }
    PollPause(start);
  }
}

void NcclCommunicator::OnBroken() {
  if (comm_ != nullptr) {
    (void)ncclCommAbort(comm_);
    comm_ = nullptr;
  }
}

Error NcclCommunicator::Break(Error e, const CallContext& ctx) {
  const std::string with = ctx.peer ? fmt::format(" ({})", Name(*ctx.peer)) : "";
  e.message = fmt::format("{}{} failed: {}", ctx.op, with, e.message);
  MarkBroken(e);
  return e;
}

Error NcclCommunicator::TimedOut(const CallContext& ctx) {
  Error e(ErrorCode::kDeadlineExceeded, "");
  if (ctx.peer) {
    e.message = fmt::format("{} timed out after {} waiting for {}", ctx.op, Timeout(),
                            Name(*ctx.peer));
  } else if (config().store == nullptr || size() < 2) {
    e.message = fmt::format("{} timed out after {}", ctx.op, Timeout());
  } else {
    // Peers that were in this collective too have set their waiting key to its number
    // at half the timeout; the others never reached it.
    (void)config().store->Set(WaitingKey(rank()), std::to_string(ctx.seq));
    std::vector<std::string> absent;
    for (int r = 0; r < size(); ++r) {
      if (r == rank()) continue;
      auto v = config().store->Get(WaitingKey(r), Millis(1));
      const auto seq = v ? ParseInt64(*v) : std::nullopt;
      if (!seq || static_cast<uint64_t>(*seq) != ctx.seq) absent.push_back(Name(r));
    }
    if (absent.empty()) {
      e.message = fmt::format("{} timed out after {}; all {} ranks had started it, so one "
                              "stalled or died mid-transfer",
                              ctx.op, Timeout(), size());
    } else {
      e = NeverStarted(ctx.op, absent);
    }
  }
  MarkBroken(e);
  return e;
}

Result<void> NcclCommunicator::Wait(const CallContext& ctx, bool drain) {
  const SteadyTime deadline = ctx.start + config().timeout;
  const SteadyTime post_at = ctx.start + config().timeout / 2;
  const bool may_post = ctx.seq > 0 && config().store != nullptr && size() > 1;
  bool posted = false;
  while (true) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t q = ncclCommGetAsyncError(comm_, &state);
    if (q != ncclSuccess) {
      return std::unexpected(Break(NcclError(q, "ncclCommGetAsyncError", __FILE__, __LINE__), ctx));
    }
    if (state != ncclSuccess && state != ncclInProgress) {
      // An asynchronous failure: a peer's connection broke, a remote error, ...
      return std::unexpected(
          Break(NcclError(state, "ncclCommGetAsyncError", __FILE__, __LINE__), ctx));
    }
    if (state == ncclSuccess) {
      if (!drain) return {};
      const cudaError_t s = cudaStreamQuery(stream_);
      if (s == cudaSuccess) return {};
      if (s != cudaErrorNotReady) {
        return std::unexpected(Break(CudaError(s, "cudaStreamQuery", __FILE__, __LINE__), ctx));
      }
    }
    const SteadyTime now = SteadyClock::now();
    if (now >= deadline) return std::unexpected(TimedOut(ctx));
    if (may_post && !posted && now >= post_at) {
      (void)config().store->Set(WaitingKey(rank()), std::to_string(ctx.seq));
      posted = true;
    }
    PollPause(ctx.start);
  }
}

template <typename Body>
Result<void> NcclCommunicator::RunCollective(const CollectiveDescriptor& d, Body&& body) {
  const CallContext ctx{DescribeOp(d), std::nullopt, d.seq, SteadyClock::now()};
  COHORT_CUDA_ENQUEUE(cudaSetDevice(shared_->device), ctx);
  if (config().check_consistency && size() > 1) COHORT_TRY_VOID(ExchangeDescriptors(d, ctx));
  COHORT_TRY_VOID(body(ctx));
  return Wait(ctx, /*drain=*/true);
}

Result<void> NcclCommunicator::ExchangeDescriptors(const CollectiveDescriptor& mine,
                                                   const CallContext& ctx) {
  constexpr size_t kBytes = sizeof(CollectiveDescriptor);
  desc_host_[0] = mine;
  COHORT_CUDA_ENQUEUE(cudaMemcpyAsync(desc_dev_, desc_host_, kBytes, cudaMemcpyHostToDevice, stream_), ctx);
  COHORT_NCCL_ENQUEUE(ncclAllGather(desc_dev_, desc_dev_ + 1, kBytes, ncclUint8, comm_, stream_), ctx);
  COHORT_CUDA_ENQUEUE(cudaMemcpyAsync(desc_host_ + 1, desc_dev_ + 1, size() * kBytes,
                                      cudaMemcpyDeviceToHost, stream_), ctx);
  COHORT_TRY_VOID(Wait(ctx, /*drain=*/true));
  // Every rank sees the same descriptors, so a mismatch fails everywhere alike and
  // before any data moved; the communicator stays usable.
  return CheckDescriptors(std::span<const CollectiveDescriptor>(desc_host_ + 1, size()),
                          rank_names());
}

Result<void> NcclCommunicator::RunAllReduce(const CollectiveDescriptor& d, const void* send,
                                            void* recv, size_t count, DataType type,
                                            ReduceOp op) {
  return RunCollective(d, [&](const CallContext& ctx) -> Result<void> {
    if (count == 0) return {};
    COHORT_NCCL_ENQUEUE(ncclAllReduce(send, recv, count, ToNccl(type), ToNccl(op), comm_, stream_), ctx);
    return {};
  });
}

Result<void> NcclCommunicator::RunReduceScatter(const CollectiveDescriptor& d, const void* send,
                                                void* recv, std::span<const size_t> recv_counts,
                                                DataType type, ReduceOp op) {
  const bool even = std::all_of(recv_counts.begin(), recv_counts.end(),
                                [&](size_t c) { return c == recv_counts[0]; });
  return RunCollective(d, [&](const CallContext& ctx) -> Result<void> {
    if (d.count == 0) return {};  // sum(recv_counts)
    if (even) {
      COHORT_NCCL_ENQUEUE(ncclReduceScatter(send, recv, recv_counts[0], ToNccl(type), ToNccl(op),
                                            comm_, stream_), ctx);
      return {};
    }
    // Uneven: rank r's block is reduced onto r; one launch for all blocks.
    const size_t esz = SizeOf(type);
    COHORT_NCCL_ENQUEUE(ncclGroupStart(), ctx);
    size_t offset = 0;
    for (int r = 0; r < size(); ++r) {
      const size_t c = recv_counts[r];
      if (c > 0) {
        const void* block = static_cast<const std::byte*>(send) + offset * esz;
        // recvbuff is only read on the root.
        COHORT_NCCL_ENQUEUE(ncclReduce(block, r == rank() ? recv : nullptr, c, ToNccl(type),
                                       ToNccl(op), r, comm_, stream_), ctx);
      }
      offset += c;
    }
    COHORT_NCCL_ENQUEUE(ncclGroupEnd(), ctx);
    return {};
  });
}

Result<void> NcclCommunicator::RunAllGather(const CollectiveDescriptor& d, const void* send,
                                            void* recv, std::span<const size_t> counts,
                                            DataType type) {
  const bool even =
      std::all_of(counts.begin(), counts.end(), [&](size_t c) { return c == counts[0]; });
  return RunCollective(d, [&](const CallContext& ctx) -> Result<void> {
    if (d.count == 0) return {};  // sum(counts)
    if (even) {
      // In place when send == recv + rank * count: NCCL's in-place rule is ours.
      COHORT_NCCL_ENQUEUE(ncclAllGather(send, recv, counts[0], ToNccl(type), comm_, stream_), ctx);
      return {};
    }
    // Uneven: every rank broadcasts its block into place; one launch for all blocks.
    const size_t esz = SizeOf(type);
    COHORT_NCCL_ENQUEUE(ncclGroupStart(), ctx);
    size_t offset = 0;
    for (int r = 0; r < size(); ++r) {
      const size_t c = counts[r];
      if (c > 0) {
        void* block = static_cast<std::byte*>(recv) + offset * esz;
        // sendbuff is only read on the root; send == block (in place) is fine.
        COHORT_NCCL_ENQUEUE(ncclBroadcast(r == rank() ? send : block, block, c, ToNccl(type), r,
                                          comm_, stream_), ctx);
      }
      offset += c;
    }
    COHORT_NCCL_ENQUEUE(ncclGroupEnd(), ctx);
    return {};
  });
}

Result<void> NcclCommunicator::RunBroadcast(const CollectiveDescriptor& d, void* buf,
                                            size_t count, DataType type, int root) {
  return RunCollective(d, [&](const CallContext& ctx) -> Result<void> {
    if (count == 0) return {};
    COHORT_NCCL_ENQUEUE(ncclBroadcast(buf, buf, count, ToNccl(type), root, comm_, stream_), ctx);
    return {};
  });
}

Result<void> NcclCommunicator::RunBarrier(const CollectiveDescriptor& d) {
  return RunCollective(d, [&](const CallContext& ctx) -> Result<void> {
    if (size() == 1) return {};
    COHORT_NCCL_ENQUEUE(ncclAllReduce(barrier_dev_, barrier_dev_, 1, ncclInt32, ncclSum, comm_,
                                      stream_), ctx);
    return {};
  });
}

Result<void> NcclCommunicator::RunPointToPoint(const PointToPointCall& call) {
  const CallContext ctx{call.op, call.peer, 0, SteadyClock::now()};
  COHORT_CUDA_ENQUEUE(cudaSetDevice(shared_->device), ctx);
  const bool check = config().check_consistency;
  const P2PHeader mine{call.count, call.tag, static_cast<uint32_t>(call.type)};
  if (check && call.is_send) {
    header_host_[0] = mine;
    COHORT_CUDA_ENQUEUE(cudaMemcpyAsync(header_dev_, header_host_, sizeof(P2PHeader),
                                        cudaMemcpyHostToDevice, stream_), ctx);
  }
  // Header and payload in one group: one launch, and NCCL keeps their order per peer.
  COHORT_NCCL_ENQUEUE(ncclGroupStart(), ctx);
  const int peer = call.peer;
  if (call.is_send) {
    if (check) {
      COHORT_NCCL_ENQUEUE(
          ncclSend(header_dev_, sizeof(P2PHeader), ncclUint8, peer, comm_, stream_), ctx);
    }
    if (call.count > 0) {
      COHORT_NCCL_ENQUEUE(
          ncclSend(call.buf, call.count, ToNccl(call.type), peer, comm_, stream_), ctx);
    }
  } else {
    if (check) {
      COHORT_NCCL_ENQUEUE(
          ncclRecv(header_dev_ + 1, sizeof(P2PHeader), ncclUint8, peer, comm_, stream_), ctx);
    }
    if (call.count > 0) {
      COHORT_NCCL_ENQUEUE(
          ncclRecv(call.buf, call.count, ToNccl(call.type), peer, comm_, stream_), ctx);
    }
  }
  COHORT_NCCL_ENQUEUE(ncclGroupEnd(), ctx);
  if (check && !call.is_send) {
    COHORT_CUDA_ENQUEUE(cudaMemcpyAsync(header_host_ + 1, header_dev_ + 1, sizeof(P2PHeader),
                                        cudaMemcpyDeviceToHost, stream_), ctx);
  }
  COHORT_TRY_VOID(Wait(ctx, /*drain=*/true));
  if (check && !call.is_send && !(header_host_[1] == mine)) {
    const P2PHeader& theirs = header_host_[1];
    const std::string_view their_type =
        theirs.dtype <= static_cast<uint32_t>(DataType::kInt64)
            ? DataTypeName(static_cast<DataType>(theirs.dtype))
            : std::string_view("?");
    return Errorf(ErrorCode::kInvalidArgument,
                  "{} was paired with {}'s send (tag {}, {}, {} elements): NCCL pairs the sends "
                  "and receives of two ranks in call order, so tags must come in the same order",
                  ctx.op, Name(call.peer), theirs.tag, their_type, theirs.count);
  }
  return {};
}

Result<std::unique_ptr<Communicator>> NcclCommunicator::ConnectGroup(
    std::string group_id, std::vector<int> world_ranks, int rank) {
  auto child = Connect(shared_, std::move(group_id), std::move(world_ranks), rank);
  if (!child) return std::unexpected(child.error());
  return std::unique_ptr<Communicator>(std::move(*child));
}

}  // namespace

Result<std::unique_ptr<Communicator>> CreateNcclCommunicator(const CommOptions& options) {
  COHORT_TRY_VOID(CudaDeviceCount());
  int device = 0;
  COHORT_CUDA_CHECK(cudaGetDevice(&device));
  auto shared = std::make_shared<NcclShared>(NcclShared{GroupConfig::From(options), device});
  auto comm = NcclCommunicator::Connect(std::move(shared), "world",
                                        WorldRanks(options.world_size), options.rank);
  if (!comm) return std::unexpected(comm.error());
  return std::unique_ptr<Communicator>(std::move(*comm));
}

}  // namespace cohort::comm
