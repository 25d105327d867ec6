#include "migrate.h"

#include "sql.h"

namespace outbox::pg {
namespace {

// PostgreSQL's DDL is transactional: a whole run commits or none of it.
class PostgresTarget final : public store::MigrationTarget {
 public:
  PostgresTarget(Session& s, const std::string& schema, const MigrationSet& set,
                 const RunSteps& steps)
      : s_(s), schema_(schema), set_(set), steps_(steps) {}

  Status Begin() override {
    OUTBOX_RETURN_IF_ERROR(s_.EnsureConnected());
    // READ COMMITTED whatever the server's default: a step that waits for a
    // lock (the conversion's) must then see what committed meanwhile.
    OUTBOX_RETURN_IF_ERROR(
        s_.ExecScript("migrate: begin", "BEGIN ISOLATION LEVEL READ COMMITTED"));
    Status st = s_.Exec("migrate: lock", sql::MigrateLock(schema_, set_.lock_name)).status();
    if (st.ok() && steps_.before) st = steps_.before();
    if (st.ok()) {
      st = s_.ExecScript("migrate: bootstrap", sql::EnsureMigrationsTable(schema_, set_.table));
    }
    if (!st.ok()) (void)s_.ExecScript("migrate: rollback", "ROLLBACK");
    return st;
  }

  Result<std::set<int>> AppliedVersions() override {
    auto res = s_.Exec("migrate: read versions", sql::AppliedVersions(schema_, set_.table));
    if (!res.ok()) return res.status();
    std::set<int> applied;
    for (int i = 0; i < PQntuples(res->get()); ++i) {
      applied.insert(static_cast<int>(GetInt64(res->get(), i, 0)));
    }
    return applied;
  }

  Status Apply(const store::Migration& m) override {
    OUTBOX_RETURN_IF_ERROR(s_.ExecScript(
        std::string("migrate: ") + set_.table + " version " + std::to_string(m.version) + " (" +
            m.name + ")",
        sql::WithSchema(std::string(m.text), schema_)));
    return s_.Exec("migrate: record", sql::RecordMigration(schema_, set_.table),
                   {Param::Text(std::to_string(m.version)), Param::Text(m.description)})
        .status();
  }

  Status End(bool ok) override {
    if (ok && steps_.after) {
      Status st = steps_.after();
      if (!st.ok()) {
        (void)s_.ExecScript("migrate: rollback", "ROLLBACK");
        return st;
      }
    }
    if (!ok) {
      (void)s_.ExecScript("migrate: rollback", "ROLLBACK");
      return Status::Ok();
    }
    return s_.ExecScript("migrate: commit", "COMMIT");
  }

 private:
  Session& s_;
  const std::string& schema_;
  const MigrationSet& set_;
  const RunSteps& steps_;
};

}  // namespace

Status RunMigrations(Session& session, const std::string& schema, const MigrationSet& set,
                     std::vector<int>* applied_now, int up_to, const RunSteps& steps) {
  auto migrations = store::ParseMigrations(set.files());
  if (!migrations.ok()) return migrations.status();
  PostgresTarget target(session, schema, set, steps);
  return store::RunMigrations(target, *migrations, up_to, applied_now);
}

Result<StoreLayout> HeldLayout(Session& session, const std::string& schema) {
  auto res = session.Exec("store layout", sql::HeldLayout(), {Param::Text(schema)});
  if (!res.ok()) return res.status();
  const std::string held = GetText(res->get(), 0, 0);
  return held == "log" ? StoreLayout::kLog : held == "rows" ? StoreLayout::kRows : StoreLayout::kDetect;
}

Status RefuseOtherLayout(Session& session, const std::string& schema, StoreLayout wanted) {
  auto held = HeldLayout(session, schema);
  if (!held.ok()) return held.status();
  if (*held == StoreLayout::kDetect || *held == wanted) return Status::Ok();
  const bool log = *held == StoreLayout::kLog;
  return Status::FailedPrecondition(
      "schema " + schema + " holds the outbox as " + (log ? "a log" : "rows") + " (" + schema +
      (log ? ".log_migrations" : ".schema_migrations") + "), not as " + (log ? "rows" : "a log") +
      (log ? "; nothing converts a log back to rows: use another schema, or open it as a log (the "
             "default detects it)"
           : "; `outboxctl migrate --layout log` converts it"));
}

}  // namespace outbox::pg
