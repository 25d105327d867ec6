#include "migrate.h"

#include "outbox/mariadb.h"

namespace outbox::maria {
namespace {

class MariaTarget final : public store::MigrationTarget {
 public:
  MariaTarget(MYSQL* c, const MigrationSet& set)
      : c_(c), set_(set), lock_("concat(" + Quote(c, std::string(set.lock_name) + ".") + ", DATABASE())") {}

  Status Begin() override {
    auto locked = Query(c_, "migrate: lock", "SELECT GET_LOCK(" + lock_ + ", 60)");
    if (!locked.ok()) return locked.status();
    if (locked->empty() || !(*locked)[0][0] || *(*locked)[0][0] != "1") {
      return Status::Unavailable("migrate: another migration held the lock for 60 s");
    }
    auto made = Exec(c_, std::string("migrate: ") + set_.table,
                     std::string("CREATE TABLE IF NOT EXISTS ") + set_.table + " (\n"
                     "  version     INT          NOT NULL PRIMARY KEY,\n"
                     "  description VARCHAR(255) NOT NULL,\n"
                     "  applied_at  DATETIME(6)  NOT NULL\n"
                     ") ENGINE = InnoDB");
    if (!made.ok()) {
      (void)End(false);
      return made.status();
    }
    return Status::Ok();
  }

  Result<std::set<int>> AppliedVersions() override {
    auto rows = Query(c_, "migrate: versions", std::string("SELECT version FROM ") + set_.table);
    if (!rows.ok()) return rows.status();
    std::set<int> applied;
    for (const auto& row : *rows) {
      if (row[0]) applied.insert(std::stoi(*row[0]));
    }
    return applied;
  }

  Status Apply(const store::Migration& m) override {
    const std::string what = std::string("migrate: ") + set_.table + " version " +
                             std::to_string(m.version) + " (" + m.name + ")";
    for (const std::string& statement : store::SplitStatements(m.text)) {
      auto done = Exec(c_, what, statement);
      if (!done.ok()) return done.status();
    }
    // A description longer than the column would fail the whole run.
    auto noted = Exec(c_, "migrate: record version",
                      std::string("INSERT INTO ") + set_.table + " VALUES (" +
                          std::to_string(m.version) + ", " + Quote(c_, m.description.substr(0, 255)) +
                          ", UTC_TIMESTAMP(6))");
    return noted.ok() ? Status::Ok() : noted.status();
  }

  Status End(bool) override {
    (void)Exec(c_, "migrate: unlock", "SELECT RELEASE_LOCK(" + lock_ + ")");
    return Status::Ok();
  }

 private:
  MYSQL* c_;
  const MigrationSet& set_;
  const std::string lock_;
};

}  // namespace

Status RunMigrations(MYSQL* conn, const MigrationSet& set, std::vector<int>* applied_now,
                     int up_to) {
  auto migrations = store::ParseMigrations(set.files());
  if (!migrations.ok()) return migrations.status();
  MariaTarget target(conn, set);
  return store::RunMigrations(target, *migrations, up_to, applied_now);
}

}  // namespace outbox::maria

namespace outbox {

Result<std::vector<int>> MigrateMariaDb(const MariaDbOptions& options) {
  auto url = maria::ParseUrl(options.url);
  if (!url.ok()) return url.status();
  auto conn = maria::Connect(*url, options.connect_timeout);
  if (!conn.ok()) return conn.status();
  std::vector<int> applied;
  OUTBOX_RETURN_IF_ERROR(maria::RunMigrations(conn->get(), maria::kOutboxSet, &applied));
  return applied;
}

}  // namespace outbox
