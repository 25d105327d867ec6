// Clock: the engines' time, injected (STYLE.md 18). The relay and the consumer
// read the time, sleep and wait only through one, so their tests run on a
// fake clock they advance instead of sleeping (tests/test_util).
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
  // Wall time, for what travels between processes: a retry's due time in a
  // message, a failure's timestamp. It moves with Now() on a fake clock.
  virtual std::chrono::system_clock::time_point WallNow() const = 0;
};

// The steady and the system clock; what engines use unless told otherwise.
Clock& SystemClock();

}  // namespace outbox

#endif  // OUTBOX_CLOCK_H_
