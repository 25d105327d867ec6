// Our side of bench/peers: the relay engine (the same code as outbox-relay:
// workers, ordered lease claim, mark SENT) with a transport that hands each
// event to an in-process handler that only counts — the counterpart of
// pg-transactional-outbox's listener with a counting handler
// (bench/peers/peer_theirs.js). No broker on either side: what is compared is
// the outbox machinery against the same PostgreSQL.
//
//   peer_ours --db URL --mode drain|latency [--rows 50000] [--seconds 60]
//             [--rate 1000] [--workers 4] [--batch 500] [--notify off|on]
//             [--source poll|cdc]
// --source cdc: the relay's change stream (logical replication; the slot is
//          created before the outbox is filled) with its workers as sweepers.
// drain:   a pre-filled outbox of --rows events (200-byte payload, 1000
//          aggregates); rate = handled / time until all are handled (or over
//          --seconds if that comes first).
// latency: --rate events/s, one per transaction, for --seconds; commit (the
//          COMMIT's reply) -> handler call, per event. --notify on makes the
//          producers set outbox.notify, so commits wake the relay.
// Prints one JSON line.
#include <atomic>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "../drain_common.h"
#include "outbox/log.h"
#include "outbox/metrics.h"
#include "outbox/postgres.h"
#include "outbox/relay.h"
#include "outbox/transport.h"

namespace {

using namespace outbox;
using namespace outbox::bench;
using Steady = std::chrono::steady_clock;

const std::string kSchema = "bench_peer_ours";

// Delivers to the handler: records when each event arrived; always acked.
class HandlerTransport final : public Transport {
 public:
  std::vector<PublishResult> Publish(std::span<const ClaimedEvent> events) override {
    const auto now = Steady::now();
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& e : events) {
      if (record_) handled_at_.emplace(e.event_id, now);
    }
    last_ = now;
    handled_ += events.size();
    return std::vector<PublishResult>(events.size(), PublishResult{PublishOutcome::kAcked, ""});
  }
  std::chrono::milliseconds MaxPublishTime() const override { return std::chrono::seconds(1); }
  bool Healthy() const override { return true; }

  void Record(bool on) { record_ = on; }
  std::size_t handled() const {
    std::lock_guard<std::mutex> lock(mu_);
    return handled_;
  }
  Steady::time_point last() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_;
  }
  std::unordered_map<std::string, Steady::time_point> TakeHandled() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(handled_at_);
  }

 private:
  mutable std::mutex mu_;
  bool record_ = false;
  std::size_t handled_ = 0;
  Steady::time_point last_;
  std::unordered_map<std::string, Steady::time_point> handled_at_;
};

double Percentile(std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1, static_cast<std::size_t>(p * static_cast<double>(sorted.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  Flags f(argc, argv,
          {{"db", DefaultDb()}, {"mode", "drain"}, {"rows", "50000"}, {"seconds", "60"},
           {"rate", "1000"}, {"workers", "4"}, {"batch", "500"}, {"notify", "off"},
           {"source", "poll"}});
  const std::string url = f.Str("db");
  const bool cdc = f.Str("source") == "cdc";
  const std::string slot = DefaultStreamName(kSchema);
  PGconn* admin = MustConnect(url);
  auto drop_stream = [&] {
    Scalar(admin, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE "
                  "slot_name = '" + slot + "'");
    MustExec(admin, "DROP PUBLICATION IF EXISTS " + slot);
  };
  drop_stream();
  MigrateFresh(admin, url, kSchema);
  if (cdc) Scalar(admin, "SELECT pg_create_logical_replication_slot('" + slot + "', 'pgoutput')");
  const long rows = f.Int("rows");
  if (f.Str("mode") == "drain") FillOutbox(admin, kSchema, static_cast<int>(rows), 1000, 200);

  HandlerTransport transport;
  transport.Record(f.Str("mode") == "latency");
  MetricsRegistry registry;
  RelayMetrics metrics(registry);
  NullLogger logger;
  RelayOptions ro;
  ro.relay_id = "peer-bench";
  ro.workers = f.Int("workers");
  ro.batch_size = f.Int("batch");
  ro.lease = std::chrono::seconds(10);
  PostgresStoreOptions so;
  so.conninfo = url;
  so.schema = kSchema;
  ChangeSource streams;
  if (cdc) {
    ro.source = RelaySource::kCdc;
    ro.cdc.slot = slot;
    PostgresChangeStreamOptions co;
    co.conninfo = url;
    co.schema = kSchema;
    streams = PostgresChangeSource(co);
  }
  auto relay = Relay::Create(ro, PartsOf([so] { return OpenPostgresStore(so); }), streams, transport,
                             metrics, logger);
  if (!relay.ok()) {
    std::fprintf(stderr, "relay: %s\n", relay.status().ToString().c_str());
    return 1;
  }
  const auto t0 = Steady::now();
  std::thread runner([&] { (void)(*relay)->Run(); });
  const double seconds = f.Int("seconds");
  std::string out;
  char buf[512];
  if (f.Str("mode") == "drain") {
    const auto deadline = t0 + std::chrono::duration<double>(seconds);
    while (transport.handled() < static_cast<std::size_t>(rows) && Steady::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    const std::size_t handled = transport.handled();
    const auto end = handled >= static_cast<std::size_t>(rows) ? transport.last() : Steady::now();
    const double window = std::chrono::duration<double>(end - t0).count();
    std::snprintf(buf, sizeof buf,
                  "{\"side\":\"ours\",\"source\":\"%s\",\"mode\":\"drain\",\"rows\":%ld,\"handled\":%zu,"
                  "\"window_s\":%.3f,\"rate\":%.1f,\"complete\":%s}",
                  f.Str("source").c_str(), rows, handled, window, static_cast<double>(handled) / window,
                  handled >= static_cast<std::size_t>(rows) ? "true" : "false");
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(1));  // the relay is connected
    const int rate = f.Int("rate");
    const long total = static_cast<long>(rate * seconds);
    const int producers = 4;  // like the peer's pool of 4 connections
    std::mutex mu;
    std::unordered_map<std::string, Steady::time_point> committed;
    std::atomic<long> next{0};
    const auto start = Steady::now();
    auto produce = [&] {
      PGconn* c = MustConnect(url);
      if (f.Str("notify") == "on") MustExec(c, "SET outbox.notify = on");
      EnqueueOptions eo;
      eo.schema = kSchema;
      const std::string payload = "{\"data\":\"" + std::string(200, 'x') + "\"}";
      for (long i; (i = next.fetch_add(1)) < total;) {
        std::this_thread::sleep_until(start + std::chrono::microseconds(i * 1'000'000 / rate));
        Event e;
        e.aggregate_type = "bench";
        e.aggregate_id = "agg-" + std::to_string(i % 1000);
        e.event_type = "BenchEvent";
        e.payload = payload;
        MustExec(c, "BEGIN");
        auto r = Enqueue(c, e, eo);
        if (!r.ok()) {
          std::fprintf(stderr, "enqueue: %s\n", r.status().ToString().c_str());
          std::exit(1);
        }
        MustExec(c, "COMMIT");
        const auto now = Steady::now();
        std::lock_guard<std::mutex> lock(mu);
        committed.emplace(r->event_id, now);
      }
      PQfinish(c);
    };
    std::vector<std::thread> threads;
    for (int i = 0; i < producers; ++i) threads.emplace_back(produce);
    for (auto& t : threads) t.join();
    const double produce_secs = std::chrono::duration<double>(Steady::now() - start).count();
    const auto deadline = Steady::now() + std::chrono::seconds(30);
    while (transport.handled() < static_cast<std::size_t>(total) && Steady::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    auto handled_at = transport.TakeHandled();
    std::vector<double> lat;
    for (const auto& [id, c] : committed) {
      auto it = handled_at.find(id);
      if (it != handled_at.end()) {
        lat.push_back(std::max(0.0, std::chrono::duration<double, std::milli>(it->second - c).count()));
      }
    }
    std::sort(lat.begin(), lat.end());
    std::this_thread::sleep_for(std::chrono::seconds(1));  // let the last marks commit
    const long left = MustExec(admin, "SELECT 1 FROM " + kSchema + ".outbox WHERE status <> 'SENT'");
    std::snprintf(buf, sizeof buf,
                  "{\"side\":\"ours\",\"source\":\"%s\",\"mode\":\"latency\",\"notify\":\"%s\","
                  "\"left_unprocessed\":%ld,\"rate_target\":%d,\"offered_rate\":%.1f,\"sent\":%ld,"
                  "\"handled\":%zu,\"p50_ms\":%.3f,\"p99_ms\":%.3f}",
                  f.Str("source").c_str(), f.Str("notify").c_str(), left, rate, static_cast<double>(total) / produce_secs, total,
                  lat.size(), Percentile(lat, 0.5), Percentile(lat, 0.99));
  }
  (*relay)->RequestStop();
  runner.join();
  drop_stream();
  MustExec(admin, "DROP SCHEMA IF EXISTS " + kSchema + " CASCADE");
  PQfinish(admin);
  std::printf("%s\n", buf);
  return 0;
}
