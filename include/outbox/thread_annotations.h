// Lock annotations that clang checks (-Wthread-safety, the asan preset's clang
// build turns the warnings into errors), and the annotated mutexes they need:
// libstdc++'s std::mutex carries no annotations, so a member guarded by one
// could not be checked. Other compilers see empty macros and plain mutexes.
//
//   outbox::Mutex mu_;
//   int n_ OUTBOX_GUARDED_BY(mu_);
//   void Bump() OUTBOX_EXCLUDES(mu_) { outbox::MutexLock l(mu_); ++n_; }
//   void BumpLocked() OUTBOX_REQUIRES(mu_);
//
// Thread-safety: Mutex and SharedMutex are what they wrap; the lock objects
// belong to the thread that made them.
#ifndef OUTBOX_THREAD_ANNOTATIONS_H_
#define OUTBOX_THREAD_ANNOTATIONS_H_

#include <mutex>
#include <shared_mutex>

#if defined(__clang__)
#define OUTBOX_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define OUTBOX_THREAD_ANNOTATION(x)
#endif

#define OUTBOX_CAPABILITY(x) OUTBOX_THREAD_ANNOTATION(capability(x))
#define OUTBOX_SCOPED_CAPABILITY OUTBOX_THREAD_ANNOTATION(scoped_lockable)
#define OUTBOX_GUARDED_BY(x) OUTBOX_THREAD_ANNOTATION(guarded_by(x))
#define OUTBOX_PT_GUARDED_BY(x) OUTBOX_THREAD_ANNOTATION(pt_guarded_by(x))
#define OUTBOX_REQUIRES(...) OUTBOX_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define OUTBOX_REQUIRES_SHARED(...) \
  OUTBOX_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define OUTBOX_EXCLUDES(...) OUTBOX_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define OUTBOX_ACQUIRE(...) OUTBOX_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define OUTBOX_ACQUIRE_SHARED(...) OUTBOX_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define OUTBOX_RELEASE(...) OUTBOX_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define OUTBOX_RELEASE_SHARED(...) OUTBOX_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define OUTBOX_RELEASE_GENERIC(...) \
  OUTBOX_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
#define OUTBOX_NO_THREAD_SAFETY_ANALYSIS OUTBOX_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace outbox {

class OUTBOX_CAPABILITY("mutex") Mutex {
 public:
  void Lock() OUTBOX_ACQUIRE() { mu_.lock(); }
  void Unlock() OUTBOX_RELEASE() { mu_.unlock(); }
  // For std::condition_variable waits (through MutexLock::native()).
  std::mutex& native() { return mu_; }

 private:
  std::mutex mu_;
};

// Holds a Mutex for its scope; native() is the std::unique_lock a
// std::condition_variable waits on (the wait releases and retakes the same
// mutex, which the analysis sees as held throughout).
class OUTBOX_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) OUTBOX_ACQUIRE(mu) : lock_(mu.native()) {}
  ~MutexLock() OUTBOX_RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

class OUTBOX_CAPABILITY("shared mutex") SharedMutex {
 public:
  void Lock() OUTBOX_ACQUIRE() { mu_.lock(); }
  void Unlock() OUTBOX_RELEASE() { mu_.unlock(); }
  void LockShared() OUTBOX_ACQUIRE_SHARED() { mu_.lock_shared(); }
  void UnlockShared() OUTBOX_RELEASE_SHARED() { mu_.unlock_shared(); }

 private:
  std::shared_mutex mu_;
};

class OUTBOX_SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex& mu) OUTBOX_ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~WriterLock() OUTBOX_RELEASE() { mu_.Unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex& mu_;
};

class OUTBOX_SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex& mu) OUTBOX_ACQUIRE_SHARED(mu) : mu_(mu) { mu_.LockShared(); }
  ~ReaderLock() OUTBOX_RELEASE() { mu_.UnlockShared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex& mu_;
};

}  // namespace outbox

#endif  // OUTBOX_THREAD_ANNOTATIONS_H_
