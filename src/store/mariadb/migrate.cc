// Migrations for the MariaDB store: versions recorded in outbox_migrations,
// applied under a named lock so that concurrent runs serialise. MariaDB commits
// DDL on its own, so each statement is idempotent (IF NOT EXISTS, OR REPLACE):
// a run cut short is finished by the next one.
#include "outbox/mariadb.h"
#include "session.h"
#include "sql.h"

namespace outbox {

Status MigrateMariaDb(const MariaDbOptions& options) {
  auto url = maria::ParseUrl(options.url);
  if (!url.ok()) return url.status();
  auto conn = maria::Connect(*url, options.connect_timeout);
  if (!conn.ok()) return conn.status();
  MYSQL* c = conn->get();
  auto lock = maria::Query(c, "migrate: lock",
                           "SELECT GET_LOCK(concat('outbox.migrate.', DATABASE()), 60)");
  if (!lock.ok()) return lock.status();
  if (lock->empty() || !(*lock)[0][0] || *(*lock)[0][0] != "1") {
    return Status::Unavailable("migrate: another migration held the lock for 60 s");
  }
  auto run = [&]() -> Status {
    auto made = maria::Exec(c, "migrate: outbox_migrations", R"SQL(
CREATE TABLE IF NOT EXISTS outbox_migrations (
  version     INT          NOT NULL PRIMARY KEY,
  description VARCHAR(255) NOT NULL,
  applied_at  DATETIME(6)  NOT NULL
) ENGINE = InnoDB)SQL");
    if (!made.ok()) return made.status();
    auto have = maria::Query(c, "migrate: version", "SELECT coalesce(max(version), 0) FROM outbox_migrations");
    if (!have.ok()) return have.status();
    const int current = std::stoi(*(*have)[0][0]);
    for (const auto& m : maria::sql::Migrations()) {
      if (m.version <= current) continue;
      for (const std::string& statement : m.statements) {
        auto done = maria::Exec(c, "migrate: version " + std::to_string(m.version), statement);
        if (!done.ok()) return done.status();
      }
      auto noted = maria::Exec(c, "migrate: record version",
                               "INSERT INTO outbox_migrations VALUES (" + std::to_string(m.version) +
                                   ", " + maria::Quote(c, m.description) + ", UTC_TIMESTAMP(6))");
      if (!noted.ok()) return noted.status();
    }
    return Status::Ok();
  };
  Status st = run();
  (void)maria::Exec(c, "migrate: unlock", "SELECT RELEASE_LOCK(concat('outbox.migrate.', DATABASE()))");
  return st;
}

}  // namespace outbox
