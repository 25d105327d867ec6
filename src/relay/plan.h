// PlanTransitions: the relay's decision for one published batch, as a pure
// function (unit-tested without a database or broker).
#ifndef OUTBOX_SRC_RELAY_PLAN_H_
#define OUTBOX_SRC_RELAY_PLAN_H_

#include <random>
#include <span>
#include <vector>

#include "outbox/relay.h"
#include "outbox/store.h"
#include "outbox/transport.h"

namespace outbox::relay_internal {

struct Plan {
  std::vector<Ticket> sent;
  std::vector<RescheduleItem> reschedule;
  std::vector<FailItem> failed;
  std::size_t retriable = 0;     // publish outcomes, for metrics
  std::size_t fatal = 0;
  std::size_t max_attempts = 0;  // FAILED because attempts ran out
  std::size_t held_back = 0;     // acked, but behind an unacked earlier event of its aggregate
};

// Backoff before attempt `attempts + 1`: min(max, base * 2^(attempts-1)),
// scaled by a factor drawn from [1 - jitter, 1].
milliseconds BackoffDelay(const RelayOptions& o, int attempts, std::mt19937_64& rng);

// REQUIRES: events sorted by seq; results[i] is the outcome of events[i].
// In ordered mode, once an event of an aggregate is not acked, later events of
// that aggregate in this batch are rescheduled (even if acked: they must reach
// the broker again after the earlier one; the inbox absorbs the extra copy) —
// except past a FAILED one under FailedPolicy::kPass.
Plan PlanTransitions(std::span<const ClaimedEvent> events, std::span<const PublishResult> results,
                     const RelayOptions& options, std::mt19937_64& rng);

}  // namespace outbox::relay_internal

#endif  // OUTBOX_SRC_RELAY_PLAN_H_
