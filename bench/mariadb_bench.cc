// mariadb_bench: the MariaDB store beside the PostgreSQL one, in one process,
// interleaved run by run so both see the same machine state:
//   - drain of a pre-filled outbox through Claim + MarkSent (no broker), and
//     each database's ceiling: a bare batched DELETE ... RETURNING;
//   - enqueue: 4 connections committing transactions of 10 events;
//   - inbox: effects/s of Apply (batches of 100, one INSERT per effect).
//
//   mariadb_bench [--rows 200000] [--batch 500] [--runs 3] [--events 20000]
// Needs OUTBOX_PG_URL and OUTBOX_MYSQL_URL (scripts/testenv).
#include <mysql.h>

#include <atomic>
#include <map>
#include <thread>

#include "drain_common.h"
#include "outbox/mariadb.h"
#include "outbox/mariadb_inbox.h"
#include "outbox/postgres_inbox.h"

namespace {

using namespace outbox;
using namespace outbox::bench;

const std::string kSchema = "bench_maria_pg";   // PostgreSQL schema
const std::string kDb = "bench_maria";          // MariaDB database

MYSQL* MyConnect(const std::string& base, const std::string& db) {
  std::string s = base.substr(std::string("mysql://").size());
  const std::string user = s.substr(0, s.find('@'));
  s = s.substr(s.find('@') + 1);
  const std::string host = s.substr(0, s.find(':'));
  const unsigned port = static_cast<unsigned>(std::atoi(s.substr(s.find(':') + 1).c_str()));
  MYSQL* c = mysql_init(nullptr);
  if (!mysql_real_connect(c, host.c_str(), user.c_str(), nullptr, db.empty() ? nullptr : db.c_str(),
                          port, nullptr, 0)) {
    std::fprintf(stderr, "mariadb: %s\n", mysql_error(c));
    std::exit(1);
  }
  return c;
}

long MyExec(MYSQL* c, const std::string& sql) {
  if (mysql_query(c, sql.c_str()) != 0) {
    std::fprintf(stderr, "mariadb: %s: %s\n", sql.substr(0, 80).c_str(), mysql_error(c));
    std::exit(1);
  }
  long n = static_cast<long>(mysql_affected_rows(c));
  if (MYSQL_RES* r = mysql_store_result(c)) {
    n = static_cast<long>(mysql_num_rows(r));
    mysql_free_result(r);
  }
  return n;
}

void MyFill(MYSQL* c, int rows, int aggregates, int payload) {
  MyExec(c, "TRUNCATE outbox");
  MyExec(c, "INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers, "
            "available_at, created_at) SELECT uuid(), 'bench', concat('agg-', seq % " +
                std::to_string(aggregates) + "), 'BenchEvent', repeat('x', " + std::to_string(payload) +
                "), '{\"traceparent\":\"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}', "
                "utc_timestamp(6), utc_timestamp(6) FROM seq_1_to_" + std::to_string(rows));
  MyExec(c, "ANALYZE TABLE outbox");
}

// `sessions` threads each run `drain` (returning the rows it drained) until
// the table is empty; rows/s over all of them.
double Parallel(int sessions, long rows, const std::function<long(int)>& drain) {
  std::atomic<long> total{0};
  std::vector<std::thread> ts;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < sessions; ++i) ts.emplace_back([&, i] { total += drain(i); });
  for (auto& t : ts) t.join();
  const double secs = SecondsSince(t0);
  if (total != rows) {
    std::fprintf(stderr, "drained %ld of %ld rows\n", total.load(), rows);
    std::exit(1);
  }
  return static_cast<double>(rows) / secs;
}

// The MariaDB store (lease claim, ordered) drained from `sessions` sessions.
double MyDrainStore(const std::string& url, SentMode mode, int batch, long rows, int sessions) {
  return Parallel(sessions, rows, [&](int i) {
    MariaDbStoreOptions o;
    o.url = url;
    o.sent_mode = mode;
    auto store = OpenMariaDbStore(o);
    if (!store.ok()) {
      std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
      std::exit(1);
    }
    ClaimOptions co;
    co.batch_size = batch;
    co.owner = "bench-" + std::to_string(i);
    return DrainCount(**store, co);
  });
}

// The seed's design (mechanism b): one transaction per batch holds the rows'
// locks for the whole "publish" — SELECT ... FOR UPDATE SKIP LOCKED, then
// UPDATE to SENT (attempts + 1), COMMIT. No lease, no fencing token, and no
// per-aggregate order across sessions. `sessions` sessions.
double MySkipLockedDrain(const std::string& base, int batch, long rows, int sessions) {
  return Parallel(sessions, rows, [&](int) {
    MYSQL* c = MyConnect(base, kDb);
    MyExec(c, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
    const std::string pick =
        "SELECT seq, event_id, aggregate_type, aggregate_id, event_type, payload, headers, dedup_key, "
        "attempts FROM outbox WHERE status = 'PENDING' ORDER BY seq LIMIT " + std::to_string(batch) +
        " FOR UPDATE SKIP LOCKED";
    long drained = 0;
    for (;;) {
      MyExec(c, "START TRANSACTION");
      if (mysql_query(c, pick.c_str()) != 0) {
        std::fprintf(stderr, "mariadb: %s\n", mysql_error(c));
        std::exit(1);
      }
      MYSQL_RES* r = mysql_store_result(c);
      std::string seqs;
      long n = 0;
      while (MYSQL_ROW row = mysql_fetch_row(r)) {
        if (n++ > 0) seqs += ",";
        seqs += row[0];
      }
      mysql_free_result(r);
      if (n == 0) {
        MyExec(c, "COMMIT");
        break;
      }
      MyExec(c, "UPDATE outbox SET status = 'SENT', attempts = attempts + 1, sent_at = utc_timestamp(6) "
                "WHERE seq IN (" + seqs + ")");
      MyExec(c, "COMMIT");
      drained += n;
    }
    mysql_close(c);
    return drained;
  });
}

double MyDrainCeiling(MYSQL* c, int batch, long rows) {
  const std::string sql = "DELETE FROM outbox ORDER BY seq LIMIT " + std::to_string(batch) +
                          " RETURNING seq, event_id, aggregate_type, aggregate_id, event_type, "
                          "payload, headers, dedup_key";
  long drained = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    const long n = MyExec(c, sql);
    if (n == 0) break;
    drained += n;
  }
  if (drained != rows) std::exit(1);
  return static_cast<double>(drained) / SecondsSince(t0);
}

Event BenchEvent(int producer, long i) {
  Event e;
  e.aggregate_type = "bench";
  e.aggregate_id = "p" + std::to_string(producer) + "-" + std::to_string(i % 100);
  e.event_type = "BenchEvent";
  e.payload = std::string(200, 'x');
  return e;
}

// 4 producers, transactions of 10 events; events/s.
template <typename Txn>
double Enqueue4(long events, Txn txn) {
  std::vector<std::thread> ts;
  const auto t0 = std::chrono::steady_clock::now();
  for (int p = 0; p < 4; ++p) ts.emplace_back([&, p] { txn(p, events / 4); });
  for (auto& t : ts) t.join();
  return static_cast<double>(events) / SecondsSince(t0);
}

std::vector<InboundMessage> Messages(long n, const std::string& tag) {
  std::vector<InboundMessage> out;
  for (long i = 0; i < n; ++i) {
    InboundMessage m;
    m.topic = "t";
    m.offset = i;
    m.payload = tag + std::to_string(i);
    out.push_back(std::move(m));
  }
  return out;
}

// Apply in batches of 100; effects/s.
double ApplyAll(InboxStore& inbox, const std::vector<InboundMessage>& msgs) {
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < msgs.size(); i += 100) {
    const std::size_t n = std::min<std::size_t>(100, msgs.size() - i);
    std::vector<std::string> keys;
    for (std::size_t j = 0; j < n; ++j) keys.push_back(msgs[i + j].payload);
    auto r = inbox.Apply(std::span(msgs).subspan(i, n), keys);
    if (!r.ok()) {
      std::fprintf(stderr, "apply: %s\n", r.status().ToString().c_str());
      std::exit(1);
    }
  }
  return static_cast<double>(msgs.size()) / SecondsSince(t0);
}

}  // namespace

int main(int argc, char** argv) {
  Flags f(argc, argv, {{"db", DefaultDb()}, {"rows", "200000"}, {"batch", "500"}, {"runs", "3"},
                       {"events", "20000"}});
  const std::string pg = f.Str("db");
  const char* my_env = std::getenv("OUTBOX_MYSQL_URL");
  if (pg.empty() || !my_env) {
    std::fprintf(stderr, "mariadb_bench: OUTBOX_PG_URL and OUTBOX_MYSQL_URL required\n");
    return 2;
  }
  const std::string base = my_env, my = base.substr(0, base.rfind('/') + 1) + kDb;
  const int rows = f.Int("rows"), batch = f.Int("batch"), runs = f.Int("runs");
  const long events = f.Int("events");
  PGconn* admin = MustConnect(pg);
  MigrateFresh(admin, pg, kSchema);
  MYSQL* madmin = MyConnect(base, "");
  MyExec(madmin, "DROP DATABASE IF EXISTS " + kDb);
  MyExec(madmin, "CREATE DATABASE " + kDb);
  mysql_close(madmin);
  if (!MigrateMariaDb({my}).ok()) return 1;
  MYSQL* mc = MyConnect(base, kDb);
  MustExec(admin, "CREATE TABLE " + kSchema + ".effects (k text PRIMARY KEY)");
  MyExec(mc, "CREATE TABLE effects (k VARCHAR(64) PRIMARY KEY)");

  struct Method {
    std::string section, name;
    std::function<double()> run;
    std::vector<double> rates;
  };
  int round = 0;
  std::vector<Method> methods = {
      {"drain", "PostgreSQL: Claim (ordered) + MarkSent, sent_mode=update", [&] {
         FillOutbox(admin, kSchema, rows, 1000, 200);
         return DrainStore(pg, kSchema, SentMode::kUpdate, true, batch, rows); }, {}},
      {"drain", "MariaDB: Claim (ordered) + MarkSent, sent_mode=update", [&] {
         MyFill(mc, rows, 1000, 200);
         return MyDrainStore(my, SentMode::kUpdate, batch, rows, 1); }, {}},
      {"drain", "MariaDB, the seed's design: SELECT ... FOR UPDATE SKIP LOCKED, UPDATE to SENT, COMMIT", [&] {
         MyFill(mc, rows, 1000, 200);
         return MySkipLockedDrain(base, batch, rows, 1); }, {}},
      {"drain", "MariaDB: Claim (ordered) + MarkSent, 4 sessions", [&] {
         MyFill(mc, rows, 1000, 200);
         return MyDrainStore(my, SentMode::kUpdate, batch, rows, 4); }, {}},
      {"drain", "MariaDB, the seed's design, 4 sessions", [&] {
         MyFill(mc, rows, 1000, 200);
         return MySkipLockedDrain(base, batch, rows, 4); }, {}},
      {"drain", "PostgreSQL ceiling: bare DELETE ... RETURNING (1 connection)", [&] {
         FillOutbox(admin, kSchema, rows, 1000, 200);
         return DrainCeiling(admin, kSchema, batch, rows); }, {}},
      {"drain", "MariaDB ceiling: bare DELETE ... ORDER BY seq LIMIT ... RETURNING (1 connection)", [&] {
         MyFill(mc, rows, 1000, 200);
         return MyDrainCeiling(mc, batch, rows); }, {}},
      {"enqueue", "PostgreSQL: EnqueueBatch, 4 connections, 10 events per transaction", [&] {
         return Enqueue4(events, [&](int p, long n) {
           PGconn* c = MustConnect(pg);
           EnqueueOptions eo;
           eo.schema = kSchema;
           for (long i = 0; i < n; i += 10) {
             std::vector<Event> b;
             for (long j = i; j < i + 10 && j < n; ++j) b.push_back(BenchEvent(p, j));
             MustExec(c, "BEGIN");
             if (!EnqueueBatch(c, b, eo).ok()) std::exit(1);
             MustExec(c, "COMMIT");
           }
           PQfinish(c);
         }); }, {}},
      {"enqueue", "MariaDB: EnqueueBatch, 4 connections, 10 events per transaction", [&] {
         return Enqueue4(events, [&](int p, long n) {
           MYSQL* c = MyConnect(base, kDb);
           for (long i = 0; i < n; i += 10) {
             std::vector<Event> b;
             for (long j = i; j < i + 10 && j < n; ++j) b.push_back(BenchEvent(p, j));
             MyExec(c, "START TRANSACTION");
             auto r = EnqueueBatch(c, b);
             if (!r.ok()) {
               std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
               std::exit(1);
             }
             MyExec(c, "COMMIT");
           }
           mysql_close(c);
         }); }, {}},
      {"inbox", "PostgreSQL inbox: Apply, batches of 100, one INSERT per effect", [&] {
         PostgresInboxOptions io;
         io.conninfo = pg;
         io.schema = kSchema + "_inbox";
         io.consumer = "bench-" + std::to_string(round);
         auto inbox = OpenPostgresInbox(io, [&](const InboundMessage& m, pg_conn* txn) {
           PGresult* r = PQexec(txn, ("INSERT INTO " + kSchema + ".effects VALUES ('" + m.payload + "')").c_str());
           const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
           PQclear(r);
           return ok ? HandlerResult::Ok() : HandlerResult::Transient("insert");
         });
         if (!inbox.ok() || !(*inbox)->Migrate().ok()) std::exit(1);
         return ApplyAll(**inbox, Messages(events, "pg" + std::to_string(round) + "-")); }, {}},
      {"inbox", "MariaDB inbox: Apply, batches of 100, one INSERT per effect", [&] {
         MariaDbInboxOptions io;
         io.url = my;
         io.consumer = "bench-" + std::to_string(round);
         auto inbox = OpenMariaDbInbox(io, [&](const InboundMessage& m, st_mysql* txn) {
           const std::string sql = "INSERT INTO effects VALUES ('" + m.payload + "')";
           return mysql_query(txn, sql.c_str()) == 0 ? HandlerResult::Ok()
                                                     : HandlerResult::Transient(mysql_error(txn));
         });
         if (!inbox.ok() || !(*inbox)->Migrate().ok()) std::exit(1);
         return ApplyAll(**inbox, Messages(events, "my" + std::to_string(round) + "-")); }, {}},
  };
  for (round = 0; round < runs; ++round) {
    for (auto& m : methods) {
      m.rates.push_back(m.run());
      std::fprintf(stderr, "run %d: %-84s %9.0f /s\n", round + 1, m.name.c_str(), m.rates.back());
    }
  }
  const std::map<std::string, std::string> titles = {
      {"drain", "Drain of a pre-filled outbox (" + std::to_string(rows) + " rows, 200-byte payloads, 1000 aggregates; no broker), rows/s"},
      {"enqueue", "Enqueue (" + std::to_string(events) + " events of 200 bytes over 400 aggregates), events/s"},
      {"inbox", "Inbox effects (" + std::to_string(events) + " new messages), effects/s"}};
  for (const std::string section : {"drain", "enqueue", "inbox"}) {
    std::printf("#### %s\n\n", titles.at(section).c_str());
    std::printf("| method | median /s | runs (/s) |\n|---|---|---|\n");
    for (auto& m : methods) {
      if (m.section != section) continue;
      std::string all;
      for (double x : m.rates) {
        if (!all.empty()) all += ", ";
        all += std::to_string(static_cast<long>(x));
      }
      std::printf("| %s | %.0f | %s |\n", m.name.c_str(), Median(m.rates), all.c_str());
    }
    std::printf("\n");
  }
  MustExec(admin, "DROP SCHEMA IF EXISTS " + kSchema + " CASCADE");
  MustExec(admin, "DROP SCHEMA IF EXISTS " + kSchema + "_inbox CASCADE");
  MyExec(mc, "DROP DATABASE IF EXISTS " + kDb);
  mysql_close(mc);
  return 0;
}
