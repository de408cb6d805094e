// Pipeline parallelism: one stage's side of a pipeline step, on any device the
// communicators reach.
//
// PipelineLinks are the point-to-point channels of one pipeline group: activations go from
// stage s to stage s + 1 and gradients back, and with interleaving the last stage also
// feeds the first (its chunk k passes to chunk k + 1 there) and gets the gradient back.
// Every directed channel (activation or gradient, from one stage to the next) is a
// communicator of its own, split from the world's, so that the two ends use it from one
// thread each: the receiving stage's training thread receives, and the sending stage hands
// each message to a sender thread that owns the channel. Sends are therefore asynchronous
// (a stage never waits for its successor to post a receive: gloo's Send would), which is
// all the schedules of pipeline_schedule.h need to be deadlock-free. Messages on a channel
// are consumed in the order they are sent (the schedules guarantee it), so a channel needs
// no tags and NCCL's order-only matching holds.
//
// Memory. Messages live where the model reads and writes them (pipeline_messages.h): host
// memory for the CPU shard, device memory for the CUDA shard, so that a GPU's activations go
// to the next stage device to device (nccl send/recv, no host round trip). The links' own
// MessagePool holds the buffers: the runner takes one, the model writes the message into it,
// and the sender thread gives it back once sent. `world` must reach that memory.
//
// PipelineRunner::Run executes one stage's schedule for a step: for a forward it receives
// the chunk's input (unless the chunk is the model's first), runs it and sends the output
// on (unless it is the last); for a backward it receives the output's gradient (unless the
// chunk is the last), runs it and sends the input's gradient back (unless it is the
// first). It times every op, so a step reports how long this stage computed and how long
// it waited: the measured bubble.
//
// Failure: a peer that dies or hangs makes a receive or a send fail within the
// communicator's timeout with its error (naming the operation and the peer's world rank);
// Run returns the first error and the links are then unusable (as a broken communicator).
//
// Threads: a runner and its links belong to the training thread; each outgoing channel
// adds a sender thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "common/error.h"
#include "engine/parallel/layout.h"
#include "engine/parallel/pipeline_messages.h"
#include "engine/parallel/pipeline_schedule.h"

namespace cohort::engine {

class SendQueue;

class PipelineLinks {
 public:
  // Splits the channels of `rank`'s pipeline group from `world` (every rank of the world
  // calls it, in the same order relative to its other splits), with messages in `memory`,
  // which `world` must reach and which must outlive the links. Stages with no neighbour in
  // a direction get no channel there; a pipeline of one has none.
  static Result<std::unique_ptr<PipelineLinks>> Create(comm::Communicator& world,
                                                      const ParallelLayout& layout, int rank,
                                                      MessageMemory& memory);
  ~PipelineLinks();

  // The message buffers (Reserve the step's message size first).
  MessagePool& pool() { return *pool_; }
  // Sends pool().count() floats of `data`, a buffer from pool().Take() that the caller has
  // filled, to the next stage (activations) or the previous one (gradients); returns at
  // once, and the buffer goes back to the pool once sent (or dropped after an error). The
  // error of an earlier send on that channel, if any.
  Result<void> SendActivation(float* data);
  Result<void> SendGradient(float* data);
  // Blocks until the previous stage's activation (the next stage's gradient) arrives in
  // `data` (in the links' memory).
  Result<void> RecvActivation(float* data, size_t count);
  Result<void> RecvGradient(float* data, size_t count);
  // Waits until every queued send is delivered; the first send error.
  Result<void> Flush();

 private:
  PipelineLinks() = default;
  std::unique_ptr<MessagePool> pool_;  // first: outlives the sender threads that give back
  std::unique_ptr<SendQueue> act_out_, grad_out_;
  std::unique_ptr<comm::Communicator> act_in_, grad_in_;
};

// What a stage computes; implemented by the model side (trainer/parallel_train_model.cc).
class PipelineCompute {
 public:
  virtual ~PipelineCompute() = default;
  // Floats in one activation message (B·T·C).
  virtual size_t activation_size() const = 0;
  // Forward of global chunk `chunk` on micro-batch `mb`: `input` is the previous chunk's
  // output (null for the model's first chunk); `output` receives this chunk's (null for
  // the last chunk). Both are in the links' MessageMemory; when the call returns `input` has
  // been read and `output` written (a device model waits for its stream: the runner reuses
  // the input buffer and hands the output to a sender thread). forward_only: keep nothing
  // for a backward.
  virtual Result<void> Forward(int chunk, int mb, const float* input, float* output,
                               bool forward_only) = 0;
  // Backward: `doutput` is the next chunk's input gradient (null for the last chunk);
  // `dinput` receives this chunk's (null for the first chunk); memory as Forward's.
  virtual Result<void> Backward(int chunk, int mb, const float* doutput, float* dinput) = 0;
};

// What one stage's step measured.
struct PipelineStepStats {
  double compute_s = 0;  // time inside Forward/Backward
  double span_s = 0;     // the whole step on this stage
  double bubble() const { return span_s > 0 ? 1.0 - compute_s / span_s : 0.0; }
};

class PipelineRunner {
 public:
  // `links` must outlive the runner.
  PipelineRunner(const ParallelLayout& layout, int stage, PipelineLinks& links);

  // Runs this stage's schedule over `microbatches` micro-batches (forward_only: the
  // forwards alone). Returns when this stage's part is done and its sends delivered.
  Result<PipelineStepStats> Run(PipelineCompute& compute, int microbatches, bool forward_only);

 private:
  const ParallelLayout& layout_;
  int stage_;
  PipelineLinks& links_;
  // Schedules built so far, by (micro-batches, forward only): a step reuses its schedule.
  std::map<std::pair<int, bool>, std::vector<PipelineOp>> schedules_;
};

}  // namespace cohort::engine
