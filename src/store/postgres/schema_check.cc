// `outboxctl migrate --check` for PostgreSQL: the live schema against what its
// recorded migrations install, built in a scratch schema inside a transaction
// that is rolled back.
#include <random>

#include "migrate.h"
#include "outbox/postgres.h"
#include "sql.h"

namespace outbox {
namespace {

struct Set {
  const pg::MigrationSet& set;
  std::vector<store::Migration> files;
  std::set<int> applied;
};

Result<store::Catalog> ReadCatalog(pg::Session& s, const std::string& schema) {
  auto res = s.Exec("migrate --check: catalog", pg::sql::CatalogObjects(),
                    {pg::Param::Text(schema)});
  if (!res.ok()) return res.status();
  store::Catalog out;
  for (int i = 0; i < PQntuples(res->get()); ++i) {
    out[pg::GetText(res->get(), i, 0)] = pg::GetText(res->get(), i, 1);
  }
  return out;
}

// The sets recorded in `schema` (the outbox's always; the inbox's when its
// consumer shares the schema), with their files and applied versions.
Result<std::vector<Set>> RecordedSets(pg::Session& s, const std::string& schema) {
  std::vector<Set> out;
  for (const pg::MigrationSet* set : {&pg::kOutboxSet, &pg::kLogSet, &pg::kInboxSet}) {
    auto has = s.Exec("migrate --check: versions table", pg::sql::HasTable(),
                      {pg::Param::Text(schema), pg::Param::Text(set->table)});
    if (!has.ok()) return has.status();
    if (pg::GetText(has->get(), 0, 0) != "t") continue;
    auto files = store::ParseMigrations(set->files());
    if (!files.ok()) return files.status();
    auto versions = s.Exec("migrate --check: versions", pg::sql::AppliedVersions(schema, set->table));
    if (!versions.ok()) return versions.status();
    std::set<int> applied;
    for (int i = 0; i < PQntuples(versions->get()); ++i) {
      applied.insert(static_cast<int>(pg::GetInt64(versions->get(), i, 0)));
    }
    out.push_back({*set, std::move(files).value(), std::move(applied)});
  }
  if (out.size() > 1 && &out[1].set == &pg::kLogSet && &out[0].set == &pg::kOutboxSet) {
    return Status::FailedPrecondition("schema " + schema + " holds both the row store and the log "
                                      "(schema_migrations and log_migrations); it should hold one");
  }
  if (out.empty() || (&out[0].set != &pg::kOutboxSet && &out[0].set != &pg::kLogSet)) {
    return Status::FailedPrecondition("schema " + schema + " has no outbox migrations (no " +
                                      schema + ".schema_migrations); run `outboxctl migrate` first");
  }
  return out;
}

// Applies each set's files up to its highest applied version to `scratch`.
Status BuildReference(pg::Session& s, const std::vector<Set>& sets, const std::string& scratch) {
  OUTBOX_RETURN_IF_ERROR(s.ExecScript("migrate --check: scratch schema", "CREATE SCHEMA " + scratch));
  for (const Set& set : sets) {
    for (const store::Migration& m : set.files) {
      if (set.applied.empty() || m.version > *set.applied.rbegin()) break;
      OUTBOX_RETURN_IF_ERROR(s.ExecScript(
          "migrate --check: " + m.name, pg::sql::WithSchema(std::string(m.text), scratch)));
    }
  }
  return Status::Ok();
}

Result<std::vector<std::string>> Drift(pg::Session& s, const std::vector<Set>& sets,
                                       const std::string& schema) {
  std::random_device rd;
  const std::string scratch = "outbox_check_" + std::to_string(rd() % 1000000000u);
  OUTBOX_RETURN_IF_ERROR(s.ExecScript("migrate --check: begin", "BEGIN"));
  auto run = [&]() -> Result<std::vector<std::string>> {
    OUTBOX_RETURN_IF_ERROR(BuildReference(s, sets, scratch));
    auto live = ReadCatalog(s, schema);
    if (!live.ok()) return live.status();
    auto reference = ReadCatalog(s, scratch);
    if (!reference.ok()) return reference.status();
    store::Catalog named;  // the scratch schema's name read as the live one's
    for (const auto& [object, definition] : *reference) {
      named[object] = store::ReplaceAll(definition, scratch, schema);
    }
    return store::CompareCatalogs(*live, named);
  };
  auto drift = run();
  (void)s.ExecScript("migrate --check: rollback", "ROLLBACK");  // nothing stays
  return drift;
}

}  // namespace

Result<SchemaCheck> CheckPostgresSchema(const PostgresStoreOptions& options, bool versions_only) {
  auto session = pg::Session::ConnectFor(
      "migrate --check: ", {.conninfo = options.conninfo, .connect_timeout = options.connect_timeout,
                            .statement_timeout = options.statement_timeout},
      options.schema);
  if (!session.ok()) return session.status();
  pg::Session& s = **session;
  auto sets = RecordedSets(s, options.schema);
  if (!sets.ok()) return sets.status();
  SchemaCheck check;
  store::CompareVersions((*sets)[0].files, (*sets)[0].applied, &check);
  // A newer release's objects cannot be built from this binary's files: its
  // versions are the finding, not drift.
  if (versions_only || !check.unknown.empty()) return check;
  auto drift = Drift(s, *sets, options.schema);
  if (!drift.ok()) return drift.status();
  check.drift = std::move(drift).value();
  // The inbox's versions, when its consumer shares the schema, as lines.
  for (std::size_t i = 1; i < sets->size(); ++i) {
    store::NoteVersionsAsDrift("inbox", (*sets)[i].files, (*sets)[i].applied, &check);
  }
  return check;
}

}  // namespace outbox
