// OutageGate: the broker-outage backoff every worker (and the stream) of one
// relay shares, as a pure state machine (unit-tested without threads, broker
// or clock). While the broker answers, every worker claims. After a batch the
// relay classified as an outage (plan.h, IsOutage), nobody claims until the
// backoff ends; then one worker probes the broker with a batch, and the others
// wait for its round. A batch the broker answered (acked) ends the outage and
// resets the backoff; any batch that is not an outage ends Down().
//
// Thread-safety: not thread-safe; the relay calls it under its mutex.
#ifndef OUTBOX_SRC_RELAY_OUTAGE_GATE_H_
#define OUTBOX_SRC_RELAY_OUTAGE_GATE_H_

#include <chrono>
#include <string>
#include <string_view>

namespace outbox::relay_internal {

using std::chrono::milliseconds;

class OutageGate {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  // The backoff doubles from `base` up to `max` for as long as the outage lasts.
  OutageGate(milliseconds base, milliseconds max) : base_(base), max_(max) {}

  enum class Turn { kClaim, kProbe, kWait };
  // May a worker claim at `now`? kClaim: no outage. kProbe: the backoff is
  // over and nobody probes yet; the caller is the prober (EndProbe or
  // EndRound with probing ends its turn). kWait: not now; *wait_until says
  // until when at most (the backoff's end, or `probe_wait` on while another
  // worker's probe is in flight).
  Turn TakeTurn(TimePoint now, milliseconds probe_wait, TimePoint* wait_until);
  // The prober did not publish (its claim failed or came back empty).
  void EndProbe() { probe_in_flight_ = false; }
  // A published batch's round: `outage` extends the backoff to at least
  // `at_least` from `now` (a server's Retry-After) — never shortening an end
  // that another worker's report set later; otherwise `broker_answered`
  // (anything acked or refused) resets it. `error` (the batch's first) is
  // what Down() reports until a batch is not an outage.
  void EndRound(TimePoint now, bool outage, milliseconds at_least, bool broker_answered, bool probing,
                std::string_view error);
  // The backoff the next outage report sets: base, then doubling to max.
  milliseconds NextDelay() const;
  bool InOutage() const { return delay_.count() != 0; }
  // From a batch classified as an outage until a batch that is not: the
  // broker is down (for /readyz), with that batch's first error.
  bool Down() const { return down_; }
  const std::string& DownError() const { return down_error_; }

 private:
  const milliseconds base_, max_;
  milliseconds delay_{0};  // 0 while the broker answers; else the current backoff
  TimePoint until_{};      // the current backoff's end
  bool probe_in_flight_ = false;
  bool down_ = false;
  std::string down_error_;
};

}  // namespace outbox::relay_internal

#endif  // OUTBOX_SRC_RELAY_OUTAGE_GATE_H_
