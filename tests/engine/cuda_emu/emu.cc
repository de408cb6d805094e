// The emulator's scheduler (emu.h): launches, blocks, the CUDA threads' fibers and barriers.
#include "emu.h"

namespace emu {
namespace {

// Points the per-OS-thread built-ins at `self`, the CUDA thread now running on this OS
// thread (blockIdx, blockDim, gridDim and t_block are the block's, set by Launch).
void Activate(CudaThread* self) {
  t_thread = self;
  t_tid = self->tid;
  threadIdx = self->idx;
}

// A fiber's whole life: run the job it is given for one block, then wait to be given the
// next block (the same fiber serves every block and launch of its OS thread).
void CudaThreadMain(void* arg) {
  auto* self = static_cast<CudaThread*>(arg);
  for (;;) {
    Activate(self);
    (*self->job)();
    if (!self->groups.empty() || !self->open.empty()) {
      t_block->left_async = true;
      g_stats.leftover_async++;
      g_stats.Report("tid %d ended with cp.async groups outstanding", self->tid);
    }
    self->done = true;
    self->fiber.Suspend();
  }
}

// This OS thread's CUDA threads, created on first need (a fiber stack each), kept until the
// OS thread exits.
std::vector<std::unique_ptr<CudaThread>>& ThreadsOfThisOsThread(int n) {
  thread_local std::vector<std::unique_ptr<CudaThread>> threads;
  while (static_cast<int>(threads.size()) < n) {
    threads.push_back(std::make_unique<CudaThread>(static_cast<int>(threads.size())));
  }
  return threads;
}

// Every thread of the block waits and none can run: says where they wait, then aborts.
[[noreturn]] void ReportDeadlock(const Block& b, long block_index) {
  g_stats.Report("deadlock in block %ld: %d of %d threads wait at __syncthreads, the rest ended "
                 "the kernel or wait at a warp barrier (a barrier not every thread reaches)",
                 block_index, b.bar.arrived, b.nthreads);
  for (size_t w = 0; w < b.warp_bar.size(); ++w) {
    if (b.warp_bar[w].arrived > 0) {
      g_stats.Report("  warp %zu: %d of %d lanes wait at a warp barrier (shfl/ballot/ldmatrix/mma)",
                     w, b.warp_bar[w].arrived, b.warp_bar[w].expected);
    }
  }
  std::abort();
}

}  // namespace

CudaThread::CudaThread(int index)
    : tid(index), fiber(Fiber::kDefaultStackBytes, &CudaThreadMain, this) {}

void BarrierWait(FiberBarrier& bar, bool sync_block, void (*on_release)(void*), void* arg) {
  Block& b = *t_block;
  CudaThread* self = t_thread;
  if (++bar.arrived == bar.expected) {
    bar.arrived = 0;
    if (sync_block) ++b.epoch;
    if (on_release != nullptr) on_release(arg);
    for (CudaThread* t : bar.waiting) b.ready.push_back(t);
    bar.waiting.clear();
    return;
  }
  bar.waiting.push_back(self);
  self->fiber.Suspend();
  Activate(self);
}

void Launch(dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()>& kernel) {
  const int nthreads = static_cast<int>(block.x * block.y * block.z);
  const long nblocks = static_cast<long>(grid.x) * grid.y * grid.z;
  if (nthreads <= 0 || nthreads > 1024 || nblocks <= 0) {
    g_stats.Report("launch: bad configuration grid (%u,%u,%u) block (%u,%u,%u)", grid.x, grid.y,
                   grid.z, block.x, block.y, block.z);
    std::abort();
  }
  if (t_thread != nullptr || t_block != nullptr) {
    g_stats.Report("launch: a kernel launched from inside a kernel (tid %d)", t_tid);
    std::abort();
  }
  std::vector<std::unique_ptr<CudaThread>>& threads = ThreadsOfThisOsThread(nthreads);
  Block blk(nthreads, smem_bytes);
  t_block = &blk;
  blockDim = block;
  gridDim = grid;
  for (long bi = 0; bi < nblocks; ++bi) {
    blockIdx = uint3{static_cast<unsigned>(bi % grid.x), static_cast<unsigned>(bi / grid.x % grid.y),
                     static_cast<unsigned>(bi / (static_cast<long>(grid.x) * grid.y))};
    for (int t = 0; t < nthreads; ++t) {
      CudaThread& c = *threads[t];
      c.idx = uint3{static_cast<unsigned>(t % block.x), static_cast<unsigned>(t / block.x % block.y),
                    static_cast<unsigned>(t / (block.x * block.y))};
      c.groups.clear();
      c.open.clear();
      c.static_off = 0;
      c.done = false;
      c.collectives = 0;
      c.job = &kernel;
      blk.ready.push_back(&c);
    }
    while (!blk.ready.empty()) {
      CudaThread* next = blk.ready.front();
      blk.ready.pop_front();
      next->fiber.Resume();
    }
    t_thread = nullptr;
    for (int t = 0; t < nthreads; ++t) {
      if (!threads[t]->done) ReportDeadlock(blk, bi);
    }
    blk.Reset();
  }
  t_block = nullptr;
}

}  // namespace emu
