// A small SIMT emulator to run the CUDA kernels (src/engine/kernels/cuda/*.cu, rewritten by
// gen_cuda_emu.py) on the CPU (no GPU on this machine).
// Each CUDA thread of a block is a fiber (fiber.h) on the OS thread that launched the kernel;
// the blocks of a launch run one after another. The fibers are switched only at barriers:
// __syncthreads and the warp barriers that warp collectives (mma.sync, ldmatrix, shfl, ballot)
// exchange their per-warp slots between suspend the thread until every thread of the block
// (or warp) has arrived (one barrier per collective: a warp's slots are double-buffered, see
// Slots()), and a block whose threads all wait with none left to run is a
// deadlock (a barrier in divergent code, or threads that exited before a barrier): reported,
// then abort. Launches from several host threads run side by side, each on its own fibers.
// Shared memory is shadowed per 4-byte word to detect races between barriers:
//   - read of a word written by another thread since the last __syncthreads (RAW)
//   - write of a word read/written by another thread since the last __syncthreads (WAR/WAW)
//   - any access to a word with a cp.async in flight (issued, not yet waited for)
// cp.async copies are deferred to the cp.async.wait_group that retires them (latest legal
// time). Smem is poisoned with 0xFF; a ldmatrix returning a NaN bf16 is reported.
// Static __shared__ variables (gen_cuda_emu.py rewrites them to SharedArray / SharedRef) live
// in a per-block area after the dynamic shared memory; every access to them is shadowed as
// above, and a read of a never-written (all 0xFF) element is reported.
// Threads: a block, its shadow and its fibers belong to the OS thread running the launch;
// g_stats is shared by all (atomic counters, a mutex for the messages).
//
// The unchecked build (COHORT_EMU_UNCHECKED, the cohort_cuda_emu_fast library for the
// trainer-level tests, tests/engine/cuda_emu.cmake) runs the same kernels on the same
// schedule, so they compute the same bits, without the hazard checks: no shadow, no poison
// (shared memory keeps whatever the last block left), no ldmatrix bank-conflict or poison
// scan, no mma fragment-coverage check. What aborts stays: bad launches, deadlocks, shared
// accesses outside the block's memory or misaligned, a static __shared__ over the limit. The
// checked build is the one that proves the kernels (the kernel, attention, model tests and
// the emulator's self-test).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdarg>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "fiber.h"

#define __launch_bounds__(...)

inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;

namespace emu {

#ifdef COHORT_EMU_UNCHECKED
inline constexpr bool kChecked = false;
#else
inline constexpr bool kChecked = true;
#endif

struct Word {
  uint32_t w_epoch = 0;
  int w_tid = -1;
  uint32_t r_epoch = 0;
  int r_tid = -1;
  bool r_multi = false;
  bool pending = false;
};

struct Stats {
  std::atomic<long> races{0}, pending_access{0}, poison_reads{0}, misaligned{0}, oob{0},
      leftover_async{0}, ldmatrix_calls{0}, mma_calls{0};
  std::atomic<int> max_conflict{0};
  std::atomic<long> conflict_phases{0};  // ldmatrix phases with > 1-way conflict
  std::mutex msg_mu;
  int messages = 0;  // guarded by msg_mu
  void Report(const char* fmt, ...) __attribute__((format(printf, 2, 3)));
  // Zeroes every counter and the message count (the emulator's self-test, between cases).
  void Reset();
};
inline Stats g_stats;
inline void Stats::Report(const char* fmt, ...) {
  std::lock_guard<std::mutex> lock(msg_mu);
  if (messages++ > 30) return;
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stderr, fmt, ap);
  va_end(ap);
  std::fputc('\n', stderr);
}
inline void Stats::Reset() {
  for (auto* c : {&races, &pending_access, &poison_reads, &misaligned, &oob, &leftover_async,
                  &ldmatrix_calls, &mma_calls, &conflict_phases}) {
    c->store(0);
  }
  max_conflict = 0;
  std::lock_guard<std::mutex> lock(msg_mu);
  messages = 0;
}

struct CudaThread;

// A barrier between fibers: the last of `expected` arrivals releases the others.
struct FiberBarrier {
  int expected = 0;
  int arrived = 0;
  std::vector<CudaThread*> waiting;  // arrived and suspended, in arrival order
};

// What a warp's lanes publish to one another in one collective. Each warp has two, used by
// its collectives in turn (Slots()).
struct WarpSlots {
  uint64_t v[32];  // shuffles
  uint32_t a[32][4];
  uint32_t b[32][2];
  const unsigned char* addr[32];
  float f[32];
  float mma_a[16][16];  // the assembled operands of the warp's current mma
  float mma_b[16][8];
};

// Static __shared__ storage per block (the hardware's static limit).
constexpr size_t kStaticSmemBytes = 48 * 1024;

// A block's buffers are kept per OS thread and handed from launch to launch (fresh ones, up to
// ~700 KB with the shadow, cost an allocation, a fill and page faults per launch, much of a
// test's time here). The checked build poisons the shared memory again and starts the shadow
// at an epoch no earlier launch used, so what they left is dead (as between a launch's
// blocks); the unchecked build takes the shared memory as the last launch left it. The warp
// slots need neither: every slot a collective reads, a lane of it wrote first.
inline thread_local std::vector<unsigned char> t_spare_smem;
inline thread_local std::vector<Word> t_spare_shadow;
inline thread_local std::vector<WarpSlots> t_spare_slots;
inline thread_local uint32_t t_last_epoch = 0;  // the last epoch a block on this OS thread used
// At least n elements (the spare ones only ever grow; a block bounds itself by its sizes).
template <class T>
inline std::vector<T> TakeSpare(std::vector<T>& spare, size_t n) {
  std::vector<T> v = std::move(spare);
  if (v.size() < n) v.resize(n);
  return v;
}

struct Block {
  int nthreads;
  size_t dyn_bytes;                  // dynamic shared memory: [0, dyn_bytes)
  size_t static_base;                // static __shared__ variables from here
  size_t static_used = 0;            // high-water mark of the static area
  size_t smem_size;                  // the block's shared memory: smem[0, smem_size)
  std::vector<unsigned char> smem;   // (maybe longer: TakeSpare)
  std::vector<Word> shadow;          // a word per 4 bytes of smem (checked build)
  uint32_t epoch;                    // advanced by every __syncthreads
  bool left_async = false;           // a thread ended with cp.async outstanding
  FiberBarrier bar;                  // __syncthreads
  std::vector<FiberBarrier> warp_bar;
  std::vector<WarpSlots> slots;      // two per warp: Slots()
  std::deque<CudaThread*> ready;     // threads to resume, in order
  Block(int n, size_t smem_bytes)
      : nthreads(n),
        dyn_bytes(smem_bytes),
        static_base((smem_bytes + 15) / 16 * 16),
        smem_size(static_base + kStaticSmemBytes),
        smem(TakeSpare(t_spare_smem, smem_size)),
        shadow(TakeSpare(t_spare_shadow, kChecked ? smem_size / 4 : 0)),
        epoch(t_last_epoch + 1) {
    if (kChecked) std::memset(smem.data(), 0xFF, smem_size);
    bar.expected = n;
    const int warps = (n + 31) / 32;
    warp_bar.resize(warps);
    for (int w = 0; w < warps; ++w) warp_bar[w].expected = std::min(32, n - 32 * w);
    slots = TakeSpare(t_spare_slots, 2 * static_cast<size_t>(warps));
  }
  ~Block() {
    // A copy never waited for (reported) leaves its words pending: clear them for the next.
    if (left_async) std::fill(shadow.begin(), shadow.end(), Word{});
    t_last_epoch = epoch;
    t_spare_smem = std::move(smem);
    t_spare_shadow = std::move(shadow);
    t_spare_slots = std::move(slots);
  }
  Block(const Block&) = delete;
  Block& operator=(const Block&) = delete;
  // Between two blocks of a launch (every thread done): poison what the last block used
  // again and start a new epoch, so nothing carries over (the shadow's old epochs are dead).
  void Reset() {
    const size_t used = static_base + static_used;
    if (kChecked) std::memset(smem.data(), 0xFF, std::min(used, smem_size));
    static_used = 0;
    ++epoch;
  }
};

struct Copy {
  unsigned char* dst;
  const unsigned char* src;
  bool valid;
};

// One CUDA thread: its fiber and its per-thread emulator state. Reused across blocks and
// launches by the OS thread that created it (emu.cc).
struct CudaThread {
  explicit CudaThread(int index);
  int tid = 0;
  uint3 idx{};
  std::deque<std::vector<Copy>> groups;  // committed cp.async groups, oldest first
  std::vector<Copy> open;                // cp.async issued since the last commit
  size_t static_off = 0;                 // the next static __shared__ offset
  bool done = false;                     // ran the kernel to its end for this block
  uint32_t collectives = 0;              // warp collectives it has entered in this block
  const std::function<void()>* job = nullptr;
  Fiber fiber;
};

inline thread_local Block* t_block = nullptr;
inline thread_local CudaThread* t_thread = nullptr;  // the running fiber's
inline thread_local int t_tid = 0;

// Suspends the running CUDA thread at `bar` until all its threads have arrived (the last
// arrival goes on at once); `sync_block` starts a new shared-memory epoch on release, and
// the last arrival runs on_release(arg), if given, before anyone goes on.
void BarrierWait(FiberBarrier& bar, bool sync_block, void (*on_release)(void*) = nullptr,
                 void* arg = nullptr);

inline unsigned char* SharedBase() { return t_block->smem.data(); }

inline bool InSmem(const void* p, size_t bytes) {
  const auto* c = static_cast<const unsigned char*>(p);
  const auto* base = t_block->smem.data();
  return c >= base && c + bytes <= base + t_block->smem_size;
}
inline size_t WordIndex(const void* p) {
  return static_cast<size_t>(static_cast<const unsigned char*>(p) - t_block->smem.data()) / 4;
}

// Shadow checks.
inline void ShadowRead(const void* p, size_t bytes, const char* what) {
  if constexpr (!kChecked) return;
  Block& b = *t_block;
  for (size_t w = WordIndex(p); w < WordIndex(p) + (bytes + 3) / 4; ++w) {
    Word& s = b.shadow[w];
    if (s.pending) {
      g_stats.pending_access++;
      g_stats.Report("%s: tid %d reads smem word %zu with a cp.async in flight", what, t_tid, w);
    }
    if (s.w_epoch == b.epoch && s.w_tid != t_tid) {
      g_stats.races++;
      g_stats.Report("%s: RAW race: tid %d reads word %zu written by tid %d in epoch %u", what,
                     t_tid, w, s.w_tid, b.epoch);
    }
    if (s.r_epoch != b.epoch) {
      s.r_epoch = b.epoch;
      s.r_tid = t_tid;
      s.r_multi = false;
    } else if (s.r_tid != t_tid) {
      s.r_multi = true;
    }
  }
}
inline void ShadowWrite(const void* p, size_t bytes, const char* what, bool completing_copy) {
  if constexpr (!kChecked) return;
  Block& b = *t_block;
  for (size_t w = WordIndex(p); w < WordIndex(p) + (bytes + 3) / 4; ++w) {
    Word& s = b.shadow[w];
    if (s.pending && !completing_copy) {
      g_stats.pending_access++;
      g_stats.Report("%s: tid %d writes smem word %zu with a cp.async in flight", what, t_tid, w);
    }
    if (!completing_copy && s.r_epoch == b.epoch && (s.r_multi || s.r_tid != t_tid)) {
      g_stats.races++;
      g_stats.Report("%s: WAR race: tid %d writes word %zu read by tid %d in epoch %u", what,
                     t_tid, w, s.r_tid, b.epoch);
    }
    if (s.w_epoch == b.epoch && s.w_tid != t_tid) {
      g_stats.races++;
      g_stats.Report("%s: WAW race: tid %d writes word %zu written by tid %d", what, t_tid, w,
                     s.w_tid);
    }
    s.w_epoch = b.epoch;
    s.w_tid = t_tid;
    if (completing_copy) s.pending = false;
  }
}

inline void WarpSync() { BarrierWait(t_block->warp_bar[t_tid / 32], false); }
// The slots of the warp collective this thread enters now: a collective publishes into them,
// waits at the warp barrier once, reads, and ends with EndCollective(), which moves the
// thread to the warp's other slots. No lane can write these slots again before every lane has
// read them: that would be two collectives later, past the next collective's barrier, which
// waits for every lane. So one barrier per collective is enough, as on the hardware.
inline WarpSlots& Slots() {
  return t_block->slots[2 * static_cast<size_t>(t_tid / 32) + (t_thread->collectives & 1)];
}
inline void EndCollective() { ++t_thread->collectives; }
inline int Lane() { return t_tid % 32; }

inline float Bf16LoToFloat(uint32_t r, int half) {
  const uint16_t bits = static_cast<uint16_t>(half ? (r >> 16) : (r & 0xffffu));
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- emulated primitives (same names and signatures as attention.cu's) ----

inline void EmuCpAsync16(void* dst, const void* src, bool valid) {
  if (!InSmem(dst, 16) || reinterpret_cast<uintptr_t>(dst) % 16) {
    g_stats.misaligned++;
    g_stats.Report("cp.async: bad smem dst %p", dst);
    std::abort();
  }
  if (reinterpret_cast<uintptr_t>(src) % 16) {
    g_stats.misaligned++;
    g_stats.Report("cp.async: src %p not 16-byte aligned", src);
  }
  if constexpr (kChecked) {
    Block& b = *t_block;
    for (size_t w = WordIndex(dst); w < WordIndex(dst) + 4; ++w) {
      Word& s = b.shadow[w];
      if (s.pending) {
        g_stats.pending_access++;
        g_stats.Report("cp.async: tid %d issues over in-flight word %zu", t_tid, w);
      }
      if (s.r_epoch == b.epoch && (s.r_multi || s.r_tid != t_tid)) {
        g_stats.races++;
        g_stats.Report("cp.async: WAR race: tid %d copies into word %zu read by tid %d this epoch",
                       t_tid, w, s.r_tid);
      }
      s.pending = true;
    }
  }
  t_thread->open.push_back(
      Copy{static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), valid});
}
inline void EmuCpAsyncCommit() {
  t_thread->groups.push_back(std::move(t_thread->open));
  t_thread->open.clear();
}
inline void EmuCpAsyncWait(int n) {
  auto& groups = t_thread->groups;
  while (static_cast<int>(groups.size()) > n) {
    for (const Copy& c : groups.front()) {
      if (c.valid) {
        std::memcpy(c.dst, c.src, 16);  // ASan checks the global read
      } else {
        std::memset(c.dst, 0, 16);
      }
      ShadowWrite(c.dst, 16, "cp.async completion", true);
    }
    groups.pop_front();
  }
}

inline void EmuLdMatrix(uint32_t (&r)[4], const void* p, bool trans) {
  g_stats.ldmatrix_calls++;
  const auto* c = static_cast<const unsigned char*>(p);
  if (!InSmem(c, 16) || reinterpret_cast<uintptr_t>(c) % 16) {
    g_stats.misaligned++;
    g_stats.Report("ldmatrix: bad row address %p (tid %d)", p, t_tid);
    std::abort();
  }
  ShadowRead(c, 16, trans ? "ldmatrix.trans" : "ldmatrix");
  WarpSlots& s = Slots();
  const int lane = Lane();
  s.addr[lane] = c;
  WarpSync();
  // Bank conflicts: lane 0 evaluates each of the 4 phases (one 8x8 matrix each).
  if (kChecked && lane == 0) {
    for (int i = 0; i < 4; ++i) {
      int count[32] = {0};
      for (int k = 0; k < 8; ++k) {
        const size_t off = static_cast<size_t>(s.addr[8 * i + k] - t_block->smem.data());
        for (int wd = 0; wd < 4; ++wd) count[(off / 4 + wd) % 32]++;
      }
      int worst = 0;
      for (int bk = 0; bk < 32; ++bk) worst = std::max(worst, count[bk]);
      if (worst > 1) g_stats.conflict_phases++;
      int prev = g_stats.max_conflict.load();
      while (worst > prev && !g_stats.max_conflict.compare_exchange_weak(prev, worst)) {
      }
    }
  }
  const int row = lane / 4, cp = 2 * (lane % 4);
  for (int i = 0; i < 4; ++i) {
    uint16_t e[2];
    for (int h = 0; h < 2; ++h) {
      const unsigned char* src;
      if (!trans) {
        src = s.addr[8 * i + row] + 2 * (cp + h);  // element (row, cp + h)
      } else {
        src = s.addr[8 * i + cp + h] + 2 * row;  // element (cp + h, row)
      }
      std::memcpy(&e[h], src, 2);
      if (kChecked && (e[h] & 0x7fffu) > 0x7f80u) {
        g_stats.poison_reads++;
        g_stats.Report("ldmatrix: NaN/poison bf16 read (tid %d, matrix %d)", t_tid, i);
      }
    }
    r[i] = static_cast<uint32_t>(e[0]) | (static_cast<uint32_t>(e[1]) << 16);
  }
  EndCollective();
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, from the PTX ISA fragment tables:
// A: a_i (i = 0..7, two per register, low half first): row = g for i in {0,1,4,5}, else g+8;
//    col = 2t + (i & 1) + (i >= 4 ? 8 : 0).
// B: b_i (i = 0..3): row(k) = 2t + (i & 1) + (i >= 2 ? 8 : 0), col(n) = g.
// C/D: c_i: row = g + (i >= 2 ? 8 : 0), col = 2t + (i & 1).
// The warp's A (16x16) and B (16x8) from the 32 lanes' fragments in the slots; once per warp
// and mma, by the lane whose arrival completes the warp barrier. Aborts if the fragment
// tables do not cover each element exactly once.
inline void AssembleMmaOperands(WarpSlots& s) {
  int seenA[16][16] = {{0}}, seenB[16][8] = {{0}};
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, t = l % 4;
    for (int i = 0; i < 8; ++i) {
      const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
      const int col = 2 * t + (i & 1) + (i >= 4 ? 8 : 0);
      s.mma_a[row][col] = Bf16LoToFloat(s.a[l][i / 2], i & 1);
      seenA[row][col]++;
    }
    for (int i = 0; i < 4; ++i) {
      const int row = 2 * t + (i & 1) + (i >= 2 ? 8 : 0);
      s.mma_b[row][g] = Bf16LoToFloat(s.b[l][i / 2], i & 1);
      seenB[row][g]++;
    }
  }
  if constexpr (!kChecked) return;
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      if (seenA[r][c] != 1) std::abort();
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 8; ++c)
      if (seenB[r][c] != 1) std::abort();
}

inline void EmuMma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  g_stats.mma_calls++;
  WarpSlots& s = Slots();
  const int lane = Lane();
  for (int i = 0; i < 4; ++i) s.a[lane][i] = a[i];
  s.b[lane][0] = b0;
  s.b[lane][1] = b1;
  BarrierWait(t_block->warp_bar[t_tid / 32], false,
              [](void* slots) { AssembleMmaOperands(*static_cast<WarpSlots*>(slots)); }, &s);
  const int g = lane / 4, t = lane % 4;
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
    float acc = d[i];
    for (int k = 0; k < 16; ++k) acc += s.mma_a[row][k] * s.mma_b[k][col];
    d[i] = acc;
  }
  EndCollective();
}

inline void EmuSharedStoreU32(void* p, uint32_t v) {
  if (!InSmem(p, 4) || reinterpret_cast<uintptr_t>(p) % 4) {
    g_stats.misaligned++;
    g_stats.Report("st.shared.u32: bad address %p", p);
    std::abort();
  }
  ShadowWrite(p, 4, "st.shared.u32", false);
  std::memcpy(p, &v, 4);
}
inline void EmuSharedStoreF32(float* p, float v) {
  if (!InSmem(p, 4) || reinterpret_cast<uintptr_t>(p) % 4) {
    g_stats.misaligned++;
    g_stats.Report("st.shared.f32: bad address %p", static_cast<void*>(p));
    std::abort();
  }
  ShadowWrite(p, 4, "st.shared.f32", false);
  *p = v;
}
inline float EmuSharedLoadF32(const float* p) {
  if (!InSmem(p, 4) || reinterpret_cast<uintptr_t>(p) % 4) {
    g_stats.misaligned++;
    g_stats.Report("ld.shared.f32: bad address %p", static_cast<const void*>(p));
    std::abort();
  }
  ShadowRead(p, 4, "ld.shared.f32");
  uint32_t u;
  std::memcpy(&u, p, 4);
  if (kChecked && u == 0xFFFFFFFFu) {
    g_stats.poison_reads++;
    g_stats.Report("ld.shared.f32: poison read (tid %d)", t_tid);
  }
  return *p;
}

// Runs kernel() for every block of the grid, one block at a time, each thread of the block a
// fiber on the calling OS thread (emu.cc). Returns when the grid is done; a bad
// configuration, a launch from inside a kernel or a deadlocked block is reported and aborts.
void Launch(dim3 grid, dim3 block, size_t smem_bytes, const std::function<void()>& kernel);

// ---- static __shared__ variables (gen_cuda_emu.py's rewrite of `__shared__ T x[N];`) ----

template <class T>
inline T SharedLoad(const T* p) {
  if (!InSmem(p, sizeof(T))) {
    g_stats.oob++;
    g_stats.Report("shared load: %p outside the block's shared memory (tid %d)",
                   static_cast<const void*>(p), t_tid);
    std::abort();
  }
  if (reinterpret_cast<uintptr_t>(p) % alignof(T)) {
    g_stats.misaligned++;
    g_stats.Report("shared load: misaligned %p", static_cast<const void*>(p));
  }
  unsigned char raw[sizeof(T)];
  ShadowRead(p, sizeof(T), "shared load");
  std::memcpy(raw, p, sizeof(T));
  bool poison = kChecked;
  if (kChecked) for (unsigned char c : raw) poison = poison && c == 0xFF;
  if (poison) {
    g_stats.poison_reads++;
    g_stats.Report("shared load: read of never-written shared memory (tid %d, byte %zu)", t_tid,
                   static_cast<size_t>(reinterpret_cast<const unsigned char*>(p) - SharedBase()));
  }
  T v;
  std::memcpy(&v, raw, sizeof(T));
  return v;
}
template <class T>
inline void SharedStore(T* p, const T& v) {
  if (!InSmem(p, sizeof(T))) {
    g_stats.oob++;
    g_stats.Report("shared store: %p outside the block's shared memory (tid %d)",
                   static_cast<void*>(p), t_tid);
    std::abort();
  }
  if (reinterpret_cast<uintptr_t>(p) % alignof(T)) {
    g_stats.misaligned++;
    g_stats.Report("shared store: misaligned %p", static_cast<void*>(p));
  }
  ShadowWrite(p, sizeof(T), "shared store", false);
  std::memcpy(static_cast<void*>(p), &v, sizeof(T));
}

// One shared element: reads and writes go through the shadow.
template <class T>
class SharedRef {
 public:
  explicit SharedRef(T* p) : p_(p) {}
  SharedRef(const SharedRef&) = default;
  operator T() const { return SharedLoad(p_); }
  const SharedRef& operator=(const T& v) const {
    SharedStore(p_, v);
    return *this;
  }
  const SharedRef& operator=(const SharedRef& o) const { return *this = static_cast<T>(o); }
  const SharedRef& operator+=(const T& v) const { return *this = static_cast<T>(*this) + v; }
  const SharedRef& operator-=(const T& v) const { return *this = static_cast<T>(*this) - v; }
  const SharedRef& operator*=(const T& v) const { return *this = static_cast<T>(*this) * v; }
  const SharedRef& operator/=(const T& v) const { return *this = static_cast<T>(*this) / v; }
  T* operator&() const { return p_; }

 private:
  T* p_;
};

template <class T>
class SharedArray {
 public:
  explicit SharedArray(T* p, size_t n) : p_(p), n_(n) {}
  SharedRef<T> operator[](long i) const {
    if (i < 0 || static_cast<size_t>(i) >= n_) {
      g_stats.oob++;
      g_stats.Report("shared array: index %ld outside [0, %zu) (tid %d)", i, n_, t_tid);
      std::abort();
    }
    return SharedRef<T>(p_ + i);
  }

 private:
  T* p_;
  size_t n_;
};

// Storage for a static __shared__ T[count]: every thread of the block executes the same
// declarations in the same order, so the per-thread running offset names the same bytes.
template <class T>
inline SharedArray<T> StaticShared(size_t count) {
  Block& b = *t_block;
  const size_t align = alignof(T) > 16 ? alignof(T) : 16;
  const size_t off = (t_thread->static_off + align - 1) / align * align;
  const size_t end = off + count * sizeof(T);
  if (end > kStaticSmemBytes) {
    g_stats.Report("static __shared__: %zu bytes exceed the %zu-byte static limit", end,
                   kStaticSmemBytes);
    std::abort();
  }
  t_thread->static_off = end;
  b.static_used = std::max(b.static_used, end);
  return SharedArray<T>(reinterpret_cast<T*>(b.smem.data() + b.static_base + off), count);
}

}  // namespace emu

// ---- CUDA built-ins used by the kernels ----
inline void __syncthreads() { emu::BarrierWait(emu::t_block->bar, true); }
namespace emu {
// A full-warp shuffle: every lane publishes v, then reads lane src(lane)'s value (its own when
// src is outside the warp, as the hardware's shfl.down/up clamp does).
template <class T, class Src>
inline T Shuffle(unsigned mask, T v, Src src) {
  static_assert(sizeof(T) <= 8, "shuffle of a type wider than 8 bytes");
  if (mask != 0xffffffffu) std::abort();  // the kernels only shuffle full warps
  WarpSlots& s = Slots();
  const int lane = Lane();
  std::memcpy(&s.v[lane], &v, sizeof(T));
  WarpSync();
  const int from = src(lane);
  T r;
  std::memcpy(&r, &s.v[from >= 0 && from < 32 ? from : lane], sizeof(T));
  EndCollective();
  return r;
}
}  // namespace emu
template <class T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask) {
  return emu::Shuffle(mask, v, [&](int lane) { return lane ^ lane_mask; });
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta) {
  return emu::Shuffle(mask, v, [&](int lane) { return lane + static_cast<int>(delta); });
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta) {
  return emu::Shuffle(mask, v, [&](int lane) { return lane - static_cast<int>(delta); });
}
template <class T>
inline T __shfl_sync(unsigned mask, T v, int src_lane) {
  return emu::Shuffle(mask, v, [&](int) { return src_lane & 31; });
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  if (mask != 0xffffffffu) std::abort();
  emu::WarpSlots& s = emu::Slots();
  s.v[emu::Lane()] = pred != 0;
  emu::WarpSync();
  unsigned r = 0;
  const int warp_lanes = std::min(32, emu::t_block->nthreads - emu::t_tid / 32 * 32);
  for (int l = 0; l < warp_lanes; ++l) r |= static_cast<unsigned>(s.v[l] != 0) << l;
  emu::EndCollective();
  return r;
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) {
  const int warp_lanes = std::min(32, emu::t_block->nthreads - emu::t_tid / 32 * 32);
  const unsigned full = warp_lanes == 32 ? 0xffffffffu : (1u << warp_lanes) - 1;
  return __ballot_sync(mask, pred) == full;
}
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
// The device's integer min/max (host code has only std::min/std::max).
#define EMU_MINMAX(T)                                  \
  inline T min(T a, T b) { return b < a ? b : a; }     \
  inline T max(T a, T b) { return a < b ? b : a; }
EMU_MINMAX(int)
EMU_MINMAX(unsigned)
EMU_MINMAX(long)
EMU_MINMAX(unsigned long)
EMU_MINMAX(long long)
EMU_MINMAX(unsigned long long)
#undef EMU_MINMAX
inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
// cuda_runtime.h declares this template only for nvcc; the same forwarding for g++.
template <class T>
inline cudaError_t cudaFuncSetAttribute(T* entry, cudaFuncAttribute attr, int value) {
  return ::cudaFuncSetAttribute(reinterpret_cast<const void*>(entry), attr, value);
}
inline float2 atomicAdd(float2* p, float2 v) {
  if (reinterpret_cast<uintptr_t>(p) % 8) std::abort();  // the hardware requires 8-byte alignment
  float* f = reinterpret_cast<float*>(p);
  return make_float2(std::atomic_ref<float>(f[0]).fetch_add(v.x), std::atomic_ref<float>(f[1]).fetch_add(v.y));
}
