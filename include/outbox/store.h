// The outbox table, whatever database holds it, as each of its users sees it:
// ClaimQueue (the relay's workers), OutboxView (operators, the relay's gauges
// and purge), StreamLedger (a change stream's bookkeeping); a Store is one
// database session's queue and view (and ledger, where the database streams).
//
// Life cycle of a row (see docs/design.md):
//   PENDING --Claim--> PROCESSING --MarkSent--> SENT (or deleted) --Purge--> gone
//                          |  \--Reschedule--> PENDING (due later)
//                          |   \-MarkFailed--> FAILED (kept; Replay -> PENDING,
//                          |                           or operator skip -> SKIPPED, kept)
//                          \-- lease expires --> claimable again (attempts already counted)
//
// Every transition after Claim is fenced by the claim's ticket (row id + lease
// token): it applies only where that claim still holds the row, and the rows
// where it did not apply are reported back, never silently dropped.
//
// Lease expiry and next-attempt times come from the database's clock, never from
// the relay host's, so clock skew between hosts cannot cause a double claim.
//
// Thread-safety: a Store, and each part of one, is NOT safe for concurrent
// use; it owns one database session. Open one per thread. Different Store
// objects (in one process or many) may work on the same table at once — that
// is the point of the claim.
#ifndef OUTBOX_STORE_H_
#define OUTBOX_STORE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "outbox/event.h"
#include "outbox/status.h"

namespace outbox {

enum class RowState { kPending, kProcessing, kSent, kFailed, kSkipped };

// What MarkSent does with a row (every store's option).
enum class SentMode {
  kUpdate,  // keep SENT rows until PurgeSent (dedup keys and `trace` keep working)
  kDelete,  // delete at mark time: fewer writes; dedup only covers unsent rows
};
std::string_view RowStateName(RowState s);  // "PENDING", ...

// How a PostgreSQL schema keeps the outbox (docs/design.md): a row per event
// whose state changes (the row store, every release so far), or the log
// (issue 42: each event written once, progress per page, rotation). A schema
// holds one; kDetect opens what the schema holds (the row store when it holds
// neither yet). MariaDB has the row store only.
enum class StoreLayout { kDetect, kRows, kLog };

// What an enqueue reports (every store's enqueue returns this).
struct EnqueueResult {
  std::string event_id;  // UUID; for a duplicate dedup key, the existing event's id
  bool enqueued = true;  // false: dedup key already present, nothing written
};

// What a schema check found (`outboxctl migrate --check`): the database's
// schema against what this binary's migration files install.
struct SchemaCheck {
  std::vector<int> applied;   // versions recorded in the database
  std::vector<int> pending;   // versions this binary has that the database lacks
  std::vector<int> unknown;   // versions the database has that this binary lacks (newer release)
  // One line per object that differs from what migrations 1..max(applied)
  // install: "function outbox.claim_ordered(...): differs", "index x: missing",
  // "index y: not installed by the migrations". Empty: no drift.
  std::vector<std::string> drift;
};

struct ClaimOptions {
  int batch_size = 500;  // rows per claim round trip
  // Payload bytes per claim: the claim stops before going over (one row always
  // comes, however large). Bounds a worker's memory with large events.
  std::int64_t batch_bytes = 8 << 20;
  // How long the claim holds a row. Must outlast a batch's publish: a relay that
  // has not finished by then loses the rows (its late marks are refused).
  std::chrono::milliseconds lease{30'000};
  std::string owner;  // relay id written to the row, for operators
  // A row already claimed this many times is not handed out again; the claim
  // marks it FAILED instead (this bounds crash loops and failed mark-failed).
  int max_attempts = 10;
  // Ordered: never hand out an event while an earlier event of the same
  // aggregate is unsent (pending, in flight or FAILED). A contiguous run of one
  // aggregate's due events may come in one claim.
  bool ordered = true;
  // Ordered mode only: whether a FAILED event holds back the later events of its
  // aggregate (until an operator replays or skips it). False lets them pass.
  bool failed_holds_aggregate = true;
  // The CDC sweeper (relay.source = cdc): while a change stream's progress is
  // fresher than stream_stale_after, take only rows created more than
  // sweep_margin before the point the stream has settled (rows it handed back,
  // held, or a crash left behind) — never the ones it is about to publish.
  // Without a fresh stream, claim like polling. 0 = no bound (polling).
  std::chrono::milliseconds sweep_margin{0};
  std::chrono::milliseconds stream_stale_after{10'000};
};

struct ClaimResult {
  std::vector<ClaimedEvent> events;  // sorted by ticket.seq; publish these
  // Rows that reached max_attempts without finishing and were marked FAILED by
  // this claim (e.g. the relay kept crashing on them). For metrics and logs.
  std::vector<std::int64_t> expired_to_failed;
};

struct RescheduleItem {
  Ticket ticket;
  std::chrono::milliseconds delay{0};  // next attempt = database now() + delay
  std::string error;                   // why, kept in last_error
  // False gives the claim's attempt back (attempts - 1): the event was not tried
  // (held behind an earlier one of its aggregate) or the broker was unreachable
  // for the whole batch. Attempts count only what implicates the event itself.
  bool attempt_counts = true;
};

struct FailItem {
  Ticket ticket;
  std::string error;
};

// Outcome of a fenced transition over several rows.
struct TransitionResult {
  std::size_t applied = 0;
  std::vector<Ticket> refused;  // another claim holds these rows now (or they are gone)
};

// What the relay's gauges show. Its cost must not grow with the retained SENT
// rows (it runs every few seconds on every relay), so it does not count them.
struct StoreStats {
  std::int64_t pending = 0;     // includes rows waiting for a retry
  std::int64_t processing = 0;  // claimed, lease possibly expired
  std::int64_t failed = 0;
  std::int64_t skipped = 0;     // set aside by an operator (outboxctl skip), kept for audit
  // Age of the oldest PENDING/PROCESSING row (the one alert everyone needs); 0 if none.
  std::chrono::milliseconds oldest_unsent_age{0};
  // Aggregates whose later events wait behind a FAILED one (ordered, hold policy).
  std::int64_t held_aggregates = 0;
};

// Operator operations (outboxctl replay / skip).
struct ReplaySelection {
  std::string event_id;      // "" = any FAILED event (then the filters below)
  std::string aggregate_id;  // "" = any
  std::string event_type;    // "" = any
  bool dry_run = false;
};

struct ReplayCounts {
  std::int64_t matched = 0;   // FAILED rows selected
  std::int64_t replayed = 0;  // back to PENDING (0 on a dry run)
  std::int64_t released = 0;  // PENDING rows behind them whose attempts were reset
  // Age of the oldest matched event (since it was enqueued): consumers must
  // still hold stamps that old (docs/inbox.md, "Stamp retention").
  std::chrono::seconds oldest_age{0};
};

struct SkipRequest {
  std::string event_id;
  std::string by;      // who, for the audit columns
  std::string reason;
  bool dry_run = false;
};

struct SkipResult {
  std::string was;  // the event's state before; "" = no such event
  std::int64_t skipped = 0;
  std::int64_t released = 0;
};

// One outbox row as operators see it (outboxctl list / trace). Times are the
// database's own text ("" when unset): for reading, not for arithmetic.
struct EventRecord {
  std::int64_t seq = 0;
  std::string event_id, aggregate_type, aggregate_id, event_type, status, dedup_key, last_error,
      lease_owner;
  int attempts = 0;
  double age_seconds = 0;  // since enqueue, database clock
  std::string created_at, claimed_at, sent_at, failed_at, skipped_at, skipped_by, skip_reason;
  // Find only (List leaves them empty, payload_bytes -1): the headers as JSON
  // text, the payload's size and its first kPayloadPreviewBytes bytes (raw).
  std::string headers;
  std::int64_t payload_bytes = -1;
  std::string payload_preview;
};
inline constexpr std::int64_t kPayloadPreviewBytes = 4096;

struct ListFilter {
  std::string state;         // "" = any; else a RowStateName, any case
  std::string aggregate_id;  // "" = any
  std::string event_type;    // "" = any
  std::chrono::seconds older_than{0};  // 0 = any age
  int limit = 100;
};

// Change data capture: what the table says about a row the change stream
// decoded (StreamLedger::StreamStates).
struct StreamRowState {
  std::int64_t seq = 0;
  RowState state = RowState::kPending;
  int attempts = 0;
  bool due = true;    // its next-attempt time has come (PENDING rows wait for a retry)
  // The first row of its aggregate in the asked batch, and an earlier event of
  // that aggregate is unsent (in flight, waiting for a retry, or FAILED under
  // the hold policy).
  bool held = false;
  // For that first row: 1 when an earlier event of its aggregate is unsent,
  // not counting the caller's own acked rows, else 0 (held == earlier_unsent
  // > 0). An existence check, not a count: counting walked a held aggregate's
  // whole tail on every check.
  std::int64_t earlier_unsent = 0;
};

// How far a change stream has settled every commit (written about once a second).
struct StreamProgress {
  std::string slot;
  std::string reader;               // relay id
  std::uint64_t confirmed_lsn = 0;  // the slot's confirmed position
  // Database clock, µs since the Unix epoch: every commit before it is settled.
  std::int64_t covered_until_us = 0;
};

struct SlotStatus {
  bool exists = false;
  bool active = false;             // a reader is attached
  std::string wal_status;          // PostgreSQL's: reserved, extended, unreserved, lost
  std::int64_t retained_wal_bytes = 0;  // WAL the slot keeps from being recycled
  // now - covered_until of the slot's progress; nullopt without progress.
  std::optional<std::chrono::milliseconds> lag;
};

// The recent past as operators see it (outboxctl serve): rows sent and failed
// per minute, and the relays that claimed or streamed rows.
struct ActivityMinute {
  std::int64_t minute = 0;  // Unix seconds at the minute's start (database clock)
  std::int64_t sent = 0;
  std::int64_t failed = 0;
};
struct RelaySeen {
  std::string relay;      // relay.id (lease_owner, or a stream's reader)
  std::string role;       // "claims", or "stream <slot>"
  std::string last_seen;  // the database's text: its last claim, or its stream's last report
  std::int64_t rows = 0;  // rows it claimed in the window (a stream: 0, it claims none)
};
struct ActivityReport {
  std::vector<ActivityMinute> minutes;  // oldest first; minutes without activity left out
  std::vector<RelaySeen> relays;
};

// A store's parts, one per audience: the relay's workers take the claim queue,
// operators (outboxctl, the relay's gauges and purge) the view, a change stream
// its ledger. A store implements the parts its database supports; an engine or
// tool takes only the part it calls, and a fake implements only that part.

// The engine's queue: claim due rows, then settle them with the claim's tickets.
// Not thread-safe (one session); one per worker.
class ClaimQueue {
 public:
  virtual ~ClaimQueue() = default;

  // Atomically claims up to batch_size due rows (see ClaimOptions).
  virtual Result<ClaimResult> Claim(const ClaimOptions& options) = 0;

  // Broker acknowledged these: SENT (or deleted, per the store's options).
  virtual Result<TransitionResult> MarkSent(std::span<const Ticket> tickets) = 0;
  // Retryable failure: back to PENDING, due after the item's delay.
  virtual Result<TransitionResult> Reschedule(std::span<const RescheduleItem> items) = 0;
  // Fatal failure or attempts exhausted: FAILED with the error text.
  virtual Result<TransitionResult> MarkFailed(std::span<const FailItem> items) = 0;

  // Blocks up to `timeout` for a sign of new work from enqueue; true if woken,
  // false on timeout. PostgreSQL: LISTEN on channel outbox_<schema>, which
  // enqueue() notifies when the setting outbox.notify is on (docs/relay.md).
  // Relays use it to wake idle workers; polling stays the fallback.
  virtual Result<bool> WaitForWork(std::chrono::milliseconds timeout) = 0;

  // Whether a claim sees every due row (true), or only the share this queue
  // leases (the PostgreSQL log: its slots). A relay's idle workers then each
  // poll their own claims: one worker polling for the others would not see
  // their rows (docs/relay.md, "Wake-up").
  virtual bool ClaimsSeeEveryRow() const { return true; }
};

// The operators' view: read the table, and the few writes an operator makes.
// Not thread-safe (one session).
class OutboxView {
 public:
  virtual ~OutboxView() = default;

  // Deletes at most `batch` SENT rows older than `retention`; returns how many.
  virtual Result<std::int64_t> PurgeSent(std::chrono::seconds retention, int batch) = 0;
  virtual Result<StoreStats> Stats() = 0;
  // SENT rows kept for retention: reads all of them (for operators, not gauges).
  virtual Result<std::int64_t> CountSent() = 0;

  // FAILED rows back to PENDING, due now, attempts reset (the error is kept,
  // prefixed); the PENDING rows held behind them get their attempts reset too,
  // so one replay releases the whole aggregate.
  virtual Result<ReplayCounts> ReplayFailed(const ReplaySelection& selection) = 0;
  // One FAILED or PENDING event set aside for good: SKIPPED, with who, when and
  // why; the rows held behind it get their attempts reset. An event in another
  // state is left as it is (SkipResult::was says which).
  virtual Result<SkipResult> Skip(const SkipRequest& request) = 0;
  // When the oldest event that may still be published was enqueued (PENDING,
  // PROCESSING or FAILED, which replay can publish); nullopt when there is none.
  // Consumers' stamps must reach back to it (docs/inbox.md, "Stamp retention").
  virtual Result<std::optional<std::chrono::system_clock::time_point>> OldestUnsent() = 0;
  // Rows in enqueue order (operators' view; reads, changes nothing).
  virtual Result<std::vector<EventRecord>> List(const ListFilter& filter) = 0;
  // The rows whose event id or dedup key is `key`.
  virtual Result<std::vector<EventRecord>> Find(const std::string& key) = 0;
  // Sent and failed rows per minute over the last `window`, and the relays
  // seen in it (reads; for operators' pages, not for gauges: without an index
  // on the times it reads the table).
  virtual Result<ActivityReport> RecentActivity(std::chrono::seconds window) = 0;
};

// The change stream's ledger (relay.source = cdc): what the table says of
// streamed rows, and how far the stream has settled. A streamed event's
// transitions go through the ClaimQueue's MarkSent / Reschedule / MarkFailed
// with ticket token 0: they apply while the row is PENDING (nobody holds it)
// and are refused otherwise. Only stores that can stream have one (PostgreSQL).
// Not thread-safe (one session).
class StreamLedger {
 public:
  virtual ~StreamLedger() = default;

  // The rows of `seqs` (a change stream's batch, in commit order) as the table
  // has them now; a row missing from the answer is gone (purged or deleted).
  // `acked`: rows the caller published and saw acked whose SENT mark is still
  // on its way; they are not counted in `earlier_unsent` (whatever their state:
  // their copy is in the partition already).
  virtual Result<std::vector<StreamRowState>> StreamStates(std::span<const std::int64_t> seqs,
                                                           bool failed_holds_aggregate,
                                                           std::span<const std::int64_t> acked) = 0;
  virtual Status SaveStreamProgress(const StreamProgress& progress) = 0;
  // Announces a stream that has just opened on `slot`, before it reads: from
  // then on the sweepers keep off the rows it will read. A slot's first
  // announcement counts every commit before now as the sweepers' (the slot did
  // not exist, or had no progress); a later one keeps the recorded progress
  // and marks it fresh under the new reader.
  virtual Status OpenStreamProgress(const std::string& slot, const std::string& reader) = 0;
  // Forgets a slot's progress: the sweepers then poll everything (slot dropped).
  virtual Status DropStreamProgress(const std::string& slot) = 0;
  virtual Result<SlotStatus> StreamSlotStatus(const std::string& slot) = 0;
};

// One database session's store: the queue and the view, and the ledger where
// the database can stream.
//
// Thread-safety: NOT safe for concurrent use; it owns one database session.
// Open one per thread.
class Store : public ClaimQueue, public OutboxView {
 public:
  // Creates or upgrades the schema. Idempotent; safe to run from several
  // processes at once (they serialise). Returns the versions this call
  // applied, in order: empty when the schema was up to date.
  virtual Result<std::vector<int>> Migrate() = 0;
  // The change stream's ledger on this store's session, or nullptr when the
  // database cannot stream. Owned by the store; valid while it lives.
  virtual StreamLedger* Ledger() { return nullptr; }
};

// The store's ledger, owning the store, or FailedPrecondition when this store
// cannot stream ("use relay.source = poll").
Result<std::unique_ptr<StreamLedger>> AsLedger(std::unique_ptr<Store> store);

}  // namespace outbox

#endif  // OUTBOX_STORE_H_
