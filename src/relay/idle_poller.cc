#include "idle_poller.h"

#include <algorithm>

namespace outbox::relay_internal {

void IdlePoller::RanOut(int index, TimePoint now) {
  found_at_ = now;
  if (interval_ > min_) {
    interval_ = min_;
    poller_ = index;
  }
}

IdlePoller::Wait IdlePoller::Next(int index, TimePoint now, milliseconds claim_cost) {
  if (poller_ >= 0 && poller_ != index) return {false, std::max(max_ * 4, kSafetyNetMin)};
  poller_ = index;
  const milliseconds sleep = std::max(interval_, claim_cost);
  if (now - found_at_ >= hot_) interval_ = std::min(interval_ * 2, max_);
  return {true, sleep};
}

void IdlePoller::Found(TimePoint now) {
  poller_ = -1;
  interval_ = min_;
  found_at_ = now;
}

void IdlePoller::Heat(TimePoint found_at, milliseconds interval) {
  if (found_at <= heated_at_) return;
  heated_at_ = found_at;
  interval_ = std::min(interval_, std::max(interval, min_));
}

bool IdlePoller::Leave(int index) {
  if (poller_ != index) return false;
  poller_ = -1;
  return true;
}

}  // namespace outbox::relay_internal
