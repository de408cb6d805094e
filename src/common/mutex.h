// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable with Clang's
// thread-safety annotations, so that the compiler checks every access to a field marked
// GUARDED_BY(mu_) and every call to a method marked REQUIRES(mu_).
//
// libstdc++'s std::mutex carries no annotations, so Clang cannot reason about it; these
// thin wrappers (Abseil's absl::Mutex is the model) cost nothing at run time. GCC ignores
// the annotations. CI checks them with `clang++ -Wthread-safety -Werror` over the head's
// and the agent's sources (scripts/check_thread_safety.py, ctest label `lint`).
//
// Threads: a Mutex may be locked from any thread; a MutexLock belongs to the thread that
// made it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define COHORT_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define COHORT_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) COHORT_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY COHORT_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) COHORT_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) COHORT_THREAD_ANNOTATION(pt_guarded_by(x))
#define REQUIRES(...) COHORT_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) COHORT_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ACQUIRE(...) COHORT_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) COHORT_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define RETURN_CAPABILITY(x) COHORT_THREAD_ANNOTATION(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS COHORT_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace cohort {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  // Tells the analysis that the caller holds this mutex (for callbacks run under it).
  void AssertHeld() const COHORT_THREAD_ANNOTATION(assert_capability(this)) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` from construction to destruction. Unlock() and Lock() release and retake it
// in between (for work that must run unlocked, such as network calls).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() RELEASE() {
    if (held_) mu_.Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() {
    held_ = false;
    mu_.Unlock();
  }
  void Lock() ACQUIRE() {
    mu_.Lock();
    held_ = true;
  }

 private:
  Mutex& mu_;
  bool held_ = true;
};

// A condition variable used with a Mutex the caller holds.
class CondVar {
 public:
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

  // Waits until notified (spurious wake-ups possible); `mu` is held again on return.
  void Wait(Mutex& mu) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // Waits until notified or `timeout` passes; false on timeout. `mu` is held again on return.
  template <typename Rep, typename Period>
  bool WaitFor(Mutex& mu, std::chrono::duration<Rep, Period> timeout) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    bool notified = cv_.wait_for(lock, timeout) == std::cv_status::no_timeout;
    lock.release();
    return notified;
  }
  // Waits until `done()` or `timeout` passes; returns done(). `done` runs with `mu` held
  // (a lambda that reads guarded fields says so with `mu.AssertHeld()`).
  template <typename Rep, typename Period, typename Pred>
  bool WaitFor(Mutex& mu, std::chrono::duration<Rep, Period> timeout, Pred done) REQUIRES(mu) {
    return WaitUntil(mu, std::chrono::steady_clock::now() + timeout, std::move(done));
  }
  // Waits until `done()` or `deadline`; returns done().
  template <typename Clock, typename Duration, typename Pred>
  bool WaitUntil(Mutex& mu, std::chrono::time_point<Clock, Duration> deadline, Pred done) REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    bool r = cv_.wait_until(lock, deadline, std::move(done));
    lock.release();
    return r;
  }

 private:
  std::condition_variable cv_;
};

}  // namespace cohort
