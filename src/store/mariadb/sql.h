// The MariaDB store's SQL: migrations and statements. Internal.
#ifndef OUTBOX_SRC_STORE_MARIADB_SQL_H_
#define OUTBOX_SRC_STORE_MARIADB_SQL_H_

#include <string>
#include <vector>

namespace outbox::maria::sql {

struct Migration {
  int version;
  std::string description;
  std::vector<std::string> statements;  // DDL commits on its own: one statement each
};

// Every migration, in version order. Tables live in the URL's database:
// outbox, outbox_aggregate_locks, outbox_migrations.
const std::vector<Migration>& Migrations();

// The inbox's (inbox_stamps, inbox_parked; versions in inbox_migrations).
const std::vector<Migration>& InboxMigrations();

}  // namespace outbox::maria::sql

#endif  // OUTBOX_SRC_STORE_MARIADB_SQL_H_
