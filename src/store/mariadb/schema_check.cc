// `outboxctl migrate --check` for MariaDB: the URL's database against what its
// recorded migrations install, built in a scratch database dropped afterwards.
#include <cctype>
#include <random>
#include <regex>

#include "migrate.h"
#include "outbox/mariadb.h"
#include "sql.h"

namespace outbox {
namespace {

struct Set {
  const maria::MigrationSet& set;
  std::vector<store::Migration> files;
  std::set<int> applied;
};

Result<store::Catalog> ReadCatalog(MYSQL* c, const std::string& db) {
  auto tables = maria::Query(c, "migrate --check: tables", maria::sql::CatalogTables(maria::Quote(c, db)));
  if (!tables.ok()) return tables.status();
  store::Catalog out;
  static const std::regex kCounter(" AUTO_INCREMENT=[0-9]+");
  for (const auto& t : *tables) {
    const bool sequence = t[1] && *t[1] == "SEQUENCE";
    auto def = maria::Query(c, "migrate --check: " + *t[0],
                            maria::sql::ShowCreate(sequence ? "SEQUENCE" : "TABLE", db, *t[0]));
    if (!def.ok()) return def.status();
    out[(sequence ? "sequence " : "table ") + *t[0]] =
        std::regex_replace((*def)[0][1].value_or(""), kCounter, "");
  }
  auto routines = maria::Query(c, "migrate --check: routines",
                               maria::sql::CatalogRoutines(maria::Quote(c, db)));
  if (!routines.ok()) return routines.status();
  static const std::regex kDefiner("DEFINER=`[^`]*`@`[^`]*` ");
  for (const auto& r : *routines) {
    auto def = maria::Query(c, "migrate --check: " + *r[0], maria::sql::ShowCreate(*r[1], db, *r[0]));
    if (!def.ok()) return def.status();
    std::string kind = r[1].value_or("ROUTINE");
    for (char& ch : kind) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    out[kind + " " + *r[0]] = std::regex_replace((*def)[0][2].value_or(""), kDefiner, "");
  }
  return out;
}

Result<std::vector<Set>> RecordedSets(MYSQL* c, const std::string& db) {
  std::vector<Set> out;
  for (const maria::MigrationSet* set : {&maria::kOutboxSet, &maria::kInboxSet}) {
    auto has = maria::Query(c, "migrate --check: versions table",
                            maria::sql::HasTable(maria::Quote(c, db), maria::Quote(c, set->table)));
    if (!has.ok()) return has.status();
    if (has->empty() || (*has)[0][0].value_or("0") == "0") continue;
    auto files = store::ParseMigrations(set->files());
    if (!files.ok()) return files.status();
    auto versions = maria::Query(c, "migrate --check: versions",
                                 std::string("SELECT version FROM ") + set->table);
    if (!versions.ok()) return versions.status();
    std::set<int> applied;
    for (const auto& row : *versions) {
      if (row[0]) applied.insert(std::stoi(*row[0]));
    }
    out.push_back({*set, std::move(files).value(), std::move(applied)});
  }
  if (out.empty() || &out[0].set != &maria::kOutboxSet) {
    return Status::FailedPrecondition("database " + db +
                                      " has no outbox migrations (no outbox_migrations table); run "
                                      "`outboxctl migrate` first");
  }
  return out;
}

// The reference: each set's files up to its highest applied version, in a
// scratch database on the same server.
Result<store::Catalog> Reference(MYSQL* c, const std::vector<Set>& sets, const std::string& live_db) {
  std::random_device rd;
  const std::string scratch = "outbox_check_" + std::to_string(rd() % 1000000000u);
  // The live database's character set and collation: tables that name none
  // take the database's, and SHOW CREATE TABLE shows it.
  auto charset = maria::Query(c, "migrate --check: character set",
                              maria::sql::DatabaseCharset(maria::Quote(c, live_db)));
  if (!charset.ok()) return charset.status();
  std::string options;
  if (!charset->empty() && (*charset)[0][0] && (*charset)[0][1]) {
    options = " CHARACTER SET " + *(*charset)[0][0] + " COLLATE " + *(*charset)[0][1];
  }
  auto made = maria::Exec(c, "migrate --check: scratch database",
                          "CREATE DATABASE " + scratch + options);
  if (!made.ok()) return made.status();
  auto run = [&]() -> Result<store::Catalog> {
    auto used = maria::Exec(c, "migrate --check: use", "USE " + scratch);
    if (!used.ok()) return used.status();
    for (const Set& set : sets) {
      for (const store::Migration& m : set.files) {
        if (set.applied.empty() || m.version > *set.applied.rbegin()) break;
        for (const std::string& statement : store::SplitStatements(m.text)) {
          auto done = maria::Exec(c, "migrate --check: " + m.name, statement);
          if (!done.ok()) return done.status();
        }
      }
    }
    return ReadCatalog(c, scratch);
  };
  auto reference = run();
  (void)maria::Exec(c, "migrate --check: use", "USE " + live_db);
  (void)maria::Exec(c, "migrate --check: drop scratch database", "DROP DATABASE " + scratch);
  return reference;
}

}  // namespace

Result<SchemaCheck> CheckMariaDbSchema(const MariaDbOptions& options, bool versions_only) {
  auto url = maria::ParseUrl(options.url);
  if (!url.ok()) return url.status();
  auto conn = maria::Connect(*url, options.connect_timeout);
  if (!conn.ok()) return conn.status();
  MYSQL* c = conn->get();
  auto sets = RecordedSets(c, url->database);
  if (!sets.ok()) return sets.status();
  SchemaCheck check;
  store::CompareVersions((*sets)[0].files, (*sets)[0].applied, &check);
  // A newer release's objects cannot be built from this binary's files: its
  // versions are the finding, not drift.
  if (versions_only || !check.unknown.empty()) return check;
  auto live = ReadCatalog(c, url->database);
  if (!live.ok()) return live.status();
  auto reference = Reference(c, *sets, url->database);
  if (!reference.ok()) return reference.status();
  check.drift = store::CompareCatalogs(*live, *reference);
  for (std::size_t i = 1; i < sets->size(); ++i) {
    store::NoteVersionsAsDrift("inbox", (*sets)[i].files, (*sets)[i].applied, &check);
  }
  return check;
}

}  // namespace outbox
