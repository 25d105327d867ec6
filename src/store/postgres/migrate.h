// The one migration runner of the PostgreSQL store (the outbox's tables and the
// inbox's). Internal to src/store/postgres.
#ifndef OUTBOX_SRC_STORE_POSTGRES_MIGRATE_H_
#define OUTBOX_SRC_STORE_POSTGRES_MIGRATE_H_

#include <string>
#include <vector>

#include "outbox/status.h"
#include "session.h"
#include "sql.h"

namespace outbox::pg {

// In one transaction, under the set's advisory lock: creates the schema and the
// set's migrations table if missing, then applies and records every migration
// not yet recorded, in order. Idempotent; concurrent callers serialize.
// `applied_now` (optional) receives the versions this call applied, in order.
Status RunMigrations(Session& session, const std::string& schema, const sql::MigrationSet& set,
                     std::vector<int>* applied_now = nullptr);

}  // namespace outbox::pg

#endif  // OUTBOX_SRC_STORE_POSTGRES_MIGRATE_H_
