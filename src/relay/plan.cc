#include "plan.h"

#include <algorithm>
#include <map>
#include <string>

namespace outbox::relay_internal {

std::chrono::steady_clock::time_point NextStatsAt(const RelayOptions& o,
                                                  std::chrono::steady_clock::time_point started,
                                                  std::chrono::steady_clock::duration took) {
  using D = std::chrono::steady_clock::duration;
  const D paced = std::min<D>(took * kStatsIntervalPerCost, kStatsMaxInterval);
  return started + std::max<D>(o.stats_interval, paced);
}

milliseconds BackoffDelay(const RelayOptions& o, int attempts, std::mt19937_64& rng) {
  const int shift = std::clamp(attempts - 1, 0, 30);
  const double base = static_cast<double>(o.backoff_base.count());
  const double cap = static_cast<double>(o.backoff_max.count());
  const double d = std::min(cap, base * static_cast<double>(1ULL << shift));
  std::uniform_real_distribution<double> u(1.0 - std::clamp(o.backoff_jitter, 0.0, 1.0), 1.0);
  return milliseconds(static_cast<long long>(d * u(rng)));
}

bool IsOutage(std::span<const PublishResult> results) {
  if (results.empty()) return false;
  return std::all_of(results.begin(), results.end(), [](const PublishResult& r) {
    return r.outcome == PublishOutcome::kNotSent ||
           (r.outcome == PublishOutcome::kRetryable && r.broker_unavailable);
  });
}

Plan PlanTransitions(std::span<const ClaimedEvent> events, std::span<const PublishResult> results,
                     const RelayOptions& options, milliseconds outage_delay, std::mt19937_64& rng) {
  Plan plan;
  for (const PublishResult& r : results) {
    if (r.outcome == PublishOutcome::kRetryable) ++plan.retryable;
    if (r.outcome == PublishOutcome::kFatal) ++plan.fatal;
    if (r.outcome == PublishOutcome::kNotSent) ++plan.not_sent;
  }
  if (IsOutage(results)) {
    // The broker was unreachable for the whole batch: not the events' fault.
    // Every row goes back with its attempt given back, due when the relay's
    // shared outage backoff ends.
    plan.outage = true;
    plan.outage_delay = outage_delay;
    milliseconds retry_after{0};
    for (const PublishResult& r : results) retry_after = std::max(retry_after, r.retry_after);
    plan.outage_delay = std::max(plan.outage_delay, retry_after);
    // The rows are due soon (backoff_base, or the server's Retry-After): the
    // shared backoff, not their due time, keeps the workers away meanwhile, and
    // once its probe gets through every row goes at once. Due at the backoff's
    // end, rows rescheduled late in a long outage waited up to a whole
    // backoff_max after it ended (issue 41: 63.5 s after a 30-s outage).
    const milliseconds due = std::max(std::min(plan.outage_delay, options.backoff_base), retry_after);
    for (std::size_t i = 0; i < events.size(); ++i) {
      const std::string& why = results[i].outcome == PublishOutcome::kNotSent
                                   ? std::string("broker unavailable")
                                   : results[i].error;
      plan.reschedule.push_back({events[i].ticket, due, "broker unavailable: " + why,
                                 /*attempt_counts=*/false});
    }
    return plan;
  }
  // Aggregate -> the delay and reason its earlier, unacked event got in this batch.
  std::map<std::pair<std::string, std::string>, std::pair<milliseconds, std::string>> broken;
  auto hold = [&](const std::pair<std::string, std::string>& key, milliseconds d,
                  std::string why) {
    if (options.ordered) broken.emplace(key, std::make_pair(d, std::move(why)));
  };
  const bool hold_on_failed = options.on_failed == FailedPolicy::kHold;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const ClaimedEvent& e = events[i];
    const PublishResult& r = results[i];
    const auto key = std::make_pair(e.event.aggregate_type, e.event.aggregate_id);

    auto b = options.ordered ? broken.find(key) : broken.end();
    if (b != broken.end() && r.outcome != PublishOutcome::kFatal) {
      // Behind an earlier unacked event of the same aggregate: go again after it.
      // Produced anyway (a broker-side failure of the earlier one came after this
      // one was on its way): the attempt counts. Not produced: it does not.
      if (r.outcome == PublishOutcome::kAcked) ++plan.held_back;
      plan.reschedule.push_back({e.ticket, b->second.first,
                                 "waiting for an earlier event of this aggregate: " + b->second.second,
                                 /*attempt_counts=*/r.outcome != PublishOutcome::kNotSent});
      continue;
    }
    switch (r.outcome) {
      case PublishOutcome::kAcked:
        plan.sent.push_back(e.ticket);
        break;
      case PublishOutcome::kNotSent:
        // Its earlier event failed under FailedPolicy::kPass, or unordered mode:
        // nothing to wait for; go again at once.
        plan.reschedule.push_back({e.ticket, milliseconds(0),
                                   "not sent: an earlier event of this aggregate failed first",
                                   /*attempt_counts=*/false});
        break;
      case PublishOutcome::kFatal:
        plan.failed.push_back({e.ticket, "fatal publish error: " + r.error});
        if (hold_on_failed) {
          hold(key, BackoffDelay(options, e.attempts, rng), "it FAILED (" + r.error + ")");
        }
        break;
      case PublishOutcome::kRetryable:
        if (r.outage_for_event) {
          // The receiver is away for this event only: an outage, not its
          // fault. Not counted, never FAILED; due after the shared backoff's
          // next step (or the receiver's Retry-After).
          const milliseconds d = std::max(outage_delay, r.retry_after);
          plan.reschedule.push_back({e.ticket, d, "receiver unavailable: " + r.error,
                                     /*attempt_counts=*/false});
          hold(key, d, r.error);
          break;
        }
        if (e.attempts >= options.max_attempts) {
          ++plan.max_attempts;
          plan.failed.push_back({e.ticket, "gave up after " + std::to_string(e.attempts) +
                                               " attempts; last error: " + r.error});
          if (hold_on_failed) {
            hold(key, BackoffDelay(options, e.attempts, rng), "it FAILED (" + r.error + ")");
          }
        } else {
          milliseconds d = std::max(BackoffDelay(options, e.attempts, rng), r.retry_after);
          plan.reschedule.push_back({e.ticket, d, r.error});
          hold(key, d, r.error);
        }
        break;
    }
  }
  return plan;
}

StreamPick PickStreamed(std::vector<ClaimedEvent> events, std::span<const StreamRowState> states,
                        bool ordered, bool failed_holds) {
  std::map<std::int64_t, const StreamRowState*> by_seq;
  for (const StreamRowState& s : states) by_seq[s.seq] = &s;
  std::map<std::pair<std::string, std::string>, bool> blocked;  // aggregate -> left behind
  StreamPick pick;
  for (ClaimedEvent& e : events) {
    auto it = by_seq.find(e.ticket.seq);
    const auto key = std::make_pair(e.event.aggregate_type, e.event.aggregate_id);
    if (it == by_seq.end()) {
      // Not visible to the check: either gone (purged, or deleted when sent)
      // or committed a moment ago — logical decoding can send a commit before
      // the committing backend is visible to new snapshots. Ask again soon;
      // a row that is really gone leaves the park after sweep_after.
      if (ordered) blocked[key] = true;
      pick.park.push_back(std::move(e));
      continue;
    }
    const StreamRowState& st = *it->second;
    if (st.state == RowState::kSent || st.state == RowState::kSkipped) {
      ++pick.already_done;
      continue;
    }
    const bool publishable = st.state == RowState::kPending && st.due && !st.held &&
                             !(ordered && blocked[key]);
    if (!publishable) {
      if (ordered && (st.state != RowState::kFailed || failed_holds)) blocked[key] = true;
      if (st.state == RowState::kPending) {
        pick.park.push_back(std::move(e));
      } else {
        ++pick.left_to_sweeper;
      }
      continue;
    }
    e.ticket.token = 0;
    e.attempts = st.attempts + 1;
    pick.publish.push_back(std::move(e));
  }
  return pick;
}

}  // namespace outbox::relay_internal
