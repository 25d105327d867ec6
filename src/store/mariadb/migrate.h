// The MariaDB store's migrations (outbox and inbox): frozen files under
// migrations/outbox/ and migrations/inbox/, embedded at build time and applied
// by the shared runner (store/common/migrations.h). Internal.
#ifndef OUTBOX_SRC_STORE_MARIADB_MIGRATE_H_
#define OUTBOX_SRC_STORE_MARIADB_MIGRATE_H_

#include <span>
#include <string>
#include <vector>

#include "migrations.h"
#include "session.h"

namespace outbox::maria {

// The embedded files (generated from migrations/<set>/ by cmake/EmbedFiles.cmake).
std::span<const store::EmbeddedFile> OutboxMigrationFiles();
std::span<const store::EmbeddedFile> InboxMigrationFiles();

// One set: versions recorded in `table` (in the URL's database), applied under
// the named lock `lock_name` + the database's name.
struct MigrationSet {
  const char* lock_name;
  const char* table;
  std::span<const store::EmbeddedFile> (*files)();
};
inline constexpr MigrationSet kOutboxSet{"outbox.migrate", "outbox_migrations", OutboxMigrationFiles};
inline constexpr MigrationSet kInboxSet{"outbox.inbox.migrate", "inbox_migrations", InboxMigrationFiles};

// Applies the missing versions up to `up_to` (0: all); concurrent runs
// serialise. MariaDB commits each DDL statement on its own, so every statement
// of a file is idempotent (IF NOT EXISTS, OR REPLACE): a run cut short is
// finished by the next one. `applied_now` (optional) receives the versions applied.
Status RunMigrations(MYSQL* conn, const MigrationSet& set, std::vector<int>* applied_now = nullptr,
                     int up_to = 0);

}  // namespace outbox::maria

#endif  // OUTBOX_SRC_STORE_MARIADB_MIGRATE_H_
