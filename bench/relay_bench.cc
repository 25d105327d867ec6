// relay_bench: outbox-relay (a real process, release build) against the real
// PostgreSQL and outbox-mock-kafka.
//  1. drain: a pre-filled outbox of --rows events, time until none is unsent;
//     in the same run and interleaved, the store-only floor (Claim+MarkSent from
//     one session, no broker) and the database's ceiling (bare DELETE…RETURNING).
//     Peak RSS (VmHWM) of the relay is read at the end of each drain.
//  2. latency: --rate events/s enqueued for --seconds by one producer while the
//     relay runs; enqueue -> marked SENT per event from the database clock
//     (an upper bound of commit -> broker ack, which happens before the mark).
//     With --warmup S, the same load runs S seconds first, straight after the
//     relay started; its events are reported apart (a worker's first claim
//     that finds rows is slower, see bench/experiments/first_claim.sh), and
//     the measured load follows at once.
//
//   relay_bench --relay BIN --mock BIN [--db URL] [--rows 200000] [--runs 3]
//               [--rate 5000] [--seconds 20] [--batch 500] [--workers 4]
//               [--relay-set KEY=VALUE[,KEY=VALUE...]]   (more relay settings)
//               [--producer-sql "SET outbox.notify = on"] (the producer's session)
//               [--http-drain 1]  (also drain with relay.transport = http to a
//                                  receiver in this process that answers 200)
//               [--rabbitmq URL]  (also drain with relay.transport = rabbitmq to that
//                                  node, and time a bare publisher there: the ceiling)
//               [--rabbitmq-queue durable|transient] (the latency run's queue)
//               [--bare-latency 1] (with --rabbitmq: instead of everything else, a
//                                  bare publisher's due -> confirm latency at
//                                  --rate for --seconds, each sent when due:
//                                  the broker's own share of the relay's latency)
//               [--warmup 0]      (seconds of the same load before the measured one)
//               [--idle 0]        (seconds with no load between the warm-up and the
//                                  measured load: the relay's idle poll backs off, and
//                                  the measured load's first events meet it)
//               [--log 0]         (1: also drain a log-layout schema, issue 42)
//               [--layout rows]   (log: the latency run on a log-layout schema; the
//                                  log keeps no send time, so only the relay's
//                                  commit-to-ack histogram is reported; it is
//                                  reported on either layout, its quantiles
//                                  interpolated inside the buckets)
//               [--keep-schema 0] (1: leave the bench's schema and its rows for
//                                  inspection; the next run drops it first)
// --rows 0 skips the drain.
#include <signal.h>

#include <filesystem>
#include <functional>
#include <algorithm>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "drain_common.h"
#include "http_receiver.h"
#include "relay_http.h"
#include "mock_broker.h"
#include "rabbitmq_publisher.h"

namespace {

using namespace outbox;
using namespace outbox::bench;
using outbox::testing::Subprocess;
namespace fs = std::filesystem;

const std::string kSchema = "bench_relay";



// The log layout's schema (--log 1), drained by the same relay.
const std::string kLogSchema = "bench_relay_log";

bool AnyUnsent(PGconn* c, const std::string& schema = kSchema) {
  return !Scalar(c, "SELECT 1 FROM " + schema +
                        ".outbox WHERE status IN ('PENDING','PROCESSING') LIMIT 1")
              .empty();
}

struct RelayRun {
  double rate = 0;
  long rss_kb = 0;
};

std::unique_ptr<Subprocess> StartRelay(const Flags& f, const std::string& url,
                                       const std::string& bootstrap, const std::string& mode,
                                       const fs::path& log, int http_port = 0,
                                       const std::vector<std::string>& sets = {}) {
  std::vector<std::string> argv = {f.Str("relay"), "--db", url, "--bootstrap", bootstrap,
                                   "--set", "database.schema=" + kSchema,
                                   "--set", "database.sent_mode=" + mode,
                                   "--set", "relay.batch_size=" + f.Str("batch"),
                                   "--set", "relay.workers=" + f.Str("workers"),
                                   "--set", "http.listen=127.0.0.1:" + std::to_string(http_port),
                                   "--set", "log.level=" + f.Str("relay-log-level"),
                                   "--set", "retention.purge_interval_s=86400"};
  for (const std::string& kv : sets) {
    argv.push_back("--set");
    argv.push_back(kv);
  }
  std::string extra = f.Str("relay-set");
  for (std::size_t pos = 0; !extra.empty() && pos <= extra.size();) {
    const std::size_t comma = extra.find(',', pos);
    const std::string kv = extra.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!kv.empty()) {
      argv.push_back("--set");
      argv.push_back(kv);
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return std::make_unique<Subprocess>(argv, std::map<std::string, std::string>{}, log.string());
}

// The relay's outbox_relay_commit_to_ack_seconds histogram between two scrapes
// of /metrics: {upper bound in s, events at or below it}, ascending (+Inf last).
std::vector<std::pair<double, double>> AckHistogram(const std::string& before,
                                                    const std::string& after) {
  std::vector<std::pair<double, double>> out;
  const std::string name = "outbox_relay_commit_to_ack_seconds_bucket";
  std::istringstream lines(after);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name + "{", 0) != 0) continue;
    const auto le = line.find("le=\"");
    if (le == std::string::npos) continue;
    const std::string bound = line.substr(le + 4, line.find('"', le + 4) - le - 4);
    const std::string query = name + "{le=\"" + bound + "\"}";
    out.emplace_back(bound == "+Inf" ? 1e9 : std::stod(bound),
                     MetricSample(after, query) - MetricSample(before, query));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A quantile of that histogram, in ms, interpolated linearly inside its bucket
// (as Prometheus' histogram_quantile): an estimate, as wide as the bucket.
double HistogramQuantileMs(const std::vector<std::pair<double, double>>& h, double q) {
  if (h.empty() || h.back().second <= 0) return -1;
  const double rank = q * h.back().second;
  double lower = 0, below = 0;
  for (const auto& [bound, count] : h) {
    if (count >= rank) {
      const double upper = bound >= 1e9 ? lower : bound;
      const double in = count - below;
      return 1000 * (lower + (upper - lower) * (in > 0 ? (rank - below) / in : 0));
    }
    lower = bound;
    below = count;
  }
  return -1;
}

RelayRun DrainWithRelay(const Flags& f, PGconn* admin, const std::string& url,
                        const std::string& bootstrap, const std::string& mode, long rows,
                        const std::vector<std::string>& sets = {},
                        const std::string& schema = kSchema) {
  const fs::path log = fs::temp_directory_path() / "relay_bench.log";
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> all = sets;
  all.push_back("database.schema=" + schema);  // later --set wins
  auto relay = StartRelay(f, url, bootstrap, mode, log, 0, all);
  while (AnyUnsent(admin, schema)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  RelayRun run;
  run.rate = static_cast<double>(rows) / SecondsSince(t0);
  // Every row must have been sent, none failed.
  std::string failed = Scalar(admin, "SELECT count(*) FROM " + schema + ".outbox WHERE status = 'FAILED'");
  if (failed != "0") {
    std::fprintf(stderr, "relay failed %s rows\n%s", failed.c_str(), relay->Log().c_str());
    std::exit(1);
  }
  std::string pid = Scalar(admin, "SELECT 0");  // keep the session warm
  (void)pid;
  run.rss_kb = PeakRssOfExecutable(f.Str("relay"));
  relay->Signal(SIGTERM);
  if (relay->Wait(std::chrono::seconds(60)) != 0) {
    std::fprintf(stderr, "relay did not stop cleanly:\n%s", relay->Log().c_str());
    std::exit(1);
  }
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f(argc, argv, {{"db", DefaultDb()}, {"relay", ""}, {"mock", ""}, {"rows", "200000"},
                       {"runs", "3"}, {"rate", "5000"}, {"seconds", "20"}, {"batch", "500"},
                       {"workers", "4"}, {"aggregates", "1000"}, {"relay-log-level", "warn"},
                       {"relay-set", ""}, {"producer-sql", ""}, {"http-drain", "0"}, {"rabbitmq", ""}, {"rabbitmq-queue", "durable"}, {"warmup", "0"}, {"idle", "0"},
                       {"keep-schema", "0"}, {"log", "0"}, {"bare-latency", "0"}, {"layout", "rows"}});
  if (f.Int("bare-latency") == 1 && !f.Str("rabbitmq").empty()) {
    const bool durable = f.Str("rabbitmq-queue") != "transient";
    PrepareRabbitMq(f.Str("rabbitmq"), "outbox.event.bench", durable ? "bench.relay" : "bench.relay.transient",
                    durable);
    if (f.Int("rate") < 1 || f.Int("seconds") < 1) {
      std::fprintf(stderr, "relay_bench --bare-latency: --rate and --seconds must be at least 1\n");
      return 2;
    }
    const std::vector<double> ms =
        BarePublishLatencies(f.Str("rabbitmq"), "outbox.event.bench", f.Int("rate"), f.Int("seconds"));
    const auto at = [&](double q) { return ms[std::min(ms.size() - 1, static_cast<std::size_t>(q * static_cast<double>(ms.size())))]; };
    std::printf("| offered load | events | due → confirm p50 | p99 | max |\n|---|---|---|---|---|\n");
    std::printf("| %d events/s for %d s, each sent when due (bare publisher) | %zu | %.2f ms | %.2f ms | %.2f ms |\n",
                f.Int("rate"), f.Int("seconds"), ms.size(), at(0.5), at(0.99), ms.back());
    return 0;
  }
  const std::string url = f.Str("db");
  if (url.empty() || f.Str("relay").empty() || f.Str("mock").empty()) {
    std::fprintf(stderr, "relay_bench: --relay BIN, --mock BIN and --db URL (or OUTBOX_PG_URL) are required\n");
    return 2;
  }
  const int rows = f.Int("rows"), runs = f.Int("runs"), batch = f.Int("batch");
  PGconn* admin = MustConnect(url);
  MigrateFresh(admin, url, kSchema);

  // A private broker; enough partitions that nothing hits the mock's ~5 MiB
  // per-partition cap during the bench (we do not read back here).
  MockBroker mock = StartMockBroker(f.Str("mock"), 3, "outbox.event.bench:32", "relay_bench_mock");
  const std::string& bootstrap = mock.bootstrap;

  struct Method {
    std::string name;
    std::function<double()> run;
    std::vector<double> rates;
  };
  std::vector<double> rss_update, rss_delete;
  std::vector<Method> methods = {
      {"outbox-relay → mock Kafka, sent_mode=update (default)", [&] {
         auto r = DrainWithRelay(f, admin, url, bootstrap, "update", rows);
         rss_update.push_back(static_cast<double>(r.rss_kb) / 1024.0);
         return r.rate;
       }, {}},
      {"outbox-relay → mock Kafka, sent_mode=delete", [&] {
         auto r = DrainWithRelay(f, admin, url, bootstrap, "delete", rows);
         rss_delete.push_back(static_cast<double>(r.rss_kb) / 1024.0);
         return r.rate;
       }, {}},
      {"store-only floor: Claim + MarkSent (update), 1 session, no broker",
       [&] { return DrainStore(url, kSchema, SentMode::kUpdate, true, batch, rows); }, {}},
      {"ceiling: bare DELETE … RETURNING, 1 connection, no broker",
       [&] { return DrainCeiling(admin, kSchema, batch, rows); }, {}},
  };
  // --log 1: the same relay draining a log-layout schema (issue 42) of the same
  // events, written through enqueue() (its fill is not timed).
  if (f.Int("log") != 0) {
    methods.insert(methods.begin() + 1,
                   Method{"outbox-relay → mock Kafka, the log layout (issue 42)", [&] {
                            FillLog(admin, url, kLogSchema, rows, f.Int("aggregates"), 200, 10);
                            return DrainWithRelay(f, admin, url, bootstrap, "update", rows, {}, kLogSchema).rate;
                          }, {}});
  }
  // HTTP delivery's receiver: 200 at once; threads for every connection the
  // relay keeps (4 workers x 8): the receiver is not what is measured.
  outbox::testing::HttpReceiver receiver(
      [](const httplib::Request&, httplib::Response& res) { res.status = 200; }, 64);
  if (f.Int("http-drain") != 0) {
    methods.insert(methods.begin() + 1,
                   Method{"outbox-relay → HTTP receiver (200 at once), sent_mode=update", [&] {
                            return DrainWithRelay(f, admin, url, bootstrap, "update", rows,
                                                  {"relay.transport=http",
                                                   "http_delivery.url=" + receiver.url("/events")})
                                .rate;
                          }, {}});
  }
  // --rabbitmq URL: the relay to RabbitMQ (a durable queue bound to the
  // exchange, purged before each run: what is measured is publishing), and a
  // bare publisher to the same exchange with confirms.
  const std::string amqp = f.Str("rabbitmq");
  if (!amqp.empty()) {
    const std::string exchange = "outbox.event.bench", queue = "bench.relay";
    methods.insert(methods.begin() + 1,
                   Method{"outbox-relay → RabbitMQ (confirms), sent_mode=update", [&, exchange, queue] {
                            PrepareRabbitMq(amqp, exchange, queue);
                            return DrainWithRelay(f, admin, url, bootstrap, "update", rows,
                                                  {"relay.transport=rabbitmq", "rabbitmq.url=" + amqp})
                                .rate;
                          }, {}});
    methods.insert(methods.begin() + 2,
                   Method{"bare publisher → RabbitMQ: 1 connection, confirms per 500 (no outbox)",
                          [&, exchange, queue] {
                            PrepareRabbitMq(amqp, exchange, queue);
                            return BarePublishRate(amqp, exchange, rows, batch, 200);
                          }, {}});
  }
  for (int r = 0; r < (rows > 0 ? runs : 0); ++r) {
    for (auto& m : methods) {
      FillOutbox(admin, kSchema, rows, f.Int("aggregates"), 200);
      m.rates.push_back(m.run());
      std::fprintf(stderr, "run %d: %-62s %9.0f events/s\n", r + 1, m.name.c_str(), m.rates.back());
    }
  }
  const double ceiling = Median(methods.back().rates);
  if (rows > 0) {
    std::printf("#### Drain of a pre-filled outbox (%d events, batch %d, %s relay workers)\n\n", rows,
                batch, f.Str("workers").c_str());
    std::printf("| method | median events/s | runs | / ceiling |\n|---|---|---|---|\n");
    for (auto& m : methods) {
      std::string all;
      for (double x : m.rates) {
        if (!all.empty()) all += ", ";
        all += std::to_string(static_cast<long>(x));
      }
      std::printf("| %s | %.0f | %s | %.2f |\n", m.name.c_str(), Median(m.rates), all.c_str(),
                  Median(m.rates) / ceiling);
    }
    std::printf("\nRelay peak RSS (VmHWM) during the drain: median %.1f MiB (update mode), %.1f MiB (delete mode).\n",
                Median(rss_update), Median(rss_delete));
  }

  // ---- latency at a steady offered load ----
  // --layout log: the relay on a log-layout schema (issue 42); the log keeps no
  // send time per event, so only the relay's histogram measures it.
  const bool on_log = f.Str("layout") == "log";
  const std::string lat_schema = on_log ? kLogSchema : kSchema;
  if (on_log) {
    FillLog(admin, url, kLogSchema, 10, 10, 10, 10);  // drained by the relay before the load
  } else {
    MustExec(admin, "TRUNCATE " + kSchema + ".outbox");
  }
  // A relay set to RabbitMQ (--relay-set) publishes to the bench's bound queue.
  // --rabbitmq-queue transient: a non-durable queue instead (no disk write per
  // message: what the fsync before each confirm costs).
  if (!amqp.empty()) {
    const bool durable = f.Str("rabbitmq-queue") != "transient";
    PrepareRabbitMq(amqp, "outbox.event.bench", durable ? "bench.relay" : "bench.relay.transient",
                    durable);
  }
  const fs::path log = fs::temp_directory_path() / "relay_bench_latency.log";
  const int port = FreePort();
  auto relay = StartRelay(f, url, bootstrap, "update", log, port, {"database.schema=" + lat_schema});
  std::this_thread::sleep_for(std::chrono::seconds(1));
  std::string warm_seq = "0";  // the last event of the warm-up
  if (f.Int("warmup") > 0) {
    (void)OfferSteadyLoad(url, lat_schema, f.Int("rate"), f.Int("warmup"), f.Str("producer-sql"));
    warm_seq = Scalar(admin, "SELECT coalesce(max(seq), 0) FROM " + lat_schema + ".outbox");
  }
  // An idle spell: the claims it costs (idle polls and the workers' safety nets).
  double idle_claims_per_s = -1;
  if (f.Int("idle") > 0) {
    while (AnyUnsent(admin, lat_schema)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const std::string idle_from = HttpGet(port, "/metrics");
    std::this_thread::sleep_for(std::chrono::seconds(f.Int("idle")));
    const std::string idle_to = HttpGet(port, "/metrics");
    idle_claims_per_s = (MetricSample(idle_to, "outbox_relay_claims_total") +
                         MetricSample(idle_to, "outbox_relay_empty_claims_total") -
                         MetricSample(idle_from, "outbox_relay_claims_total") -
                         MetricSample(idle_from, "outbox_relay_empty_claims_total")) /
                        f.Int("idle");
  }
  // The claims the relay made while the load ran (idle polls included): what
  // its latency costs the database.
  while (AnyUnsent(admin, lat_schema)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::string before = HttpGet(port, "/metrics");
  const int seconds = f.Int("seconds");
  const SteadyLoad load = OfferSteadyLoad(url, lat_schema, f.Int("rate"), seconds, f.Str("producer-sql"));
  while (AnyUnsent(admin, lat_schema)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::string after = HttpGet(port, "/metrics");
  const auto acks = AckHistogram(before, after);
  auto delta = [&](const char* name) { return MetricSample(after, name) - MetricSample(before, name); };
  const double claims = delta("outbox_relay_claims_total");
  const double empty = delta("outbox_relay_empty_claims_total");
  relay->Signal(SIGTERM);
  relay->Wait(std::chrono::seconds(60));
  const std::vector<std::string> lat =
      on_log ? std::vector<std::string>{"-", "-", "-", std::to_string(static_cast<long>(load.offered * seconds))}
             : SentLatency(admin, kSchema, "seq > " + warm_seq);
  const auto row = [](const std::string& label, const std::vector<std::string>& l) {
    std::printf("| %s | %s | %s ms | %s ms | %s ms |\n", label.c_str(), l[3].c_str(), l[0].c_str(),
                l[1].c_str(), l[2].c_str());
  };
  char label[128];
  std::snprintf(label, sizeof label, "%.0f events/s for %d s (%d events per transaction every %d ms)",
                load.offered, seconds, load.per_transaction, load.tick_ms);
  std::printf("\n#### Latency at a steady offered load\n\n");
  std::printf("| offered load | events | enqueue → marked SENT p50 | p99 | max |\n|---|---|---|---|---|\n");
  row(label, lat);
  // The relay's own histogram (enqueue → broker ack), on either layout.
  double within20 = 0;
  for (const auto& [bound, count] : acks) {
    if (bound <= 0.02 + 1e-9) within20 = count;
  }
  std::printf("\nRelay histogram (%s layout), enqueue → broker ack: p50 ≈ %.2f ms, p99 ≈ %.2f ms, "
              "%.2f %% within 20 ms, %.0f events.\n",
              on_log ? "log" : "rows", HistogramQuantileMs(acks, 0.5), HistogramQuantileMs(acks, 0.99),
              acks.empty() || acks.back().second <= 0 ? 0.0 : 100 * within20 / acks.back().second,
              acks.empty() ? 0.0 : acks.back().second);
  if (warm_seq != "0" && !on_log) {
    row("warm-up: the same load for " + std::to_string(f.Int("warmup")) +
            " s straight after the relay started",
        SentLatency(admin, kSchema, "seq <= " + warm_seq));
  }
  if (idle_claims_per_s >= 0) {
    std::printf("\nIdle for %d s before the load: %.1f claims/s.\n", f.Int("idle"), idle_claims_per_s);
  }
  std::printf("\nClaims during the load: %.0f with rows, %.0f empty (%.0f/s, %.2f per event).\n",
              claims, empty, (claims + empty) / seconds,
              (claims + empty) / std::max(1.0, std::atof(lat[3].c_str())));
  if (f.Int("keep-schema") == 0) MustExec(admin, "DROP SCHEMA " + kSchema + " CASCADE");
  MustExec(admin, "DROP SCHEMA IF EXISTS " + kLogSchema + " CASCADE");
  PQfinish(admin);
  return 0;
}
