// GptShardCudaModel: one rank's part of a GPT-2 model under tensor and pipeline parallelism
// on a CUDA device: GptShardModel's contract (gpt_shard.h: the chunks of its pipeline
// stage, each block split across the tensor group as gpt_shard_layout.h describes, the
// same Forward / Backward / Release / Logits per (chunk, micro-batch slot)) with
// GptCudaModel's kernels and precision (gpt_cuda.h): float32 master parameters and
// gradients, a bf16 copy of the parameters that the kernels read, bf16 activations, float32
// statistics. Megatron's collectives go through TensorParallelGroup on DEVICE buffers (nccl
// on a GPU; gloo over the emulator's host-backed device memory in tests):
//   forward   the vocabulary-parallel embedding's float32 partials, and each row-parallel
//             product (attention projection, MLP projection) as float32 partial sums,
//             then bias and residual (kernels/cuda/residual.cuh BiasResidualFromSum);
//   backward  the input gradient of each column-parallel product (qkv, fc, the head);
//   loss      the cross-entropy's row max, then Σ e^{x − max} and the target logit
//             (kernels/cuda/cross_entropy.cuh CrossEntropyShard*): never the logits.
// A group of one skips the conversions and adds the bias in the product, as GptCudaModel.
//
// Activations are stashed per (chunk, slot) in device memory until the matching Backward
// (one device allocation per stash, reused for a later micro-batch it is large enough for).
// Pipeline messages are DEVICE float32 (B·T·C): `input`/`output`/`doutput`/`dinput` point
// into device memory on the model's device (the pipeline sends them device to device, nccl
// send/recv; trainer/cuda_shard_engine.cc stages host messages through device buffers when
// asked to), converted to and from the bf16 activations exactly (bf16 → float → bf16 is the
// identity), so a chunk computes the same bits wherever the stage boundary falls and whatever
// memory carries the message.
//
// Synchronisation: a collective needs the data in memory, so the model synchronises its
// stream before each (communicators are synchronous, communicator.h), and Forward with
// targets reads the loss. Forward and Backward return once their message buffers are done
// with: `input`/`doutput` read and `output`/`dinput` written (the caller may then receive
// into the one and hand the other to another thread's send), the rest of the work may still
// run on the stream. Gradients accumulate over Backward calls until ZeroGrad.
//
// Gradient readiness (data-parallel overlap, parallel/ddp.h): Backward with a `ready`
// function reports each piece of the chunk's gradient as its kernels are queued
// (ShardGradPieces order: the head, the blocks from the last, the embedding), recording an
// event behind the piece's last writer; WaitGradsReady (any thread) blocks on the events of
// the pieces a range overlaps.
//
// ZeRO-3 (Create with hold_params false, SetParamSource): the model holds no parameters, float32
// or bf16, and reads each piece of its chunks' bf16 parameters from a CudaParamSource
// (gpt_cuda.h) just before it uses it, releasing it after (one piece held at a time): a
// chunk's Forward is one pass (ParamPasses: the embedding chunk's wte slice and wpe, each
// block, the head chunk's ln_f and wte slice), its Backward another (the head's wte slice,
// ln_f, the blocks from the last; the embeddings' gradients need no parameters), the pieces
// of gpt_shard.h ShardParamPieces. Gradients still accumulate into its whole buffer.
//
// Threads: one thread at a time (each method makes the model's device current again), except
// WaitGradsReady, which any thread may call while Backward runs or after it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "common/error.h"
#include "engine/kernels/cuda/common.cuh"
#include "engine/model/gpt_cuda.h"
#include "engine/model/gpt_shard.h"
#include "engine/model/gpt_shard_layout.h"
#include "engine/parallel/tensor_parallel.h"

namespace cohort::engine {

class GptShardCudaModel {
 public:
  // On the current CUDA device; `tp` (the tensor group of spec.tensor_size ranks, its
  // communicator reaching device memory) must outlive the model. Parameters start zeroed:
  // CopyParamsFromHost a shard (ExtractShard) in. kInvalidArgument as GptShardModel::Create
  // and for shapes the CUDA kernels refuse (n_embd / tensor a multiple of 8, the head size;
  // CheckCudaChannels in cuda_arena.h); kUnavailable without a device.
  // `hold_params` false (ZeRO-3): no parameter memory; SetParamSource before a pass.
  static Result<std::unique_ptr<GptShardCudaModel>> Create(const ShardSpec& spec,
                                                           TensorParallelGroup& tp,
                                                           bool hold_params = true);
  // The passes a CudaParamSource serves for a shard of `layout`, each its pieces in the order
  // the model asks for them: chunk c's Forward is pass 2c, its Backward pass 2c + 1.
  static std::vector<std::vector<ParamPiece>> ParamPasses(const GptShardLayout& layout);
  ~GptShardCudaModel();
  GptShardCudaModel(const GptShardCudaModel&) = delete;
  GptShardCudaModel& operator=(const GptShardCudaModel&) = delete;

  const GptShardLayout& layout() const;
  int num_chunks() const;
  int device() const;
  cudaStream_t stream();

  // Where a model without parameters reads them (it must outlive their use); a pass fails
  // with kFailedPrecondition without one.
  void SetParamSource(CudaParamSource* source);
  bool holds_params() const;

  // Device memory (layout().total floats; never dereference on the host). Without parameters
  // (hold_params false) params_device() is empty and params_bf16_device() null, and the
  // copies and ParamsWritten below are kFailedPrecondition.
  std::span<float> params_device();
  std::span<float> grads_device();
  cuda::bf16* params_bf16_device();
  // Host copies in and out (the shard's flat layout); return when done. kInvalidArgument on
  // a size mismatch.
  Result<void> CopyParamsFromHost(std::span<const float> params);
  Result<void> CopyParamsToHost(std::span<float> params);
  Result<void> CopyGradsToHost(std::span<float> grads);
  // Refreshes the bf16 copy after the float32 parameters changed in device memory.
  Result<void> ParamsWritten();
  Result<void> ZeroGrad();
  Result<void> Synchronize();

  // As GptShardModel::Forward / Backward / Release / Logits (device messages, see above).
  // Token ids must lie in [0, vocab_size) and targets in [-1, vocab_size): kInvalidArgument.
  Result<float> Forward(int chunk, int slot, const MicrobatchTokens& batch, const float* input,
                        float* output);
  Result<void> Backward(int chunk, int slot, float loss_scale, const float* doutput,
                        float* dinput, const GradReadyFn& ready = {});
  // Blocks until every piece of grads_device() overlapping [offset, offset + count) that
  // the last Backward with `ready` reported is written (its event has completed).
  Result<void> WaitGradsReady(size_t offset, size_t count);
  void Release(int chunk, int slot);
  Result<std::vector<float>> Logits(int chunk, int slot, int position);

  // Device bytes of activations stashed now, and the most at once since ResetPeak.
  size_t activation_bytes() const;
  size_t peak_activation_bytes() const;
  void ResetPeak();

 private:
  struct Impl;
  explicit GptShardCudaModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::engine
