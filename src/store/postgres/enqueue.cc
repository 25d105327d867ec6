// Enqueue into the caller's transaction on the caller's connection. All the
// row-writing logic lives in the SQL function <schema>.enqueue (one contract for
// every language); this side validates first, so that a contract violation never
// reaches the server and the caller's transaction stays usable.
#include <libpq-fe.h>

#include <string_view>

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

// enqueue()'s row as one composite in text form: "(event_id,t)" or
// "(event_id,f)" (a UUID needs no quoting).
Result<EnqueueResult> ReadRecord(const PGresult* res) {
  const std::string rec = pg::GetText(res, 0, 0);
  const std::size_t comma = rec.rfind(',');
  if (rec.size() < 4 || rec.front() != '(' || rec.back() != ')' || comma == std::string::npos ||
      comma + 3 != rec.size() || (rec[comma + 1] != 't' && rec[comma + 1] != 'f')) {
    return Status::Internal("enqueue: unexpected result '" + rec + "'");
  }
  return EnqueueResult{rec.substr(1, comma - 1), rec[comma + 1] == 't'};
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
    auto row = ReadRecord(res->get());
    if (!row.ok()) return row.status();
    out[0] = std::move(row).value();
    return out;
  }

  // One statement: enqueue_batch() checks the events, takes their aggregates'
  // locks in key order and inserts them in the given order.
  std::vector<std::string> types, ids, event_types, headers;
  std::vector<std::string_view> payloads;  // hex-encoded once, into the literal
  std::vector<std::optional<std::string>> keys;
  for (const Event& e : events) {
    types.push_back(e.aggregate_type);
    ids.push_back(e.aggregate_id);
    event_types.push_back(e.event_type);
    payloads.push_back(e.payload);
    headers.push_back(store_common::HeadersToJson(e.headers));
    keys.push_back(e.dedup_key);
  }
  auto res = pg::ExecParams(conn, "enqueue batch", pg::sql::EnqueueBatch(options.schema),
                            {pg::Param::Text(pg::TextArrayLiteral(types)),
                             pg::Param::Text(pg::TextArrayLiteral(ids)),
                             pg::Param::Text(pg::TextArrayLiteral(event_types)),
                             pg::Param::Text(pg::ByteaArrayLiteral(payloads)),
                             pg::Param::Text(pg::TextArrayLiteral(headers)),
                             pg::Param::Text(pg::TextArrayLiteral(keys))},
                            {});
  if (!res.ok()) return res.status();
  const PGresult* r = res->get();
  if (PQntuples(r) != static_cast<int>(events.size())) {
    return Status::Internal("enqueue batch: " + std::to_string(PQntuples(r)) + " rows for " +
                            std::to_string(events.size()) + " events");
  }
  for (int i = 0; i < PQntuples(r); ++i) {
    const std::int64_t ord = pg::GetInt64(r, i, 0);
    if (ord < 1 || ord > static_cast<std::int64_t>(events.size())) {
      return Status::Internal("enqueue batch: position " + std::to_string(ord) + " out of range");
    }
    out[static_cast<std::size_t>(ord - 1)] =
        EnqueueResult{pg::GetText(r, i, 1), pg::GetText(r, i, 2) == "t"};
  }
  return out;
}

Result<EnqueueResult> Enqueue(pg_conn* conn, const Event& event, const EnqueueOptions& options) {
  auto r = EnqueueBatch(conn, std::span<const Event>(&event, 1), options);
  if (!r.ok()) return r.status();
  return std::move(r).value()[0];
}

}  // namespace outbox
