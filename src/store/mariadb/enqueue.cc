// Enqueue into the caller's transaction on the caller's MariaDB connection. The
// row-writing logic lives in the procedure outbox_enqueue (one contract for
// every language); this side validates first, so that a contract violation
// never reaches the server and the caller's transaction stays usable.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "outbox/mariadb.h"
#include "session.h"
#include "sql.h"

namespace outbox {
namespace {

std::string HeadersJson(const Event& e) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : e.headers) j[k] = v;
  return j.dump();
}

// CALLs outbox_enqueue for one event: its one-row result, then the CALL's own
// status result.
Result<EnqueueResult> CallEnqueue(MYSQL* c, const Event& e) {
  const std::string sql =
      maria::sql::CallEnqueue(maria::Quote(c, e.aggregate_type), maria::Quote(c, e.aggregate_id),
                              maria::Quote(c, e.event_type), maria::HexLiteral(e.payload),
                              maria::Quote(c, HeadersJson(e)), maria::QuoteOrNull(c, e.dedup_key));
  if (mysql_real_query(c, sql.data(), sql.size()) != 0) return maria::LastError(c, "enqueue");
  EnqueueResult out;
  bool got = false;
  do {
    if (MYSQL_RES* res = mysql_store_result(c)) {
      if (MYSQL_ROW row = mysql_fetch_row(res); row && !got && mysql_num_fields(res) == 2) {
        out.event_id = row[0] ? row[0] : "";
        out.enqueued = row[1] && std::string(row[1]) == "1";
        got = true;
      }
      mysql_free_result(res);
    } else if (mysql_field_count(c) != 0) {
      return maria::LastError(c, "enqueue");
    }
  } while (mysql_next_result(c) == 0);
  if (mysql_errno(c) != 0) return maria::LastError(c, "enqueue");
  if (!got) return Status::Internal("enqueue: outbox_enqueue returned no row");
  return out;
}

Status CheckCallerConnection(MYSQL* c) {
  if (c == nullptr) return Status::InvalidArgument("enqueue: connection is null");
  if (!maria::InTransaction(c)) {
    return Status::FailedPrecondition(
        "enqueue: no open transaction on this connection; START TRANSACTION first so the event "
        "commits with the business data");
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<EnqueueResult>> EnqueueBatch(st_mysql* conn, std::span<const Event> events,
                                                const MariaDbEnqueueOptions& options) {
  OUTBOX_RETURN_IF_ERROR(ValidateEvents(events, options.limits));
  OUTBOX_RETURN_IF_ERROR(CheckCallerConnection(conn));
  std::vector<EnqueueResult> out(events.size());
  if (events.empty()) return out;
  if (events.size() > 1) {
    // Every aggregate's lock bucket first, in one statement: InnoDB locks them
    // in primary-key order, so two batches over colliding buckets lock in the
    // same order and cannot deadlock; the procedure's own lock is then held.
    std::string in;
    for (const Event& e : events) {
      in += std::string(in.empty() ? "" : ", ") +
            maria::sql::AggregateBucket(maria::Quote(conn, e.aggregate_type),
                                        maria::Quote(conn, e.aggregate_id));
    }
    auto locked = maria::Query(conn, "enqueue: lock aggregates", maria::sql::LockAggregates(in));
    if (!locked.ok()) return locked.status();
  }
  std::vector<std::size_t> order(events.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return std::tie(events[a].aggregate_type, events[a].aggregate_id) <
           std::tie(events[b].aggregate_type, events[b].aggregate_id);
  });
  for (std::size_t i : order) {
    auto r = CallEnqueue(conn, events[i]);
    if (!r.ok()) return r.status();
    out[i] = std::move(r).value();
  }
  return out;
}

Result<EnqueueResult> Enqueue(st_mysql* conn, const Event& event,
                              const MariaDbEnqueueOptions& options) {
  auto r = EnqueueBatch(conn, std::span<const Event>(&event, 1), options);
  if (!r.ok()) return r.status();
  return std::move(r).value()[0];
}

}  // namespace outbox
