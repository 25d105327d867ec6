// RelayMetrics (the outbox_relay_* names, docs/relay.md) and a published
// batch's metrics and log lines (relay_internal::RecordPublish).
#include "outbox/relay.h"
#include "outbox/version.h"

#include <set>

#include "plan.h"

namespace outbox {
namespace {

const std::vector<double> kBatchBuckets = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000};
const std::vector<double> kLatencyBuckets = {0.001, 0.0025, 0.005, 0.01,  0.02, 0.05, 0.1,
                                             0.25,  0.5,    1,     2.5,   5,    10,   30, 60};

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

}  // namespace outbox
