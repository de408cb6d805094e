// Fiber: a user-level thread for the CPU SIMT emulator (emu.h), one per emulated CUDA thread.
// A fiber owns its stack (mmap'd, with a guard page below it) and runs `entry(arg)` on it;
// entry must never return. Resume() switches from the calling OS thread's current stack into
// the fiber and returns when the fiber calls Suspend(); Suspend() switches back to whoever
// resumed it. The switch is a hand-written x86-64 register swap (callee-saved registers,
// MXCSR and the x87 control word; no system call), elsewhere ucontext's swapcontext.
// AddressSanitizer is told about every stack switch (__sanitizer_start_switch_fiber /
// __sanitizer_finish_switch_fiber), so it keeps checking the fibers' stacks and the
// resumer's own.
//
// Threads: a fiber belongs to the OS thread that created it; only that thread may Resume it,
// never while running on a fiber itself (no nesting), and only the fiber itself may Suspend.
// The destructor may run only while the fiber is suspended or was never started.
#pragma once

#include <cstddef>

namespace emu {

class Fiber {
 public:
  using Entry = void (*)(void* arg);

  // Allocates the stack (aborts when the memory cannot be mapped); nothing runs yet.
  Fiber(size_t stack_bytes, Entry entry, void* arg);
  ~Fiber();
  Fiber(const Fiber&) = delete;
  Fiber& operator=(const Fiber&) = delete;

  // From the OS thread's own stack: runs the fiber until it next calls Suspend().
  void Resume();
  // On the fiber: back to the Resume() that started this stretch.
  void Suspend();

  // The default stack size: the deepest emulated kernel (under ASan, with vfprintf for the
  // hazard reports) uses well under a tenth of it; untouched pages cost no memory.
  static constexpr size_t kDefaultStackBytes = 256 * 1024;

 private:
  static void Start(void* self);  // the first code a fiber runs, on its own stack

  Entry entry_;
  void* arg_;
  void* map_ = nullptr;       // the mapping: guard page, then the stack
  size_t map_bytes_ = 0;
  char* stack_lo_ = nullptr;  // the usable stack, [stack_lo_, stack_lo_ + stack_bytes_)
  size_t stack_bytes_ = 0;
  void* context_ = nullptr;   // the fiber's saved context (a stack pointer or a ucontext_t)
  void* resumer_ = nullptr;   // the resumer's saved context
  // AddressSanitizer's view of the two stacks (unused without ASan).
  void* fake_stack_ = nullptr;          // the fiber's fake stack while it is suspended
  void* resumer_fake_stack_ = nullptr;  // the resumer's while the fiber runs
  const void* resumer_lo_ = nullptr;    // the resumer's stack, as ASan reported it
  size_t resumer_bytes_ = 0;
};

}  // namespace emu
