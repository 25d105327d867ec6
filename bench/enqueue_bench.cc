// enqueue_bench: what the producer pays. Several connections enqueue events in
// transactions (EnqueueBatch), with the opt-in NOTIFY off and on, alternating
// run by run in one process. Reports events/s committed, medians.
//
//   enqueue_bench [--db URL] [--producers 4] [--events 20000] [--per-txn 10] [--runs 3]
#include <thread>

#include "bench_util.h"
#include "outbox/postgres.h"

namespace {
using namespace outbox;
using namespace outbox::bench;
const std::string kSchema = "bench_enqueue";
}  // namespace

int main(int argc, char** argv) {
  Flags f(argc, argv, {{"db", DefaultDb()}, {"producers", "4"}, {"events", "20000"},
                       {"per-txn", "10"}, {"runs", "3"}});
  const std::string url = f.Str("db");
  if (url.empty()) return 2;
  PGconn* admin = MustConnect(url);
  MustExec(admin, "DROP SCHEMA IF EXISTS " + kSchema + " CASCADE");
  {
    PostgresStoreOptions o;
    o.conninfo = url;
    o.schema = kSchema;
    auto s = OpenPostgresStore(o);
    if (!s.ok() || !(*s)->Migrate().ok()) return 1;
  }
  const int producers = f.Int("producers"), events = f.Int("events"), per_txn = f.Int("per-txn");
  std::vector<double> off, on;
  for (int r = 0; r < 2 * f.Int("runs"); ++r) {
    const bool notify = r % 2 == 1;
    MustExec(admin, "TRUNCATE " + kSchema + ".outbox");
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> ts;
    for (int p = 0; p < producers; ++p) {
      ts.emplace_back([&, p] {
        PGconn* c = MustConnect(url);
        if (notify) MustExec(c, "SET outbox.notify = on");
        EnqueueOptions eo;
        eo.schema = kSchema;
        for (int i = 0; i < events / producers; i += per_txn) {
          std::vector<Event> batch;
          for (int j = 0; j < per_txn; ++j) {
            Event e;
            e.aggregate_type = "bench";
            e.aggregate_id = std::string("p");  // appends: GCC 12 -Wrestrict false positive
            e.aggregate_id += std::to_string(p);
            e.aggregate_id += '-';
            e.aggregate_id += std::to_string((i + j) % 100);
            e.event_type = "BenchEvent";
            e.payload = std::string(200, 'x');
            batch.push_back(std::move(e));
          }
          MustExec(c, "BEGIN");
          if (!EnqueueBatch(c, batch, eo).ok()) std::exit(1);
          MustExec(c, "COMMIT");
        }
        PQfinish(c);
      });
    }
    for (auto& t : ts) t.join();
    (notify ? on : off).push_back(static_cast<double>(events) / SecondsSince(t0));
  }
  std::printf("| producers | events | per transaction | NOTIFY off (events/s) | NOTIFY on (events/s) | on / off |\n");
  std::printf("|---|---|---|---|---|---|\n");
  std::printf("| %d | %d | %d | %.0f | %.0f | %.2f |\n", producers, events, per_txn, Median(off),
              Median(on), Median(on) / Median(off));
  MustExec(admin, "DROP SCHEMA " + kSchema + " CASCADE");
  PQfinish(admin);
  return 0;
}
