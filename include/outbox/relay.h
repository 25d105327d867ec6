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

#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "outbox/change_stream.h"
#include "outbox/clock.h"
#include "outbox/log.h"
#include "outbox/metrics.h"
#include "outbox/status.h"
#include "outbox/store.h"
#include "outbox/thread_annotations.h"
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
  // poll_hot, then doubling up to poll_max (see Relay::IdleWait).
  milliseconds poll_min{2};
  // 20 ms: a steady stream of events up to 20 ms apart (50/s and more) is
  // found within poll_min; a slower one lets the poll back off.
  milliseconds poll_hot{20};
  // 20 ms (was 250): the first event after an idle spell waits at most this;
  // an idle relay makes about 55 claims a second, each an empty index probe
  // (docs/benchmarks.md, "Latency with the defaults").
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
  ~Relay();  // stops and joins every thread Run() started

  // Runs until RequestStop(); then stops claiming, finishes in-flight batches
  // (up to shutdown_timeout) and returns. OK, or DeadlineExceeded when batches
  // were still in flight at the deadline: their threads still run, and the
  // destructor waits for them (at most one publish, MaxPublishTime()), so
  // either destroy the Relay or end the process (what outbox-relay does).
  Status Run();

  void RequestStop();
  bool Ready() const;
  // Why Ready() is false, for /readyz: the database's refusal when the role
  // lacks a privilege, else "database or broker unreachable". Safe from any
  // thread.
  std::string NotReadyReason() const;
  // For a watchdog: true when every thread Run() started (workers, housekeeping,
  // listener, stream) has gone round its loop within `max_silence` — a hung
  // thread makes it false; a database or broker outage does not (the loops
  // keep going round while they back off). `max_silence` must exceed the
  // longest a loop legitimately waits: stats_interval, db_retry_max, a
  // statement (the store's statement timeout), a publish (MaxPublishTime).
  // True before Run() and after a thread has finished. Safe from any thread.
  bool Alive(milliseconds max_silence) const;

 private:
  Relay(RelayOptions o, StoreParts s, ChangeSource c, Transport& t, RelayMetrics& m,
        Logger& l);
  struct Worker;  // one worker's loop state (relay.cc)
  void WorkerLoop(int index);
  ClaimOptions WorkerClaimOptions();
  void WorkerDbFailed(Worker& w, const Status& st);
  void WorkerDbSucceeded(Worker& w);
  // Publishes a claimed batch and records its outcomes: marks, metrics, logs.
  void PublishAndSettle(Worker& w, ClaimQueue& store, std::vector<ClaimedEvent>& events,
                        bool probing, std::chrono::steady_clock::time_point claimed_at);
  // A database call failed with `st`: counted (db_errors, and
  // db_permission_denied for a PermissionDenied). Returns true for a
  // PermissionDenied; `*refusal`, when given, then keeps its message for
  // NotReadyReason().
  bool NoteDbError(const Status& st, std::string* refusal = nullptr);
  void ClearRefusal(std::string* refusal);
  class StreamPump;   // the stream thread's state and steps (stream.cc)
  void StreamLoop();  // stream.cc
  // cdc: the slot's gauges, and the WAL cap (sets / clears wal_capped_).
  void WatchSlot(StreamLedger& ledger, const StoreStats* stats);
  // A fenced transition, retried on database errors until `deadline`; false if
  // it could not be recorded (the rows are left to lease expiry / the sweeper).
  bool ApplyTransition(const std::string& who, const char* what,
                       const std::function<Result<TransitionResult>()>& call, std::size_t n,
                       std::string_view fault_point, std::chrono::steady_clock::time_point deadline);
  void HousekeepingLoop();
  // The row-count gauges, when `next_stats` has come (then moved on, paced by
  // the query's cost: relay_internal::NextStatsAt); the stats read, or nullopt
  // when not due or failed. Housekeeping's thread only.
  std::optional<StoreStats> RefreshGauges(OutboxView& view,
                                          std::chrono::steady_clock::time_point& next_stats);
  void ListenLoop();
  // The threads' heartbeats for Alive(): one slot per thread (workers first,
  // then housekeeping, listener, stream), steady-clock nanoseconds of the last
  // loop round, kIdleBeat when not running.
  void Beat(int slot);
  int HousekeepingSlot() const { return options_.workers; }
  int ListenSlot() const { return options_.workers + 1; }
  int StreamSlot() const { return options_.workers + 2; }
  // Sleeps up to `d` or until stop is requested; returns false if stopping.
  bool SleepFor(milliseconds d);
  // Waits on cv_ until stopping, a wake after `seen`, or `until`.
  void WaitForWake(MutexLock& lock, std::uint64_t seen, std::chrono::steady_clock::time_point until)
      OUTBOX_REQUIRES(mu_);
  // Broker outage backoff, shared by all workers. BrokerTurn: true if this
  // worker may claim now (*probing: it is the one worker that tests the broker
  // after a backoff); false after waiting a while (call again).
  bool BrokerTurn(bool* probing);
  void EndBrokerProbe();
  // After a batch: `outage` (no broker at all) extends the shared backoff (to
  // at least `at_least`: a server's Retry-After),
  // `broker_answered` (anything acked) ends it. `error` (the batch's first)
  // is what /readyz says while the outage lasts.
  void EndBrokerRound(bool outage, milliseconds at_least, bool broker_answered, bool probing,
                      std::string_view error);
  milliseconds NextOutageDelay() const;
  milliseconds NextOutageDelayLocked() const OUTBOX_REQUIRES(mu_);
  // Idle polling: one idle worker polls, the others wait until an idle worker
  // finds work (EndIdle: the role is then free, whoever found it), the poller
  // leaves (LeavePolling) or a notification arrives, so idle workers do not
  // each walk the rows held behind an in-flight hot aggregate. The interval is the relay's,
  // not a worker's (a worker taking over the polling must not resume the
  // interval it reached itself): poll_min while an idle worker found work in
  // the last poll_hot, then doubling to poll_max; never shorter than the last
  // empty claim took. An idle worker finding work resets it, and so does a
  // busy worker running out of work (`ran_out`: its claim after a batch came
  // back empty): while the busy workers' own claims caught every event the
  // poller found none and backed off, and the next event waited up to
  // poll_max. A busy worker's next batch does not reset it, so with a hot
  // aggregate in flight (the others' claims walk its held rows) the poller
  // backs off.
  void IdleWait(int index, milliseconds claim_cost, bool ran_out);
  void EndIdle(bool full);
  // A poller that is about to back off (database error, broker outage) hands
  // its role to a waiting worker, so the idle ones are not left unpolled.
  void LeavePolling(int index);
  // True when a claim stopped at batch_size or batch_bytes (more may be due).
  bool FullBatch(const std::vector<ClaimedEvent>& events) const;

  RelayOptions options_;
  StoreParts store_;
  Clock& clock_;  // options_.clock or SystemClock()
  ChangeSource source_;  // empty unless source = kCdc
  Transport& transport_;
  RelayMetrics& metrics_;
  Logger& logger_;
  std::atomic<bool> stopping_{false};
  static constexpr std::int64_t kIdleBeat = INT64_MAX;
  // The shortest safety-net wait of an idle worker that is not the poller.
  static constexpr milliseconds kIdleSafetyNetMin{1'000};
  const int beat_slots_;                                       // workers + 3
  const std::unique_ptr<std::atomic<std::int64_t>[]> beats_;  // made by the constructor
  std::vector<std::thread> threads_;  // started and joined by Run(); ~Relay joins leftovers
  int running_ OUTBOX_GUARDED_BY(mu_) = 0;  // threads not yet finished
  std::atomic<int> db_ok_workers_{0};
  std::atomic<bool> db_ok_housekeeping_{false};
  // Set by the first database error: until then a relay whose first answers
  // have not come yet is "starting", not "database unreachable".
  std::atomic<bool> db_failed_once_{false};
  // cdc: housekeeping saw the slot over max_retained_wal_bytes (set), or the
  // outbox drained after a cap stop (cleared); read by StreamLoop.
  std::atomic<bool> wal_capped_{false};
  // cdc: set once this relay's stream has announced itself (OpenStreamProgress); until then
  // (at most cdc.stream_stale_after) the sweepers wait, so that a starting
  // relay does not claim what its stream is about to publish.
  std::atomic<bool> stream_reported_{false};
  mutable Mutex mu_;
  std::condition_variable cv_;
  std::uint64_t wake_seq_ OUTBOX_GUARDED_BY(mu_) = 0;  // bumped to end idle sleeps (all claim)
  std::uint64_t handover_seq_ OUTBOX_GUARDED_BY(mu_) = 0;  // bumped when the poller's role is free
  // 0 while the broker answers; else the current outage backoff.
  milliseconds outage_delay_ OUTBOX_GUARDED_BY(mu_){0};
  std::chrono::steady_clock::time_point outage_until_ OUTBOX_GUARDED_BY(mu_);
  bool probe_in_flight_ OUTBOX_GUARDED_BY(mu_) = false;
  // Set from the batch the relay classified as an outage until a batch is
  // acked: /readyz answers 503 meanwhile, naming the broker and the error
  // (librdkafka may still see its connections up when the path black-holes).
  std::atomic<bool> broker_down_{false};
  std::string broker_down_error_ OUTBOX_GUARDED_BY(mu_);
  int idle_poller_ OUTBOX_GUARDED_BY(mu_) = -1;  // the worker polling for the idle ones
  milliseconds idle_interval_ OUTBOX_GUARDED_BY(mu_);  // its next sleep (poll_min after work)
  std::chrono::steady_clock::time_point idle_found_at_ OUTBOX_GUARDED_BY(mu_);  // last EndIdle
  // The last PermissionDenied of the workers' claims and of housekeeping's
  // stats, each until that side succeeds again.
  std::string refused_by_workers_ OUTBOX_GUARDED_BY(mu_);
  std::string refused_by_housekeeping_ OUTBOX_GUARDED_BY(mu_);
};

}  // namespace outbox

#endif  // OUTBOX_RELAY_H_
