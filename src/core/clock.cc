#include "outbox/clock.h"

#include <thread>

namespace outbox {
namespace {

class SteadyClock final : public Clock {
 public:
  time_point Now() const override { return std::chrono::steady_clock::now(); }
  std::cv_status WaitUntil(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                           time_point until) override {
    return cv.wait_until(lock, until);
  }
  void SleepFor(std::chrono::nanoseconds d) override { std::this_thread::sleep_for(d); }
  std::chrono::system_clock::time_point WallNow() const override {
    return std::chrono::system_clock::now();
  }
};

}  // namespace

Clock& SystemClock() {
  static SteadyClock clock;
  return clock;
}

}  // namespace outbox
