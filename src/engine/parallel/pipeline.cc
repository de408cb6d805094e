#include "engine/parallel/pipeline.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include <fmt/format.h>

namespace cohort::engine {

using Clock = std::chrono::steady_clock;

// One outgoing channel: a thread that sends queued messages in order over a communicator it
// alone uses, giving each buffer back to the pool once sent.
class SendQueue {
 public:
  SendQueue(std::unique_ptr<comm::Communicator> comm, int peer, MessagePool& pool)
      : comm_(std::move(comm)), peer_(peer), pool_(pool), thread_([this] { Loop(); }) {}
  ~SendQueue() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    for (const Message& m : queue_) pool_.Give(m.data);
  }

  Result<void> Push(float* data, size_t count) {
    std::lock_guard lock(mu_);
    if (!status_) {
      pool_.Give(data);
      return status_;
    }
    queue_.push_back({data, count});
    cv_.notify_all();
    return {};
  }

  Result<void> Flush() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return (queue_.empty() && !busy_) || !status_; });
    return status_;
  }

 private:
  struct Message {
    float* data = nullptr;
    size_t count = 0;
  };

  void Loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      const Message m = queue_.front();
      queue_.pop_front();
      busy_ = true;
      Result<void> sent;
      if (status_) {
        lock.unlock();
        sent = comm_->Send(m.data, m.count, comm::DataType::kFloat32, peer_, 0);
        lock.lock();
      }
      pool_.Give(m.data);
      busy_ = false;
      if (!sent && status_) {
        status_ = std::move(sent);
        for (const Message& rest : queue_) pool_.Give(rest.data);
        queue_.clear();
      }
      cv_.notify_all();
    }
  }

  std::unique_ptr<comm::Communicator> comm_;  // sender thread only (after construction)
  const int peer_;
  MessagePool& pool_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Message> queue_;  // guarded by mu_
  bool busy_ = false;          // guarded by mu_: a send is in progress
  bool stop_ = false;          // guarded by mu_
  Result<void> status_;        // guarded by mu_: the first send error
  std::thread thread_;         // last: starts once the fields exist
};

namespace {

// A buffer lent by the pool for the scope (given back unless released to a send).
class Lent {
 public:
  explicit Lent(MessagePool& pool) : pool_(pool) {}
  ~Lent() {
    if (data_ != nullptr) pool_.Give(data_);
  }
  Lent(const Lent&) = delete;
  Lent& operator=(const Lent&) = delete;
  // Takes a buffer unless one is held.
  Result<float*> Get() {
    if (data_ == nullptr) data_ = COHORT_TRY(pool_.Take());
    return data_;
  }
  // The buffer, which the caller now owns (a send gives it back).
  float* Release() { return std::exchange(data_, nullptr); }

 private:
  MessagePool& pool_;
  float* data_ = nullptr;
};

}  // namespace

PipelineLinks::~PipelineLinks() = default;

Result<std::unique_ptr<PipelineLinks>> PipelineLinks::Create(comm::Communicator& world,
                                                             const ParallelLayout& layout,
                                                             int rank, MessageMemory& memory) {
  std::unique_ptr<PipelineLinks> links(new PipelineLinks());
  links->pool_ = std::make_unique<MessagePool>(memory);
  const int p = layout.pipeline;
  if (p == 1) return links;
  const std::vector<int> group = layout.PipelineGroup(rank);
  const int me = layout.CoordsOf(rank).stage;
  const bool ring = layout.virtual_stages > 1;
  // Every directed channel of the group in one order (activations s -> s+1, then gradients
  // s+1 -> s); each rank splits the ones it belongs to in that order, so no two ranks wait
  // on each other's splits in opposite orders.
  for (int kind = 0; kind < 2; ++kind) {
    for (int s = 0; s < p; ++s) {
      const int next = s + 1;
      if (next == p && !ring) continue;
      const int a = s, b = next % p;  // activation flows a -> b, gradient b -> a
      const int from = kind == 0 ? a : b, to = kind == 0 ? b : a;
      if (me != from && me != to) continue;
      std::vector<int> members = {group[from], group[to]};
      std::sort(members.begin(), members.end());
      auto comm = world.Split(members);
      if (!comm) {
        return std::unexpected(WithContext(
            comm.error(), fmt::format("pipeline {} channel stage {} -> {}",
                                      kind == 0 ? "activation" : "gradient", from, to)));
      }
      const int peer = 1 - (*comm)->rank();
      if (me == from) {
        auto q = std::make_unique<SendQueue>(std::move(*comm), peer, *links->pool_);
        (kind == 0 ? links->act_out_ : links->grad_out_) = std::move(q);
      } else {
        (kind == 0 ? links->act_in_ : links->grad_in_) = std::move(*comm);
      }
    }
  }
  return links;
}

Result<void> PipelineLinks::SendActivation(float* data) {
  if (!act_out_) {
    pool_->Give(data);
    return MakeError(ErrorCode::kInternal, "pipeline: no activation channel out");
  }
  return act_out_->Push(data, pool_->count());
}

Result<void> PipelineLinks::SendGradient(float* data) {
  if (!grad_out_) {
    pool_->Give(data);
    return MakeError(ErrorCode::kInternal, "pipeline: no gradient channel out");
  }
  return grad_out_->Push(data, pool_->count());
}

Result<void> PipelineLinks::RecvActivation(float* data, size_t count) {
  if (!act_in_) return MakeError(ErrorCode::kInternal, "pipeline: no activation channel in");
  return act_in_->Recv(data, count, comm::DataType::kFloat32, 1 - act_in_->rank(), 0);
}

Result<void> PipelineLinks::RecvGradient(float* data, size_t count) {
  if (!grad_in_) return MakeError(ErrorCode::kInternal, "pipeline: no gradient channel in");
  return grad_in_->Recv(data, count, comm::DataType::kFloat32, 1 - grad_in_->rank(), 0);
}

Result<void> PipelineLinks::Flush() {
  if (act_out_) COHORT_TRY_VOID(act_out_->Flush());
  if (grad_out_) COHORT_TRY_VOID(grad_out_->Flush());
  return {};
}

PipelineRunner::PipelineRunner(const ParallelLayout& layout, int stage, PipelineLinks& links)
    : layout_(layout), stage_(stage), links_(links) {}

Result<PipelineStepStats> PipelineRunner::Run(PipelineCompute& compute, int microbatches,
                                              bool forward_only) {
  const auto start = Clock::now();
  PipelineStepStats stats;
  const int last = layout_.num_chunks() - 1;
  const size_t n = compute.activation_size();
  MessagePool& pool = links_.pool();
  if (auto r = pool.Reserve(n); !r) return std::unexpected(WithContext(r.error(), "pipeline"));
  Lent in(pool);  // the receive buffer, for the whole step
  auto timed = [&stats](auto&& fn) -> Result<void> {
    const auto t0 = Clock::now();
    auto r = fn();
    stats.compute_s += std::chrono::duration<double>(Clock::now() - t0).count();
    return r;
  };
  auto [it, fresh] = schedules_.try_emplace({microbatches, forward_only});
  if (fresh) it->second = BuildSchedule(layout_, stage_, microbatches, forward_only);
  for (const PipelineOp& op : it->second) {
    auto context = [&op](const Error& e) { return WithContext(e, "pipeline " + OpName(op)); };
    const bool first = op.chunk == 0, final = op.chunk == last;
    // Forward: receives unless first, sends unless final; backward the other way round.
    const bool receives = op.forward ? !first : !final;
    const bool sends = op.forward ? !final : !first;
    float* input = nullptr;
    if (receives) {
      auto buf = in.Get();
      if (!buf) return std::unexpected(context(buf.error()));
      input = *buf;
      auto r = op.forward ? links_.RecvActivation(input, n) : links_.RecvGradient(input, n);
      if (!r) return std::unexpected(context(r.error()));
    }
    Lent out(pool);
    float* output = nullptr;
    if (sends) {
      auto buf = out.Get();
      if (!buf) return std::unexpected(context(buf.error()));
      output = *buf;
    }
    auto r = timed([&] {
      return op.forward ? compute.Forward(op.chunk, op.microbatch, input, output, forward_only)
                        : compute.Backward(op.chunk, op.microbatch, input, output);
    });
    if (!r) return std::unexpected(context(r.error()));
    if (sends) {
      auto s = op.forward ? links_.SendActivation(out.Release())
                          : links_.SendGradient(out.Release());
      if (!s) return std::unexpected(context(s.error()));
    }
  }
  if (auto r = links_.Flush(); !r) return std::unexpected(WithContext(r.error(), "pipeline send"));
  stats.span_s = std::chrono::duration<double>(Clock::now() - start).count();
  return stats;
}

}  // namespace cohort::engine
