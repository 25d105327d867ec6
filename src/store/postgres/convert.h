// The conversion of a PostgreSQL row store into the log (issue 42, step 7):
// `outboxctl migrate --layout log` on a schema that holds the row store.
// Internal to src/store/postgres; docs/design.md, "Converting a row store".
//
// In one transaction, under the outbox migrations' lock and an ACCESS
// EXCLUSIVE lock on <schema>.outbox (producers and relays wait for it, then
// fail their statement: stop the relays first):
//   - the row store's functions, sequence, stream_progress and versions table
//     go, and its table is set aside;
//   - the log set is installed (every version);
//   - each row moves, keeping its id, its seq as pos, and its order: an unsent
//     row never attempted into the log, read after the conversion commits; an
//     unsent row already attempted (PENDING with attempts, PROCESSING) into a
//     RETRY exception with its attempts, due at its next attempt time (an
//     in-flight one now); FAILED, SKIPPED and SENT rows into exception copies
//     with their times and errors, listed and traced as before, the SENT ones
//     until rotation passes the partition (at least the retention); dedup keys
//     into dedup; every id into converted_ids, so trace finds it;
//   - the old table goes.
// A failure at any step rolls all of it back: the schema is the row store it was.
//
// Thread-safety: uses `session`, one run at a time, as RunMigrations.
#ifndef OUTBOX_SRC_STORE_POSTGRES_CONVERT_H_
#define OUTBOX_SRC_STORE_POSTGRES_CONVERT_H_

#include <string>
#include <vector>

#include "outbox/postgres.h"
#include "outbox/status.h"
#include "session.h"

namespace outbox::pg {

// Brings the row store to its last version (its own transaction), then
// converts it (another). `converted` is false, and nothing is done, when the
// schema does not hold the row store. FailedPrecondition, changing nothing,
// when a change stream reads it (relay.source = cdc is not on the log yet).
Result<LogConversion> ConvertRowsToLog(Session& session, const std::string& schema);

}  // namespace outbox::pg

#endif  // OUTBOX_SRC_STORE_POSTGRES_CONVERT_H_
