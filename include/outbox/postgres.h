// PostgreSQL outbox: the Store implementation and enqueue into a caller's
// transaction.
//
// Enqueue works on the caller's own libpq connection, inside the transaction the
// caller has opened; it never commits, never opens a connection of its own and
// makes no network call other than to that database. The same logic is available
// to services in any language as the SQL function <schema>.enqueue(...) (see
// README.md).
//
// This header does not include libpq: the connection is the opaque `pg_conn`
// that libpq's PGconn is a typedef of.
//
// Thread-safety: the store is not safe for concurrent use (see store.h). Enqueue
// functions are as thread-safe as the connection passed to them (libpq: one
// thread per connection at a time).
#ifndef OUTBOX_POSTGRES_H_
#define OUTBOX_POSTGRES_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "outbox/change_stream.h"
#include "outbox/event.h"
#include "outbox/status.h"
#include "outbox/store.h"

struct pg_conn;  // libpq's PGconn

namespace outbox {

struct PostgresStoreOptions {
  std::string conninfo;         // "postgresql://user@host:port/db" or key=value form
  std::string schema = "outbox";  // validated as an identifier: [a-z_][a-z0-9_]{0,62}
  SentMode sent_mode = SentMode::kUpdate;
  // Statement timeout for the store's own session, so a stuck server surfaces as
  // a retryable error instead of a hung relay.
  std::chrono::milliseconds statement_timeout{30'000};
  std::chrono::seconds connect_timeout{5};
  // Which store to open; kDetect reads the schema (one query at open).
  StoreLayout layout = StoreLayout::kDetect;
  // The log layout only: a page end whose events were all sent (none retried,
  // failed or held) writes its slots' positions at most this often. Between
  // writes the positions are kept in the store: its own claims read them, and
  // it writes them at its first claim or page end after this interval, at a
  // claim that finds nothing (idle), before its own reads of positions (stats,
  // list, trace, skip, purge; not while a page is in flight), before its lease
  // renewals and give-backs, and when it is destroyed. Page ends defer only
  // early in the lease (the interval ends before half of it), never in a slot
  // counting restarts, so a value of half the lease or more writes every page
  // end. A process killed in between has those events published again (at
  // least once); others (outboxctl, the view `<schema>.outbox`) see them sent
  // that much later, or until the next round when a round runs longer. 10 ms:
  // at 3,000 events/s under a held snapshot a write per round (0.07 row writes
  // per event) misses issue 42's 0.05, and 10 ms reaches 0.03 (docs/benchmarks.md).
  // 0: every page end writes.
  std::chrono::milliseconds log_position_every{10};
};

// Opens a session (connects at once). A failed connection is Unavailable.
// After a connection loss each call reconnects first; if that fails the call
// returns Unavailable and the caller backs off.
Result<std::unique_ptr<Store>> OpenPostgresStore(const PostgresStoreOptions& options);

// What `ConvertPostgresRowsToLog` did: whether the schema held a row store (if
// not, nothing was done), and where its rows went.
struct LogConversion {
  bool converted = false;
  std::int64_t into_log = 0;  // unsent, never attempted: read from the log
  std::int64_t retries = 0;   // unsent, attempted (PENDING with attempts, PROCESSING): RETRY copies
  std::int64_t terminal = 0;  // FAILED and SKIPPED: copies, listed as before
  std::int64_t sent = 0;      // SENT: copies kept for trace until rotation passes them
  std::vector<int> applied;   // the log set's versions installed
};

// Converts the row store in `options.schema` into the log (issue 42, step 7:
// `outboxctl migrate --layout log` on a row schema; docs/design.md,
// "Converting a row store to the log"). First brings the row store to its
// last version, then in one transaction sets it aside, installs the log set
// and moves every row, keeping its id, its seq and its aggregate's order; a
// failure changes nothing. Waits up to 30 s for the producers and relays
// writing the table, which then fail their statement: stop the relays first.
// FailedPrecondition, changing nothing, while a change stream reads the
// schema (relay.source = cdc is not on the log yet). `layout` is ignored.
Result<LogConversion> ConvertPostgresRowsToLog(const PostgresStoreOptions& options);

// The log's slots (issue 42): an aggregate's events hash into one of `count`
// slots; each slot is read by one relay at a time under a lease.
struct LogSlot {
  int slot = 0;
  std::string owner;       // the relay reading it; empty when free
  std::string expires_at;  // its lease's expiry (database clock, text)
  bool retired = false;    // beyond the count: kept for its position, never leased
};
struct LogSlots {
  int count = 0;
  std::vector<LogSlot> slots;
};

// The slots of the log in `options.schema` (FailedPrecondition when it holds no log).
Result<LogSlots> ReadPostgresLogSlots(const PostgresStoreOptions& options);

// Changes the log's slot count to `count` (1-1024; `outboxctl slots --set`).
// An aggregate's slot changes with the count, so the change waits until every
// slot has passed every event and no retry is in flight: it locks the log's
// settings (up to `drain_timeout` for the lock; producers' enqueue() waits from
// then on, up to `drain_timeout` more),
// waits for the relays to publish what remains, then changes the count, gives
// every slot back (relays lease them again with new tokens: a pause of up to
// a tenth of relay.lease_ms), and moves the open exceptions to their
// aggregates' new slots. When the relays do not drain in time (one is down,
// the broker is out): FailedPrecondition naming how many events remain, and
// nothing changes. Lowering the count keeps the retired slots' rows (their
// positions say their events were published, which rotation reads).
// Returns the count before.
Result<int> SetPostgresLogSlots(const PostgresStoreOptions& options, int count,
                                std::chrono::milliseconds drain_timeout);

// Compares the schema's tables, columns, constraints, indexes, functions and
// sequences with what its recorded migrations install, built in a scratch
// schema inside a transaction that is rolled back: nothing changes. Needs the
// CREATE privilege on the database (as `outboxctl migrate` does). A schema
// never migrated is FailedPrecondition. `versions_only`: the versions tables
// alone (no scratch schema, no privilege beyond reading them); drift stays
// empty. The relay's start-up check (a schema from a newer release).
Result<SchemaCheck> CheckPostgresSchema(const PostgresStoreOptions& options,
                                        bool versions_only = false);

// Change data capture over PostgreSQL logical replication (pgoutput, binary
// mode; PostgreSQL 14 or later). The role needs REPLICATION (or superuser) and
// the server wal_level = logical; outbox migration 5 creates the publication.
struct PostgresChangeStreamOptions {
  std::string conninfo;           // the database's (replication=database is added)
  std::string schema = "outbox";  // the outbox table's schema
  std::string slot;               // "" = outbox_<schema>
  std::string publication;        // "" = outbox_<schema> (created by migration 5)
  std::chrono::seconds connect_timeout{5};
};

// Connects, creates the slot when missing (or when it was invalidated), and
// starts streaming from the slot's confirmed position. See ChangeStreamFactory
// for the errors.
Result<std::unique_ptr<ChangeStream>> OpenPostgresChangeStream(
    const PostgresChangeStreamOptions& options);

// Drops the slot so that it stops pinning WAL. Fenced while a reader is
// attached; OK when there is no such slot.
Status DropPostgresSlot(const PostgresChangeStreamOptions& options);

// The relay's change source on PostgreSQL: OpenPostgresChangeStream and
// DropPostgresSlot with these options.
ChangeSource PostgresChangeSource(const PostgresChangeStreamOptions& options);

// The slot and publication names for a schema: outbox_<schema>.
std::string DefaultStreamName(const std::string& schema);
// True when `name` may name a slot or publication: [a-z_][a-z0-9_]{0,62}, not
// a reserved word.
bool IsStreamName(const std::string& name);

// OK when `name` is a safe unquoted PostgreSQL identifier for a schema.
Status ValidateSchemaName(const std::string& name);

// The conninfo (URL or key=value form) as key=value pairs with every secret
// (password, sslpassword, ...) replaced by ***, for logs and --print-config.
std::string RedactConninfo(const std::string& conninfo);

struct EnqueueOptions {
  std::string schema = "outbox";
  EventLimits limits;
};

// Inserts `event` inside the caller's open transaction on `conn`.
// REQUIRES: `conn` is connected and inside a transaction block (BEGIN issued);
//           otherwise FailedPrecondition and nothing is sent.
// A contract violation is InvalidArgument and nothing is sent to the server, so
// the caller's transaction stays usable. A server error leaves the transaction
// aborted, as any failed statement does; the caller rolls back.
Result<EnqueueResult> Enqueue(pg_conn* conn, const Event& event,
                              const EnqueueOptions& options = {});

// Same for several events in one round trip (libpq pipeline mode). All events are
// validated before any is sent; results are in input order.
Result<std::vector<EnqueueResult>> EnqueueBatch(pg_conn* conn, std::span<const Event> events,
                                                const EnqueueOptions& options = {});

}  // namespace outbox

#endif  // OUTBOX_POSTGRES_H_
