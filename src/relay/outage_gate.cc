#include "outage_gate.h"

#include <algorithm>

namespace outbox::relay_internal {

OutageGate::Turn OutageGate::TakeTurn(TimePoint now, milliseconds probe_wait, TimePoint* wait_until) {
  if (delay_.count() == 0) return Turn::kClaim;
  if (now >= until_ && !probe_in_flight_) {
    probe_in_flight_ = true;
    return Turn::kProbe;
  }
  *wait_until = probe_in_flight_ ? now + probe_wait : until_;
  return Turn::kWait;
}

milliseconds OutageGate::NextDelay() const {
  if (delay_.count() == 0) return base_;
  return std::min(delay_ * 2, max_);
}

void OutageGate::EndRound(TimePoint now, bool outage, milliseconds at_least, bool broker_answered, bool probing,
                          std::string_view error) {
  if (probing) probe_in_flight_ = false;
  if (!outage) {
    if (broker_answered) delay_ = milliseconds(0);
    down_ = false;
    return;
  }
  down_error_ = error.empty() ? "no answer" : std::string(error.substr(0, 500));
  down_ = true;
  const milliseconds next = NextDelay();
  // The doubling goes on from `next`; a server's Retry-After only moves this
  // outage's end. Several workers may report the same outage at once: the
  // end only ever moves later.
  const TimePoint until = now + std::max(next, at_least);
  if (until > until_) {
    delay_ = next;
    until_ = until;
  }
}

}  // namespace outbox::relay_internal
