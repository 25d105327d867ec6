// A worker's round: its turn with the broker, a claim, then an empty claim's
// idle wait or the batch's publish and settlement (fenced transitions).
#include <algorithm>
#include <random>

#include "core/fault.h"
#include "plan.h"
#include "relay_impl.h"

namespace outbox {
namespace {

using Steady = std::chrono::steady_clock;
using relay_internal::Plan;
using relay_internal::PlanTransitions;
using relay_internal::RecordPublish;

std::string SeqList(const std::vector<std::int64_t>& seqs) {
  std::string s;
  for (std::size_t i = 0; i < seqs.size() && i < 20; ++i) {
    if (!s.empty()) s += ',';
    s += std::to_string(seqs[i]);
  }
  if (seqs.size() > 20) s += ",...";
  return s;
}

// The fault point's tags: the event types the broker acked in this batch.
[[maybe_unused]] std::vector<std::string> AckedEventTypes(const std::vector<ClaimedEvent>& events,
                                                          const std::vector<PublishResult>& results) {
  std::vector<std::string> types;
  for (std::size_t i = 0; i < events.size() && i < results.size(); ++i) {
    if (results[i].outcome != PublishOutcome::kAcked) continue;
    const std::string& t = events[i].event.event_type;
    if (std::find(types.begin(), types.end(), t) == types.end()) types.push_back(t);
  }
  return types;
}

}  // namespace

// One worker's loop state: its name, its random source, and what it last
// logged and waited.
struct RelayImpl::Worker {
  Worker(int i, const std::string& relay_id)
      : index(i),
        who(relay_id + "/" + std::to_string(i)),
        rng(std::random_device{}() ^ static_cast<std::uint64_t>(i)) {}
  const int index;
  const std::string who;
  std::mt19937_64 rng;
  bool db_ok = false;
  bool logged_down = false;
  std::string logged_refusal;  // a refusal is logged again when it changes
  bool logged_outage = false;
  bool was_idle = true;  // a worker starts idle: its first empty claim is not running out
  milliseconds db_backoff{100};
  // Its own idle polling, for a queue whose claims see only its share
  // (ClaimQueue::ClaimsSeeEveryRow); else the relay's shared idle_ is used.
  std::unique_ptr<relay_internal::IdlePoller> own_idle;
};

relay_internal::IdlePoller* RelayImpl::OwnIdle(Worker& w, const ClaimQueue& store) {
  if (store.ClaimsSeeEveryRow()) return nullptr;
  if (!w.own_idle) {
    w.own_idle = std::make_unique<relay_internal::IdlePoller>(options_.poll_min, options_.poll_max,
                                                              options_.poll_hot);
  }
  return w.own_idle.get();
}

ClaimOptions RelayImpl::WorkerClaimOptions() {
  ClaimOptions co;
  co.batch_size = options_.batch_size;
  co.batch_bytes = options_.batch_bytes;
  co.lease = options_.lease;
  co.owner = options_.relay_id;
  co.max_attempts = options_.max_attempts;
  co.ordered = options_.ordered;
  co.failed_holds_aggregate = options_.on_failed == FailedPolicy::kHold;
  if (options_.source == RelaySource::kCdc) {
    co.sweep_margin = options_.cdc.sweep_after;
    co.stream_stale_after = options_.cdc.stream_stale_after;
    // Until the stream has announced itself (its progress row), every unsent
    // row would look like the sweeper's (no progress row = no stream).
    const auto until = clock_.Now() + options_.cdc.stream_stale_after;
    while (!stopping_ && !stream_reported_ && clock_.Now() < until) SleepFor(milliseconds(50));
  }
  return co;
}

void RelayImpl::WorkerDbFailed(Worker& w, const Status& st) {
  LeavePolling(w.index);
  const bool refused = NoteDbError(st, &refused_by_workers_);
  if (w.db_ok) --db_ok_workers_;
  w.db_ok = false;
  if (!w.logged_down || (refused && st.message() != w.logged_refusal)) {
    if (refused) {
      w.logged_refusal = st.message();
      logger_.Error("database refused the relay's role: a missing privilege or a failed "
                    "authentication, a configuration error (not an outage); retrying with "
                    "backoff until it is granted",
                    {{"worker", w.who}, {"error", st.ToString()}});
    } else {
      logger_.Warn("database unavailable; retrying with backoff",
                   {{"worker", w.who}, {"error", st.ToString()}});
    }
    w.logged_down = true;
  }
  SleepFor(w.db_backoff);
  w.db_backoff = std::min(w.db_backoff * 2, options_.db_retry_max);
}

void RelayImpl::WorkerDbSucceeded(Worker& w) {
  if (!w.db_ok) {
    ClearRefusal(&refused_by_workers_);
    ++db_ok_workers_;
    if (w.logged_down) logger_.Info("database reachable again", {{"worker", w.who}});
  }
  w.db_ok = true;
  w.logged_down = false;
  w.logged_refusal.clear();
  w.db_backoff = milliseconds(100);
}

// The steps of a worker's round: its turn with the broker, a claim, then an
// empty claim's idle wait or the batch's publish and settlement.
void RelayImpl::WorkerLoop(int index) {
  Worker w(index, options_.relay_id);
  const ClaimOptions co = WorkerClaimOptions();
  std::unique_ptr<ClaimQueue> store;
  while (!stopping_) {
    Beat(index);
    if (!store) {
      auto s = store_.queue();
      if (!s.ok()) {
        WorkerDbFailed(w, s.status());
        continue;
      }
      store = std::move(s).value();
    }
    bool probing = false;
    if (!BrokerTurn(&probing)) {
      LeavePolling(index);
      continue;
    }
    const auto claimed_at = clock_.Now();
    auto claim = store->Claim(co);
    if (!claim.ok()) {
      if (probing) EndBrokerProbe();
      WorkerDbFailed(w, claim.status());
      continue;
    }
    WorkerDbSucceeded(w);
    if (!claim->expired_to_failed.empty()) {
      metrics_.failed_expired.Inc(claim->expired_to_failed.size());
      logger_.Warn("rows claimed max_attempts times without finishing marked FAILED",
                   {{"seqs", SeqList(claim->expired_to_failed)},
                    {"max_attempts", std::to_string(options_.max_attempts)}});
    }
    if (claim->events.empty()) {
      if (probing) EndBrokerProbe();
      metrics_.empty_claims.Inc();
      // An empty claim can be costly (it walked rows held behind in-flight
      // events): the idle poller waits at least as long as its last one took.
      IdleWait(index, std::chrono::duration_cast<milliseconds>(clock_.Now() - claimed_at),
               /*ran_out=*/!w.was_idle, OwnIdle(w, *store));
      w.was_idle = true;
      continue;
    }
    if (w.was_idle) {
      if (relay_internal::IdlePoller* own = OwnIdle(w, *store)) {
        OwnFound(*own);
      } else {
        EndIdle(FullBatch(claim->events));
      }
    }
    w.was_idle = false;
    PublishAndSettle(w, *store, claim->events, probing, claimed_at);
  }
  if (w.db_ok) --db_ok_workers_;
  MutexLock lock(mu_);
  (void)idle_.Leave(index);
}

void RelayImpl::PublishAndSettle(Worker& w, ClaimQueue& store, std::vector<ClaimedEvent>& events,
                             bool probing, Steady::time_point claimed_at) {
  (void)OUTBOX_FAULT(fault::kRelayAfterClaim);
  metrics_.claims.Inc();
  metrics_.batch_size.Observe(static_cast<double>(events.size()));

  const auto published_at = clock_.Now();
  std::vector<PublishResult> results = transport_.Publish(events);
  const auto acked_at = clock_.Now();
  (void)OUTBOX_FAULT_TAGGED(fault::kRelayAfterPublishBeforeMarkSent,
                            AckedEventTypes(events, results));
  Plan plan = PlanTransitions(events, results, options_, NextOutageDelay(), w.rng);
  EndBrokerRound(plan.outage, plan.outage_delay, !plan.sent.empty() || plan.held_back > 0, probing,
                 results.empty() ? std::string_view() : std::string_view(results.front().error));
  RecordPublish(metrics_, logger_, w.who, transport_.PeerName(), events, results, plan,
                acked_at - claimed_at, &w.logged_outage);

  // Transitions: retried on database errors until the lease is about to lapse
  // (or the shutdown deadline). A mark that cannot be done is left to lease
  // expiry: the row is published again and the inbox absorbs it — it is never
  // marked FAILED for a failure of ours.
  const auto lease_deadline = claimed_at + options_.lease - std::chrono::seconds(1);
  auto apply = [&](const char* what, const std::function<Result<TransitionResult>()>& call,
                   std::size_t n, std::string_view fault_point) {
    if (ApplyTransition(w.who, what, call, n, fault_point, lease_deadline)) WorkerDbSucceeded(w);
  };
  apply("mark sent", [&] { return store.MarkSent(plan.sent); }, plan.sent.size(),
        fault::kRelayMarkSent);
  apply("reschedule", [&] { return store.Reschedule(plan.reschedule); }, plan.reschedule.size(),
        std::string_view{});
  apply("mark failed", [&] { return store.MarkFailed(plan.failed); }, plan.failed.size(),
        fault::kRelayMarkFailed);
  auto ms = [](auto d) {
    return std::to_string(std::chrono::duration<double, std::milli>(d).count());
  };
  logger_.Log(LogLevel::kDebug, "batch done",
              {{"worker", w.who}, {"rows", std::to_string(events.size())},
               {"claim_ms", ms(published_at - claimed_at)},
               {"publish_ms", ms(acked_at - published_at)},
               {"mark_ms", ms(clock_.Now() - acked_at)}});
  metrics_.rescheduled.Inc(plan.reschedule.size());
  metrics_.failed_fatal.Inc(plan.failed.size() - plan.max_attempts);
  metrics_.failed_max_attempts.Inc(plan.max_attempts);
  if (!plan.failed.empty()) {
    logger_.Warn("rows marked FAILED", {{"worker", w.who},
                                        {"rows", std::to_string(plan.failed.size())},
                                        {"first_error", plan.failed.front().error}});
  }
}

bool RelayImpl::ApplyTransition(const std::string& who, const char* what,
                            const std::function<Result<TransitionResult>()>& call, std::size_t n,
                            std::string_view fault_point,
                            std::chrono::steady_clock::time_point deadline) {
  // Retried on database errors until the deadline (the lease is about to lapse,
  // or the shutdown deadline). A mark that cannot be done is left to lease
  // expiry (or, for streamed rows, to the sweeper): the row is published again
  // and the inbox absorbs it — it is never marked FAILED for a failure of ours.
  if (n == 0) return true;
  milliseconds backoff{50};
  for (;;) {
    Result<TransitionResult> r =
        OUTBOX_FAULT(fault_point)
            ? Result<TransitionResult>(Status::Internal("fault point " + std::string(fault_point)))
            : call();
    if (r.ok()) {
      if (!r->refused.empty()) {
        metrics_.fenced.Inc(r->refused.size());
        logger_.Warn("transition refused: another claim holds the row (a streamed row: it is no "
                     "longer PENDING)",
                     {{"worker", who}, {"op", what}, {"rows", std::to_string(r->refused.size())}});
      }
      return true;
    }
    (void)NoteDbError(r.status());  // a refused mark is counted; its line follows
    if (!r.status().retryable() || clock_.Now() + backoff >= deadline) {
      logger_.Error("could not record transition; leaving rows to lease expiry",
                    {{"worker", who}, {"op", what}, {"rows", std::to_string(n)},
                     {"error", r.status().ToString()}});
      return false;
    }
    metrics_.mark_retries.Inc();
    clock_.SleepFor(backoff);
    backoff = std::min(backoff * 2, milliseconds(2000));
  }
}

}  // namespace outbox
