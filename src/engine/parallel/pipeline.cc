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
// alone uses.
class SendQueue {
 public:
  SendQueue(std::unique_ptr<comm::Communicator> comm, int peer)
      : comm_(std::move(comm)), peer_(peer), thread_([this] { Loop(); }) {}
  ~SendQueue() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  Result<void> Push(std::vector<float> data) {
    std::lock_guard lock(mu_);
    if (!status_) return status_;
    queue_.push_back(std::move(data));
    cv_.notify_all();
    return {};
  }

  Result<void> Flush() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [this] { return (queue_.empty() && !busy_) || !status_; });
    return status_;
  }

 private:
  void Loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      std::vector<float> data = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      Result<void> sent;
      if (status_) {
        lock.unlock();
        sent = comm_->Send(data.data(), data.size(), comm::DataType::kFloat32, peer_, 0);
        lock.lock();
      }
      busy_ = false;
      if (!sent && status_) {
        status_ = std::move(sent);
        queue_.clear();
      }
      cv_.notify_all();
    }
  }

  std::unique_ptr<comm::Communicator> comm_;  // sender thread only (after construction)
  const int peer_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::vector<float>> queue_;  // guarded by mu_
  bool busy_ = false;                     // guarded by mu_: a send is in progress
  bool stop_ = false;                     // guarded by mu_
  Result<void> status_;                   // guarded by mu_: the first send error
  std::thread thread_;                    // last: starts once the fields exist
};

PipelineLinks::~PipelineLinks() = default;

Result<std::unique_ptr<PipelineLinks>> PipelineLinks::Create(comm::Communicator& world,
                                                             const ParallelLayout& layout,
                                                             int rank) {
  std::unique_ptr<PipelineLinks> links(new PipelineLinks());
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
        auto q = std::make_unique<SendQueue>(std::move(*comm), peer);
        (kind == 0 ? links->act_out_ : links->grad_out_) = std::move(q);
      } else {
        (kind == 0 ? links->act_in_ : links->grad_in_) = std::move(*comm);
      }
    }
  }
  return links;
}

Result<void> PipelineLinks::SendActivation(std::vector<float> data) {
  if (!act_out_) return MakeError(ErrorCode::kInternal, "pipeline: no activation channel out");
  return act_out_->Push(std::move(data));
}

Result<void> PipelineLinks::SendGradient(std::vector<float> data) {
  if (!grad_out_) return MakeError(ErrorCode::kInternal, "pipeline: no gradient channel out");
  return grad_out_->Push(std::move(data));
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
  in_.resize(n);
  out_.resize(n);
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
    if (op.forward) {
      const bool first = op.chunk == 0, final = op.chunk == last;
      if (!first) {
        if (auto r = links_.RecvActivation(in_.data(), n); !r) return std::unexpected(context(r.error()));
      }
      auto r = timed([&] {
        return compute.Forward(op.chunk, op.microbatch, first ? nullptr : in_.data(),
                               final ? nullptr : out_.data(), forward_only);
      });
      if (!r) return std::unexpected(context(r.error()));
      if (!final) {
        if (auto s = links_.SendActivation(out_); !s) return std::unexpected(context(s.error()));
      }
    } else {
      const bool first = op.chunk == 0, final = op.chunk == last;
      if (!final) {
        if (auto r = links_.RecvGradient(in_.data(), n); !r) return std::unexpected(context(r.error()));
      }
      auto r = timed([&] {
        return compute.Backward(op.chunk, op.microbatch, final ? nullptr : in_.data(),
                                first ? nullptr : out_.data());
      });
      if (!r) return std::unexpected(context(r.error()));
      if (!first) {
        if (auto s = links_.SendGradient(out_); !s) return std::unexpected(context(s.error()));
      }
    }
  }
  if (auto r = links_.Flush(); !r) return std::unexpected(WithContext(r.error(), "pipeline send"));
  stats.span_s = std::chrono::duration<double>(Clock::now() - start).count();
  return stats;
}

}  // namespace cohort::engine
