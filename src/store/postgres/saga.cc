// Saga guards (include/outbox/saga.h): single conditional UPDATEs on the
// handler's transaction.
#include "outbox/saga.h"

#include <libpq-fe.h>

#include "session.h"
#include "sql.h"

namespace outbox::saga {
namespace {

bool IsIdent(const std::string& s) {
  return pg::sql::IsIdentifier(s) && !pg::sql::IsReservedWord(s);
}

bool IsTableName(const std::string& s) {
  auto dot = s.find('.');
  if (dot == std::string::npos) return IsIdent(s);
  return IsIdent(s.substr(0, dot)) && IsIdent(s.substr(dot + 1));
}

Status CheckNames(std::initializer_list<std::pair<const char*, const std::string*>> names,
                  const std::string& table) {
  if (!IsTableName(table)) {
    return Status::InvalidArgument("saga: table \"" + table + "\" is not a valid table name");
  }
  for (const auto& [what, v] : names) {
    if (!IsIdent(*v)) {
      return Status::InvalidArgument(std::string("saga: ") + what + " \"" + *v +
                                     "\" is not a valid column name");
    }
  }
  return Status::Ok();
}

Result<bool> RunUpdate(pg_conn* txn, const std::string& sql, std::vector<pg::Param> params) {
  auto r = pg::ExecParams(txn, "saga", sql, params);
  if (!r.ok()) return r.status();
  return std::string(PQcmdTuples(r->get())) != "0";
}

}  // namespace

Result<bool> Transition(pg_conn* txn, const StateColumn& c, const std::string& id,
                        std::span<const std::string> from, const std::string& to) {
  OUTBOX_RETURN_IF_ERROR(
      CheckNames({{"id_column", &c.id_column}, {"state_column", &c.state_column}}, c.table));
  const std::string sql = "UPDATE " + c.table + " SET " + c.state_column + " = $3 WHERE " +
                          c.id_column + "::text = $1 AND " + c.state_column + " = ANY($2::text[])";
  return RunUpdate(txn, sql,
                   {pg::Param::Text(id), pg::Param::Text(pg::TextArrayLiteral(from)), pg::Param::Text(to)});
}

Result<bool> AdvanceVersion(pg_conn* txn, const std::string& table, const std::string& id_column,
                            const std::string& version_column, const std::string& id,
                            std::int64_t version) {
  OUTBOX_RETURN_IF_ERROR(
      CheckNames({{"id_column", &id_column}, {"version_column", &version_column}}, table));
  const std::string sql = "UPDATE " + table + " SET " + version_column + " = $2 WHERE " +
                          id_column + "::text = $1 AND " + version_column + " < $2::bigint";
  return RunUpdate(txn, sql, {pg::Param::Text(id), pg::Param::Text(std::to_string(version))});
}

Result<bool> Compensate(pg_conn* txn, const StateColumn& c, const std::string& id,
                        std::span<const std::string> applied_states,
                        const std::string& compensated_state) {
  return Transition(txn, c, id, applied_states, compensated_state);
}

}  // namespace outbox::saga
