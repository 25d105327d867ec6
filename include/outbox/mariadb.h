// MariaDB / MySQL outbox: the Store implementation, migrations and enqueue into
// a caller's transaction. (The relay and outboxctl do not take mysql:// URLs
// yet; issue 13.)
//
// Enqueue works on the caller's own libmariadb connection, inside the
// transaction the caller has started; it never commits and never opens a
// connection of its own. The same logic is available to services in any
// language as the procedure outbox_enqueue(...) (docs/design.md, "MariaDB").
// The outbox tables live in the connection's current database.
//
// This header does not include libmariadb: the connection is the opaque
// `st_mysql` that MYSQL is a typedef of.
//
// Thread-safety: the store is not safe for concurrent use (see store.h). Enqueue
// functions are as thread-safe as the connection passed to them (one thread per
// connection at a time).
#ifndef OUTBOX_MARIADB_H_
#define OUTBOX_MARIADB_H_

#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "outbox/event.h"
#include "outbox/status.h"
#include "outbox/store.h"

struct st_mysql;  // libmariadb's MYSQL

namespace outbox {

// True for a mysql:// URL: the tools pick the MariaDB store for it.
bool IsMariaDbUrl(const std::string& url);
// OK when `url` is a well-formed mysql:// URL; else InvalidArgument naming the part.
Status ValidateMariaDbUrl(const std::string& url);
// The URL with its password replaced by ***, for logs and --print-config.
std::string RedactMariaDbUrl(const std::string& url);

struct MariaDbOptions {
  std::string url;  // mysql://user[:password]@host[:port]/database
  std::chrono::seconds connect_timeout{5};
};

// Creates or upgrades the outbox tables and the enqueue procedure in the URL's
// database. Idempotent; concurrent runs serialise on a named lock; a run cut
// short is finished by the next one. A bad URL is InvalidArgument naming the
// part; an unreachable server is Unavailable. Returns the versions this call
// applied, in order (empty: up to date).
Result<std::vector<int>> MigrateMariaDb(const MariaDbOptions& options);

// Compares the database's outbox tables, sequence and procedure with what its
// recorded migrations install, built in a scratch database that is dropped
// afterwards (needs the CREATE and DROP privileges on databases). Nothing in
// the URL's database changes. Never migrated: FailedPrecondition.
// `versions_only`: the versions table alone (no scratch database); drift stays empty.
Result<SchemaCheck> CheckMariaDbSchema(const MariaDbOptions& options, bool versions_only = false);

struct MariaDbStoreOptions {
  std::string url;  // mysql://user[:password]@host[:port]/database
  SentMode sent_mode = SentMode::kUpdate;
  // Bounds each statement (max_statement_time) and each lock wait
  // (innodb_lock_wait_timeout, whole seconds) of the store's session.
  std::chrono::milliseconds statement_timeout{30'000};
  std::chrono::seconds connect_timeout{5};
};

// Opens a session (connects at once). A failed connection is Unavailable; after
// a connection loss the next call reconnects first. MariaDB has no LISTEN:
// WaitForWork sleeps its timeout and reports no wake-up.
Result<std::unique_ptr<Store>> OpenMariaDbStore(const MariaDbStoreOptions& options);

struct MariaDbEnqueueOptions {
  EventLimits limits;
};

// Inserts `event` inside the caller's open transaction on `conn`.
// REQUIRES: `conn` is connected and inside a transaction (START TRANSACTION);
//           otherwise FailedPrecondition and nothing is sent.
// A contract violation is InvalidArgument and nothing is sent to the server. A
// server error fails the statement only (InnoDB); the caller decides to roll back.
Result<EnqueueResult> Enqueue(st_mysql* conn, const Event& event,
                              const MariaDbEnqueueOptions& options = {});

// Same for several events: all validated before any is sent; the aggregates'
// lock rows are taken first in one statement, in key order (two batches never
// deadlock on them); results in input order.
Result<std::vector<EnqueueResult>> EnqueueBatch(st_mysql* conn, std::span<const Event> events,
                                                const MariaDbEnqueueOptions& options = {});

}  // namespace outbox

#endif  // OUTBOX_MARIADB_H_
