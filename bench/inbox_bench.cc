// inbox_bench: effects applied per second through the inbox (stamp + one
// inserted row per event, one transaction per batch) by one consumer, from a
// pre-filled topic on outbox-mock-kafka. Medians of --runs runs; each run uses a
// fresh consumer group and empty stamp and effect tables. After each batch-handler
// run the topic is replayed twice by fresh groups (every message a duplicate):
// once counting the absorbed copies on the stamps (default), once not.
// With --daemon BIN it compares, instead, the in-process sink handler with the
// outbox-consumer daemon (BIN) running the same INSERT as its `sql` handler,
// taking turns run by run. With --daemon BIN --amqp URL it compares the daemon
// reading Kafka (the mock) with the daemon reading RabbitMQ (issue 43): each
// RabbitMQ run fills a fresh group's queue with the same messages (200-byte
// payloads, the outbox headers) first, by a bare publisher with confirms.
//
//   inbox_bench --mock BIN [--db URL] [--events 200000] [--runs 3] [--batch 500] [--daemon BIN]
//               [--amqp URL] [--prefetch 500]
#include <librdkafka/rdkafka.h>
#include <libpq-fe.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "bench_util.h"
#include "outbox/consumer.h"
#include "outbox/inbox.h"
#include "outbox/kafka.h"
#include "outbox/postgres_inbox.h"
#include "mock_broker.h"
#include "rabbitmq_publisher.h"

namespace {

using namespace outbox;
using namespace outbox::bench;

const std::string kSchema = "bench_inbox";
const std::string kTopic = "bench.events";

void ProduceAll(const std::string& bootstrap, int events) {
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap.c_str(), err, sizeof err);
  rd_kafka_conf_set(conf, "linger.ms", "20", err, sizeof err);
  rd_kafka_conf_set(conf, "log_level", "3", err, sizeof err);
  rd_kafka_t* p = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  const std::string payload(200, 'x');
  for (int i = 0; i < events; ++i) {
    std::string key = "agg-" + std::to_string(i % 1000);
    std::string id = "00000000-0000-7000-8000-" + std::to_string(100000000000LL + i);
    rd_kafka_headers_t* h = rd_kafka_headers_new(1);
    rd_kafka_header_add(h, "outbox-event-id", -1, id.data(), static_cast<ssize_t>(id.size()));
    for (;;) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
      rd_kafka_resp_err_t e = rd_kafka_producev(
          p, RD_KAFKA_V_TOPIC(kTopic.c_str()), RD_KAFKA_V_KEY(key.data(), key.size()),
          RD_KAFKA_V_VALUE(const_cast<char*>(payload.data()), payload.size()),
          RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_END);
#pragma GCC diagnostic pop
      if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL) break;
      rd_kafka_poll(p, 10);
    }
  }
  rd_kafka_flush(p, 120000);
  rd_kafka_destroy(p);
}

// CPU seconds (user + system) used so far by each of the machine's processes,
// by PID with its command name (/proc/PID/stat's comm, cut at 15 bytes).
using CpuReading = std::map<std::string, std::pair<std::string, double>>;  // pid -> (comm, seconds)
CpuReading CpuSecondsByProcess() {
  CpuReading out;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = entry.path().filename().string();
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    const auto open = line.find('('), close = line.rfind(')');
    if (open == std::string::npos || close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    std::string field;
    unsigned long long utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {  // fields 14 and 15: utime, stime
      if (i == 14) utime = std::stoull(field);
      if (i == 15) stime = std::stoull(field);
    }
    out[pid] = {line.substr(open + 1, close - open - 1), static_cast<double>(utime + stime) / tick};
  }
  return out;
}

// Microseconds of CPU per effect by part, between two readings: the broker
// (RabbitMQ's beam.smp or outbox-mock-kafka), PostgreSQL (every postgres
// process), and outbox-consumer. Per process, what it used in between (one that
// started in between counts from 0; one that ended in between is not counted:
// its last seconds are not known).
struct CpuPerEffect {
  double broker = 0, postgres = 0, consumer = 0;
};
CpuPerEffect CpuBetween(const CpuReading& a, const CpuReading& b, long effects) {
  std::map<std::string, double> used;  // comm -> seconds
  for (const auto& [pid, now] : b) {
    const auto before = a.find(pid);
    used[now.first] += now.second - (before == a.end() ? 0 : before->second.second);
  }
  const auto per_effect = [&](const char* comm) { return used[comm] * 1e6 / static_cast<double>(effects); };
  return {per_effect("beam.smp") + per_effect("outbox-mock-kaf"), per_effect("postgres"),
          per_effect("outbox-consumer")};
}

// Runs the outbox-consumer daemon at `bin` with one `sql` handler doing the
// sink handler's INSERT (the key is $4) under a fresh group, until every event
// has its effect row. Timed from the first effect row to the last (polled
// every 50 ms); returns effects/s, and in `cpu` (when set) the CPU each part
// used per effect over the same span.
// `broker`: --set arguments naming the broker (and handler.0.broker);
// `topic`: the handler's topic (RabbitMQ: the exchange); `group` its group.
double TimedDaemon(const std::string& bin, const std::string& url, std::vector<std::string> broker,
                   const std::string& topic, const std::string& group, int events, int batch,
                   PGconn* admin, CpuPerEffect* cpu = nullptr) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "inbox_bench_daemon";
  fs::create_directories(dir);
  const std::string config = (dir / "consumer.toml").string();
  std::ofstream(config) << "[database]\ninbox_schema = \"" << kSchema << "\"\n"
                        << "[consumer]\nbatch_size = " << batch << "\nbatch_wait_ms = 20\n"
                        << "[http]\nlisten = \"127.0.0.1:0\"\n[log]\nlevel = \"warn\"\n"
                        << "[[handler]]\ntopic = \"" << topic << "\"\ngroup = \"" << group
                        << "\"\nsql = \"INSERT INTO " << kSchema << ".effects VALUES ($4, 1)\"\n";
  std::vector<std::string> argv = {bin, "--config", config, "--set", "database.url=" + url};
  for (std::string& b : broker) {
    argv.push_back("--set");
    argv.push_back(std::move(b));
  }
  outbox::testing::Subprocess daemon(argv, {}, (dir / "log").string());
  const std::string count = "SELECT count(*) FROM " + kSchema + ".effects";
  long first = 0;
  for (;;) {
    first = std::stol(Scalar(admin, count));
    if (first > 0) break;
    if (daemon.Wait(std::chrono::milliseconds(0))) {
      std::fprintf(stderr, "outbox-consumer exited: %s\n", daemon.Log().c_str());
      std::exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto cpu0 = CpuSecondsByProcess();
  while (std::stol(Scalar(admin, count)) < events) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const double secs = SecondsSince(t0);
  if (cpu) *cpu = CpuBetween(cpu0, CpuSecondsByProcess(), events - first);
  daemon.Signal(SIGTERM);
  if (daemon.Wait(std::chrono::seconds(30)) != 0) {
    std::fprintf(stderr, "outbox-consumer did not stop cleanly: %s\n", daemon.Log().c_str());
    std::exit(1);
  }
  return static_cast<double>(events - first) / secs;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f(argc, argv, {{"db", DefaultDb()}, {"mock", ""}, {"events", "200000"}, {"runs", "3"},
                       {"batch", "500"}, {"daemon", ""}, {"amqp", ""}, {"prefetch", "500"}});
  if (f.Str("db").empty() || f.Str("mock").empty()) {
    std::fprintf(stderr, "inbox_bench: --mock BIN and --db URL (or OUTBOX_PG_URL) are required\n");
    return 2;
  }
  const std::string url = f.Str("db");
  const int events = f.Int("events"), runs = f.Int("runs");
  MockBroker mock = StartMockBroker(f.Str("mock"), 1, kTopic + ":64", "inbox_bench_mock");
  const std::string& bootstrap = mock.bootstrap;
  ProduceAll(bootstrap, events);

  PGconn* admin = MustConnect(url);
  MustExec(admin, "DROP SCHEMA IF EXISTS " + kSchema + " CASCADE");
  MustExec(admin, "CREATE SCHEMA " + kSchema);
  MustExec(admin, "CREATE TABLE " + kSchema + ".effects (k text, n int)");
  const std::string insert = "INSERT INTO " + kSchema + ".effects VALUES ($1, 1)";
  Handler handler = [&](const InboundMessage& m, pg_conn* txn) {
    const char* v[] = {m.key.c_str()};
    PGresult* r = PQexecParams(txn, insert.c_str(), 1, nullptr, v, nullptr, nullptr, 0);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    return ok ? HandlerResult::Ok() : HandlerResult::Transient("insert failed");
  };
  // The same effect, one multi-row INSERT per batch (see BatchHandler).
  const std::string insert_many =
      "INSERT INTO " + kSchema + ".effects SELECT k, 1 FROM unnest($1::text[]) k";
  BatchHandler batch_handler = [&](std::span<const InboundMessage* const> msgs, pg_conn* txn) {
    std::string keys = "{";
    for (const InboundMessage* m : msgs) {
      if (keys.size() > 1) keys += ',';
      keys += m->key;  // agg-N: no quoting needed
    }
    keys += '}';
    const char* v[] = {keys.c_str()};
    PGresult* res = PQexecParams(txn, insert_many.c_str(), 1, nullptr, v, nullptr, nullptr, 0);
    bool ok = PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
    return ok ? HandlerResult::Ok() : HandlerResult::Transient("insert failed");
  };
  // The per-message handler's statement, queued on the sink: the statements of a
  // batch go in one pipeline (StatementSink).
  SinkHandler sink_handler = [&](const InboundMessage& m, StatementSink& sink) {
    sink.Add(insert, {m.key});
    return HandlerResult::Ok();
  };
  PostgresInboxOptions io;
  io.conninfo = url;
  io.schema = kSchema;
  io.consumer = "bench";
  auto inbox = OpenPostgresInbox(io, handler);
  if (!inbox.ok() || !(*inbox)->Migrate().ok()) return 1;
  auto batch_inbox = OpenPostgresInbox(io, handler, batch_handler);
  if (!batch_inbox.ok()) return 1;
  auto sink_inbox = OpenPostgresInbox(io, sink_handler);
  if (!sink_inbox.ok()) return 1;
  PostgresInboxOptions uncounted_io = io;
  uncounted_io.count_duplicates = false;
  auto uncounted = OpenPostgresInbox(uncounted_io, handler, batch_handler);
  if (!uncounted.ok()) return 1;
  NullLogger quiet;
  // Consumes the whole topic with a fresh consumer group until every message was
  // applied (`replay` false) or absorbed as a duplicate (`replay` true: the topic
  // was applied before). Timed from the first message with that outcome (the
  // mock's group join, ~3 s, is left out); returns messages/s.
  int group_seq = 0;
  auto timed_consume = [&](InboxStore& into, bool replay) -> double {
    KafkaInboxSourceOptions so;
    so.properties = {{"bootstrap.servers", bootstrap}, {"group.id", "bench-" + std::to_string(group_seq++)}};
    auto source = OpenKafkaInboxSource(so, quiet);
    if (!source.ok()) {
      std::fprintf(stderr, "%s\n", source.status().ToString().c_str());
      std::exit(1);
    }
    ConsumerOptions co;
    co.topics = {kTopic};
    co.batch_size = f.Int("batch");
    auto consumer = Consumer::Create(co, **source, into, DedupByEventId(), quiet);
    if (!consumer.ok()) {
      std::fprintf(stderr, "%s\n", consumer.status().ToString().c_str());
      std::exit(1);
    }
    auto done = [&] {
      const ConsumerCounters c = (*consumer)->counters();
      return replay ? c.duplicates : c.applied;
    };
    std::thread runner([&] { (void)(*consumer)->Run(); });
    while (done() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    const auto t0 = std::chrono::steady_clock::now();
    const std::uint64_t first = done();
    while (done() < static_cast<std::uint64_t>(events)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const double secs = SecondsSince(t0);
    const std::uint64_t applied = (*consumer)->counters().applied;
    (*consumer)->Stop();
    runner.join();
    if (replay && applied != 0) {
      std::fprintf(stderr, "replay applied %llu effects\n", static_cast<unsigned long long>(applied));
      std::exit(1);
    }
    return static_cast<double>(static_cast<std::uint64_t>(events) - first) / secs;
  };
  const std::vector<std::string> on_kafka = {"kafka.bootstrap=" + bootstrap};
  if (!f.Str("daemon").empty() && !f.Str("amqp").empty()) {  // outbox-consumer: Kafka against RabbitMQ
    const std::string amqp = f.Str("amqp"), exchange = "bench.inbox.events";
    std::vector<double> kafka, rabbit, fill, bare;
    std::vector<CpuPerEffect> kafka_cpu, rabbit_cpu;
    for (int r = 0; r < 2 * runs; ++r) {
      const bool use_rabbit = (r % 2 == 1) != ((r / 2) % 2 == 1);  // order flips each round
      MustExec(admin, "TRUNCATE " + kSchema + ".effects, " + kSchema + ".inbox_stamps");
      const std::string group = "bench-daemon-" + std::to_string(group_seq++);
      if (use_rabbit) {
        const std::string queue = group + "." + exchange;  // RabbitMqQueueName
        PrepareRabbitMq(amqp, exchange, queue);
        fill.push_back(BarePublishRate(amqp, exchange, events, 500, 200));
        bare.push_back(BareConsumeRate(amqp, queue, events, std::stoi(f.Str("prefetch")), f.Int("batch")));
        (void)BarePublishRate(amqp, exchange, events, 500, 200);  // the same messages again, for the daemon
        rabbit.push_back(TimedDaemon(f.Str("daemon"), url,
                                     {"rabbitmq.url=" + amqp, "handler.0.broker=rabbitmq",
                                      "rabbitmq.prefetch=" + f.Str("prefetch")},
                                     exchange, group, events, f.Int("batch"), admin, &rabbit_cpu.emplace_back()));
        outbox::testing::AmqpClient c(amqp);
        for (const char* q : {"", ".retry.1", ".retry.2", ".retry.3", ".dlt"}) c.DeleteQueue(queue + q);
      } else {
        kafka.push_back(TimedDaemon(f.Str("daemon"), url, on_kafka, kTopic, group, events,
                                    f.Int("batch"), admin, &kafka_cpu.emplace_back()));
      }
      std::fprintf(stderr, "run %d (%s): %.0f effects/s\n", r / 2 + 1, use_rabbit ? "RabbitMQ" : "Kafka",
                   use_rabbit ? rabbit.back() : kafka.back());
    }
    std::printf("| outbox-consumer, `sql = \"INSERT ... VALUES ($4, 1)\"`, reading | events | batch | median effects/s | runs |\n|---|---|---|---|---|\n");
    std::printf("| Kafka (`outbox-mock-kafka`, 64 partitions) | %d | %d | %.0f | %s |\n", events, f.Int("batch"),
                Median(kafka), JoinRates(kafka).c_str());
    std::printf("| RabbitMQ (the group's durable queue, prefetch %s) | %d | %d | %.0f | %s |\n",
                f.Str("prefetch").c_str(), events, f.Int("batch"), Median(rabbit), JoinRates(rabbit).c_str());
    std::printf("| bare RabbitMQ consumer: no database, `basic.ack` every %d (the ceiling) | %d | | %.0f | %s |\n",
                f.Int("batch"), events, Median(bare), JoinRates(bare).c_str());
    std::printf("\nRabbitMQ / Kafka: %.2f; outbox-consumer on RabbitMQ / the bare consumer: %.2f. (Filling "
                "each RabbitMQ queue first, by one publisher with confirms: %.0f messages/s, median.)\n",
                Median(rabbit) / Median(kafka), Median(rabbit) / Median(bare), Median(fill));
    const auto part = [](const std::vector<CpuPerEffect>& v, double CpuPerEffect::*m) {
      std::vector<double> x;
      for (const CpuPerEffect& c : v) x.push_back(c.*m);
      return Median(x);
    };
    std::printf("\n| CPU per effect, median µs (over the timed span; all the machine's processes of each name) | broker | PostgreSQL | outbox-consumer | sum | the sum's ceiling on %ld cores |\n|---|---|---|---|---|---|\n",
                sysconf(_SC_NPROCESSORS_ONLN));
    for (const auto& [name, v] : {std::pair<const char*, const std::vector<CpuPerEffect>*>{"Kafka (`outbox-mock-kafka`)", &kafka_cpu},
                                  {"RabbitMQ (`beam.smp`)", &rabbit_cpu}}) {
      const double b = part(*v, &CpuPerEffect::broker), p = part(*v, &CpuPerEffect::postgres),
                   c = part(*v, &CpuPerEffect::consumer);
      std::printf("| %s | %.1f | %.1f | %.1f | %.1f | %.0f effects/s |\n", name, b, p, c, b + p + c,
                  static_cast<double>(sysconf(_SC_NPROCESSORS_ONLN)) * 1e6 / (b + p + c));
    }
    MustExec(admin, "DROP SCHEMA " + kSchema + " CASCADE");
    PQfinish(admin);
    return 0;
  }
  if (!f.Str("daemon").empty()) {  // the sink handler against outbox-consumer, taking turns
    std::vector<double> sink, daemon;
    for (int r = 0; r < 2 * runs; ++r) {
      const bool use_daemon = (r % 2 == 1) != ((r / 2) % 2 == 1);  // order flips each round
      MustExec(admin, "TRUNCATE " + kSchema + ".effects, " + kSchema + ".inbox_stamps");
      if (use_daemon) {
        daemon.push_back(TimedDaemon(f.Str("daemon"), url, on_kafka, kTopic,
                                     "bench-daemon-" + std::to_string(group_seq++), events, f.Int("batch"), admin));
      } else {
        sink.push_back(timed_consume(**sink_inbox, false));
      }
      std::fprintf(stderr, "run %d (%s): %.0f effects/s\n", r / 2 + 1, use_daemon ? "outbox-consumer" : "sink handler",
                   use_daemon ? daemon.back() : sink.back());
    }
    std::printf("| consumer | events | batch | median effects/s | runs |\n|---|---|---|---|---|\n");
    std::printf("| C++ `SinkHandler` in-process: `INSERT ... VALUES ($1, 1)` with the key | %d | %d | %.0f | %s |\n",
                events, f.Int("batch"), Median(sink), JoinRates(sink).c_str());
    std::printf("| `outbox-consumer`, `sql = \"INSERT ... VALUES ($4, 1)\"` | %d | %d | %.0f | %s |\n", events,
                f.Int("batch"), Median(daemon), JoinRates(daemon).c_str());
    std::printf("\noutbox-consumer / SinkHandler: %.2f.\n", Median(daemon) / Median(sink));
    MustExec(admin, "DROP SCHEMA " + kSchema + " CASCADE");
    PQfinish(admin);
    return 0;
  }
  std::vector<double> rates, sink_rates, batch_rates, replay_counted, replay_uncounted;
  const char* style_names[] = {"per-message handler", "per-message sink handler", "batch handler"};
  for (int r = 0; r < 3 * runs; ++r) {
    const int style = r % 3;  // the three handlers take turns, run by run
    const bool use_batch = style == 2;
    MustExec(admin, "TRUNCATE " + kSchema + ".effects, " + kSchema + ".inbox_stamps");
    auto& into = style == 0 ? rates : style == 1 ? sink_rates : batch_rates;
    InboxStore& store = style == 0 ? **inbox : style == 1 ? **sink_inbox : **batch_inbox;
    into.push_back(timed_consume(store, false));
    const std::string n = std::to_string(MustExec(admin, "SELECT 1 FROM " + kSchema + ".effects"));
    std::fprintf(stderr, "run %d (%s): %.0f effects/s (%s effect rows)\n", r / 3 + 1,
                 style_names[style], into.back(), n.c_str());
    if (use_batch) {  // then replay the topic twice, counting on the stamps or not, alternating order
      const bool counted_first = (r / 3) % 2 == 0;
      for (int k = 0; k < 2; ++k) {
        const bool counted = (k == 0) == counted_first;
        (counted ? replay_counted : replay_uncounted)
            .push_back(timed_consume(counted ? **batch_inbox : **uncounted, true));
        std::fprintf(stderr, "run %d replay (%s): %.0f copies/s absorbed\n", r / 3 + 1,
                     counted ? "counted" : "not counted",
                     (counted ? replay_counted : replay_uncounted).back());
      }
    }
  }
  std::printf("| consumer | events | batch | median effects/s | runs |\n|---|---|---|---|---|\n");
  std::printf("| 1 consumer, per-message handler: one `INSERT` per event | %d | %d | %.0f | %s |\n",
              events, f.Int("batch"), Median(rates), JoinRates(rates).c_str());
  std::printf("| 1 consumer, per-message sink handler: the same `INSERT` queued on a `StatementSink` (one pipeline per batch) | %d | %d | %.0f | %s |\n",
              events, f.Int("batch"), Median(sink_rates), JoinRates(sink_rates).c_str());
  std::printf("| 1 consumer, batch handler: one multi-row `INSERT` per batch | %d | %d | %.0f | %s |\n",
              events, f.Int("batch"), Median(batch_rates), JoinRates(batch_rates).c_str());
  std::printf("\n| replay of the applied topic (every message a duplicate) | events | batch | median copies absorbed/s | runs |\n|---|---|---|---|---|\n");
  std::printf("| duplicates counted on the stamps (default) | %d | %d | %.0f | %s |\n", events,
              f.Int("batch"), Median(replay_counted), JoinRates(replay_counted).c_str());
  std::printf("| not counted (`PostgresInboxOptions::count_duplicates = false`) | %d | %d | %.0f | %s |\n", events,
              f.Int("batch"), Median(replay_uncounted), JoinRates(replay_uncounted).c_str());
  std::printf("\nCounted / not counted: %.2f.\n", Median(replay_counted) / Median(replay_uncounted));
  MustExec(admin, "DROP SCHEMA " + kSchema + " CASCADE");
  PQfinish(admin);
  return 0;
}
