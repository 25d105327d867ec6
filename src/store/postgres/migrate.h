// The PostgreSQL store's migrations (the outbox's tables and the inbox's):
// frozen files under migrations/outbox/ and migrations/inbox/, embedded at
// build time and applied by the shared runner (store/common/migrations.h).
// Internal to src/store/postgres.
#ifndef OUTBOX_SRC_STORE_POSTGRES_MIGRATE_H_
#define OUTBOX_SRC_STORE_POSTGRES_MIGRATE_H_

#include <functional>
#include <span>
#include <string>
#include <vector>

#include "migrations.h"
#include "outbox/status.h"
#include "session.h"

namespace outbox::pg {

// The embedded files (generated from migrations/<set>/ by cmake/EmbedFiles.cmake).
std::span<const store::EmbeddedFile> OutboxMigrationFiles();
std::span<const store::EmbeddedFile> InboxMigrationFiles();
std::span<const store::EmbeddedFile> LogMigrationFiles();  // the log layout (issue 42)

// One schema's set: applied under an advisory lock named `lock_name`, each
// version recorded in <schema>.<table>. Files use "{S}" for the schema.
struct MigrationSet {
  const char* lock_name;
  const char* table;
  std::span<const store::EmbeddedFile> (*files)();
};
inline constexpr MigrationSet kOutboxSet{"outbox.migrate", "schema_migrations", OutboxMigrationFiles};
inline constexpr MigrationSet kInboxSet{"outbox.inbox.migrate", "inbox_migrations", InboxMigrationFiles};
// The log layout's set shares the outbox set's lock: their runs serialize (the
// check that a schema holds only one of them runs before the lock is taken).
inline constexpr MigrationSet kLogSet{"outbox.migrate", "log_migrations", LogMigrationFiles};

// Steps a run takes inside its transaction, under the set's lock: `before`
// ahead of the versions table and the files, `after` once they are applied
// (the conversion from rows to the log: convert.h). Either failing rolls the
// whole run back.
struct RunSteps {
  std::function<Status()> before;
  std::function<Status()> after;
};

// In one transaction, under the set's advisory lock: creates the schema and the
// set's versions table if missing, then applies and records every migration
// not yet recorded, in order, up to `up_to` (0: all). Idempotent; concurrent
// callers serialize. `applied_now` (optional) receives the versions applied.
Status RunMigrations(Session& session, const std::string& schema, const MigrationSet& set,
                     std::vector<int>* applied_now = nullptr, int up_to = 0,
                     const RunSteps& steps = {});

// What `schema` holds: kLog (its log_migrations table), kRows (its
// schema_migrations table), or kDetect when it holds neither yet.
Result<StoreLayout> HeldLayout(Session& session, const std::string& schema);

// FailedPrecondition, naming both, when `schema` already holds the other
// layout than `wanted`. The log store converts a row schema instead of calling
// this (convert.h); nothing converts a log back to rows.
Status RefuseOtherLayout(Session& session, const std::string& schema, StoreLayout wanted);

}  // namespace outbox::pg

#endif  // OUTBOX_SRC_STORE_POSTGRES_MIGRATE_H_
