#include "migrate.h"

#include <set>

namespace outbox::pg {
namespace {

Status Apply(Session& s, const std::string& schema, const sql::MigrationSet& set,
             std::vector<int>* applied_now) {
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
    applied_now->push_back(m.version);
  }
  return Status::Ok();
}

}  // namespace

Status RunMigrations(Session& session, const std::string& schema, const sql::MigrationSet& set,
                     std::vector<int>* applied_now) {
  OUTBOX_RETURN_IF_ERROR(session.EnsureConnected());
  OUTBOX_RETURN_IF_ERROR(session.ExecScript("migrate: begin", "BEGIN"));
  std::vector<int> applied;
  Status st = Apply(session, schema, set, &applied);
  if (!st.ok()) {
    (void)session.ExecScript("migrate: rollback", "ROLLBACK");
    return st;
  }
  OUTBOX_RETURN_IF_ERROR(session.ExecScript("migrate: commit", "COMMIT"));
  if (applied_now) *applied_now = std::move(applied);
  return Status::Ok();
}

}  // namespace outbox::pg
