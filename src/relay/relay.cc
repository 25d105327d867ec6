#include "outbox/relay.h"
#include "outbox/version.h"

#include <algorithm>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "core/fault.h"
#include "plan.h"

namespace outbox {
namespace {

using Steady = std::chrono::steady_clock;
using relay_internal::Plan;
using relay_internal::PlanTransitions;
using relay_internal::RecordPublish;

const std::vector<double> kBatchBuckets = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000};
const std::vector<double> kLatencyBuckets = {0.001, 0.0025, 0.005, 0.01,  0.02, 0.05, 0.1,
                                             0.25,  0.5,    1,     2.5,   5,    10,   30, 60};

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

namespace {

constexpr const char* kRowsHelp =
    "Rows of the outbox table by state (SENT rows are not counted). A table-wide value: every "
    "relay of the schema reports the same one; aggregate with max, not sum.";

// The help texts of the outbox_relay_* metrics.
constexpr const char* kPublishedHelp = "Events acknowledged by the broker (acks=all).";
constexpr const char* kPublishFailuresHelp = "Publish attempts that failed, by error class.";
constexpr const char* kRescheduledHelp = "Rows put back to PENDING with a backoff delay.";
constexpr const char* kFailedHelp = "Rows marked FAILED, by reason.";
constexpr const char* kFencedHelp =
    "Transitions refused because another claim holds the row (lease lost).";
constexpr const char* kClaimsHelp = "Claims that returned at least one row.";
constexpr const char* kEmptyClaimsHelp = "Claims that returned no row (idle polls).";
constexpr const char* kNotSentHelp =
    "Events kept from the broker because an earlier event of their aggregate failed first in "
    "the same batch (attempt not counted).";
constexpr const char* kAckedOutOfOrderHelp =
    "Events the broker acked while an earlier event of their aggregate in the same batch was "
    "not acked: the topic holds them before that event (published again after it).";
constexpr const char* kOutageHelp =
    "Batches that found no reachable broker: rescheduled without counting attempts; workers "
    "back off together.";
constexpr const char* kPermissionDeniedHelp =
    "Failed database calls the server refused for a missing privilege or a failed "
    "authentication: a configuration error, not an outage (also in db_errors_total).";
constexpr const char* kPurgedHelp = "SENT rows deleted after the retention period.";
constexpr const char* kMarkRetriesHelp = "Retries of a transition after a database error.";

// Every outbox_relay_* sample says which transport the relay delivers with.
std::string TransportLabels(const std::string& transport, const std::string& more = "") {
  const std::string l = "transport=\"" + PrometheusLabelValue(transport) + "\"";
  return more.empty() ? l : l + "," + more;
}

std::string TableLabels(const std::string& schema, const std::string& state = "") {
  std::string l = "schema=\"" + PrometheusLabelValue(schema) + "\"";
  if (!state.empty()) l += ",state=\"" + state + "\"";
  return l;
}

}  // namespace

RelayMetrics::RelayMetrics(MetricsRegistry& r, const std::string& schema,
                           const std::string& transport)
    : published(r.AddCounter("outbox_relay_events_published_total", kPublishedHelp,
                             TransportLabels(transport))),
      publish_retryable(r.AddCounter("outbox_relay_publish_failures_total", kPublishFailuresHelp,
                                     TransportLabels(transport, "class=\"retriable\""))),
      publish_fatal(r.AddCounter("outbox_relay_publish_failures_total", kPublishFailuresHelp,
                                 TransportLabels(transport, "class=\"fatal\""))),
      rescheduled(r.AddCounter("outbox_relay_rows_rescheduled_total", kRescheduledHelp,
                               TransportLabels(transport))),
      failed_fatal(r.AddCounter("outbox_relay_rows_failed_total", kFailedHelp,
                                TransportLabels(transport, "reason=\"fatal\""))),
      failed_max_attempts(r.AddCounter("outbox_relay_rows_failed_total", kFailedHelp,
                                       TransportLabels(transport, "reason=\"max_attempts\""))),
      failed_expired(r.AddCounter("outbox_relay_rows_failed_total", kFailedHelp,
                                  TransportLabels(transport, "reason=\"lease_expired\""))),
      fenced(r.AddCounter("outbox_relay_transitions_fenced_total", kFencedHelp,
                          TransportLabels(transport))),
      claims(r.AddCounter("outbox_relay_claims_total", kClaimsHelp, TransportLabels(transport))),
      empty_claims(r.AddCounter("outbox_relay_empty_claims_total", kEmptyClaimsHelp,
                                TransportLabels(transport))),
      not_sent(r.AddCounter("outbox_relay_events_not_sent_total", kNotSentHelp,
                            TransportLabels(transport))),
      acked_out_of_order(r.AddCounter("outbox_relay_events_acked_out_of_order_total",
                                      kAckedOutOfOrderHelp, TransportLabels(transport))),
      outage_batches(r.AddCounter("outbox_relay_broker_outage_batches_total", kOutageHelp,
                                  TransportLabels(transport))),
      db_errors(r.AddCounter("outbox_relay_db_errors_total", "Failed database calls.",
                             TransportLabels(transport))),
      db_permission_denied(r.AddCounter("outbox_relay_db_permission_denied_total",
                                        kPermissionDeniedHelp, TransportLabels(transport))),
      purged(r.AddCounter("outbox_relay_rows_purged_total", kPurgedHelp,
                          TransportLabels(transport))),
      mark_retries(r.AddCounter("outbox_relay_mark_retries_total", kMarkRetriesHelp,
                                TransportLabels(transport))),
      pending(r.AddGauge("outbox_rows", kRowsHelp, TableLabels(schema, "pending"))),
      processing(r.AddGauge("outbox_rows", kRowsHelp, TableLabels(schema, "processing"))),
      failed_rows(r.AddGauge("outbox_rows", kRowsHelp, TableLabels(schema, "failed"))),
      skipped_rows(r.AddGauge("outbox_rows", kRowsHelp, TableLabels(schema, "skipped"))),
      oldest_unsent_age(r.AddGauge("outbox_oldest_unsent_age_seconds",
                                   "Age of the oldest PENDING or PROCESSING row. A table-wide "
                                   "value: every relay of the schema reports the same one.",
                                   TableLabels(schema))),
      held_aggregates(r.AddGauge("outbox_held_aggregates",
                                 "Aggregates whose later events wait behind a FAILED one. A "
                                 "table-wide value: every relay of the schema reports the same one.",
                                 TableLabels(schema))),
      ready(r.AddGauge("outbox_relay_ready", "1 when database and broker are reachable.",
                       TransportLabels(transport))),
      batch_size(r.AddHistogram("outbox_relay_claim_batch_rows", "Rows per non-empty claim.",
                                kBatchBuckets, TransportLabels(transport))),
      commit_to_ack(r.AddHistogram("outbox_relay_commit_to_ack_seconds",
                                   "Time from enqueue to broker ack: the row's age at claim on the "
                                   "database's clock plus claim-to-ack on the relay's clock (cdc: "
                                   "from the commit's time to the broker's ack, on the relay's "
                                   "clock).",
                                   kLatencyBuckets, TransportLabels(transport))),
      cdc_streaming(r.AddGauge("outbox_cdc_streaming",
                               "1 while this relay reads the replication slot (cdc).")),
      cdc_streamed(r.AddCounter("outbox_cdc_events_decoded_total",
                                "Outbox rows the change stream decoded (cdc).")),
      cdc_left_to_sweeper(r.AddCounter(
          "outbox_cdc_events_left_to_sweeper_total",
          "Decoded rows the stream did not publish: in flight elsewhere, FAILED, waiting "
          "for a retry or behind an earlier unsent event (the sweeper finishes them).")),
      cdc_restarts(r.AddCounter("outbox_cdc_stream_restarts_total",
                                "Times the change stream was reopened after an error.")),
      cdc_slot_created(r.AddCounter("outbox_cdc_slot_created_total",
                                    "Replication slots this relay created (first start, or "
                                    "after the slot was lost or dropped).")),
      cdc_wal_cap_stops(r.AddCounter("outbox_cdc_wal_cap_stops_total",
                                     "Times streaming stopped and the slot was dropped because "
                                     "it retained more than cdc.max_retained_wal_bytes.")),
      cdc_retained_wal(r.AddGauge("outbox_cdc_slot_retained_wal_bytes",
                                  "WAL the replication slot keeps from being recycled.")),
      cdc_lag(r.AddGauge("outbox_cdc_lag_seconds",
                         "Database time since the point up to which the stream has settled "
                         "every commit.")),
      cdc_confirmed_lsn(r.AddGauge("outbox_cdc_confirmed_lsn_bytes",
                                   "The slot position this relay last confirmed (a WAL byte "
                                   "position).")),
      build_info(r.AddGauge("outbox_build_info", "Always 1; the version of outbox this relay runs.",
                            "version=\"" OUTBOX_VERSION_STRING "\"")) {
  build_info.Set(1);
}

namespace relay_internal {

void RecordPublish(RelayMetrics& metrics, Logger& logger, const std::string& who,
                   const std::string& peer, std::span<const ClaimedEvent> events, std::span<const PublishResult> results,
                   const Plan& plan, std::chrono::steady_clock::duration claim_to_ack,
                   bool* logged_outage) {
  for (std::size_t i = 0; i < events.size(); ++i) {
    if (results[i].outcome == PublishOutcome::kAcked) {
      // Age at claim by the database's clock + claim-to-ack by ours: each
      // difference is taken on one clock, so host clock skew does not enter.
      metrics.commit_to_ack.Observe(
          std::chrono::duration<double>(events[i].age_at_claim + claim_to_ack)
              .count());
    }
  }
  metrics.published.Inc(plan.sent.size() + plan.held_back);
  metrics.publish_retryable.Inc(plan.retryable);
  metrics.publish_fatal.Inc(plan.fatal);
  metrics.not_sent.Inc(plan.not_sent);
  if (plan.outage) {
    metrics.outage_batches.Inc();
    if (!*logged_outage) {
      logger.Warn(peer + " unreachable for a whole batch; workers back off together, "
                   "attempts are not counted",
                   {{"worker", who}, {"batch", std::to_string(events.size())},
                    {"error", results.empty() ? "" : results.front().error}});
      *logged_outage = true;
    }
  } else if (plan.fatal > 0 || plan.retryable > 0) {
    const PublishResult* first = nullptr;
    for (const auto& r : results) {
      if (r.outcome == PublishOutcome::kRetryable || r.outcome == PublishOutcome::kFatal) {
        first = &r;
        break;
      }
    }
    logger.Warn("publish failures in batch",
                 {{"worker", who},
                  {"batch", std::to_string(events.size())},
                  {"retriable", std::to_string(plan.retryable)},
                  {"fatal", std::to_string(plan.fatal)},
                  {"not_sent", std::to_string(plan.not_sent)},
                  {"first_error", first ? first->error : ""}});
  }
  if (plan.held_back > 0) {
    // The broker wrote an event before an earlier one of its aggregate (e.g.
    // librdkafka timed the earlier one out in its queue while the broker was
    // away, then sent the later one: INTRODUCTION.md, "Message timeout
    // considerations"). The relay publishes it again after the earlier one,
    // but the topic, and a consumer, may see it first.
    metrics.acked_out_of_order.Inc(plan.held_back);
    std::set<std::pair<std::string, std::string>> unacked;
    std::string example;
    for (std::size_t i = 0; i < events.size() && example.empty(); ++i) {
      const auto key = std::make_pair(events[i].event.aggregate_type, events[i].event.aggregate_id);
      if (results[i].outcome != PublishOutcome::kAcked) {
        unacked.insert(key);
      } else if (unacked.count(key)) {
        example = key.first + "/" + key.second + " seq " + std::to_string(events[i].ticket.seq);
      }
    }
    logger.Error("events acked before an earlier event of their aggregate: the topic holds them out "
                 "of order (they are published again after it)",
                 {{"worker", who}, {"events", std::to_string(plan.held_back)}, {"first", example}});
  }
  if (!plan.outage && plan.sent.size() + plan.held_back > 0 && *logged_outage) {
    logger.Info(peer + " reachable again", {{"worker", who}});
    *logged_outage = false;
  }
}

}  // namespace relay_internal

Status ValidateRelayOptions(const RelayOptions& o) {
  auto bad = [](const std::string& key, const std::string& why) {
    return Status::InvalidArgument("relay." + key + " " + why);
  };
  if (o.relay_id.empty()) return bad("id", "must not be empty");
  if (o.workers < 1 || o.workers > 64) return bad("workers", "must be 1..64");
  if (o.batch_size < 1 || o.batch_size > 10000) return bad("batch_size", "must be 1..10000");
  if (o.batch_bytes < 1) return bad("batch_bytes", "must be >= 1");
  if (o.max_attempts < 1) return bad("max_attempts", "must be >= 1");
  if (o.backoff_base.count() < 1) return bad("backoff_base_ms", "must be >= 1");
  if (o.backoff_max < o.backoff_base) return bad("backoff_max_ms", "must be >= backoff_base_ms");
  // Written so that NaN fails too.
  if (!(o.backoff_jitter >= 0 && o.backoff_jitter <= 1)) return bad("backoff_jitter", "must be 0..1");
  if (o.poll_min.count() < 1) return bad("poll_min_ms", "must be >= 1");
  if (o.poll_max < o.poll_min) return bad("poll_max_ms", "must be >= poll_min_ms");
  if (o.poll_hot.count() < 0) return bad("poll_hot_ms", "must be >= 0");
  if (o.db_retry_max.count() < 1) return bad("db_retry_max_ms", "must be >= 1");
  if (o.purge_batch < 1) return bad("purge_batch", "must be >= 1");
  if (o.purge_interval.count() < 1) return bad("purge_interval_s", "must be >= 1");
  if (o.stats_interval.count() < 100) return bad("stats_interval_ms", "must be >= 100");
  if (o.source == RelaySource::kCdc) {
    auto cdc = [](const std::string& key, const std::string& why) {
      return Status::InvalidArgument("cdc." + key + " " + why);
    };
    if (o.cdc.slot.empty()) return cdc("slot", "must not be empty");
    if (o.cdc.batch_size < 1 || o.cdc.batch_size > 100000) return cdc("batch_size", "must be 1..100000");
    if (o.cdc.status_interval.count() < 10) return cdc("status_interval_ms", "must be >= 10");
    if (o.cdc.sweep_after.count() < 1) return cdc("sweep_after_ms", "must be >= 1");
    if (o.cdc.stream_stale_after <= o.cdc.status_interval) {
      return cdc("stream_stale_after_ms", "must be > cdc.status_interval_ms");
    }
    if (o.cdc.standby_retry.count() < 1) return cdc("standby_retry_ms", "must be >= 1");
    if (o.cdc.heartbeat_interval.count() < 1) return cdc("heartbeat_interval_ms", "must be >= 1");
    if (o.cdc.max_retained_wal_bytes < 0) return cdc("max_retained_wal_bytes", "must be >= 0");
  }
  return Status::Ok();
}

StoreParts PartsOf(StoreFactory all) {
  StoreParts parts;
  parts.queue = [all]() -> Result<std::unique_ptr<ClaimQueue>> {
    auto s = all();
    if (!s.ok()) return s.status();
    return std::unique_ptr<ClaimQueue>(std::move(s).value());
  };
  parts.view = [all]() -> Result<std::unique_ptr<OutboxView>> {
    auto s = all();
    if (!s.ok()) return s.status();
    return std::unique_ptr<OutboxView>(std::move(s).value());
  };
  parts.ledger = [all]() -> Result<std::unique_ptr<StreamLedger>> {
    auto s = all();
    if (!s.ok()) return s.status();
    return AsLedger(std::move(s).value());
  };
  return parts;
}

Result<std::unique_ptr<Relay>> Relay::Create(RelayOptions options, StoreParts store,
                                             Transport& transport, RelayMetrics& metrics,
                                             Logger& logger) {
  return Create(std::move(options), std::move(store), ChangeSource(), transport, metrics, logger);
}

Result<std::unique_ptr<Relay>> Relay::Create(RelayOptions options, StoreParts store,
                                             ChangeSource source,
                                             Transport& transport, RelayMetrics& metrics,
                                             Logger& logger) {
  OUTBOX_RETURN_IF_ERROR(ValidateRelayOptions(options));
  if (!store.queue) return Status::InvalidArgument("the relay needs a store's claim queue");
  if (options.source == RelaySource::kCdc && (!source.open || !store.ledger)) {
    return Status::InvalidArgument("relay.source = cdc needs a change stream (this store has none)");
  }
  if (options.lease <= transport.MaxPublishTime()) {
    return Status::InvalidArgument(
        "relay.lease_ms (" + std::to_string(options.lease.count()) +
        ") must exceed the longest publish, " + std::to_string(transport.MaxPublishTime().count()) +
        " ms = " + transport.DescribeMaxPublishTime() +
        ", or a message could outlive its lease and be published again by another relay");
  }
  return std::unique_ptr<Relay>(new Relay(std::move(options), std::move(store),
                                          std::move(source), transport, metrics, logger));
}

Relay::Relay(RelayOptions o, StoreParts s, ChangeSource c, Transport& t, RelayMetrics& m,
             Logger& l)
    : options_(std::move(o)),
      store_(std::move(s)),
      clock_(options_.clock != nullptr ? *options_.clock : SystemClock()),
      source_(std::move(c)),
      transport_(t),
      metrics_(m),
      logger_(l),
      beat_slots_(options_.workers + 3),
      beats_(std::make_unique<std::atomic<std::int64_t>[]>(static_cast<std::size_t>(beat_slots_))),
      idle_interval_(options_.poll_min) {
  // Allocated here, never replaced: Alive() may run on another thread at any time.
  for (int i = 0; i < beat_slots_; ++i) beats_[static_cast<std::size_t>(i)] = kIdleBeat;
}

Relay::~Relay() {
  RequestStop();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void Relay::RequestStop() {
  stopping_ = true;
  MutexLock lock(mu_);
  cv_.notify_all();
}

bool Relay::Ready() const {
  return db_ok_housekeeping_ && db_ok_workers_ > 0 && transport_.Healthy() && !broker_down_;
}

std::string Relay::NotReadyReason() const {
  std::string why;
  if (!db_ok_housekeeping_ || db_ok_workers_ == 0) {
    MutexLock lock(mu_);
    const std::string& refused = db_ok_workers_ == 0 && !refused_by_workers_.empty() ? refused_by_workers_
                                                                                     : refused_by_housekeeping_;
    why = !refused.empty() ? refused
          : db_failed_once_ ? "database unreachable"
                            : "starting (waiting for the database's first answer)";
  }
  if (!transport_.Healthy()) {
    why += (why.empty() ? "" : "; ") + transport_.UnhealthyReason();
  } else if (broker_down_) {
    MutexLock lock(mu_);
    why += (why.empty() ? "" : "; ") + transport_.PeerName() +
           " unreachable: no acknowledgement for a whole batch (" + broker_down_error_ + ")";
  }
  return "not ready: " + (why.empty() ? std::string("starting") : why) + "\n";
}

bool Relay::NoteDbError(const Status& st, std::string* refusal) {
  db_failed_once_ = true;  // before the count: a reader of the count sees the flag
  metrics_.db_errors.Inc();
  // The outbox's own schema or functions missing (42P01, 42883, 3F000): a
  // configuration error too, named on /readyz, but not a refused role.
  if (st.code() == Code::kFailedPrecondition && st.message().find("outboxctl migrate") != std::string::npos) {
    if (refusal) {
      MutexLock lock(mu_);
      *refusal = "the outbox schema is missing or not migrated (run outbox-relay --migrate or "
                 "outboxctl migrate; retrying): " + st.message().substr(0, st.message().find('\n'));
    }
    return false;
  }
  if (st.code() != Code::kPermissionDenied) return false;
  metrics_.db_permission_denied.Inc();
  if (refusal) {
    MutexLock lock(mu_);
    *refusal = "the database refused the relay's role (a configuration error, not an outage; retrying): " +
               st.message();
  }
  return true;
}

void Relay::ClearRefusal(std::string* refusal) {
  MutexLock lock(mu_);
  refusal->clear();
}

void Relay::Beat(int slot) {
  beats_[static_cast<std::size_t>(slot)].store(clock_.Now().time_since_epoch().count(),
                                               std::memory_order_relaxed);
}

bool Relay::Alive(milliseconds max_silence) const {
  const auto now = clock_.Now().time_since_epoch().count();
  const auto limit = std::chrono::duration_cast<Steady::duration>(max_silence).count();
  for (int i = 0; i < beat_slots_; ++i) {
    const std::int64_t b = beats_[static_cast<std::size_t>(i)].load(std::memory_order_relaxed);
    if (b != kIdleBeat && now - b > limit) return false;
  }
  return true;
}

// The condition variable's waits are loops here (not predicate lambdas) so
// that the lock annotations see every guarded read under mu_.
void Relay::WaitForWake(MutexLock& lock, std::uint64_t seen, Steady::time_point until) {
  while (!stopping_ && wake_seq_ == seen) {
    if (clock_.WaitUntil(cv_, lock.native(), until) == std::cv_status::timeout) return;
  }
}

bool Relay::SleepFor(milliseconds d) {
  MutexLock lock(mu_);
  WaitForWake(lock, wake_seq_, clock_.Now() + d);
  return !stopping_;
}

void Relay::IdleWait(int index, milliseconds claim_cost, bool ran_out) {
  MutexLock lock(mu_);
  const std::uint64_t seen = wake_seq_;
  if (ran_out) {
    // More may follow soon; and while this worker's own claims caught every
    // event, the poller found none and may have backed off. Hot again; if the
    // poller has backed off, this worker polls next, at poll_min (the poller
    // claims once more when its wait ends, then waits as the others do).
    idle_found_at_ = clock_.Now();
    if (idle_interval_ > options_.poll_min) {
      idle_interval_ = options_.poll_min;
      idle_poller_ = index;
    }
  }
  for (;;) {
    const auto now = clock_.Now();
    if (idle_poller_ < 0 || idle_poller_ == index) {
      idle_poller_ = index;  // this worker polls for the idle ones
      const milliseconds d = std::max(idle_interval_, claim_cost);
      if (now - idle_found_at_ >= options_.poll_hot) {
        idle_interval_ = std::min(idle_interval_ * 2, options_.poll_max);
      }
      WaitForWake(lock, seen, now + d);
      return;
    }
    // Another worker polls; wait for a notification, for the poller's role to
    // be free (an idle worker found work, or the poller left: the first waiter
    // to see it polls next, after the interval, not at once), or (a safety
    // net) a few poll intervals and at least a second (with poll_max 20 ms,
    // 4 x poll_max would make each waiting worker claim 12 times a second).
    const std::uint64_t handovers = handover_seq_;
    const auto until = now + std::max(options_.poll_max * 4, kIdleSafetyNetMin);
    while (!stopping_ && wake_seq_ == seen && handover_seq_ == handovers) {
      if (clock_.WaitUntil(cv_, lock.native(), until) == std::cv_status::timeout) return;
    }
    if (stopping_ || wake_seq_ != seen) return;
    claim_cost = milliseconds(0);
  }
}

void Relay::EndIdle(bool full) {
  MutexLock lock(mu_);
  // The poller's role is free, whoever found the work: when a waiting worker
  // found it (its safety net, a notification), the poller may be in a sleep
  // of up to poll_max, and the next poll is due at poll_min.
  idle_poller_ = -1;
  idle_interval_ = options_.poll_min;
  idle_found_at_ = clock_.Now();
  // A full batch may have left more: every idle worker claims now. Else the
  // claim took all there was: one of them takes over the polling.
  if (full) {
    ++wake_seq_;
  } else {
    ++handover_seq_;
  }
  cv_.notify_all();
}

void Relay::LeavePolling(int index) {
  MutexLock lock(mu_);
  if (idle_poller_ != index) return;
  idle_poller_ = -1;
  ++handover_seq_;
  cv_.notify_all();
}

bool Relay::FullBatch(const std::vector<ClaimedEvent>& events) const {
  if (static_cast<int>(events.size()) >= options_.batch_size) return true;
  // The claim stops before a row that would go over batch_bytes; which row
  // that was is not known here, so past half the bound counts as full (a wrong
  // guess costs the idle workers one claim each, or the next event a poll).
  std::int64_t bytes = 0;
  for (const auto& e : events) bytes += static_cast<std::int64_t>(e.event.payload.size());
  return bytes * 2 >= options_.batch_bytes;
}

milliseconds Relay::NextOutageDelayLocked() const {
  if (outage_delay_.count() == 0) return options_.backoff_base;
  return std::min(outage_delay_ * 2, options_.backoff_max);
}

milliseconds Relay::NextOutageDelay() const {
  MutexLock lock(mu_);
  return NextOutageDelayLocked();
}

bool Relay::BrokerTurn(bool* probing) {
  MutexLock lock(mu_);
  if (outage_delay_.count() == 0) return true;
  const auto now = clock_.Now();
  if (now >= outage_until_ && !probe_in_flight_) {
    probe_in_flight_ = true;
    *probing = true;
    return true;
  }
  const auto until = probe_in_flight_ ? now + options_.poll_max : outage_until_;
  while (!stopping_ && outage_delay_.count() != 0) {
    if (clock_.WaitUntil(cv_, lock.native(), until) == std::cv_status::timeout) break;
  }
  return false;
}

void Relay::EndBrokerProbe() {
  MutexLock lock(mu_);
  probe_in_flight_ = false;
  cv_.notify_all();
}

void Relay::EndBrokerRound(bool outage, milliseconds at_least, bool broker_answered,
                           bool probing, std::string_view error) {
  MutexLock lock(mu_);
  if (probing) probe_in_flight_ = false;
  if (outage) {
    broker_down_error_ = error.empty() ? "no answer" : std::string(error.substr(0, 500));
    broker_down_ = true;
    const milliseconds next = NextOutageDelayLocked();
    // The doubling goes on from `next`; a server's Retry-After only moves this
    // outage's end.
    const auto until = clock_.Now() + std::max(next, at_least);
    // Several workers may report the same outage at once: the backoff only
    // ever moves later, it is not shortened by a report that started earlier.
    if (until > outage_until_) {
      outage_delay_ = next;
      outage_until_ = until;
    }
  } else {
    // Any batch that is not an outage got an answer (an ack, a refusal).
    if (broker_answered) outage_delay_ = milliseconds(0);
    broker_down_ = false;
  }
  cv_.notify_all();
}

void Relay::ListenLoop() {
  std::unique_ptr<ClaimQueue> store;
  milliseconds backoff{200};
  while (!stopping_) {
    Beat(ListenSlot());
    if (!store) {
      auto s = store_.queue();
      if (!s.ok()) {
        SleepFor(backoff);
        backoff = std::min(backoff * 2, options_.db_retry_max);
        continue;
      }
      store = std::move(s).value();
    }
    auto woken = store->WaitForWork(milliseconds(500));
    if (!woken.ok()) {
      store.reset();  // reconnect (and LISTEN again) after a pause
      SleepFor(backoff);
      backoff = std::min(backoff * 2, options_.db_retry_max);
      continue;
    }
    backoff = milliseconds(200);
    if (*woken) {
      MutexLock lock(mu_);
      ++wake_seq_;
      cv_.notify_all();
    }
  }
}

Status Relay::Run() {
  const bool cdc = options_.source == RelaySource::kCdc;
  logger_.Info("relay starting", {{"relay_id", options_.relay_id},
                                  {"source", cdc ? "cdc" : "poll"},
                                  {"workers", std::to_string(options_.workers)},
                                  {"batch_size", std::to_string(options_.batch_size)},
                                  {"ordered", options_.ordered ? "true" : "false"}});
  auto spawn = [&](int slot, auto fn) {
    {
      MutexLock lock(mu_);
      ++running_;
    }
    Beat(slot);
    threads_.emplace_back([this, slot, fn] {
      fn();
      beats_[static_cast<std::size_t>(slot)] = kIdleBeat;
      MutexLock lock(mu_);
      --running_;
      cv_.notify_all();
    });
  };
  for (int i = 0; i < options_.workers; ++i) spawn(i, [this, i] { WorkerLoop(i); });
  spawn(HousekeepingSlot(), [this] { HousekeepingLoop(); });
  // In cdc mode new rows come from the stream; notifications would only wake
  // the sweepers for rows they must leave to it.
  if (options_.listen && !cdc) spawn(ListenSlot(), [this] { ListenLoop(); });
  if (cdc) spawn(StreamSlot(), [this] { StreamLoop(); });

  {
    MutexLock lock(mu_);
    while (!stopping_) cv_.wait(lock.native());
    logger_.Info("relay stopping: no new claims; finishing in-flight batches",
                 {{"timeout_ms", std::to_string(options_.shutdown_timeout.count())}});
    const auto deadline = clock_.Now() + options_.shutdown_timeout;
    while (running_ != 0 &&
           clock_.WaitUntil(cv_, lock.native(), deadline) != std::cv_status::timeout) {
    }
    if (running_ != 0) {
      // The threads keep running (they only touch members; ~Relay joins them).
      // The daemon exits the process now: the rows still in flight are safe,
      // their leases expire and another relay takes them.
      return Status::DeadlineExceeded("in-flight batches did not finish within shutdown_timeout");
    }
  }
  for (auto& t : threads_) t.join();
  threads_.clear();
  metrics_.ready.Set(0);
  logger_.Info("relay stopped cleanly");
  return Status::Ok();
}

// One worker's loop state: its name, its random source, and what it last
// logged and waited.
struct Relay::Worker {
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
};

ClaimOptions Relay::WorkerClaimOptions() {
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

void Relay::WorkerDbFailed(Worker& w, const Status& st) {
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

void Relay::WorkerDbSucceeded(Worker& w) {
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
void Relay::WorkerLoop(int index) {
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
               /*ran_out=*/!w.was_idle);
      w.was_idle = true;
      continue;
    }
    if (w.was_idle) EndIdle(FullBatch(claim->events));
    w.was_idle = false;
    PublishAndSettle(w, *store, claim->events, probing, claimed_at);
  }
  if (w.db_ok) --db_ok_workers_;
  MutexLock lock(mu_);
  if (idle_poller_ == index) idle_poller_ = -1;
}

void Relay::PublishAndSettle(Worker& w, ClaimQueue& store, std::vector<ClaimedEvent>& events,
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

bool Relay::ApplyTransition(const std::string& who, const char* what,
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

void Relay::WatchSlot(StreamLedger& ledger, const StoreStats* stats) {
  const CdcOptions& cdc = options_.cdc;
  auto slot = ledger.StreamSlotStatus(cdc.slot);
  if (!slot.ok()) {
    metrics_.db_errors.Inc();
    return;
  }
  metrics_.cdc_retained_wal.Set(static_cast<double>(slot->retained_wal_bytes));
  metrics_.cdc_lag.Set(slot->lag ? static_cast<double>(slot->lag->count()) / 1000.0 : 0.0);
  if (cdc.max_retained_wal_bytes > 0 && slot->exists &&
      slot->retained_wal_bytes > cdc.max_retained_wal_bytes) {
    wal_capped_ = true;  // the streaming relay drops the slot; standbys do not start one
  } else if (wal_capped_ && stats != nullptr && stats->oldest_unsent_age < cdc.sweep_after * 2) {
    // The sweepers have drained what piled up: stream again (a new slot).
    logger_.Info("outbox drained by polling after the WAL cap; streaming starts again",
                 {{"slot", cdc.slot},
                  {"oldest_unsent_ms", std::to_string(stats->oldest_unsent_age.count())}});
    wal_capped_ = false;
  }
}

std::optional<StoreStats> Relay::RefreshGauges(OutboxView& view,
                                               Steady::time_point& next_stats) {
  if (clock_.Now() < next_stats) return std::nullopt;
  const auto started = clock_.Now();
  auto st = view.Stats();
  // Paced by its cost only when it answered: a failure (which may have taken a
  // timeout's length) is tried again next round, so that readiness follows the
  // database; and while the WAL cap holds, every round reads the oldest age
  // that lifts it.
  next_stats = st.ok() && !wal_capped_
                   ? relay_internal::NextStatsAt(options_, started, clock_.Now() - started)
                   : started + options_.stats_interval;
  if (!st.ok()) {
    (void)NoteDbError(st.status(), &refused_by_housekeeping_);
    db_ok_housekeeping_ = false;
    return std::nullopt;
  }
  if (!db_ok_housekeeping_) ClearRefusal(&refused_by_housekeeping_);
  db_ok_housekeeping_ = true;
  metrics_.pending.Set(static_cast<double>(st->pending));
  metrics_.processing.Set(static_cast<double>(st->processing));
  metrics_.failed_rows.Set(static_cast<double>(st->failed));
  metrics_.skipped_rows.Set(static_cast<double>(st->skipped));
  metrics_.oldest_unsent_age.Set(static_cast<double>(st->oldest_unsent_age.count()) / 1000.0);
  metrics_.held_aggregates.Set(static_cast<double>(st->held_aggregates));
  return *st;
}

void Relay::HousekeepingLoop() {
  std::unique_ptr<OutboxView> store;
  std::unique_ptr<StreamLedger> ledger;  // cdc: the slot's gauges and the WAL cap
  auto next_purge = clock_.Now() + std::chrono::seconds(5);
  auto next_stats = clock_.Now();
  // cdc: the slot's gauges and the WAL cap, on the ledger's own session (one
  // more than polling needs: the view's store may be another database's part).
  auto watch_slot = [&](const StoreStats* stats) {
    if (options_.source != RelaySource::kCdc || !store_.ledger) return;
    if (!ledger) {
      auto l = store_.ledger();
      if (!l.ok()) {
        (void)NoteDbError(l.status());
        return;
      }
      ledger = std::move(l).value();
    }
    WatchSlot(*ledger, stats);
  };
  while (!stopping_) {
    Beat(HousekeepingSlot());
    if (!store_.view) {  // no view (engine tests): no gauges, no purge
      db_ok_housekeeping_ = true;
      watch_slot(nullptr);
      metrics_.ready.Set(Ready() ? 1 : 0);
      SleepFor(options_.stats_interval);
      continue;
    }
    if (!store) {
      auto s = store_.view();
      if (!s.ok()) {
        (void)NoteDbError(s.status(), &refused_by_housekeeping_);
        db_ok_housekeeping_ = false;
        metrics_.ready.Set(0);
        SleepFor(options_.stats_interval);
        continue;
      }
      store = std::move(s).value();
    }
    const std::optional<StoreStats> st = RefreshGauges(*store, next_stats);
    watch_slot(st ? &*st : nullptr);
    // Purge does not depend on Stats. Each round deletes batches for at most
    // kPurgeBudget; if rows are left it goes on next round (every stats
    // interval) instead of waiting a whole purge_interval, so it keeps up with
    // any ingest the database can take.
    if (clock_.Now() >= next_purge) {
      constexpr auto kPurgeBudget = std::chrono::seconds(1);
      const auto stop_at = clock_.Now() + kPurgeBudget;
      std::int64_t total = 0;
      bool more = false;
      while (!stopping_) {
        auto p = store->PurgeSent(options_.sent_retention, options_.purge_batch);
        if (!p.ok()) {
          if (NoteDbError(p.status())) {
            logger_.Error("purge refused: the relay's role lacks DELETE on the outbox table; SENT "
                          "rows are kept until it is granted",
                          {{"error", p.status().ToString()}});
          }
          break;
        }
        total += *p;
        metrics_.purged.Inc(static_cast<std::uint64_t>(*p));
        if (*p < options_.purge_batch) break;
        if (clock_.Now() >= stop_at) {
          more = true;
          break;
        }
      }
      next_purge = more ? clock_.Now() : clock_.Now() + options_.purge_interval;
      if (total > 0) logger_.Log(LogLevel::kDebug, "purged sent rows", {{"rows", std::to_string(total)}});
    }
    metrics_.ready.Set(Ready() ? 1 : 0);
    SleepFor(options_.stats_interval);
  }
}

}  // namespace outbox
