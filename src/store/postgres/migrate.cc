#include "migrate.h"

#include <set>

namespace outbox::pg {
namespace {

Status Apply(Session& s, const std::string& schema, const sql::MigrationSet& set) {
  OUTBOX_RETURN_IF_ERROR(s.Exec("migrate: lock", sql::MigrateLock(schema, set)).status());
  OUTBOX_RETURN_IF_ERROR(
      s.ExecScript("migrate: bootstrap", sql::EnsureMigrationsTable(schema, set)));
  auto applied_res = s.Exec("migrate: read versions", sql::AppliedVersions(schema, set));
  if (!applied_res.ok()) return applied_res.status();
  std::set<int> applied;
  for (int i = 0; i < PQntuples(applied_res->get()); ++i) {
    applied.insert(static_cast<int>(GetInt64(applied_res->get(), i, 0)));
  }
  for (const auto& m : set.migrations) {
    if (applied.count(m.version)) continue;
    OUTBOX_RETURN_IF_ERROR(
        s.ExecScript("migrate: " + set.table + " version " + std::to_string(m.version), m.script));
    OUTBOX_RETURN_IF_ERROR(s.Exec("migrate: record", sql::RecordMigration(schema, set),
                                  {Param::Text(std::to_string(m.version)),
                                   Param::Text(m.description)})
                               .status());
  }
  return Status::Ok();
}

}  // namespace

Status RunMigrations(Session& session, const std::string& schema, const sql::MigrationSet& set) {
  OUTBOX_RETURN_IF_ERROR(session.EnsureConnected());
  OUTBOX_RETURN_IF_ERROR(session.ExecScript("migrate: begin", "BEGIN"));
  Status st = Apply(session, schema, set);
  if (!st.ok()) {
    (void)session.ExecScript("migrate: rollback", "ROLLBACK");
    return st;
  }
  return session.ExecScript("migrate: commit", "COMMIT");
}

}  // namespace outbox::pg
