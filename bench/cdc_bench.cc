// cdc_bench: outbox-relay with relay.source = cdc (a real process, release
// build) against the real PostgreSQL and outbox-mock-kafka, side by side in
// one run with its ceiling and with the polling relay.
//  1. drain: a backlog of --rows events committed in transactions of 1,000
//     while the slot exists; per run, interleaved:
//       - the ceiling: a bare libpq replication stream of the same slot and
//         WAL (pgoutput, binary, no decoding of tuples, no broker, no writes);
//       - outbox-relay, relay.source = cdc (reads the same WAL again: the
//         ceiling does not confirm);
//       - outbox-relay, relay.source = poll, on the same backlog (no slot).
//     Also the WAL the relay writes per event while draining (its row writes),
//     rows the cdc sweeper claimed, and the relay's peak RSS.
//  2. one transaction of --big-tx events, streamed: time and peak RSS.
//  3. latency: --rates events/s for --seconds, both sources; enqueue → row
//     marked SENT on the database clock (an upper bound of commit → broker ack).
//
//   cdc_bench --relay BIN --mock BIN [--db URL] [--rows 200000] [--runs 3]
//             [--big-tx 100000] [--rates 1000,5000] [--seconds 15]
#include <libpq-fe.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <limits>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <sstream>
#include <thread>

#include <httplib.h>

#include "drain_common.h"
#include "relay_http.h"
#include "mock_broker.h"
#include "subprocess.h"

namespace {

using namespace outbox;
using namespace outbox::bench;
using outbox::testing::Subprocess;
namespace fs = std::filesystem;

const std::string kSchema = "bench_cdc";
const std::string kSlot = "outbox_bench_cdc";  // DefaultStreamName(kSchema)

bool AnyUnsent(PGconn* c) {
  return !Scalar(c, "SELECT 1 FROM " + kSchema +
                        ".outbox WHERE status IN ('PENDING','PROCESSING') LIMIT 1")
              .empty();
}

std::uint64_t Lsn(PGconn* c, const std::string& sql) {
  return std::stoull(Scalar(c, "SELECT (" + sql + ") - '0/0'::pg_lsn"));
}

void DropSlot(PGconn* c) {
  Scalar(c, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE "
            "slot_name = '" + kSlot + "'");
}

void CreateSlot(PGconn* c) {
  DropSlot(c);
  Scalar(c, "SELECT pg_create_logical_replication_slot('" + kSlot + "', 'pgoutput')");
}

// `rows` events over `aggregates` aggregates, committed 1,000 per transaction.
void FillCommitted(PGconn* c, long rows, int aggregates, int per_tx) {
  MustExec(c, "TRUNCATE " + kSchema + ".outbox");
  for (long done = 0; done < rows; done += per_tx) {
    const long n = std::min<long>(per_tx, rows - done);
    MustExec(c, "INSERT INTO " + kSchema +
                    ".outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers) "
                    "SELECT " + kSchema + ".uuid_v7(), 'bench', 'agg-' || ((i + " +
                    std::to_string(done) + ") % " + std::to_string(aggregates) +
                    "), 'BenchEvent', convert_to(repeat('x', 200), 'UTF8'), "
                    "'{\"traceparent\":\"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}' "
                    "FROM generate_series(1, " + std::to_string(n) + ") i");
  }
  MustExec(c, "VACUUM ANALYZE " + kSchema + ".outbox");
  MustExec(c, "CHECKPOINT");
}

// The ceiling: read the slot from its start until the commit of the backlog's
// last transaction, counting INSERT messages; nothing decoded beyond the tag,
// nothing confirmed. Returns events/s.
double BareStream(const std::string& url, long rows) {
  const char* keys[] = {"dbname", "replication", nullptr};
  const char* vals[] = {url.c_str(), "database", nullptr};
  const auto t0 = std::chrono::steady_clock::now();
  PGconn* c = PQconnectdbParams(keys, vals, 1);
  if (PQstatus(c) != CONNECTION_OK) {
    std::fprintf(stderr, "bare stream: %s", PQerrorMessage(c));
    std::exit(1);
  }
  const std::string start = "START_REPLICATION SLOT " + kSlot +
                            " LOGICAL 0/0 (proto_version '1', publication_names '" + kSlot +
                            "', binary 'true')";
  PGresult* r = PQexec(c, start.c_str());
  if (PQresultStatus(r) != PGRES_COPY_BOTH) {
    std::fprintf(stderr, "bare stream: %s", PQerrorMessage(c));
    std::exit(1);
  }
  PQclear(r);
  long inserts = 0;
  for (;;) {
    char* buf = nullptr;
    const int n = PQgetCopyData(c, &buf, /*async=*/0);
    if (n < 0) {
      std::fprintf(stderr, "bare stream ended early: %s", PQerrorMessage(c));
      std::exit(1);
    }
    bool done = false;
    if (n > 25 && buf[0] == 'w') {
      const char tag = buf[25];
      if (tag == 'I') ++inserts;
      // The last transaction of the backlog: every insert seen, then its commit.
      if (tag == 'C' && inserts >= rows) done = true;
    }
    PQfreemem(buf);
    if (done) break;
  }
  const double secs = SecondsSince(t0);
  PQfinish(c);
  if (inserts != rows) {
    std::fprintf(stderr, "bare stream saw %ld inserts of %ld\n", inserts, rows);
    std::exit(1);
  }
  return static_cast<double>(rows) / secs;
}

// The one write per event a streamed row needs, alone: MarkSent with token 0
// (what the stream writes) over the committed backlog in batches of `batch`,
// one session, no broker and no reading. Returns rows/s.
double MarkOnly(const std::string& url, long rows, int batch) {
  PostgresStoreOptions o;
  o.conninfo = url;
  o.schema = kSchema;
  auto store = OpenPostgresStore(o);
  if (!store.ok()) {
    std::fprintf(stderr, "mark only: %s\n", store.status().ToString().c_str());
    std::exit(1);
  }
  PGconn* c = MustConnect(url);
  PGresult* res = PQexec(c, ("SELECT seq FROM " + kSchema + ".outbox ORDER BY seq").c_str());
  std::vector<Ticket> tickets;
  for (int i = 0; i < PQntuples(res); ++i) tickets.push_back({std::stoll(PQgetvalue(res, i, 0)), 0});
  PQclear(res);
  PQfinish(c);
  const auto t0 = std::chrono::steady_clock::now();
  long marked = 0;
  for (std::size_t i = 0; i < tickets.size(); i += static_cast<std::size_t>(batch)) {
    const std::size_t n = std::min(tickets.size() - i, static_cast<std::size_t>(batch));
    auto r = (*store)->MarkSent(std::span<const Ticket>(tickets).subspan(i, n));
    if (!r.ok()) {
      std::fprintf(stderr, "mark only: %s\n", r.status().ToString().c_str());
      std::exit(1);
    }
    marked += static_cast<long>(n);
  }
  const double secs = SecondsSince(t0);
  if (marked != rows) {
    std::fprintf(stderr, "mark only: %ld rows of %ld\n", marked, rows);
    std::exit(1);
  }
  return static_cast<double>(rows) / secs;
}

std::unique_ptr<Subprocess> StartRelay(const Flags& f, const std::string& url,
                                       const std::string& bootstrap, const std::string& source,
                                       const std::string& log,
                                       const std::vector<std::string>& more = {}) {
  std::vector<std::string> argv = {f.Str("relay"), "--db", url, "--bootstrap", bootstrap,
                                   "--set", "database.schema=" + kSchema,
                                   "--set", "relay.source=" + source,
                                   "--set", "http.listen=127.0.0.1:0",
                                   "--set", "log.level=warn",
                                   "--set", "retention.purge_interval_s=86400"};
  std::stringstream extra(f.Str(source + "-set"));  // e.g. --cdc-set a=1,b=2
  for (std::string kv; std::getline(extra, kv, ',');) {
    if (kv.empty()) continue;
    argv.push_back("--set");
    argv.push_back(kv);
  }
  for (const auto& kv : more) {  // after --cdc-set: these win
    argv.push_back("--set");
    argv.push_back(kv);
  }
  return std::make_unique<Subprocess>(argv, std::map<std::string, std::string>{},
                                      (fs::temp_directory_path() / log).string());
}

// CPU seconds (user + system) a process has used so far; 0 when it is gone.
double CpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  std::getline(in, stat);  // one line
  const auto close = stat.rfind(')');  // the name may hold spaces
  if (close == std::string::npos) return 0;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);  // utime, stime
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// The CPU seconds of every PostgreSQL process on the machine (the server and
// its backends, walsenders included).
double PostgresCpuSeconds() {
  double sum = 0;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream comm(entry.path() / "comm");
    std::string c;
    std::getline(comm, c);
    if (c == "postgres") sum += CpuSeconds(static_cast<pid_t>(std::stol(name)));
  }
  return sum;
}

pid_t g_broker_pid = -1;  // the private mock broker

struct Drain {
  double rate = 0;
  double wal_per_event = 0;  // bytes the relay's writes added to the WAL, per event
  long rss_kb = 0;
  long swept = 0;            // rows a claim took (cdc: the sweeper)
  double cpu_relay = 0, cpu_pg = 0, cpu_broker = 0;  // CPU seconds during the drain
};

Drain DrainWithRelay(const Flags& f, PGconn* admin, const std::string& url,
                     const std::string& bootstrap, const std::string& source, long rows,
                     const std::vector<std::string>& more = {}) {
  const std::uint64_t wal0 = Lsn(admin, "pg_current_wal_lsn()");
  const double pg0 = PostgresCpuSeconds(), broker0 = CpuSeconds(g_broker_pid);
  const auto t0 = std::chrono::steady_clock::now();
  static int drains = 0;  // one log per drain: cdc_bench_<source>_<n>.log
  auto relay = StartRelay(f, url, bootstrap, source,
                          "cdc_bench_" + source + "_" + std::to_string(++drains) + ".log", more);
  while (AnyUnsent(admin)) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  Drain d;
  d.rate = static_cast<double>(rows) / SecondsSince(t0);
  d.cpu_relay = CpuSeconds(relay->pid());
  d.cpu_pg = PostgresCpuSeconds() - pg0;
  d.cpu_broker = CpuSeconds(g_broker_pid) - broker0;
  d.wal_per_event =
      static_cast<double>(Lsn(admin, "pg_current_wal_lsn()") - wal0) / static_cast<double>(rows);
  d.rss_kb = PeakRssOfExecutable(f.Str("relay"));
  d.swept = std::stol(Scalar(admin, "SELECT count(*) FROM " + kSchema +
                                        ".outbox WHERE lease_token IS NOT NULL"));
  // database.sent_mode = delete leaves no row behind; update leaves every row SENT.
  const std::string sent = Scalar(admin, "SELECT count(*) FROM " + kSchema +
                                             ".outbox WHERE status = 'SENT'");
  const bool deleted = Scalar(admin, "SELECT count(*) FROM " + kSchema + ".outbox") == "0";
  if (sent != std::to_string(rows) && !deleted) {
    std::fprintf(stderr, "relay (%s) did not send every row:\n%s", source.c_str(),
                 relay->Log().c_str());
    std::exit(1);
  }
  relay->Signal(SIGTERM);
  if (relay->Wait(std::chrono::seconds(60)) != 0) {
    std::fprintf(stderr, "relay did not stop cleanly:\n%s", relay->Log().c_str());
    std::exit(1);
  }
  return d;
}

// The relay's commit → broker ack histogram (outbox_relay_commit_to_ack_seconds):
// the share of events acked within 5 ms (exact: a bucket bound) and p50 / p99
// interpolated inside their buckets as Prometheus' histogram_quantile does.
struct AckLatency {
  double count = 0, within_5ms = 0, p50_ms = 0, p99_ms = 0;
};

AckLatency ParseAckHistogram(const std::string& metrics) {
  const std::string prefix = "outbox_relay_commit_to_ack_seconds_bucket{transport=\"kafka\",le=\"";
  std::vector<std::pair<double, double>> buckets;  // upper bound (s), cumulative count
  std::istringstream in(metrics);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(prefix, 0) != 0) continue;
    const std::string le = line.substr(prefix.size(), line.find('"', prefix.size()) - prefix.size());
    const double bound = le == "+Inf" ? std::numeric_limits<double>::infinity() : std::stod(le);
    buckets.emplace_back(bound, std::stod(line.substr(line.rfind(' ') + 1)));
  }
  AckLatency a;
  if (buckets.empty() || buckets.back().second <= 0) return a;
  a.count = buckets.back().second;
  for (const auto& [bound, n] : buckets) {
    if (bound == 0.005) a.within_5ms = n / a.count;
  }
  auto quantile = [&](double q) {
    const double rank = q * a.count;
    double lo = 0, below = 0;
    for (const auto& [bound, n] : buckets) {
      if (n >= rank) {
        if (std::isinf(bound)) return lo * 1000;
        return (lo + (bound - lo) * (rank - below) / std::max(1.0, n - below)) * 1000;
      }
      lo = bound;
      below = n;
    }
    return lo * 1000;
  };
  a.p50_ms = quantile(0.5);
  a.p99_ms = quantile(0.99);
  return a;
}

// One producer: `rate` events/s for `seconds`, one transaction every 5 ms.
// Returns {offered rate, p50 ms, p99 ms, max ms, events}.
std::vector<std::string> Latency(const Flags& f, PGconn* admin, const std::string& url,
                                 const std::string& bootstrap, const std::string& source,
                                 int rate, int seconds) {
  MustExec(admin, "TRUNCATE " + kSchema + ".outbox");
  if (source == "cdc") CreateSlot(admin);
  const int port = FreePort();
  auto relay = StartRelay(f, url, bootstrap, source, "cdc_bench_latency_" + source + ".log",
                          {"http.listen=127.0.0.1:" + std::to_string(port)});
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const SteadyLoad load = OfferSteadyLoad(url, kSchema, rate, seconds);
  while (AnyUnsent(admin)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const AckLatency ack = ParseAckHistogram(HttpGet(port, "/metrics"));
  if (ack.count <= 0) {
    std::fprintf(stderr, "cdc_bench: no commit-to-ack histogram from the relay's /metrics:\n%s",
                 relay->Log().c_str());
    std::exit(1);
  }
  relay->Signal(SIGTERM);
  relay->Wait(std::chrono::seconds(60));
  std::vector<std::string> lat = SentLatency(admin, kSchema);
  char buf[64];
  std::vector<std::string> out = {std::to_string(static_cast<long>(load.offered)), lat[0], lat[1],
                                  lat[2], lat[3], lat[4]};
  for (double v : {ack.p50_ms, ack.p99_ms, ack.within_5ms * 100}) {
    std::snprintf(buf, sizeof buf, "%.2f", v);
    out.push_back(buf);
  }
  DropSlot(admin);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f(argc, argv, {{"db", DefaultDb()}, {"relay", ""}, {"mock", ""}, {"rows", "200000"},
                       {"runs", "3"}, {"big-tx", "100000"}, {"rates", "1000,5000"},
                       {"seconds", "15"}, {"aggregates", "1000"}, {"cdc-set", ""},
                       {"poll-set", ""}});
  const std::string url = f.Str("db");
  if (url.empty() || f.Str("relay").empty() || f.Str("mock").empty()) {
    std::fprintf(stderr, "cdc_bench: --relay BIN, --mock BIN and --db URL (or OUTBOX_PG_URL) are required\n");
    return 2;
  }
  const long rows = f.Int("rows");
  const int runs = f.Int("runs");
  PGconn* admin = MustConnect(url);
  DropSlot(admin);
  MustExec(admin, "DROP PUBLICATION IF EXISTS " + kSlot);
  MigrateFresh(admin, url, kSchema);
  MockBroker mock = StartMockBroker(f.Str("mock"), 3, "outbox.event.bench:32", "cdc_bench_mock");
  const std::string& bootstrap = mock.bootstrap;
  g_broker_pid = mock.process->pid();

  std::vector<double> bare, cdc, cdc_serial, poll, cdc_wal, poll_wal, cdc_rss, poll_rss, swept,
      marks;
  // CPU milliseconds per 1,000 events during the drains: {relay, PostgreSQL, broker}.
  std::map<std::string, std::vector<std::vector<double>>> cpu;
  auto note_cpu = [&](const std::string& name, const Drain& d) {
    const double per = 1e6 / static_cast<double>(rows);  // s per drain → ms per 1,000 events
    auto& v = cpu[name];
    v.resize(3);
    v[0].push_back(d.cpu_relay * per);
    v[1].push_back(d.cpu_pg * per);
    v[2].push_back(d.cpu_broker * per);
  };
  for (int r = 0; r < runs; ++r) {
    CreateSlot(admin);
    FillCommitted(admin, rows, f.Int("aggregates"), 1000);
    bare.push_back(BareStream(url, rows));
    std::fprintf(stderr, "run %d: bare stream %9.0f events/s\n", r + 1, bare.back());
    Drain d = DrainWithRelay(f, admin, url, bootstrap, "cdc", rows);
    cdc.push_back(d.rate);
    cdc_wal.push_back(d.wal_per_event);
    cdc_rss.push_back(static_cast<double>(d.rss_kb) / 1024.0);
    swept.push_back(static_cast<double>(d.swept));
    note_cpu("cdc", d);
    std::fprintf(stderr, "run %d: relay cdc    %9.0f events/s (%ld swept)\n", r + 1, d.rate, d.swept);
    DropSlot(admin);
    // The same with four stream batches in flight (opt-in, experimental).
    CreateSlot(admin);
    FillCommitted(admin, rows, f.Int("aggregates"), 1000);
    Drain s1 = DrainWithRelay(f, admin, url, bootstrap, "cdc", rows, {"cdc.batches_in_flight=4"});
    cdc_serial.push_back(s1.rate);
    note_cpu("cdc, 4 batches in flight", s1);
    std::fprintf(stderr, "run %d: relay cdc, 4 batches in flight %9.0f events/s\n", r + 1, s1.rate);
    DropSlot(admin);
    FillCommitted(admin, rows, f.Int("aggregates"), 1000);
    Drain p = DrainWithRelay(f, admin, url, bootstrap, "poll", rows);
    poll.push_back(p.rate);
    note_cpu("poll", p);
    poll_wal.push_back(p.wal_per_event);
    poll_rss.push_back(static_cast<double>(p.rss_kb) / 1024.0);
    std::fprintf(stderr, "run %d: relay poll   %9.0f events/s\n", r + 1, p.rate);
    FillCommitted(admin, rows, f.Int("aggregates"), 1000);
    marks.push_back(MarkOnly(url, rows, 2000));
    std::fprintf(stderr, "run %d: marks alone  %9.0f rows/s\n", r + 1, marks.back());
  }
  const double ceiling = Median(bare);
  std::printf("#### Drain of a %ld-event backlog (committed 1,000 per transaction, 200-byte payloads, %s aggregates)\n\n",
              rows, f.Str("aggregates").c_str());
  std::printf("| method | median events/s | runs | / ceiling | relay WAL per event | relay peak RSS |\n");
  std::printf("|---|---|---|---|---|---|\n");
  std::printf("| ceiling: bare libpq replication stream of the same slot (pgoutput, binary; no tuple decoding, no broker, no writes) | %.0f | %s | 1.00 | — | — |\n",
              ceiling, JoinRates(bare).c_str());
  std::printf("| the stream's one write per event alone: MarkSent (token 0) of the committed rows in batches of 2,000, one session (no reading, no broker) | %.0f | %s | %.2f | — | — |\n",
              Median(marks), JoinRates(marks).c_str(), Median(marks) / ceiling);
  std::printf("| outbox-relay, relay.source = cdc → mock Kafka | %.0f | %s | %.2f | %.0f bytes | %.1f MiB |\n",
              Median(cdc), JoinRates(cdc).c_str(), Median(cdc) / ceiling, Median(cdc_wal), Median(cdc_rss));
  std::printf("| outbox-relay, relay.source = cdc, cdc.batches_in_flight = 4 (opt-in) | %.0f | %s | %.2f | — | — |\n",
              Median(cdc_serial), JoinRates(cdc_serial).c_str(), Median(cdc_serial) / ceiling);
  std::printf("| outbox-relay, relay.source = poll → mock Kafka | %.0f | %s | %.2f | %.0f bytes | %.1f MiB |\n",
              Median(poll), JoinRates(poll).c_str(), Median(poll) / ceiling, Median(poll_wal), Median(poll_rss));
  std::printf("\ncdc / poll: %.2f×; cdc / the marks alone: %.2f×; cdc with 4 batches in flight / with %s: %.2f×. Rows the cdc relay's sweeper claimed during its drains: %s (the stream sent the rest).\n",
              Median(cdc) / Median(poll), Median(cdc) / Median(marks), "the default 1",
              Median(cdc_serial) / Median(cdc), JoinRates(swept).c_str());
  std::printf("\nWhere the two cores went during the drains — CPU time (user + system) per 1,000 events, medians:\n\n");
  std::printf("| relay | outbox-relay | PostgreSQL (all its processes: walsender, the relay's sessions, background) | mock broker | sum |\n");
  std::printf("|---|---|---|---|---|\n");
  for (const std::string name : {"cdc", "cdc, 4 batches in flight", "poll"}) {
    const auto& v = cpu[name];
    std::printf("| %s | %.1f ms | %.1f ms | %.1f ms | %.1f ms |\n", name.c_str(), Median(v[0]),
                Median(v[1]), Median(v[2]), Median(v[0]) + Median(v[1]) + Median(v[2]));
  }

  // ---- one large transaction ----
  {
    CreateSlot(admin);
    const long big = f.Int("big-tx");
    FillOutbox(admin, kSchema, static_cast<int>(big), f.Int("aggregates"), 200);  // one INSERT
    Drain d = DrainWithRelay(f, admin, url, bootstrap, "cdc", big);
    std::printf("\n#### One transaction of %ld events, streamed\n\n", big);
    std::printf("Drained in %.1f s (%.0f events/s), %ld rows swept; relay peak RSS %.1f MiB "
                "(the %ld-event drains above: %.1f MiB).\n",
                static_cast<double>(big) / d.rate, d.rate, d.swept,
                static_cast<double>(d.rss_kb) / 1024.0, rows, Median(cdc_rss));
    DropSlot(admin);
  }

  // ---- latency ----
  std::printf("\n#### Latency at a steady offered load (one producer, a transaction every 5 ms)\n\n");
  std::printf("| source | offered events/s | events | commit → broker ack p50 | p99 | acked within 5 ms | enqueue → marked SENT p50 | p99 | max | rows claimed |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  std::stringstream rates(f.Str("rates"));
  for (std::string rate; std::getline(rates, rate, ',');) {
    for (const std::string source : {"cdc", "poll"}) {
      auto l = Latency(f, admin, url, bootstrap, source, std::stoi(rate), f.Int("seconds"));
      std::printf("| %s | %s | %s | ≈ %s ms | ≈ %s ms | %s %% | %s ms | %s ms | %s ms | %s |\n",
                  source.c_str(), l[0].c_str(), l[4].c_str(), l[6].c_str(), l[7].c_str(),
                  l[8].c_str(), l[1].c_str(), l[2].c_str(), l[3].c_str(), l[5].c_str());
      std::fflush(stdout);
      std::fprintf(stderr, "latency %s at %s/s: ack p50 ~%s ms p99 ~%s ms (%s %% within 5 ms); "
                   "SENT p50 %s ms p99 %s ms\n", source.c_str(), rate.c_str(), l[6].c_str(),
                   l[7].c_str(), l[8].c_str(), l[1].c_str(), l[2].c_str());
    }
  }
  DropSlot(admin);
  MustExec(admin, "DROP PUBLICATION IF EXISTS " + kSlot);
  MustExec(admin, "DROP SCHEMA " + kSchema + " CASCADE");
  PQfinish(admin);
  return 0;
}
