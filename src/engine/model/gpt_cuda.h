// GptCudaModel: the GPU twin of GptModel (gpt.h) — the same GPT-2 architecture, GptConfig
// and flat parameter layout (GptLayout), so checkpoints, safetensors import/export and the
// AdamW decay ranges are shared with the CPU reference. GptCudaAdamW is its optimizer.
//
// Precision (issue 5): float32 master parameters, float32 gradients, a bf16 copy of the
// parameters that the forward and backward read, bf16 activations, float32 statistics
// (LayerNorm mean/rstd, attention log-sum-exp, losses); every reduction accumulates in
// float32. Matrix products go through cuBLASLt (kernels/cuda/matmul.h).
//
// Memory. Create allocates everything once on the CUDA device current on the calling
// thread, for up to `max_batch` sequences of up to `max_seq` tokens (llm.c's plan): per
// layer ln1 out + mean/rstd, qkv, attention out + lse, the residual after attention (the
// attention projection is written into it and the skip added in place, as GptModel does),
// ln2 out + mean/rstd, fc out (pre-GELU), GELU out, and the residual after the MLP (the MLP
// projection likewise written into it); the encoder output, ln_f out + stats, the logits
// (B·T·Vp bf16), which become d(loss)/d(logits) (written by Backward, or by Forward with
// targets under the single-pass classifier), and B·Vp bf16 where that Forward sets each
// sequence's last logits row aside first. The backward reuses three buffers for the whole
// stack (the residual stream's gradient, one B·T·C and one B·T·4C temporary) and one
// scratch area for the kernels that need one.
// PlanMemory reports the bytes without a device.
//
// Streams and synchronisation. All work runs on one non-blocking compute stream, in order;
// nothing touches the legacy default stream. Forward with targets synchronises once (to
// read the loss); Backward does not synchronise. Backward calls ready(offset, count) in
// GptModel's order (ln_f, layer L-1, ..., layer 0, wpe, wte), each time right after
// recording a CUDA event on the compute stream behind the last kernel that writes that
// slice; WaitGradsReady (any thread) blocks on exactly the events of the slices a range
// touches, which is how DdpReducer's communication thread knows a bucket's gradients are
// in device memory before it hands them to NCCL.
//
// ZeRO (trainer/cuda_zero.h). Created with GptCudaStorage{.grads = false} the model holds no
// gradient buffer: Backward asks a CudaGradSink (SetGradSink) for a device buffer per piece,
// in the order pieces become final (ln_f, layer L-1, ..., layer 0, wpe, then wte in chunks of
// rows from the last: GradPieces), zeroes it, writes the piece's gradient of this
// micro-batch into it and hands it back. wte's gradient is taken at the end, a chunk of rows
// at a time: the head's part (dlogitsᵀ · ln_f(x), from the dlogits that stay in the logits
// buffer, Matmul::BackwardWeightRows) and the token embedding's rows of the chunk
// (EncoderShardBackward), so no piece is larger than MaxGradPiece (GptModel's: a layer's
// block, or wpe) and the sink needs bucket-sized buffers only. Created with {.params =
// false} it holds no parameters either: Forward and Backward read each piece's bf16
// parameters from a CudaParamSource (SetParamSource) just before they use them and release
// it after (ParamPieces lists the order; at most two pieces are held at a time, because
// each layer's last kernel normalises with the next piece's LayerNorm).
//
// Threads: one thread calls a model at a time (the one that created it, or any thread after
// it has made the model's device current — every method makes it current again); the
// exception is WaitGradsReady, which any thread may call while Backward runs or after it.
// The `ready` callback runs on the calling thread and must not call into the model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/error.h"
#include "engine/kernels/cuda/common.cuh"
#include "engine/kernels/cuda/matmul.h"
#include "engine/model/gpt.h"
#include "engine/optim/adamw.h"

namespace cohort::engine {

// Device bytes GptCudaModel::Create allocates for a configuration and batch shape.
struct GptCudaMemory {
  size_t params = 0;       // float32 master copy
  size_t params_bf16 = 0;  // bf16 copy read by the kernels
  size_t grads = 0;        // float32
  size_t activations = 0;  // saved for the backward, including the logits
  size_t logits = 0;       // of which: the B·T·Vp bf16 logits (reused for dlogits)
  size_t backward = 0;     // the backward's temporaries
  size_t scratch = 0;      // kernels' scratch (encoder/LayerNorm/attention backward)
  size_t total = 0;        // everything above, in one allocation (alignment included)
};

// The step's fusions (issue 21's levers), each on by default and each switchable so that
// one benchmark run can time the step with and without it on the same device
// (bench_train_throughput --variants). Every combination computes the same function: the
// parity tests run with the defaults and with every lever off.
struct GptCudaOptions {
  // The MLP's GELU in the fc product's cuBLASLt epilogue (forward: GELU_AUX_BIAS keeps the
  // pre-activation for the backward; backward: DGELU on fc_proj's dinp product) instead of
  // two elementwise kernels.
  bool gelu_epilogue = true;
  // Bias gradients in the weight-gradient product's cuBLASLt epilogue (BGRADB, stored into
  // a scratch vector and added to the gradient) instead of the column-sum kernels. Off by
  // default: on an H200 with cuBLASLt 13.1 it made the step slower (+0.19 and +0.15 ms in
  // two calls): cuBLASLt computes the bias gradient in a kernel of its own
  // (globalKernelBgradAB_v2, 0.65 ms a step) besides the products, so it saves nothing
  // over ours (0.80 ms). Kept for other devices and library versions.
  bool bias_grad_epilogue = false;
  // GptCudaAdamW::Step updates every parameter in one launch (the decay runs as a table in
  // device memory, 16-byte accesses) instead of one launch per decay run; bitwise the same
  // update.
  bool fused_adamw = true;
  // Forward with targets writes d(mean loss)/d(logits) in the same pass over the logits
  // that computes the loss (llm.c's fused classifier), after setting each sequence's last
  // row aside for LastLogits; Backward starts from it without passing over the logits
  // again and applies loss_scale as the alpha of the classifier's two products. Off:
  // Forward only reads the logits, Backward passes over them again to write the gradient.
  bool single_pass_classifier = true;
  // The residual add after each attention and MLP projection fused into the LayerNorm
  // forward that follows it (llm.c's fused_residual_forward): one kernel writes the residual
  // stream and normalises it, instead of an add kernel and a LayerNorm that re-reads its
  // output; bitwise the same.
  bool fused_residual_layernorm = true;

  // All levers off: the step as it was first measured on a GPU (bench/gpu/NOTES.md).
  static GptCudaOptions Baseline() { return {false, false, false, false, false}; }
  // Every lever on, bias_grad_epilogue included.
  static GptCudaOptions AllOn() { return {true, true, true, true, true}; }
};

// What Create allocates besides the activations: the float32 and bf16 parameters and the
// float32 gradient buffer (each Ψ values). ZeRO-2 drops the gradients, ZeRO-3 both.
struct GptCudaStorage {
  bool params = true;
  bool grads = true;
};

// A piece of the flat parameter buffer that a pass reads or writes as a whole.
struct ParamPiece {
  size_t offset = 0, count = 0;
  bool operator==(const ParamPiece&) const = default;
};

// Where the backward pass of a model without a gradient buffer writes (see above). Acquire
// returns a DEVICE buffer of at least `count` floats for gradients [offset, offset + count)
// (it may block until one is free); the model zeroes it and queues the piece's kernels on
// its compute stream, then calls Done: the sink must order its reads after those kernels
// (an event on the stream). One piece is held at a time. Errors fail the Backward.
class CudaGradSink {
 public:
  virtual ~CudaGradSink() = default;
  virtual Result<float*> Acquire(size_t offset, size_t count) = 0;
  virtual Result<void> Done(size_t offset, size_t count) = 0;
};

// Where a model without parameters reads them. BeginPass(pass) starts pass `pass` of the
// model's list of passes, whose pieces it then asks for in that order (GptCudaModel: pass 0
// the forward, ParamPieces(config, false), pass 1 the backward, ParamPieces(config, true);
// GptShardCudaModel: ParamPasses, chunk c's forward 2c and its backward 2c + 1, one piece
// held at a time); Gather returns a DEVICE buffer of
// the piece's bf16 parameters, usable by kernels queued on the compute stream after the
// call; Release says that the kernels queued so far are the piece's last readers (the source
// orders its reuse of the buffer after them). At most two pieces are held at a time.
class CudaParamSource {
 public:
  virtual ~CudaParamSource() = default;
  virtual Result<void> BeginPass(size_t pass) = 0;
  virtual Result<const cuda::bf16*> Gather(size_t offset, size_t count) = 0;
  virtual Result<void> Release(size_t offset, size_t count) = 0;
};

class GptCudaModel {
 public:
  // The pieces a pass reads from a CudaParamSource, in order. Forward: the embeddings
  // [wte, end of wpe), layers 0..L-1, ln_f, wte (the head). Backward: wte (the head's
  // dlnf), ln_f, layers L-1..0. The backward's gradient pieces (CudaGradSink): ln_f,
  // layers L-1..0, wpe, wte's chunks of rows from the last (each a multiple of 8 rows).
  static std::vector<ParamPiece> ParamPieces(const GptConfig& config, bool backward);
  static std::vector<ParamPiece> GradPieces(const GptConfig& config);
  // The largest piece of each list, in floats: the embeddings (wte and wpe: one piece here,
  // two in GptModel's list) or a layer's block, and GptModel::MaxGradPiece (a layer's block,
  // wpe or ln_f).
  static size_t MaxParamPiece(const GptConfig& config);
  static size_t MaxGradPiece(const GptConfig& config);

  // The memory plan without allocating (on a machine without a device the encoder's sort
  // storage, a few KB, is not counted). Errors as Create's kInvalidArgument cases.
  static Result<GptCudaMemory> PlanMemory(const GptConfig& config, int max_batch, int max_seq,
                                          const GptCudaStorage& storage = {});

  // Creates the model on the current CUDA device with zeroed parameters (copy weights in
  // with CopyParamsFromHost). kInvalidArgument naming the field: an invalid config,
  // max_batch < 1, max_seq outside [1, config.max_seq_len], model.n_embd not a multiple
  // of 8 (16-byte vector access), or a head size (n_embd / n_head) that the attention
  // kernel does not support. kUnavailable when there is no usable device.
  // kResourceExhausted "out of device memory: ... needs N bytes" when the allocation fails
  // (this configuration cannot run on this device); other CUDA failures as
  // COHORT_CUDA_CHECK classifies them (common/cuda_status.h).
  static Result<std::unique_ptr<GptCudaModel>> Create(const GptConfig& config, int max_batch,
                                                      int max_seq,
                                                      const GptCudaOptions& options = {},
                                                      const GptCudaStorage& storage = {});
  ~GptCudaModel();
  GptCudaModel(const GptCudaModel&) = delete;
  GptCudaModel& operator=(const GptCudaModel&) = delete;

  const GptConfig& config() const;
  const GptCudaOptions& options() const;
  // Products that ran without the epilogue the options asked for (cuBLASLt had no
  // algorithm for it on that shape; the kernels did the work), counted since Create.
  cuda::MatmulFallbacks matmul_fallbacks() const;
  const std::vector<ParamTensor>& tensors() const;
  size_t num_parameters() const;
  int max_batch() const;
  int max_seq() const;
  int device() const;           // the CUDA device ordinal
  size_t device_bytes() const;  // allocated by the model (cuBLASLt's workspace not counted)

  const GptCudaStorage& storage() const;
  // Without a gradient buffer (resp. parameters): where Backward writes (resp. Forward and
  // Backward read); must outlive their use. A pass fails with kFailedPrecondition without.
  void SetGradSink(CudaGradSink* sink);
  void SetParamSource(CudaParamSource* source);

  // Copies all parameters in (float32, the GptModel layout) and refreshes the bf16 copy;
  // returns when the copy is done. kInvalidArgument on a size mismatch. The copies in and
  // out of parameters and gradients are kFailedPrecondition for a model without them.
  Result<void> CopyParamsFromHost(std::span<const float> params);
  // Copies the float32 parameters (resp. gradients) out; returns when done.
  Result<void> CopyParamsToHost(std::span<float> params);
  Result<void> CopyGradsToHost(std::span<float> grads);

  // Refreshes the bf16 copy after the float32 parameters were written in device memory by
  // other means (a broadcast into params_device()); returns when done.
  Result<void> ParamsWritten();

  // Device memory, for the optimizer and data parallelism (num_parameters() floats each;
  // spans over DEVICE memory: never dereference them on the host). Empty (null) for a model
  // created without them.
  std::span<float> params_device();
  std::span<float> grads_device();
  cuda::bf16* params_bf16_device();  // num_parameters() values
  cudaStream_t stream();             // the compute stream

  // As GptModel::Forward: tokens B·T ids in [0, vocab_size), targets B·T ids in [-1,
  // vocab_size) or empty; returns the mean cross-entropy over the targets >= 0 (0 without
  // targets or when every target is -1). Also kInvalidArgument when B > max_batch or
  // T > max_seq. Synchronises once when there are targets. kInternal on a CUDA error.
  Result<float> Forward(std::span<const int32_t> tokens, std::span<const int32_t> targets,
                        int B, int T);

  // Logits (vocab_size values per sequence, float) at position T-1 of every sequence of
  // the last Forward, with or without targets: B·vocab_size values. kFailedPrecondition
  // when no Forward ran or a Backward has since consumed it (whatever the options).
  Result<std::vector<float>> LastLogits();

  Result<void> ZeroGrad();

  // As GptModel::Backward: adds loss_scale × d(loss)/d(params) into the gradients and
  // calls `ready` per finished slice (see above). kFailedPrecondition without a preceding
  // Forward with targets. Returns without waiting for the GPU; a CUDA error surfaces here
  // or at the next synchronising call.
  Result<void> Backward(float loss_scale, const GradReadyFn& ready = {});

  // Blocks until the gradients of every slice overlapping [offset, offset + count) that
  // the last Backward computes are in device memory. Any thread. kInternal on a CUDA error.
  Result<void> WaitGradsReady(size_t offset, size_t count);

  // Waits for all work queued on the compute stream; kInternal naming a failure.
  Result<void> Synchronize();

 private:
  struct Impl;
  explicit GptCudaModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// AdamW on the device over a GptCudaModel's parameters (the update is CudaAdamW,
// cuda_adamw.h, which a tensor/pipeline shard's optimizer shares; torch.optim.AdamW, as
// engine/optim/adamw.h, whose decay ranges it uses: matrices and embeddings decay,
// biases and LayerNorm do not), with torch's clip_grad_norm_ fused in: the global norm
// and the clipping factor are computed on the device and the update reads the factor
// from device memory. The moments m, v are float32 on the device. Whether a Step is one
// launch or one per decay run follows the model's options().fused_adamw at Create. Same
// thread rules as the model it was made for, which must outlive it.
class GptCudaAdamW {
 public:
  // kInvalidArgument from config.Validate(); kResourceExhausted / CUDA errors as Create.
  static Result<std::unique_ptr<GptCudaAdamW>> Create(GptCudaModel& model,
                                                      const AdamWConfig& config);
  ~GptCudaAdamW();
  GptCudaAdamW(const GptCudaAdamW&) = delete;
  GptCudaAdamW& operator=(const GptCudaAdamW&) = delete;

  // One step: t += 1; the gradients are scaled by min(1, max_norm / (norm + 1e-6)) (no
  // clipping when max_norm <= 0) inside the update, which also refreshes the bf16
  // parameters. Returns the gradient norm before clipping: the one host round trip.
  Result<double> Step(float lr, double max_norm);

  int64_t t() const;
  // Moments in device memory (num_parameters() floats; never dereference on the host).
  std::span<float> m_device();
  std::span<float> v_device();
  // Copies m and v out; returns when done.
  Result<void> CopyStateToHost(std::span<float> m, std::span<float> v);
  // Uploads m and v and sets t (checkpoint load). kInvalidArgument on a size mismatch or
  // t < 0.
  Result<void> Restore(std::span<const float> m, std::span<const float> v, int64_t t);
  // Sets t alone (after m and v arrived in device memory by other means, e.g. a broadcast).
  Result<void> SetStep(int64_t t);
  size_t device_bytes() const;

 private:
  struct Impl;
  explicit GptCudaAdamW(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::engine
