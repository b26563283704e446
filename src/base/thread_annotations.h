// Clang's thread-safety annotations, and a mutex they understand.
//
// A field says which mutex guards it (GUARDED_BY), a function which mutex it needs held
// (REQUIRES) or must not hold (EXCLUDES). Clang checks every access at compile time
// (-Wthread-safety; `scripts/style.sh` builds the annotated code that way in CI); GCC ignores
// the annotations. libstdc++'s std::mutex carries none, so annotated classes use Mutex and
// MutexLock from here.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#if defined(__clang__)
#define WARREN_TSA(x) __attribute__((x))
#else
#define WARREN_TSA(x)
#endif

#define CAPABILITY(x) WARREN_TSA(capability(x))
#define SCOPED_CAPABILITY WARREN_TSA(scoped_lockable)
#define GUARDED_BY(x) WARREN_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) WARREN_TSA(pt_guarded_by(x))
#define REQUIRES(...) WARREN_TSA(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) WARREN_TSA(requires_shared_capability(__VA_ARGS__))
#define ACQUIRE(...) WARREN_TSA(acquire_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) WARREN_TSA(acquire_shared_capability(__VA_ARGS__))
#define RELEASE(...) WARREN_TSA(release_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) WARREN_TSA(release_shared_capability(__VA_ARGS__))
#define RELEASE_GENERIC(...) WARREN_TSA(release_generic_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) WARREN_TSA(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) WARREN_TSA(locks_excluded(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS WARREN_TSA(no_thread_safety_analysis)

namespace warren {

class CAPABILITY("mutex") Mutex {
 public:
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  bool try_lock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  std::mutex mu_;
};

// Shared (reader) and exclusive (writer) locking.
class CAPABILITY("shared_mutex") SharedMutex {
 public:
  void lock() ACQUIRE() { mu_.lock(); }
  void unlock() RELEASE() { mu_.unlock(); }
  void lock_shared() ACQUIRE_SHARED() { mu_.lock_shared(); }
  void unlock_shared() RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

// Holds `mu` for its scope; Unlock()/Lock() in between for a stretch without it.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->lock(); }
  ~MutexLock() RELEASE() {
    if (held_) mu_->unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() {
    mu_->unlock();
    held_ = false;
  }
  void Lock() ACQUIRE() {
    mu_->lock();
    held_ = true;
  }

  // Waits on `cv` (which releases and retakes the mutex) until notified (or spuriously woken:
  // callers wait in a loop on their condition).
  void Wait(std::condition_variable_any& cv) { cv.wait(*mu_); }
  // Waits on `cv` (which releases and retakes the mutex) until `pred` or `timeout` passes.
  template <typename Rep, typename Period, typename Pred>
  bool WaitFor(std::condition_variable_any& cv, std::chrono::duration<Rep, Period> timeout,
               Pred pred) {
    return cv.wait_for(*mu_, timeout, pred);
  }
  template <typename Rep, typename Period>
  void WaitFor(std::condition_variable_any& cv, std::chrono::duration<Rep, Period> timeout) {
    cv.wait_for(*mu_, timeout);
  }
  // Waits on `cv` until notified or `deadline`: std::cv_status::timeout once it passed.
  template <typename Clock, typename Duration>
  std::cv_status WaitUntil(std::condition_variable_any& cv,
                           std::chrono::time_point<Clock, Duration> deadline) {
    return cv.wait_until(*mu_, deadline);
  }

 private:
  Mutex* const mu_;
  bool held_ = true;
};

class SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex* mu) ACQUIRE_SHARED(mu) : mu_(mu) { mu_->lock_shared(); }
  ~ReaderLock() RELEASE() {
    if (held_) mu_->unlock_shared();
  }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;
  void Unlock() RELEASE() {
    mu_->unlock_shared();
    held_ = false;
  }

 private:
  SharedMutex* const mu_;
  bool held_ = true;
};

class SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->lock(); }
  ~WriterLock() RELEASE() { mu_->unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex* const mu_;
};

}  // namespace warren
