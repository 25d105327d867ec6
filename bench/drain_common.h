// Shared by the drain benchmarks: filling a benchmark outbox, and the
// store-only and bare-SQL drains that serve as floor and ceiling.
#ifndef OUTBOX_BENCH_DRAIN_COMMON_H_
#define OUTBOX_BENCH_DRAIN_COMMON_H_

#include <functional>

#include "bench_util.h"
#include "outbox/postgres.h"

namespace outbox::bench {

// `rows` events, 200-byte payload by default, over `aggregates` interleaved aggregates.
inline void FillOutbox(PGconn* c, const std::string& schema, int rows, int aggregates,
                       int payload) {
  MustExec(c, "TRUNCATE " + schema + ".outbox");
  MustExec(c, "INSERT INTO " + schema +
                  ".outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers) "
                  "SELECT " + schema + ".uuid_v7(), 'bench', 'agg-' || (i % " +
                  std::to_string(aggregates) + "), 'BenchEvent', convert_to(repeat('x', " +
                  std::to_string(payload) + "), 'UTF8'), '{\"traceparent\":\"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}' "
                  "FROM generate_series(1, " + std::to_string(rows) + ") i");
  MustExec(c, "VACUUM ANALYZE " + schema + ".outbox");
  MustExec(c, "CHECKPOINT");
}

inline void MigrateFresh(PGconn* admin, const std::string& url, const std::string& schema) {
  MustExec(admin, "DROP SCHEMA IF EXISTS " + schema + " CASCADE");
  PostgresStoreOptions o;
  o.conninfo = url;
  o.schema = schema;
  auto s = OpenPostgresStore(o);
  if (!s.ok() || !(*s)->Migrate().ok()) {
    std::fprintf(stderr, "cannot migrate %s\n", schema.c_str());
    std::exit(1);
  }
}

// Claim + MarkSent in a loop from one session; returns rows/s.
inline double DrainStore(const std::string& url, const std::string& schema, SentMode mode,
                         bool ordered, int batch, long rows) {
  PostgresStoreOptions o;
  o.conninfo = url;
  o.schema = schema;
  o.sent_mode = mode;
  auto store = OpenPostgresStore(o);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
    std::exit(1);
  }
  ClaimOptions co;
  co.batch_size = batch;
  co.owner = "bench";
  co.ordered = ordered;
  long drained = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    auto c = (*store)->Claim(co);
    if (!c.ok()) {
      std::fprintf(stderr, "claim: %s\n", c.status().ToString().c_str());
      std::exit(1);
    }
    if (c->events.empty()) break;
    std::vector<Ticket> t;
    t.reserve(c->events.size());
    for (const auto& e : c->events) t.push_back(e.ticket);
    auto m = (*store)->MarkSent(t);
    if (!m.ok() || !m->refused.empty()) {
      std::fprintf(stderr, "mark sent failed\n");
      std::exit(1);
    }
    drained += static_cast<long>(c->events.size());
  }
  double secs = SecondsSince(t0);
  if (drained != rows) {
    std::fprintf(stderr, "drained %ld of %ld rows\n", drained, rows);
    std::exit(1);
  }
  return static_cast<double>(drained) / secs;
}

// The database's ceiling: a bare batched DELETE ... RETURNING, one connection.
inline double DrainCeiling(PGconn* c, const std::string& schema, int batch, long rows) {
  const std::string sql = "DELETE FROM " + schema + ".outbox WHERE seq IN (SELECT seq FROM " +
                          schema + ".outbox ORDER BY seq LIMIT " + std::to_string(batch) +
                          " FOR UPDATE SKIP LOCKED) RETURNING seq, event_id, aggregate_type, "
                          "aggregate_id, event_type, payload, headers, dedup_key";
  long drained = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    long n = MustExec(c, sql);
    if (n == 0) break;
    drained += n;
  }
  double secs = SecondsSince(t0);
  if (drained != rows) std::exit(1);
  return static_cast<double>(drained) / secs;
}

}  // namespace outbox::bench

#endif  // OUTBOX_BENCH_DRAIN_COMMON_H_
