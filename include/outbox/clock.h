// Clock: the engines' time, injected (STYLE.md 18). The relay reads the time,
// sleeps and waits on its condition variable only through one, so its tests
// run on a fake clock they advance instead of sleeping (tests/test_util).
//
// Thread-safety: a Clock is called from every thread of the engine that uses
// it; implementations must be safe for that. Lifetime: must outlive the engine.
#ifndef OUTBOX_CLOCK_H_
#define OUTBOX_CLOCK_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace outbox {

class Clock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  virtual ~Clock() = default;

  virtual time_point Now() const = 0;
  // Waits on `cv` (REQUIRES: `lock` holds its mutex) until a notification or
  // `until` on this clock; may also return early (no_timeout), as
  // condition_variable::wait_until may: callers wait in a loop on their
  // condition.
  virtual std::cv_status WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                                   time_point until) = 0;
  virtual void SleepFor(std::chrono::nanoseconds d) = 0;
};

// The steady clock; what engines use unless told otherwise.
Clock& SystemClock();

}  // namespace outbox

#endif  // OUTBOX_CLOCK_H_
