// Shared by the drain benchmarks: filling a benchmark outbox, and the
// store-only and bare-SQL drains that serve as floor and ceiling.
#ifndef OUTBOX_BENCH_DRAIN_COMMON_H_
#define OUTBOX_BENCH_DRAIN_COMMON_H_

#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

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
  // The publication outlives the schema (without its table): a cdc relay of
  // the new schema would stream nothing. An old slot would start before the
  // new publication and fail on every read (docs/relay.md, "CDC").
  MustExec(admin, "DROP PUBLICATION IF EXISTS " + DefaultStreamName(schema));
  MustExec(admin, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                  "WHERE slot_name = '" + DefaultStreamName(schema) + "' AND NOT active");
  PostgresStoreOptions o;
  o.conninfo = url;
  o.schema = schema;
  auto s = OpenPostgresStore(o);
  if (!s.ok() || !(*s)->Migrate().ok()) {
    std::fprintf(stderr, "cannot migrate %s\n", schema.c_str());
    std::exit(1);
  }
}

// A fresh log-layout schema (issue 42) holding `rows` events written through
// enqueue(), `per_tx` a transaction, as producers write them.
inline void FillLog(PGconn* admin, const std::string& url, const std::string& schema, int rows,
                    int aggregates, int payload, int per_tx) {
  MustExec(admin, "DROP SCHEMA IF EXISTS " + schema + " CASCADE");
  PostgresStoreOptions o;
  o.conninfo = url;
  o.schema = schema;
  o.layout = StoreLayout::kLog;
  auto s = OpenPostgresStore(o);
  if (!s.ok() || !(*s)->Migrate().ok()) {
    std::fprintf(stderr, "cannot migrate the log schema %s\n", schema.c_str());
    std::exit(1);
  }
  MustExec(admin, "CREATE PROCEDURE " + schema + ".fill(n int, per_tx int, aggs int, payload int) "
                  "LANGUAGE plpgsql AS $$ BEGIN FOR t IN 0 .. (n / per_tx) - 1 LOOP "
                  "PERFORM " + schema + ".enqueue('bench', 'agg-' || (i % aggs), 'BenchEvent', "
                  "convert_to(repeat('x', payload), 'UTF8'), "
                  "'{\"traceparent\":\"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}') "
                  "FROM generate_series(t * per_tx, t * per_tx + per_tx - 1) i; COMMIT; END LOOP; END $$");
  MustExec(admin, "CALL " + schema + ".fill(" + std::to_string(rows) + ", " + std::to_string(per_tx) + ", " +
                      std::to_string(aggregates) + ", " + std::to_string(payload) + ")");
  MustExec(admin, "VACUUM ANALYZE " + schema + ".log, " + schema + ".slots");
  MustExec(admin, "CHECKPOINT");
}

// Claim + MarkSent in a loop on `store` until it is empty; returns rows/s.
// Claim + MarkSent until a claim comes back empty; returns the rows drained.
inline long DrainCount(Store& store, const ClaimOptions& co) {
  long drained = 0;
  for (;;) {
    auto c = store.Claim(co);
    if (!c.ok()) {
      std::fprintf(stderr, "claim: %s\n", c.status().ToString().c_str());
      std::exit(1);
    }
    if (c->events.empty()) break;
    std::vector<Ticket> t;
    t.reserve(c->events.size());
    for (const auto& e : c->events) t.push_back(e.ticket);
    auto m = store.MarkSent(t);
    if (!m.ok() || !m->refused.empty()) {
      std::fprintf(stderr, "mark sent failed\n");
      std::exit(1);
    }
    drained += static_cast<long>(c->events.size());
  }
  return drained;
}

// One session drains all `rows`; returns rows/s.
inline double DrainLoop(Store& store, const ClaimOptions& co, long rows) {
  auto t0 = std::chrono::steady_clock::now();
  const long drained = DrainCount(store, co);
  double secs = SecondsSince(t0);
  if (drained != rows) {
    std::fprintf(stderr, "drained %ld of %ld rows\n", drained, rows);
    std::exit(1);
  }
  return static_cast<double>(drained) / secs;
}

// The PostgreSQL store drained from one session; returns rows/s.
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
  return DrainLoop(**store, co, rows);
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

// Peak RSS (VmHWM, KiB) of the running process whose executable is `exe`; -1 if none.
inline long PeakRssOfExecutable(const std::string& exe) {
  namespace fs = std::filesystem;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmd(entry.path() / "cmdline");
    std::string c;
    std::getline(cmd, c, '\0');
    if (c == exe) return PeakRssKb(std::stol(name));
  }
  return -1;
}

// One producer offering `rate` events/s for `seconds`: a transaction of
// rate/200 events every 5 ms (200-byte payloads over 1,000 aggregates).
// Returns the offered rate; exits on an enqueue error.
// One producer commits per_transaction events every tick_ms: ticks of 5 ms,
// or one event per transaction at 1000/rate ms below 200 events/s.
// `session` (if any) runs first on the producer's connection (e.g. a SET).
struct SteadyLoad {
  double offered = 0;
  int per_transaction = 0;
  int tick_ms = 5;
  static constexpr int kTickMs = 5;
};
inline SteadyLoad OfferSteadyLoad(const std::string& url, const std::string& schema, int rate,
                                  int seconds, const std::string& session = "") {
  SteadyLoad load;
  load.per_transaction = std::max(1, rate * SteadyLoad::kTickMs / 1000);
  load.tick_ms = rate * SteadyLoad::kTickMs >= 1000 ? SteadyLoad::kTickMs : std::max(1, 1000 / std::max(1, rate));
  PGconn* producer = MustConnect(url);
  if (!session.empty()) MustExec(producer, session);
  EnqueueOptions eo;
  eo.schema = schema;
  std::vector<Event> events(static_cast<std::size_t>(load.per_transaction));
  long enqueued = 0;
  const auto start = std::chrono::steady_clock::now();
  for (long tick = 0; tick < static_cast<long>(seconds) * 1000 / load.tick_ms; ++tick) {
    for (int i = 0; i < load.per_transaction; ++i) {
      Event& e = events[static_cast<std::size_t>(i)];
      e.aggregate_type = "bench";
      e.aggregate_id = "agg-" + std::to_string((enqueued + i) % 1000);
      e.event_type = "BenchEvent";
      e.payload = std::string(200, 'x');
    }
    MustExec(producer, "BEGIN");
    auto r = EnqueueBatch(producer, events, eo);
    if (!r.ok()) {
      std::fprintf(stderr, "enqueue: %s\n", r.status().ToString().c_str());
      std::exit(1);
    }
    MustExec(producer, "COMMIT");
    enqueued += load.per_transaction;
    std::this_thread::sleep_until(start + std::chrono::milliseconds((tick + 1) * load.tick_ms));
  }
  load.offered = static_cast<double>(enqueued) / SecondsSince(start);
  PQfinish(producer);
  return load;
}

// enqueue (created_at) -> marked SENT (sent_at) over every row (or those
// `where` selects: an SQL condition on the outbox's columns), database clock:
// {p50 ms, p99 ms, max ms, rows, rows a claim took}.
inline std::vector<std::string> SentLatency(PGconn* admin, const std::string& schema,
                                            const std::string& where = "true") {
  const std::string q =
      "SELECT round((percentile_cont(0.5) WITHIN GROUP (ORDER BY lat) * 1000)::numeric, 2), "
      "round((percentile_cont(0.99) WITHIN GROUP (ORDER BY lat) * 1000)::numeric, 2), "
      "round((max(lat) * 1000)::numeric, 2), count(*), count(*) FILTER (WHERE claimed) FROM "
      "(SELECT extract(epoch FROM sent_at - created_at) AS lat, lease_token IS NOT NULL AS claimed "
      "FROM " + schema + ".outbox WHERE " + where + ") s";
  PGresult* res = PQexec(admin, q.c_str());
  std::vector<std::string> out;
  for (int i = 0; i < 5; ++i) out.push_back(PQgetvalue(res, 0, i));
  PQclear(res);
  return out;
}

}  // namespace outbox::bench

#endif  // OUTBOX_BENCH_DRAIN_COMMON_H_
