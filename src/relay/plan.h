// PlanTransitions: the relay's decision for one published batch, as a pure
// function (unit-tested without a database or broker).
#ifndef OUTBOX_SRC_RELAY_PLAN_H_
#define OUTBOX_SRC_RELAY_PLAN_H_

#include <chrono>
#include <map>
#include <random>
#include <string>
#include <utility>
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
  std::size_t retryable = 0;     // publish outcomes, for metrics
  std::size_t fatal = 0;
  std::size_t max_attempts = 0;  // FAILED because attempts ran out
  std::size_t held_back = 0;     // acked, but behind an unacked earlier event of its aggregate
  std::size_t not_sent = 0;      // kept from the broker behind an earlier failure (kNotSent)
  bool outage = false;           // the whole batch failed for want of a broker (IsOutage)
  // The shared backoff this outage sets (longer when the server asked for it
  // with PublishResult::retry_after). Its rows are due sooner (PlanTransitions).
  milliseconds outage_delay{0};
};

// True when every result is kNotSent or a kRetryable with broker_unavailable:
// the broker could not be reached for this batch at all.
bool IsOutage(std::span<const PublishResult> results);

// Backoff before attempt `attempts + 1`: min(max, base * 2^(attempts-1)),
// scaled by a factor drawn from [1 - jitter, 1].
milliseconds BackoffDelay(const RelayOptions& o, int attempts, std::mt19937_64& rng);

// When the row-count gauges' query may run again, having started at `started`
// and taken `took`: after stats_interval, or after kStatsIntervalPerCost times
// what it took when that is longer, but no later than kStatsMaxInterval (it
// counts every unsent row: 0.4-1.2 s at 1,000,000 on a 2-core machine, which
// every 2 s would keep a quarter of a core busy exactly while a backlog
// drains). The caller retries a failed query after stats_interval.
inline constexpr int kStatsIntervalPerCost = 20;
inline constexpr std::chrono::seconds kStatsMaxInterval{60};
std::chrono::steady_clock::time_point NextStatsAt(const RelayOptions& o,
                                                  std::chrono::steady_clock::time_point started,
                                                  std::chrono::steady_clock::duration took);

// REQUIRES: events sorted by seq; results[i] is the outcome of events[i].
// In ordered mode, once an event of an aggregate is not acked, later events of
// that aggregate in this batch are rescheduled (even if acked: they must reach
// the broker again after the earlier one; the inbox absorbs the extra copy) —
// except past a FAILED one under FailedPolicy::kPass.
// Attempts: events that were not produced (kNotSent) get their claim's attempt
// back; so does every event of an outage batch, which is never FAILED, however
// many attempts it has, and is due after the shorter of `outage_delay` and
// backoff_base (at least any retry_after): the shared backoff holds the
// workers, so when its probe gets through every row goes at once; and a
// kRetryable with outage_for_event in any batch (after the longer of
// `outage_delay` and its retry_after).
Plan PlanTransitions(std::span<const ClaimedEvent> events, std::span<const PublishResult> results,
                     const RelayOptions& options, milliseconds outage_delay,
                     std::mt19937_64& rng);

// Metrics and logs of one published batch (claimed or streamed): commit-to-ack
// latency (each event's age when handed to the relay + `claim_to_ack`),
// publish outcome counters, and the outage / failure log lines (once per state
// change, tracked in *logged_outage; `peer` names what is unreachable:
// "broker" or "receiver").
void RecordPublish(RelayMetrics& metrics, Logger& logger, const std::string& who,
                   const std::string& peer, std::span<const ClaimedEvent> events, std::span<const PublishResult> results,
                   const Plan& plan, std::chrono::steady_clock::duration claim_to_ack,
                   bool* logged_outage);

// The change stream's decision for one decoded batch: which events to publish
// now, given what the table says about their rows (StreamLedger::StreamStates).
struct StreamPick {
  std::vector<ClaimedEvent> publish;  // in commit order, attempts = the row's + 1
  std::size_t already_done = 0;  // SENT or SKIPPED: nothing to do
  // Still PENDING but not publishable now — behind an earlier unsent event of
  // its aggregate (ordered mode), waiting for its retry time — or not visible
  // to the check yet. The stream
  // keeps them a little while and asks again (the earlier event is usually in
  // a sweeper's hands for milliseconds); the sweeper takes them otherwise.
  std::vector<ClaimedEvent> park;
  // Left to the sweeper for good: in flight elsewhere (PROCESSING) or FAILED.
  std::size_t left_to_sweeper = 0;
};

// REQUIRES: `events` in commit order. In ordered mode, once an event of an
// aggregate is left to the sweeper (or its aggregate is held behind an
// earlier unsent event), every later event of that aggregate in the batch is
// too: the sweeper's claim keeps their order (a FAILED one only when
// `failed_holds`). An event whose row is missing from `states` is parked: it
// may be gone (purged, deleted when sent) or committed but not yet visible to
// the check's snapshot.
// `states[i].held` already leaves out the stream's own acked rows whose SENT
// mark is not written yet (StreamLedger::StreamStates' `acked`).
StreamPick PickStreamed(std::vector<ClaimedEvent> events, std::span<const StreamRowState> states,
                        bool ordered, bool failed_holds);

}  // namespace outbox::relay_internal

#endif  // OUTBOX_SRC_RELAY_PLAN_H_
