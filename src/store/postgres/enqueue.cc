// Enqueue into the caller's transaction on the caller's connection. All the
// row-writing logic lives in the SQL function <schema>.enqueue (one contract for
// every language); this side validates first, so that a contract violation never
// reaches the server and the caller's transaction stays usable.
#include <libpq-fe.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "outbox/postgres.h"
#include "headers_json.h"
#include "session.h"
#include "sql.h"

namespace outbox {
namespace {

std::vector<pg::Param> EnqueueParams(const Event& e) {
  return {pg::Param::Text(e.aggregate_type),
          pg::Param::Text(e.aggregate_id),
          pg::Param::Text(e.event_type),
          pg::Param::Binary(e.payload),
          pg::Param::Text(store_common::HeadersToJson(e.headers)),
          e.dedup_key ? pg::Param::Text(*e.dedup_key) : pg::Param::Null()};
}

const std::vector<Oid> kEnqueueTypes = {pg::kTextOid, pg::kTextOid,  pg::kTextOid,
                                        pg::kByteaOid, pg::kJsonbOid, pg::kTextOid};

Status CheckCallerConnection(PGconn* conn) {
  if (conn == nullptr) return Status::InvalidArgument("enqueue: connection is null");
  if (PQstatus(conn) != CONNECTION_OK) {
    return Status::Unavailable("enqueue: the caller's connection is not open");
  }
  switch (PQtransactionStatus(conn)) {
    case PQTRANS_INTRANS:
      return Status::Ok();
    case PQTRANS_IDLE:
      return Status::FailedPrecondition(
          "enqueue: no open transaction on this connection; BEGIN first so the event commits "
          "with the business data");
    case PQTRANS_INERROR:
      return Status::FailedPrecondition(
          "enqueue: the caller's transaction has already failed; roll it back");
    default:
      return Status::FailedPrecondition("enqueue: the connection is busy with another command");
  }
}

EnqueueResult ReadRow(const PGresult* res) {
  return EnqueueResult{pg::GetText(res, 0, 0), pg::GetText(res, 0, 1) == "t"};
}

}  // namespace

Result<std::vector<EnqueueResult>> EnqueueBatch(pg_conn* conn, std::span<const Event> events,
                                                const EnqueueOptions& options) {
  OUTBOX_RETURN_IF_ERROR(ValidateSchemaName(options.schema));
  OUTBOX_RETURN_IF_ERROR(ValidateEvents(events, options.limits));
  OUTBOX_RETURN_IF_ERROR(CheckCallerConnection(conn));
  std::vector<EnqueueResult> out(events.size());
  if (events.empty()) return out;
  const std::string sql = pg::sql::Enqueue(options.schema);

  if (events.size() == 1) {
    auto res = pg::ExecParams(conn, "enqueue", sql, EnqueueParams(events[0]), kEnqueueTypes);
    if (!res.ok()) return res.status();
    out[0] = ReadRow(res->get());
    return out;
  }

  // Insert in aggregate order (stable: one aggregate's events keep the caller's
  // order). The locks are taken first, in lock-key order (sql::LockAggregates).
  std::vector<std::size_t> order(events.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const Event& x = events[a];
    const Event& y = events[b];
    return std::tie(x.aggregate_type, x.aggregate_id) < std::tie(y.aggregate_type, y.aggregate_id);
  });
  std::vector<std::string> types, ids;
  for (const Event& e : events) {
    types.push_back(e.aggregate_type);
    ids.push_back(e.aggregate_id);
  }
  // First in the pipeline (same round trip): the aggregate locks in key order.
  std::vector<pg::Statement> statements;
  statements.push_back({pg::sql::LockAggregates(options.schema),
                        {pg::Param::Text(pg::TextArrayLiteral(types)),
                         pg::Param::Text(pg::TextArrayLiteral(ids))},
                        nullptr});
  for (std::size_t i : order) {
    statements.push_back({sql, EnqueueParams(events[i]), kEnqueueTypes.data()});
  }
  pg::PipelineResult pr = pg::RunPipeline(conn, "enqueue batch", statements);
  if (!pr.status.ok()) return pr.status;
  for (std::size_t k = 0; k < order.size(); ++k) out[order[k]] = ReadRow(pr.results[k + 1].get());
  return out;
}

Result<EnqueueResult> Enqueue(pg_conn* conn, const Event& event, const EnqueueOptions& options) {
  auto r = EnqueueBatch(conn, std::span<const Event>(&event, 1), options);
  if (!r.ok()) return r.status();
  return std::move(r).value()[0];
}

}  // namespace outbox
