// Relay: the engine that moves committed outbox rows to the broker.
//
// Each worker loops: claim a batch (lease) -> publish -> wait for the outcomes
// -> fenced transitions: acked rows SENT, retryable ones rescheduled with
// exponential backoff and jitter, fatal ones and those past max_attempts
// FAILED with the error. Several workers (and several relay processes) run at
// once; while one waits for the broker another claims or marks, so neither the
// database nor the broker idles. Order per aggregate holds because the store
// never hands out an event while an earlier one of its aggregate is unsent.
//
// Failure rules (see docs/relay.md): a database or broker outage is retried with
// backoff and logged on state change, never spun on and never turned into
// FAILED rows; a mark-sent that fails after a successful publish is retried and,
// if it cannot be done, left to lease expiry (republish, absorbed by the inbox) —
// the row is never marked FAILED for it.
//
// Thread-safety: Run() blocks the calling thread; RequestStop(), Ready() and
// metrics may be used from any thread (e.g. a signal-watching thread).
//
// Ownership and lifetimes: the Relay borrows the transport, the metrics and the
// logger — all three must outlive it (destroy the Relay first). It keeps the
// StoreParts' factories and owns every part they return: a ClaimQueue per
// worker and one for LISTEN; an OutboxView for housekeeping (gauges, purge)
// and, with source = kCdc, a StreamLedger for housekeeping (the slot's
// gauges) and one plus a ClaimQueue for the stream. A Clock in RelayOptions
// must outlive it too.
#ifndef OUTBOX_RELAY_H_
#define OUTBOX_RELAY_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "outbox/change_stream.h"
#include "outbox/clock.h"
#include "outbox/log.h"
#include "outbox/metrics.h"
#include "outbox/status.h"
#include "outbox/store.h"
#include "outbox/transport.h"

namespace outbox {

using std::chrono::milliseconds;
using std::chrono::seconds;

enum class FailedPolicy {
  kHold,  // later events of an aggregate wait while an earlier one is FAILED (default)
  kPass,  // they go ahead; the FAILED one is replayed or skipped on its own
};

enum class RelaySource {
  kPoll,  // claim rows from the table (default)
  kCdc,   // read the database's log (change stream) + claim what it leaves (sweeper)
};

// relay.source = cdc (docs/relay.md, "CDC"). One relay streams (holds the
// slot); the others stand by and take over when it dies. Every relay sweeps.
struct CdcOptions {
  std::string slot;  // the replication slot (progress rows and its gauges)
  // Rows per stream batch (relay.batch_bytes still bounds its payloads): 2000
  // drained 1.8× faster than 500 (docs/benchmarks.md).
  int batch_size = 2000;
  // Batches whose publish may be in flight at once: the stream reads, checks
  // and publishes batch k+1 while batch k waits for its acks. A row whose
  // aggregate has an earlier row in flight is held by the table's check (that
  // row is still PENDING) until the earlier outcome is recorded, so order per
  // aggregate holds at any depth. 1 = the serial loop, the default: measured
  // at edddc94, 4 drains no faster and has a higher latency (docs/benchmarks.md,
  // "CDC: one batch in flight against four").
  int batches_in_flight = 1;
  // How often the stream confirms its position to the server and records its
  // progress in the table (one row, not per event).
  milliseconds status_interval{1'000};
  // The sweeper takes a row once the stream's settled point is this far past
  // it: rows the stream handed back or never reached. Shorter finishes them
  // sooner; too short and the sweeper races the stream (extra copies only).
  milliseconds sweep_after{5'000};
  // Stream progress older than this counts as no stream: sweepers then poll
  // every due row (the stream is down, lost its slot, or capped).
  milliseconds stream_stale_after{10'000};
  milliseconds standby_retry{1'000};  // a standby tries to take the slot this often
  // Asks the server for its position this often when the outbox is idle, so the
  // slot moves while other tables write WAL — and the sweepers' horizon with it
  // (rows of an idle stream's gaps and replays wait for it: docs/design.md, CDC).
  milliseconds heartbeat_interval{1'000};
  // Retained WAL past which the streaming relay stops streaming, drops the
  // slot (releasing the WAL) and leaves the outbox to the sweepers until they
  // have drained it; then a new slot starts. 0 = no cap.
  std::int64_t max_retained_wal_bytes = std::int64_t{1} << 30;
};

struct RelayOptions {
  // The relay's time (now, sleeps, waits); nullptr: the steady clock. Tests
  // inject a fake one. Must outlive the Relay.
  Clock* clock = nullptr;
  std::string relay_id;  // written into claimed rows; default host:pid (set by the daemon)
  // Concurrent claim->publish->mark loops (and DB sessions). 4 measured best on
  // 2 cores: while two wait for the broker, two claim or mark (docs/benchmarks.md).
  int workers = 4;
  int batch_size = 500;  // rows per claim
  // Payload bytes per claim (at least one row). With 1 MB events and 4 workers
  // the relay holds ~4 x 8 MB of payloads plus copies, not 4 x 500 MB.
  std::int64_t batch_bytes = 8 << 20;
  // Must exceed the transport's MaxPublishTime() so a live relay never loses its
  // rows mid-publish; checked at Create.
  milliseconds lease{60'000};
  int max_attempts = 10;              // claims per event before it ends FAILED
  milliseconds backoff_base{500};     // first retry delay
  milliseconds backoff_max{60'000};   // cap
  double backoff_jitter = 0.2;        // delay drawn from [d*(1-j), d]
  bool ordered = true;                // per-aggregate order (false: publish as claimed)
  FailedPolicy on_failed = FailedPolicy::kHold;
  // Wake idle workers on PostgreSQL notifications (see Store::WaitForWork); the
  // producers opt in with the setting outbox.notify = on. Polling stays the fallback.
  bool listen = true;
  // Idle polling: every poll_min while an idle worker found work in the last
  // poll_hot, then doubling up to poll_max (src/relay/idle_poller.h).
  milliseconds poll_min{2};
  // 20 ms: a steady stream of events up to 20 ms apart (50/s and more) is
  // found within poll_min; a slower one lets the poll back off.
  milliseconds poll_hot{20};
  // 20 ms (was 250): the first event after an idle spell waits at most this;
  // an idle relay makes about 55 claims a second, each an empty index probe
  // (docs/benchmarks.md, "Latency with the defaults"); on a PostgreSQL log
  // schema each worker polls its own slots: about 50 a second per worker.
  milliseconds poll_max{20};
  milliseconds db_retry_max{5'000};   // cap of the backoff on database errors
  milliseconds shutdown_timeout{30'000};  // graceful stop: finish in-flight, then exit
  seconds sent_retention{7 * 24 * 3600};  // purge SENT rows older than this
  seconds purge_interval{60};
  int purge_batch = 1000;
  // Refresh of the row-count gauges (pending, oldest unsent age, ...), and the
  // housekeeping round. The gauges' query counts every unsent row: when it
  // takes longer than 1/20 of this, it runs only every 20 times its last
  // duration, and at least once a minute (so a backlog's gauges take at most
  // 5 % of a database core per relay until the query takes 3 s).
  milliseconds stats_interval{2'000};
  RelaySource source = RelaySource::kPoll;
  CdcOptions cdc;  // source = kCdc only
};

Status ValidateRelayOptions(const RelayOptions& o);

// Opens a new Store (a new database session). Called from several relay
// threads at once — each worker, housekeeping and the listener open their own,
// and again after a connection loss — so it must be safe to call concurrently;
// what it captures must outlive the Relay. An error is retried with backoff.
using StoreFactory = std::function<Result<std::unique_ptr<Store>>()>;

// The parts of a store the relay opens, each a new database session, under the
// same rules as StoreFactory: the claim queue for each worker, the listener
// and the stream's marks; the view for the gauges and the SENT purge
// (housekeeping); the ledger for the change stream and the slot's gauges
// (source = kCdc). An empty `view` means no gauges and no purge; an empty
// `ledger` refuses source = kCdc.
struct StoreParts {
  std::function<Result<std::unique_ptr<ClaimQueue>>()> queue;
  std::function<Result<std::unique_ptr<OutboxView>>()> view;
  std::function<Result<std::unique_ptr<StreamLedger>>()> ledger;
};

// Every part from one store factory (a Store is a queue and a view; its ledger
// is AsLedger's).
StoreParts PartsOf(StoreFactory all);

// The relay's Prometheus metrics (names in docs/relay.md). The table-wide
// gauges (rows by state, oldest unsent age, held aggregates) carry
// schema="`schema`": every relay of one table reports the same values. Every
// outbox_relay_* sample carries transport="`transport`" (the relay's
// relay.transport: "kafka" or "http").
struct RelayMetrics {
  explicit RelayMetrics(MetricsRegistry& r, const std::string& schema = "outbox",
                        const std::string& transport = "kafka");
  Counter& published;
  Counter& publish_retryable;
  Counter& publish_fatal;
  Counter& rescheduled;
  Counter& failed_fatal;
  Counter& failed_max_attempts;
  Counter& failed_expired;  // lease lapsed max_attempts times (e.g. crash loops)
  Counter& fenced;          // transitions refused: another claim holds the row
  Counter& claims;
  Counter& empty_claims;
  Counter& not_sent;
  Counter& acked_out_of_order;  // acked behind an unacked earlier event of its aggregate
  Counter& outage_batches;
  Counter& db_errors;
  Counter& db_permission_denied;  // of db_errors: the role lacks a privilege (configuration)
  Counter& purged;
  Counter& mark_retries;
  Gauge& pending;
  Gauge& processing;
  Gauge& failed_rows;
  Gauge& skipped_rows;
  Gauge& oldest_unsent_age;
  Gauge& held_aggregates;
  Gauge& ready;
  Histogram& batch_size;
  Histogram& commit_to_ack;
  // relay.source = cdc
  Gauge& cdc_streaming;
  Counter& cdc_streamed;
  Counter& cdc_left_to_sweeper;
  Counter& cdc_restarts;
  Counter& cdc_slot_created;
  Counter& cdc_wal_cap_stops;
  Gauge& cdc_retained_wal;
  Gauge& cdc_lag;
  Gauge& cdc_confirmed_lsn;
  Gauge& build_info;  // outbox_build_info{version="..."} 1
};

// The engine (src/relay). Create validates the options and the parts, starts
// nothing; Run starts the threads (one per worker, housekeeping, the listener
// with relay.listen, the stream with source = kCdc) and returns after
// RequestStop. Destroying a Relay stops and joins every thread Run() started.
class Relay {
 public:
  static Result<std::unique_ptr<Relay>> Create(RelayOptions options, StoreParts store,
                                               Transport& transport, RelayMetrics& metrics,
                                               Logger& logger);
  // source = kCdc: also a change stream (one reader per slot; see CdcOptions).
  static Result<std::unique_ptr<Relay>> Create(RelayOptions options, StoreParts store,
                                               ChangeSource source,
                                               Transport& transport, RelayMetrics& metrics,
                                               Logger& logger);
  virtual ~Relay() = default;

  // Runs until RequestStop(); then stops claiming, finishes in-flight batches
  // (up to shutdown_timeout) and returns. OK, or DeadlineExceeded when batches
  // were still in flight at the deadline: their threads still run, and the
  // destructor waits for them (at most one publish, MaxPublishTime()), so
  // either destroy the Relay or end the process (what outbox-relay does).
  virtual Status Run() = 0;

  virtual void RequestStop() = 0;
  virtual bool Ready() const = 0;
  // Why Ready() is false, for /readyz: "starting" until the database's first
  // answer, the database's refusal when the role lacks a privilege, the
  // database or the broker unreachable (naming the error). Safe from any
  // thread.
  virtual std::string NotReadyReason() const = 0;
  // For a watchdog: true when every thread Run() started (workers, housekeeping,
  // listener, stream) has gone round its loop within `max_silence` — a hung
  // thread makes it false; a database or broker outage does not (the loops
  // keep going round while they back off). `max_silence` must exceed the
  // longest a loop legitimately waits: stats_interval, db_retry_max, a
  // statement (the store's statement timeout), a publish (MaxPublishTime).
  // True before Run() and after a thread has finished. Safe from any thread.
  virtual bool Alive(milliseconds max_silence) const = 0;

 protected:
  Relay() = default;
};

}  // namespace outbox

#endif  // OUTBOX_RELAY_H_
