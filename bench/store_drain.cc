// store_drain: how fast the PostgreSQL store alone drains a pre-filled outbox
// through Claim + MarkSent (no broker), next to the database's own ceiling — a
// bare batched DELETE ... RETURNING from one connection. All methods run in the
// same process, interleaved run by run, so they see the same machine state.
//
//   store_drain [--db URL] [--rows 200000] [--batch 500] [--runs 3]
//               [--aggregates 1000] [--payload 200]
#include <functional>

#include "bench_util.h"
#include "outbox/postgres.h"

namespace {

using namespace outbox;
using namespace outbox::bench;

const std::string kSchema = "bench_store_drain";

void Fill(PGconn* c, int rows, int aggregates, int payload) {
  MustExec(c, "TRUNCATE " + kSchema + ".outbox");
  MustExec(c, "INSERT INTO " + kSchema +
                  ".outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers) "
                  "SELECT " + kSchema + ".uuid_v7(), 'bench', 'agg-' || (i % " +
                  std::to_string(aggregates) + "), 'BenchEvent', convert_to(repeat('x', " +
                  std::to_string(payload) + "), 'UTF8'), '{\"traceparent\":\"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}' "
                  "FROM generate_series(1, " + std::to_string(rows) + ") i");
  MustExec(c, "VACUUM ANALYZE " + kSchema + ".outbox");
  MustExec(c, "CHECKPOINT");
}

// Returns rows drained per second.
double DrainStore(const std::string& url, SentMode mode, bool ordered, int batch, long rows) {
  PostgresStoreOptions o;
  o.conninfo = url;
  o.schema = kSchema;
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

double DrainCeiling(PGconn* c, int batch, long rows) {
  const std::string sql = "DELETE FROM " + kSchema + ".outbox WHERE seq IN (SELECT seq FROM " +
                          kSchema + ".outbox ORDER BY seq LIMIT " + std::to_string(batch) +
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

}  // namespace

int main(int argc, char** argv) {
  Flags f(argc, argv,
          {{"db", DefaultDb()}, {"rows", "200000"}, {"batch", "500"}, {"runs", "3"},
           {"aggregates", "1000"}, {"payload", "200"}});
  const std::string url = f.Str("db");
  if (url.empty()) {
    std::fprintf(stderr, "store_drain: --db URL or OUTBOX_PG_URL required\n");
    return 2;
  }
  const int rows = f.Int("rows"), batch = f.Int("batch"), runs = f.Int("runs");
  PGconn* admin = MustConnect(url);
  MustExec(admin, "DROP SCHEMA IF EXISTS " + kSchema + " CASCADE");
  {
    PostgresStoreOptions o;
    o.conninfo = url;
    o.schema = kSchema;
    auto s = OpenPostgresStore(o);
    if (!s.ok() || !(*s)->Migrate().ok()) return 1;
  }
  struct Method {
    std::string name;
    std::function<double()> run;
    std::vector<double> rates;
  };
  std::vector<Method> methods = {
      {"Claim (ordered) + MarkSent, sent_mode=update", [&] { return DrainStore(url, SentMode::kUpdate, true, batch, rows); }, {}},
      {"Claim (ordered) + MarkSent, sent_mode=delete", [&] { return DrainStore(url, SentMode::kDelete, true, batch, rows); }, {}},
      {"Claim (unordered) + MarkSent, sent_mode=delete", [&] { return DrainStore(url, SentMode::kDelete, false, batch, rows); }, {}},
      {"ceiling: bare DELETE ... RETURNING (1 connection)", [&] { return DrainCeiling(admin, batch, rows); }, {}},
  };
  for (int r = 0; r < runs; ++r) {
    for (auto& m : methods) {
      Fill(admin, rows, f.Int("aggregates"), f.Int("payload"));
      m.rates.push_back(m.run());
      std::fprintf(stderr, "run %d: %-52s %9.0f rows/s\n", r + 1, m.name.c_str(), m.rates.back());
    }
  }
  const double ceiling = Median(methods.back().rates);
  std::printf("| method | rows | batch | median rows/s | runs (rows/s) | / ceiling |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (auto& m : methods) {
    std::string all;
    for (double x : m.rates) {
      if (!all.empty()) all += ", ";
      all += std::to_string(static_cast<long>(x));
    }
    std::printf("| %s | %d | %d | %.0f | %s | %.2f |\n", m.name.c_str(), rows, batch,
                Median(m.rates), all.c_str(), Median(m.rates) / ceiling);
  }
  MustExec(admin, "DROP SCHEMA " + kSchema + " CASCADE");
  PQfinish(admin);
  return 0;
}
