// The PostgreSQL outbox as a log (issue 42; docs/design.md, "The outbox as a
// log"): the Store interface over the log set's tables (migrations/log/).
// Every event is written once by enqueue(); a relay's claim reads a page of
// each slot it leases, in pos order, and moves the slot's position once per
// page; only failing events are written again, as exception rows.
//
// Step 4 of the issue: built behind the Store interface; a schema gets it from
// `outboxctl migrate --layout log`, and OpenPostgresStore opens it wherever the
// schema holds it (StoreLayout::kDetect). Internal to src/store/postgres.
//
// Thread-safety: as every Store, one session, not safe for concurrent use.
// Lifetime: the destructor releases the slots the store holds (a clean stop
// counts no restart on them).
#ifndef OUTBOX_SRC_STORE_POSTGRES_LOG_STORE_H_
#define OUTBOX_SRC_STORE_POSTGRES_LOG_STORE_H_

#include <memory>
#include <string>

#include "outbox/postgres.h"
#include "outbox/store.h"

namespace outbox::pg {

// Opens a log-layout store on `options.schema` (sent_mode is not used: the
// log's events stay until rotation). Migrate() installs the log set.
Result<std::unique_ptr<Store>> OpenPostgresLogStore(const PostgresStoreOptions& options);

// The statement that settles exception events handed out ($1: a JSON array of
// {pos, token, outcome, counts, delay_ms, error}), for `schema`: tests run it
// twice to prove that a retry of a statement whose reply was lost changes
// nothing more.
std::string SettleExceptionsStatement(const std::string& schema);

}  // namespace outbox::pg

#endif  // OUTBOX_SRC_STORE_POSTGRES_LOG_STORE_H_
