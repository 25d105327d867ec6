#include "plan.h"

#include <algorithm>
#include <map>
#include <string>

namespace outbox::relay_internal {

milliseconds BackoffDelay(const RelayOptions& o, int attempts, std::mt19937_64& rng) {
  const int shift = std::clamp(attempts - 1, 0, 30);
  const double base = static_cast<double>(o.backoff_base.count());
  const double cap = static_cast<double>(o.backoff_max.count());
  const double d = std::min(cap, base * static_cast<double>(1ULL << shift));
  std::uniform_real_distribution<double> u(1.0 - std::clamp(o.backoff_jitter, 0.0, 1.0), 1.0);
  return milliseconds(static_cast<long long>(d * u(rng)));
}

Plan PlanTransitions(std::span<const ClaimedEvent> events, std::span<const PublishResult> results,
                     const RelayOptions& options, std::mt19937_64& rng) {
  Plan plan;
  // Aggregate -> the delay and reason its earlier, unacked event got in this batch.
  std::map<std::pair<std::string, std::string>, std::pair<milliseconds, std::string>> broken;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const ClaimedEvent& e = events[i];
    const PublishResult& r = results[i];
    const auto key = std::make_pair(e.event.aggregate_type, e.event.aggregate_id);
    if (r.outcome == PublishOutcome::kRetriable) ++plan.retriable;
    if (r.outcome == PublishOutcome::kFatal) ++plan.fatal;

    auto b = options.ordered ? broken.find(key) : broken.end();
    if (b != broken.end() && r.outcome != PublishOutcome::kFatal) {
      // Behind an earlier unacked event of the same aggregate: go again after it.
      if (r.outcome == PublishOutcome::kAcked) ++plan.held_back;
      plan.reschedule.push_back({e.ticket, b->second.first,
                                 "waiting for an earlier event of this aggregate: " + b->second.second});
      continue;
    }
    switch (r.outcome) {
      case PublishOutcome::kAcked:
        plan.sent.push_back(e.ticket);
        break;
      case PublishOutcome::kFatal:
        plan.failed.push_back({e.ticket, "fatal publish error: " + r.error});
        if (options.ordered && options.on_failed == FailedPolicy::kHold) {
          broken.emplace(key, std::make_pair(BackoffDelay(options, e.attempts, rng),
                                             "it FAILED (" + r.error + ")"));
        }
        break;
      case PublishOutcome::kRetriable:
        if (e.attempts >= options.max_attempts) {
          ++plan.max_attempts;
          plan.failed.push_back({e.ticket, "gave up after " + std::to_string(e.attempts) +
                                               " attempts; last error: " + r.error});
          if (options.ordered && options.on_failed == FailedPolicy::kHold) {
            broken.emplace(key, std::make_pair(BackoffDelay(options, e.attempts, rng),
                                               "it FAILED (" + r.error + ")"));
          }
        } else {
          milliseconds d = BackoffDelay(options, e.attempts, rng);
          plan.reschedule.push_back({e.ticket, d, r.error});
          if (options.ordered) broken.emplace(key, std::make_pair(d, r.error));
        }
        break;
    }
  }
  return plan;
}

}  // namespace outbox::relay_internal
