// SerialThread, ShardedDeviceGrads and GatheredDeviceParams (cuda_zero_pieces.h).
// Compiled only with the CUDA engine.
#if COHORT_HAVE_CUDA_ENGINE
#include "engine/trainer/cuda_zero_pieces.h"

#include <cuda_runtime.h>

#include <algorithm>

#include <fmt/format.h>

#include "common/cuda_status.h"
#include "engine/kernels/cuda/common.cuh"
#include "engine/model/cuda_arena.h"

namespace cohort::engine {

// ---------------------------------------------------------------------------------------
// SerialThread

SerialThread::SerialThread(int device) : device_(device) {
  thread_ = std::thread([this] { Loop(); });
}

SerialThread::~SerialThread() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

uint64_t SerialThread::Post(Op op) {
  uint64_t ticket;
  {
    std::lock_guard lock(mu_);
    ticket = ++posted_;
    queue_.emplace_back(ticket, std::move(op));
  }
  cv_.notify_all();
  return ticket;
}

Result<void> SerialThread::WaitFor(uint64_t ticket) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return done_ >= ticket; });
  return status_;
}

Result<void> SerialThread::Drain() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return done_ >= posted_; });
  return status_;
}

Result<void> SerialThread::TakeError() {
  std::lock_guard lock(mu_);
  Result<void> r = std::move(status_);
  status_ = {};
  return r;
}

bool SerialThread::IsDone(uint64_t ticket) {
  std::lock_guard lock(mu_);
  return done_ >= ticket;
}

void SerialThread::Loop() {
  const cudaError_t set = cudaSetDevice(device_);
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    auto [ticket, op] = std::move(queue_.front());
    queue_.pop_front();
    const bool failed = !status_.has_value();
    lock.unlock();
    Result<void> r;
    if (set != cudaSuccess) {
      r = Errorf(ErrorCode::kInternal, "ZeRO's serial thread: cudaSetDevice({}): {}", device_,
                 cudaGetErrorString(set));
    } else if (!failed) {
      r = op();
    }
    lock.lock();
    if (!r && status_) status_ = std::move(r);
    done_ = ticket;
    cv_.notify_all();
  }
}

// ---------------------------------------------------------------------------------------
// ShardedDeviceGrads

ShardedDeviceGrads::ShardedDeviceGrads(comm::Communicator* comm, const ZeroPartition& partition,
                                       size_t max_piece, int device, cudaStream_t stream,
                                       SerialThread& thread)
    : comm_(comm),
      partition_(partition),
      rank_(comm ? comm->rank() : 0),
      max_piece_(std::max<size_t>(1, max_piece)),
      device_(device),
      stream_(stream),
      thread_(thread) {}

ShardedDeviceGrads::~ShardedDeviceGrads() {
  (void)thread_.Drain();  // no op may read the buffers below any more
  for (cudaEvent_t e : written_) {
    if (e != nullptr) (void)cudaEventDestroy(e);
  }
  for (cudaEvent_t e : submitted_) (void)cudaEventDestroy(e);
  if (add_stream_ != nullptr) (void)cudaStreamDestroy(add_stream_);
  for (float* p : {shard_, slots_[0], slots_[1], received_}) {
    if (p != nullptr) (void)cudaFree(p);
  }
}

Result<std::unique_ptr<ShardedDeviceGrads>> ShardedDeviceGrads::Create(
    comm::Communicator* comm, const ZeroPartition& partition, size_t max_piece, int device,
    cudaStream_t stream, SerialThread& thread, bool caller_memory) {
  std::unique_ptr<ShardedDeviceGrads> g(
      new ShardedDeviceGrads(comm, partition, max_piece, device, stream, thread));
  COHORT_CUDA_CHECK(cudaSetDevice(device));
  const size_t n = g->shard_size();
  g->shard_ = static_cast<float*>(COHORT_TRY(DeviceAlloc(
      std::max<size_t>(1, n) * sizeof(float),
      fmt::format("the ZeRO gradient shard ({} values)", n), device)));
  for (float*& slot : g->slots_) {
    if (caller_memory) break;
    slot = static_cast<float*>(COHORT_TRY(DeviceAlloc(
        g->max_piece_ * sizeof(float),
        fmt::format("a ZeRO gradient piece buffer ({} values)", g->max_piece_), device)));
    g->scratch_bytes_ += g->max_piece_ * sizeof(float);
  }
  if (partition.ranks > 1) {
    const size_t recv = std::max<size_t>(1, std::min(g->max_piece_, n));
    g->received_ = static_cast<float*>(COHORT_TRY(DeviceAlloc(
        recv * sizeof(float), fmt::format("the ZeRO reduce-scatter's receive buffer ({} values)", recv),
        device)));
    g->scratch_bytes_ += std::min(g->max_piece_, n) * sizeof(float);
  }
  for (cudaEvent_t& e : g->written_) {
    COHORT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  COHORT_CUDA_CHECK(cudaStreamCreateWithFlags(&g->add_stream_, cudaStreamNonBlocking));
  COHORT_CUDA_CHECK(cudaMemsetAsync(g->shard_, 0, std::max<size_t>(1, n) * sizeof(float), stream));
  COHORT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return g;
}

Result<void> ShardedDeviceGrads::ZeroShard() {
  COHORT_TRY_VOID(thread_.Drain());
  COHORT_CUDA_CHECK(cudaMemsetAsync(shard_, 0, shard_size() * sizeof(float), stream_));
  return {};
}

void ShardedDeviceGrads::Begin(bool final) {
  final_ = final;
  reported_ = 0;
  submits_ = 0;
  oversize_ = false;
}

Result<float*> ShardedDeviceGrads::Acquire(size_t offset, size_t count) {
  (void)offset;
  const int slot = next_;
  COHORT_TRY_VOID(thread_.WaitFor(slot_op_[slot]));
  if (count > max_piece_) {
    oversize_ = true;
    return Errorf(ErrorCode::kInternal, "ZeRO gradients: a piece of {} values, more than {}",
                  count, max_piece_);
  }
  return slots_[slot];
}

Result<void> ShardedDeviceGrads::Done(size_t offset, size_t count) {
  const int slot = next_;
  next_ = 1 - next_;
  reported_ += count;
  COHORT_CUDA_CHECK(cudaEventRecord(written_[slot], stream_));
  const bool final = final_;
  slot_op_[slot] = thread_.Post([this, slot, offset, count, final] {
    return Reduce(slots_[slot], written_[slot], offset, count, final);
  });
  return {};
}

Result<void> ShardedDeviceGrads::Submit(const float* src, size_t offset, size_t count) {
  if (slots_[0] != nullptr || count > max_piece_) {
    oversize_ = oversize_ || count > max_piece_;
    return Errorf(ErrorCode::kInternal,
                  "ZeRO gradients: Submit of {} values (at most {}) on {} memory", count,
                  max_piece_, slots_[0] != nullptr ? "piece-buffer" : "caller");
  }
  if (submits_ == submitted_.size()) {
    cudaEvent_t e = nullptr;
    COHORT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    submitted_.push_back(e);
  }
  // Ops of earlier rounds are done (Finish drained them): the round's events are free.
  cudaEvent_t written = submitted_[submits_++];
  COHORT_CUDA_CHECK(cudaEventRecord(written, stream_));
  reported_ += count;
  const bool final = final_;
  thread_.Post([this, src, written, offset, count, final] {
    return Reduce(src, written, offset, count, final);
  });
  return {};
}

Result<void> ShardedDeviceGrads::Reduce(const float* piece, cudaEvent_t written, size_t offset,
                                        size_t count, bool final) {
  COHORT_CUDA_CHECK(cudaEventSynchronize(written));
  const size_t begin = partition_.begin(rank_), end = partition_.end(rank_);
  const size_t lo = std::min(std::max(offset, begin), end);
  const size_t hi = std::max(lo, std::min(offset + count, end));
  const float* mine = piece + (lo - offset);
  if (comm_ != nullptr && partition_.ranks > 1) {
    COHORT_TRY_VOID(comm_->ReduceScatter(piece, received_,
                                         partition_.counts_in(offset, offset + count),
                                         comm::DataType::kFloat32, comm::ReduceOp::kAvg));
    mine = received_;
  }
  cuda::Add(shard_ + (lo - begin), mine, hi - lo, add_stream_);
  COHORT_CUDA_CHECK(cudaGetLastError());  // Add (ZeRO gradient shard)
  COHORT_CUDA_CHECK(cudaStreamSynchronize(add_stream_));
  if (final && final_fn_ && hi > lo) return final_fn_(lo - begin, hi - begin);
  return {};
}

Result<void> ShardedDeviceGrads::Finish() {
  COHORT_TRY_VOID(thread_.Drain());
  if (oversize_) {
    return Errorf(ErrorCode::kInternal, "ZeRO gradients: a piece was larger than {} floats",
                  max_piece_);
  }
  if (reported_ != partition_.total) {
    return Errorf(ErrorCode::kInternal,
                  "ZeRO gradients: the backward pass reported {} gradient elements of {}",
                  reported_, partition_.total);
  }
  return {};
}

// ---------------------------------------------------------------------------------------
// GatheredDeviceParams

namespace {

size_t LargestPiece(const std::vector<std::vector<ParamPiece>>& passes) {
  size_t most = 1;
  for (const std::vector<ParamPiece>& pass : passes) {
    for (const ParamPiece& p : pass) most = std::max(most, p.count);
  }
  return most;
}

}  // namespace

GatheredDeviceParams::GatheredDeviceParams(comm::Communicator* comm,
                                           const ZeroPartition& partition,
                                           std::vector<std::vector<ParamPiece>> passes,
                                           const cuda::bf16* shard, bool on_host, int device,
                                           cudaStream_t stream, SerialThread& thread)
    : comm_(comm),
      partition_(partition),
      rank_(comm ? comm->rank() : 0),
      max_piece_(LargestPiece(passes)),
      shard_(shard),
      on_host_(on_host),
      device_(device),
      stream_(stream),
      thread_(thread),
      passes_(std::move(passes)) {}

GatheredDeviceParams::~GatheredDeviceParams() {
  Abort();
  (void)thread_.Drain();
  for (cudaEvent_t e : released_event_) {
    if (e != nullptr) (void)cudaEventDestroy(e);
  }
  if (copy_stream_ != nullptr) (void)cudaStreamDestroy(copy_stream_);
  for (cuda::bf16* p : {buffers_[0], buffers_[1], send_}) {
    if (p != nullptr) (void)cudaFree(p);
  }
}

Result<std::unique_ptr<GatheredDeviceParams>> GatheredDeviceParams::Create(
    comm::Communicator* comm, const ZeroPartition& partition,
    std::vector<std::vector<ParamPiece>> passes, const cuda::bf16* shard, bool on_host,
    int device, cudaStream_t stream, SerialThread& thread) {
  std::unique_ptr<GatheredDeviceParams> g(new GatheredDeviceParams(
      comm, partition, std::move(passes), shard, on_host, device, stream, thread));
  COHORT_CUDA_CHECK(cudaSetDevice(device));
  const size_t max = g->max_piece_;
  for (cuda::bf16*& b : g->buffers_) {
    b = static_cast<cuda::bf16*>(COHORT_TRY(DeviceAlloc(
        max * sizeof(cuda::bf16),
        fmt::format("a ZeRO-3 parameter gather buffer ({} bf16 values)", max), device)));
    g->scratch_bytes_ += max * sizeof(cuda::bf16);
  }
  if (on_host && comm != nullptr && partition.ranks > 1) {
    const size_t part = std::min(max, partition.size(g->rank_));
    g->send_ = static_cast<cuda::bf16*>(COHORT_TRY(DeviceAlloc(
        std::max<size_t>(1, part) * sizeof(cuda::bf16),
        fmt::format("the offloaded parameters' device send buffer ({} bf16 values)", part),
        device)));
    g->scratch_bytes_ += part * sizeof(cuda::bf16);
  }
  COHORT_CUDA_CHECK(cudaStreamCreateWithFlags(&g->copy_stream_, cudaStreamNonBlocking));
  for (cudaEvent_t& e : g->released_event_) {
    COHORT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  }
  return g;
}

void GatheredDeviceParams::Abort() {
  {
    std::lock_guard lock(mu_);
    aborted_ = true;
  }
  cv_.notify_all();
}

Result<void> GatheredDeviceParams::BeginPass(size_t pass) {
  if (pass_ != nullptr && index_ != pass_->size()) {
    return Errorf(ErrorCode::kInternal, "ZeRO-3: a pass began after {} of the last pass's {} pieces",
                  index_, pass_->size());
  }
  if (pass >= passes_.size()) {
    return Errorf(ErrorCode::kInternal, "ZeRO-3: pass {} of {}", pass, passes_.size());
  }
  pass_ = &passes_[pass];
  index_ = 0;
  posted_ = 0;
  Post(0);
  return {};
}

void GatheredDeviceParams::Post(size_t index) {
  if (index >= pass_->size() || index < posted_) return;
  const int buffer = static_cast<int>(index % 2);
  const ParamPiece p = (*pass_)[index];
  posted_ = index + 1;
  ticket_[buffer] = thread_.Post([this, buffer, p] { return GatherInto(buffer, p); });
}

Result<void> GatheredDeviceParams::GatherInto(int buffer, const ParamPiece& p) {
  {
    // The buffer's last piece released by the model (its kernels queued), then finished.
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return aborted_ || free_[buffer]; });
    if (aborted_) {
      return MakeError(ErrorCode::kFailedPrecondition,
                       "ZeRO-3 parameter gather aborted (the model is being destroyed)");
    }
    free_[buffer] = false;
  }
  COHORT_CUDA_CHECK(cudaEventSynchronize(released_event_[buffer]));
  const size_t begin = partition_.begin(rank_), end = partition_.end(rank_);
  const size_t lo = std::min(std::max(p.offset, begin), end);
  const size_t hi = std::max(lo, std::min(p.offset + p.count, end));
  const cuda::bf16* mine = shard_ + (lo - begin);
  const bool gather = comm_ != nullptr && partition_.ranks > 1;
  if (on_host_ && gather) {
    // This rank's part of the piece to the device, just before the gather.
    if (hi > lo) {
      COHORT_CUDA_CHECK(cudaMemcpyAsync(send_, mine, (hi - lo) * sizeof(cuda::bf16),
                                        cudaMemcpyHostToDevice, copy_stream_));
      COHORT_CUDA_CHECK(cudaStreamSynchronize(copy_stream_));
    }
    mine = send_;
  }
  if (gather) {
    return comm_->AllGather(mine, buffers_[buffer], partition_.counts_in(p.offset, p.offset + p.count),
                            comm::DataType::kBFloat16);
  }
  // One rank: the shard is the whole model; the piece is a copy from the device shard, or
  // (on_host) from the pinned host shard.
  COHORT_CUDA_CHECK(cudaMemcpyAsync(buffers_[buffer], mine, p.count * sizeof(cuda::bf16),
                                    on_host_ ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice,
                                    copy_stream_));
  COHORT_CUDA_CHECK(cudaStreamSynchronize(copy_stream_));
  return {};
}

Result<const cuda::bf16*> GatheredDeviceParams::Gather(size_t offset, size_t count) {
  if (pass_ == nullptr || index_ >= pass_->size() ||
      (*pass_)[index_] != ParamPiece{offset, count}) {
    return Errorf(ErrorCode::kInternal,
                  "ZeRO-3: the model asked for parameters [{}, +{}) out of the pieces' order",
                  offset, count);
  }
  const int buffer = static_cast<int>(index_ % 2);
  const uint64_t ticket = ticket_[buffer];
  given_[buffer] = ParamPiece{offset, count};
  ++index_;
  Post(index_);  // the prefetch: the next piece's gather runs while this one is used
  ++asked_;
  if (thread_.IsDone(ticket)) ++prefetched_;
  COHORT_TRY_VOID(thread_.WaitFor(ticket));
  return buffers_[buffer];
}

Result<void> GatheredDeviceParams::Release(size_t offset, size_t count) {
  for (int b = 0; b < 2; ++b) {
    if (given_[b] == ParamPiece{offset, count} && given_[b].count > 0) {
      given_[b] = {};
      COHORT_CUDA_CHECK(cudaEventRecord(released_event_[b], stream_));
      {
        std::lock_guard lock(mu_);
        free_[b] = true;
      }
      cv_.notify_all();
      return {};
    }
  }
  return Errorf(ErrorCode::kInternal, "ZeRO-3: released parameters [{}, +{}) not gathered",
                offset, count);
}

}  // namespace cohort::engine
#endif  // COHORT_HAVE_CUDA_ENGINE
