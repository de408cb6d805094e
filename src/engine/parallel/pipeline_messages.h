// Where a pipeline stage's messages (activations and their gradients, float32) live, and the
// pool of buffers that carries them between the stage's compute and its sender threads.
//
// MessageMemory allocates message buffers in one memory: host memory (HostMessageMemory:
// the CPU shard, or a CUDA shard that stages its messages through the host) or a device's
// memory (the CUDA shard's, trainer/cuda_shard_engine.cc). The pipeline's channels must then
// be communicators that reach that memory: gloo for host memory; nccl for device memory (on
// the CPU emulator of the CUDA kernels device memory is host memory, and gloo stands in).
//
// MessagePool hands out buffers of the step's message size: the training thread takes one,
// the model writes a message into it, and the sender thread that sends it gives it back, so a
// message is never copied between the model and the link and the pool holds as many buffers
// as there are messages in flight (at most what the schedule queues). Reserve, at the start of
// a step (when no buffer is out), frees the free buffers too small for the step's size: the
// only place buffers are freed before the pool goes, so that no device memory is freed while
// a send may still read another buffer (cudaFree synchronises the device, which would wait
// for a send whose receiver waits for this rank).
//
// Threads: Reserve and Take on the training thread; Give on any thread.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

#include "common/error.h"

namespace cohort::engine {

class MessageMemory {
 public:
  virtual ~MessageMemory() = default;
  // True for a device's memory (a pointer the host must never dereference).
  virtual bool on_device() const = 0;
  // `count` floats (count >= 1). kResourceExhausted (with what was asked) when out of memory.
  virtual Result<float*> Allocate(size_t count) = 0;
  // Frees what Allocate returned (null: nothing).
  virtual void Free(float* data) = 0;
};

// Host memory (operator new).
class HostMessageMemory final : public MessageMemory {
 public:
  bool on_device() const override { return false; }
  Result<float*> Allocate(size_t count) override;
  void Free(float* data) override;
};

class MessagePool {
 public:
  // `memory` must outlive the pool.
  explicit MessagePool(MessageMemory& memory) : memory_(memory) {}
  ~MessagePool();
  MessagePool(const MessagePool&) = delete;
  MessagePool& operator=(const MessagePool&) = delete;

  MessageMemory& memory() const { return memory_; }
  // Messages of `count` floats from now on (count >= 1). Frees the free buffers smaller than
  // that; kFailedPrecondition if a buffer is still out (a send not given back).
  Result<void> Reserve(size_t count);
  // A free buffer of at least the reserved size (a new one when none is free); the memory's
  // error when it cannot allocate.
  Result<float*> Take();
  // Returns a buffer that Take handed out.
  void Give(float* data);

  size_t count() const { return count_; }
  // Buffers allocated now (free and out).
  size_t buffers() const;

 private:
  struct Buffer {
    float* data = nullptr;
    size_t capacity = 0;
    bool out = false;
  };
  MessageMemory& memory_;
  size_t count_ = 0;           // training thread: the reserved message size
  mutable std::mutex mu_;
  std::vector<Buffer> all_;    // guarded by mu_
};

}  // namespace cohort::engine
