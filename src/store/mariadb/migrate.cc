// Migrations for the MariaDB stores: versions recorded in a table, applied
// under a named lock so that concurrent runs serialise. MariaDB commits DDL on
// its own, so each statement is idempotent (IF NOT EXISTS, OR REPLACE): a run
// cut short is finished by the next one.
#include "migrate.h"

#include "outbox/mariadb.h"

namespace outbox::maria {

Status RunMigrations(MYSQL* c, const std::string& table, const std::string& lock,
                     const std::vector<sql::Migration>& migrations, std::vector<int>* applied_now) {
  const std::string name = "concat(" + Quote(c, lock + ".") + ", DATABASE())";
  auto locked = Query(c, "migrate: lock", "SELECT GET_LOCK(" + name + ", 60)");
  if (!locked.ok()) return locked.status();
  if (locked->empty() || !(*locked)[0][0] || *(*locked)[0][0] != "1") {
    return Status::Unavailable("migrate: another migration held the lock for 60 s");
  }
  auto run = [&]() -> Status {
    auto made = Exec(c, "migrate: " + table,
                     "CREATE TABLE IF NOT EXISTS " + table + " (\n"
                     "  version     INT          NOT NULL PRIMARY KEY,\n"
                     "  description VARCHAR(255) NOT NULL,\n"
                     "  applied_at  DATETIME(6)  NOT NULL\n"
                     ") ENGINE = InnoDB");
    if (!made.ok()) return made.status();
    auto have = Query(c, "migrate: version", "SELECT coalesce(max(version), 0) FROM " + table);
    if (!have.ok()) return have.status();
    const int current = std::stoi(*(*have)[0][0]);
    for (const auto& m : migrations) {
      if (m.version <= current) continue;
      for (const std::string& statement : m.statements) {
        auto done = Exec(c, "migrate: version " + std::to_string(m.version), statement);
        if (!done.ok()) return done.status();
      }
      auto noted = Exec(c, "migrate: record version",
                        "INSERT INTO " + table + " VALUES (" + std::to_string(m.version) + ", " +
                            Quote(c, m.description) + ", UTC_TIMESTAMP(6))");
      if (!noted.ok()) return noted.status();
      if (applied_now) applied_now->push_back(m.version);  // DDL commits on its own
    }
    return Status::Ok();
  };
  Status st = run();
  (void)Exec(c, "migrate: unlock", "SELECT RELEASE_LOCK(" + name + ")");
  return st;
}

}  // namespace outbox::maria

namespace outbox {

Result<std::vector<int>> MigrateMariaDb(const MariaDbOptions& options) {
  auto url = maria::ParseUrl(options.url);
  if (!url.ok()) return url.status();
  auto conn = maria::Connect(*url, options.connect_timeout);
  if (!conn.ok()) return conn.status();
  std::vector<int> applied;
  OUTBOX_RETURN_IF_ERROR(maria::RunMigrations(conn->get(), "outbox_migrations", "outbox.migrate",
                                              maria::sql::Migrations(), &applied));
  return applied;
}

}  // namespace outbox
