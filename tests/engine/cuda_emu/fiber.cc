// Fiber (fiber.h): stacks, the context switch and AddressSanitizer's fiber annotations.
#include "fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#if defined(__SANITIZE_ADDRESS__)
#define EMU_FIBER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EMU_FIBER_ASAN 1
#endif
#endif
#ifdef EMU_FIBER_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

#if defined(__x86_64__) && !defined(EMU_FIBER_UCONTEXT)
#define EMU_FIBER_X86_64 1
#else
#include <ucontext.h>
#endif

namespace emu {
namespace {

// Tells ASan that this thread leaves its current stack for [lo, lo + bytes); `fake` keeps the
// leaving stack's fake frames (null: the leaving stack is never coming back).
inline void StartSwitch(void** fake, const void* lo, size_t bytes) {
#ifdef EMU_FIBER_ASAN
  __sanitizer_start_switch_fiber(fake, lo, bytes);
#else
  (void)fake, (void)lo, (void)bytes;
#endif
}
// On the new stack: completes the switch, restoring its fake frames, and reports the bounds
// of the stack that was left.
inline void FinishSwitch(void* fake, const void** old_lo, size_t* old_bytes) {
#ifdef EMU_FIBER_ASAN
  __sanitizer_finish_switch_fiber(fake, old_lo, old_bytes);
#else
  (void)fake, (void)old_lo, (void)old_bytes;
#endif
}

[[noreturn]] void Die(const char* what) {
  std::fprintf(stderr, "emu fiber: %s\n", what);
  std::abort();
}

}  // namespace
}  // namespace emu

#ifdef EMU_FIBER_X86_64
// cohort_emu_fiber_switch(void** save_sp, void* load_sp): pushes the callee-saved registers
// and the SSE/x87 control words, stores the stack pointer in *save_sp, loads load_sp and pops
// the same frame from it. A new fiber's first frame (Fiber::Fiber) "returns" into
// cohort_emu_fiber_trampoline, which calls r13(r12) = Fiber::Start(fiber).
extern "C" void cohort_emu_fiber_switch(void** save_sp, void* load_sp);
extern "C" void cohort_emu_fiber_trampoline();
asm(R"(
  .text
  .p2align 4
  .globl cohort_emu_fiber_switch
  .hidden cohort_emu_fiber_switch
  .type cohort_emu_fiber_switch, @function
cohort_emu_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size cohort_emu_fiber_switch, .-cohort_emu_fiber_switch

  .p2align 4
  .globl cohort_emu_fiber_trampoline
  .hidden cohort_emu_fiber_trampoline
  .type cohort_emu_fiber_trampoline, @function
cohort_emu_fiber_trampoline:
  .cfi_startproc
  .cfi_undefined rip
  movq %r12, %rdi
  callq *%r13
  ud2
  .cfi_endproc
  .size cohort_emu_fiber_trampoline, .-cohort_emu_fiber_trampoline
)");
#else
namespace emu {
namespace {
thread_local Fiber* t_starting = nullptr;  // the fiber makecontext's entry is about to start
}  // namespace
}  // namespace emu
#endif

namespace emu {

Fiber::Fiber(size_t stack_bytes, Entry entry, void* arg) : entry_(entry), arg_(arg) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  stack_bytes_ = (stack_bytes + page - 1) / page * page;
  map_bytes_ = stack_bytes_ + page;
  map_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE,
              MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (map_ == MAP_FAILED) Die("cannot map a fiber stack");
  if (mprotect(map_, page, PROT_NONE) != 0) Die("cannot protect a fiber stack's guard page");
  stack_lo_ = static_cast<char*>(map_) + page;
#ifdef EMU_FIBER_X86_64
  // The frame cohort_emu_fiber_switch pops: control words, r15, r14, r13, r12, rbx, rbp, and
  // the return address; after the `ret` the stack pointer is 16-byte aligned, as a call needs.
  const uintptr_t top = reinterpret_cast<uintptr_t>(stack_lo_ + stack_bytes_) & ~uintptr_t{15};
  auto* frame = reinterpret_cast<uint64_t*>(top - 64);
  frame[0] = 0x1F80 | (uint64_t{0x037F} << 32);  // MXCSR and the x87 control word at reset
  frame[1] = 0;                                    // r15
  frame[2] = 0;                                    // r14
  frame[3] = reinterpret_cast<uint64_t>(&Fiber::Start);  // r13
  frame[4] = reinterpret_cast<uint64_t>(this);           // r12
  frame[5] = 0;                                    // rbx
  frame[6] = 0;                                    // rbp: ends frame-pointer walks here
  frame[7] = reinterpret_cast<uint64_t>(&cohort_emu_fiber_trampoline);
  context_ = frame;
#else
  auto* uc = new ucontext_t;
  resumer_ = new ucontext_t;
  if (getcontext(uc) != 0) Die("getcontext failed");
  uc->uc_stack.ss_sp = stack_lo_;
  uc->uc_stack.ss_size = stack_bytes_;
  uc->uc_link = nullptr;
  makecontext(uc, [] { Fiber::Start(t_starting); }, 0);
  context_ = uc;
#endif
}

Fiber::~Fiber() {
#ifdef EMU_FIBER_ASAN
  // A suspended fiber's frames leave poisoned redzones behind; clear them, or memory mapped
  // here later would inherit them.
  ASAN_UNPOISON_MEMORY_REGION(stack_lo_, stack_bytes_);
#endif
  munmap(map_, map_bytes_);
#ifndef EMU_FIBER_X86_64
  delete static_cast<ucontext_t*>(context_);
  delete static_cast<ucontext_t*>(resumer_);
#endif
}

void Fiber::Resume() {
  StartSwitch(&resumer_fake_stack_, stack_lo_, stack_bytes_);
#ifdef EMU_FIBER_X86_64
  cohort_emu_fiber_switch(&resumer_, context_);
#else
  t_starting = this;
  if (swapcontext(static_cast<ucontext_t*>(resumer_), static_cast<ucontext_t*>(context_)) != 0) {
    Die("swapcontext failed");
  }
#endif
  FinishSwitch(resumer_fake_stack_, nullptr, nullptr);
}

void Fiber::Suspend() {
  StartSwitch(&fake_stack_, resumer_lo_, resumer_bytes_);
#ifdef EMU_FIBER_X86_64
  cohort_emu_fiber_switch(&context_, resumer_);
#else
  if (swapcontext(static_cast<ucontext_t*>(context_), static_cast<ucontext_t*>(resumer_)) != 0) {
    Die("swapcontext failed");
  }
#endif
  FinishSwitch(fake_stack_, &resumer_lo_, &resumer_bytes_);
}

void Fiber::Start(void* self) {
  auto* f = static_cast<Fiber*>(self);
  FinishSwitch(nullptr, &f->resumer_lo_, &f->resumer_bytes_);
  f->entry_(f->arg_);
  Die("a fiber's entry returned");
}

}  // namespace emu
