// relay_edge_bench: the relay just past its comfortable envelope, as a real
// process (release build) against the real PostgreSQL and outbox-mock-kafka.
//
//   --scenario hot       10,000 events on one aggregate interleaved with 10,000
//                        spread over 1,000 others, against 20,000 spread; time
//                        until the hot key (resp. 10,000 spread) is all SENT;
//                        relay.workers 1 and 4, alternating, --runs times.
//   --scenario large     2,000 events of 1,000,000-byte payloads drained with the
//                        relay's defaults; peak RSS (VmHWM) of the relay.
//   --scenario bigtable  --sent-rows SENT rows older than retention (default 5M);
//                        the relay purges them while --rate events/s flow through
//                        it; purge rate and the stats query's time, and its plan.
//
//   relay_edge_bench --relay BIN --mock BIN [--db URL] --scenario S [--runs 3]
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "drain_common.h"
#include "mock_broker.h"

namespace {

using namespace outbox;
using namespace outbox::bench;
using outbox::testing::Subprocess;
namespace fs = std::filesystem;

const std::string kSchema = "bench_edge";


long Count(PGconn* c, const std::string& where) {
  return std::atol(Scalar(c, "SELECT count(*) FROM " + kSchema + ".outbox WHERE " + where).c_str());
}


std::unique_ptr<Subprocess> StartRelay(const Flags& f, const std::string& url,
                                       const std::string& bootstrap,
                                       std::vector<std::string> sets) {
  std::vector<std::string> argv = {f.Str("relay"), "--db", url, "--bootstrap", bootstrap,
                                   "--set", "database.schema=" + kSchema,
                                   "--set", "http.listen=127.0.0.1:0",
                                   "--set", "log.level=warn"};
  for (auto& s : sets) {
    argv.push_back("--set");
    argv.push_back(s);
  }
  return std::make_unique<Subprocess>(argv, std::map<std::string, std::string>{},
                                      (fs::temp_directory_path() / "relay_edge_bench.log").string());
}

void Stop(std::unique_ptr<Subprocess>& relay) {
  relay->Signal(SIGTERM);
  if (relay->Wait(std::chrono::seconds(60)) != 0) {
    std::fprintf(stderr, "relay did not stop cleanly:\n%s", relay->Log().c_str());
    std::exit(1);
  }
}

// rows of payload `bytes` for aggregate expression `agg` (SQL over i).
void Insert(PGconn* c, long rows, const std::string& agg_expr, int bytes) {
  MustExec(c, "INSERT INTO " + kSchema +
                  ".outbox (event_id, aggregate_type, aggregate_id, event_type, payload) "
                  "SELECT " + kSchema + ".uuid_v7(), 'bench', " + agg_expr +
                  ", 'BenchEvent', convert_to(repeat('x', " + std::to_string(bytes) +
                  "), 'UTF8') FROM generate_series(1, " + std::to_string(rows) + ") i");
}

void Prepare(PGconn* c) {
  MustExec(c, "VACUUM ANALYZE " + kSchema + ".outbox");
  MustExec(c, "CHECKPOINT");
}

int Hot(const Flags& f, PGconn* admin, const std::string& url, const std::string& bootstrap) {
  struct Case {
    std::string name;
    bool hot;
    std::string workers;
    std::vector<double> rates;  // events/s of the measured 10,000
  };
  std::vector<Case> cases = {{"10k spread (of 20k spread)", false, "1", {}},
                             {"10k spread (of 20k spread)", false, "4", {}},
                             {"10k on one key (+10k spread)", true, "1", {}},
                             {"10k on one key (+10k spread)", true, "4", {}}};
  for (int r = 0; r < f.Int("runs"); ++r) {
    for (auto& c : cases) {
      MustExec(admin, "TRUNCATE " + kSchema + ".outbox");
      // Interleaved in seq order: odd i hot (or spread), even i spread.
      Insert(admin, 20000,
             c.hot ? "CASE WHEN i % 2 = 1 THEN 'hot' ELSE 'agg-' || (i % 1000) END"
                   : "'agg-' || (i % 1000)",
             200);
      Prepare(admin);
      const std::string measured =
          c.hot ? "aggregate_id = 'hot'" : "seq % 2 = 1";  // 10,000 either way
      auto t0 = std::chrono::steady_clock::now();
      auto relay = StartRelay(f, url, bootstrap, {"relay.workers=" + c.workers});
      double t_measured = 0;
      while (true) {
        if (t_measured == 0 && Count(admin, measured + " AND status <> 'SENT'") == 0) {
          t_measured = SecondsSince(t0);
        }
        if (t_measured > 0 && Count(admin, "status <> 'SENT'") == 0) break;
        if (SecondsSince(t0) > 600) {
          std::fprintf(stderr, "hot: not drained after 600 s\n");
          return 1;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      Stop(relay);
      c.rates.push_back(10000.0 / t_measured);
      std::fprintf(stderr, "run %d: %-30s workers %s: %.2f s\n", r + 1, c.name.c_str(),
                   c.workers.c_str(), t_measured);
    }
  }
  std::printf("| events measured | relay.workers | median time to SENT | median events/s | runs (events/s) |\n"
              "|---|---|---|---|---|\n");
  for (auto& c : cases) {
    std::string all;
    for (double x : c.rates) all += (all.empty() ? "" : ", ") + std::to_string(static_cast<long>(x));
    std::printf("| %s | %s | %.2f s | %.0f | %s |\n", c.name.c_str(), c.workers.c_str(),
                10000.0 / Median(c.rates), Median(c.rates), all.c_str());
  }
  std::printf("\nHot key / spread, same workers: %.2f (1 worker), %.2f (4 workers). "
              "Hot key, 4 workers / 1 worker: %.2f.\n",
              Median(cases[2].rates) / Median(cases[0].rates),
              Median(cases[3].rates) / Median(cases[1].rates),
              Median(cases[3].rates) / Median(cases[2].rates));
  return 0;
}

int Large(const Flags& f, PGconn* admin, const std::string& url, const std::string& bootstrap) {
  std::vector<double> rss, secs;
  const long rows = f.Int("large-rows");
  for (int r = 0; r < f.Int("runs"); ++r) {
    MustExec(admin, "TRUNCATE " + kSchema + ".outbox");
    Insert(admin, rows, "'agg-' || (i % 100)", 1'000'000 - 8);
    Prepare(admin);
    auto t0 = std::chrono::steady_clock::now();
    auto relay = StartRelay(f, url, bootstrap, {});
    while (Count(admin, "status <> 'SENT'") > 0) {
      if (Count(admin, "status = 'FAILED'") > 0) {
        std::fprintf(stderr, "large: rows FAILED\n%s", relay->Log().c_str());
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    secs.push_back(SecondsSince(t0));
    rss.push_back(static_cast<double>(PeakRssKb(relay->pid())) / 1024.0);
    Stop(relay);
    std::fprintf(stderr, "run %d: %.1f s, peak RSS %.1f MiB\n", r + 1, secs.back(), rss.back());
  }
  std::printf("| events | payload | relay settings | median drain | median peak RSS (VmHWM) | runs (MiB) |\n"
              "|---|---|---|---|---|---|\n");
  std::string all;
  for (double x : rss) all += (all.empty() ? "" : ", ") + std::to_string(static_cast<long>(x));
  std::printf("| %ld | 1,000,000 bytes | defaults (4 workers, batch 500, batch_bytes 8 MiB) | %.1f s | %.1f MiB | %s |\n",
              rows, Median(secs), Median(rss), all.c_str());
  return 0;
}

double StatsMs(PGconn* c) {
  auto t0 = std::chrono::steady_clock::now();
  Scalar(c, "SELECT * FROM " + kSchema + ".stats()");
  return SecondsSince(t0) * 1000.0;
}

int BigTable(const Flags& f, PGconn* admin, const std::string& url, const std::string& bootstrap) {
  const long sent = f.Int("sent-rows");
  MustExec(admin, "TRUNCATE " + kSchema + ".outbox");
  auto t_fill = std::chrono::steady_clock::now();
  for (long done = 0; done < sent; done += 500000) {
    MustExec(admin, "INSERT INTO " + kSchema +
                        ".outbox (event_id, aggregate_type, aggregate_id, event_type, payload, "
                        "status, attempts, sent_at, created_at) SELECT " + kSchema +
                        ".uuid_v7(), 'bench', 'agg-' || (i % 1000), 'BenchEvent', "
                        "convert_to(repeat('x', 200), 'UTF8'), 'SENT', 1, "
                        "now() - interval '8 days', now() - interval '8 days' "
                        "FROM generate_series(1, " + std::to_string(std::min(500000L, sent - done)) + ") i");
  }
  Prepare(admin);
  std::fprintf(stderr, "filled %ld SENT rows in %.0f s\n", sent, SecondsSince(t_fill));
  std::vector<double> stats_before;
  for (int i = 0; i < 5; ++i) stats_before.push_back(StatsMs(admin));
  // The plan inside stats() (a function hides it from EXPLAIN): its unsent count.
  std::string inner;
  PGresult* p2 = PQexec(admin, ("SET enable_seqscan = off; EXPLAIN (COSTS OFF) SELECT "
                                "count(*) FILTER (WHERE status = 'PENDING'), count(*) FILTER "
                                "(WHERE status = 'PROCESSING') FROM " + kSchema +
                                ".outbox WHERE status IN ('PENDING', 'PROCESSING')").c_str());
  for (int i = 0; i < PQntuples(p2); ++i) inner += std::string("    ") + PQgetvalue(p2, i, 0) + "\n";
  PQclear(p2);
  MustExec(admin, "RESET enable_seqscan");

  // Offered load while the relay purges: a producer enqueues --rate events/s.
  auto relay = StartRelay(f, url, bootstrap, {"retention.purge_interval_s=1"});
  const int rate = f.Int("rate");
  PGconn* producer = MustConnect(url);
  EnqueueOptions eo;
  eo.schema = kSchema;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<double> stats_during;
  long enqueued = 0;
  double purge_s = 0;
  for (long tick = 0;; ++tick) {
    std::vector<Event> evs(static_cast<std::size_t>(rate / 100));
    for (std::size_t i = 0; i < evs.size(); ++i) {
      evs[i].aggregate_type = "bench";
      evs[i].aggregate_id = "live-" + std::to_string((enqueued + static_cast<long>(i)) % 1000);
      evs[i].event_type = "BenchEvent";
      evs[i].payload = std::string(200, 'x');
    }
    MustExec(producer, "BEGIN");
    if (!EnqueueBatch(producer, evs, eo).ok()) return 1;
    MustExec(producer, "COMMIT");
    enqueued += static_cast<long>(evs.size());
    if (tick % 100 == 0) {
      stats_during.push_back(StatsMs(admin));
      // An existence probe (cheap), not a count, so the producer keeps its pace.
      const bool old = !Scalar(admin, "SELECT 1 FROM " + kSchema +
                                          ".outbox WHERE status = 'SENT' AND sent_at < now() - "
                                          "interval '7 days' LIMIT 1").empty();
      std::fprintf(stderr, "%.0f s: old SENT rows left: %s, stats %.1f ms\n", SecondsSince(t0),
                   old ? "yes" : "no", stats_during.back());
      if (!old) {
        purge_s = SecondsSince(t0);
        break;
      }
      if (SecondsSince(t0) > 1800) break;
    }
    std::this_thread::sleep_until(t0 + std::chrono::milliseconds((tick + 1) * 10));
  }
  const double offered = static_cast<double>(enqueued) / SecondsSince(t0);
  while (Count(admin, "status IN ('PENDING', 'PROCESSING')") > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  Stop(relay);
  PQfinish(producer);
  std::printf("| SENT rows past retention | offered load meanwhile | all purged after | purge rate | stats() before (median of 5) | stats() during purge (median) |\n"
              "|---|---|---|---|---|---|\n");
  std::printf("| %ld | %.0f events/s (all delivered) | %s | %s | %.1f ms | %.1f ms |\n", sent, offered,
              purge_s > 0 ? (std::to_string(static_cast<long>(purge_s)) + " s").c_str() : "not within 1800 s",
              purge_s > 0 ? (std::to_string(static_cast<long>(static_cast<double>(sent) / purge_s)) + " rows/s").c_str() : "-",
              Median(stats_before), Median(stats_during));
  std::printf("\nPlan of the pending count inside `stats()` (the other counts are alike, on the\n"
              "partial index of FAILED/SKIPPED rows):\n\n```\n%s```\n", inner.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f(argc, argv, {{"db", DefaultDb()}, {"relay", ""}, {"mock", ""}, {"scenario", ""},
                       {"runs", "3"}, {"large-rows", "2000"}, {"sent-rows", "5000000"},
                       {"rate", "5000"}});
  const std::string url = f.Str("db");
  if (url.empty() || f.Str("relay").empty() || f.Str("mock").empty()) {
    std::fprintf(stderr, "relay_edge_bench: --relay BIN, --mock BIN and --db URL are required\n");
    return 2;
  }
  PGconn* admin = MustConnect(url);
  MigrateFresh(admin, url, kSchema);
  MockBroker mock =
      StartMockBroker(f.Str("mock"), 3, "outbox.event.bench:32", "relay_edge_bench_mock");
  int rc = 2;
  const std::string s = f.Str("scenario");
  if (s == "hot") rc = Hot(f, admin, url, mock.bootstrap);
  if (s == "large") rc = Large(f, admin, url, mock.bootstrap);
  if (s == "bigtable") rc = BigTable(f, admin, url, mock.bootstrap);
  if (rc == 2) std::fprintf(stderr, "relay_edge_bench: --scenario hot|large|bigtable\n");
  MustExec(admin, "DROP SCHEMA " + kSchema + " CASCADE");
  PQfinish(admin);
  return rc;
}
