// enqueue_cost: what one event costs the producer's transaction. Several
// clients commit a business transaction (one INSERT of a ~200-byte row) in a
// loop for a fixed time, and each case adds one thing to it:
//   PostgreSQL: nothing; a hand-rolled outbox INSERT (uuid key, bytea payload,
//   jsonb headers, a partial "pending" index); <schema>.enqueue(...) called as
//   SQL; a bare INSERT into our outbox table (the floor of any enqueue());
//   the C++ Enqueue; and per 10 events, a hand-rolled 10-row INSERT
//   against EnqueueBatch of 10;
//   MariaDB: nothing; a hand-rolled INSERT; CALL outbox_enqueue(...); the C++
//   Enqueue.
// Every case runs with durable commits off and on (PostgreSQL:
// synchronous_commit; MariaDB: innodb_flush_log_at_trx_commit 2 or 1), in
// interleaved rounds, the tables emptied before each run. Reports medians of
// transactions/s, the microseconds each case adds to a transaction (1/rate
// minus the business INSERT's 1/rate, the measure the issue used) and that
// added cost against the hand-rolled INSERT's.
//
//   enqueue_cost [--clients 4] [--seconds 10] [--rounds 3] [--aggregates 10000]
//                [--before src/store/postgres/migrations/outbox/0004_skipped_stats_limits.sql]
// --before adds the case "enqueue() before migration 10", from that file.
// Needs OUTBOX_PG_URL; MariaDB's cases run when OUTBOX_MYSQL_URL is set.
#include <mysql.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <sstream>
#include <random>
#include <thread>

#include "drain_common.h"
#include "outbox/mariadb.h"
#include "outbox/postgres.h"

namespace {

using namespace outbox;
using namespace outbox::bench;

const std::string kSchema = "bench_cost";  // PostgreSQL schema and MariaDB database
const std::string kLogSchema = "bench_cost_log";  // a built log-layout schema (--log 1)
const std::string kPayload(200, 'p');
const std::string kBusinessRow(200, 'b');
const std::string kHeaders = R"({"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})";

Event MakeEvent(const std::string& aggregate_id) {
  Event e;
  e.aggregate_type = "order";
  e.aggregate_id = aggregate_id;
  e.event_type = "OrderCreated";
  e.payload = kPayload;
  e.headers = {{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}};
  return e;
}

// ---- PostgreSQL ----

void PgMust(PGresult* r, const char* what) {
  const ExecStatusType st = PQresultStatus(r);
  if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
    std::fprintf(stderr, "%s: %s", what, PQresultErrorMessage(r));
    std::exit(1);
  }
  PQclear(r);
}

void PgPrepare(PGconn* c, const char* name, const std::string& sql) {
  PgMust(PQprepare(c, name, sql.c_str(), 0, nullptr), name);
}

// Parameter `binary` (if any) is sent in binary form (bytea), the rest as text.
void PgRun(PGconn* c, const char* name, std::vector<std::string> text, int binary = -1) {
  std::vector<const char*> values;
  std::vector<int> lengths, formats;
  for (std::size_t i = 0; i < text.size(); ++i) {
    values.push_back(text[i].data());
    lengths.push_back(static_cast<int>(text[i].size()));
    formats.push_back(static_cast<int>(i) == binary ? 1 : 0);
  }
  PgMust(PQexecPrepared(c, name, static_cast<int>(values.size()), values.data(), lengths.data(),
                        formats.data(), 0),
         name);
}

// One event through `sql`, an unnamed statement with typed parameters (as the
// C++ Enqueue sends it): parsed and planned by the server on every call.
void EnqueueUnprepared(PGconn* c, const std::string& aggregate, const std::string& sql) {
  const char* values[6] = {"order", aggregate.c_str(), "OrderCreated", kPayload.data(),
                           kHeaders.c_str(), nullptr};
  const int lengths[6] = {0, 0, 0, static_cast<int>(kPayload.size()), 0, 0};
  const int formats[6] = {0, 0, 0, 1, 0, 0};
  const Oid types[6] = {25, 25, 25, 17, 3802, 25};
  PgMust(PQexecParams(c, sql.c_str(), 6, types, values, lengths, formats, 0), "enqueue unprepared");
}

// enqueue() as migration 4 wrote it (the last before migration 10), installed
// beside the current one as enqueue_before(), for a side-by-side figure.
void PgInstallBefore(PGconn* admin, const std::string& migration_file) {
  std::ifstream in(migration_file);
  std::stringstream text;
  text << in.rdbuf();
  const std::string sql = text.str();
  const std::string head = "CREATE OR REPLACE FUNCTION {S}.enqueue(";
  const std::size_t from = sql.find(head);
  const std::size_t to = sql.find("$fn$;", from);
  if (from == std::string::npos || to == std::string::npos) {
    std::fprintf(stderr, "no enqueue() in %s\n", migration_file.c_str());
    std::exit(1);
  }
  std::string fn = sql.substr(from, to + 5 - from);
  fn.replace(0, head.size(), "CREATE FUNCTION {S}.enqueue_before(");
  for (std::size_t p; (p = fn.find("{S}")) != std::string::npos;) fn.replace(p, 3, kSchema);
  for (std::size_t p; (p = fn.find("enqueue.")) != std::string::npos;) {
    fn.replace(p, 8, "enqueue_before.");
  }
  MustExec(admin, fn);
}

void PgSetUp(const std::string& url, const std::string& before_file) {
  PGconn* admin = MustConnect(url);
  MigrateFresh(admin, url, kSchema);
  MustExec(admin, "CREATE TABLE " + kSchema +
                      ".business (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "
                      "customer text NOT NULL, note text NOT NULL, "
                      "created_at timestamptz NOT NULL DEFAULT now())");
  MustExec(admin, "CREATE TABLE " + kSchema +
                      ".outbox_hand (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), "
                      "aggregate_type text NOT NULL, aggregate_id text NOT NULL, "
                      "event_type text NOT NULL, payload bytea NOT NULL, "
                      "headers jsonb NOT NULL DEFAULT '{}', status text NOT NULL DEFAULT 'PENDING', "
                      "created_at timestamptz NOT NULL DEFAULT now())");
  MustExec(admin, "CREATE INDEX outbox_hand_pending ON " + kSchema +
                      ".outbox_hand (created_at) WHERE status = 'PENDING'");
  if (!before_file.empty()) PgInstallBefore(admin, before_file);
  // Issue 42's log (bench/log_drain.cc's prototype): each event written once,
  // one index, (slot, txid, pos); enqueue_log() is enqueue() writing there:
  // the same checks and the aggregate's lock, the slot from the lock's hash,
  // no dedup key (its own small table, written only for events with one).
  MustExec(admin, "CREATE SEQUENCE " + kSchema + ".log_pos");
  MustExec(admin, "CREATE TABLE " + kSchema + ".log (pos bigint NOT NULL DEFAULT nextval('" + kSchema +
                      ".log_pos'), txid xid8 NOT NULL DEFAULT pg_current_xact_id(), slot smallint NOT NULL, "
                      "event_id uuid NOT NULL, aggregate_type text NOT NULL, aggregate_id text NOT NULL, "
                      "event_type text NOT NULL, payload bytea NOT NULL, headers jsonb NOT NULL, "
                      "created_at timestamptz NOT NULL DEFAULT now())");
  MustExec(admin, "CREATE INDEX log_read ON " + kSchema + ".log (slot, txid, pos)");
  MustExec(admin, "CREATE FUNCTION " + kSchema + ".enqueue_log(aggregate_type text, aggregate_id text, "
                      "event_type text, payload bytea, headers jsonb DEFAULT '{}'::jsonb, dedup_key text DEFAULT NULL) "
                      "RETURNS TABLE (event_id uuid, enqueued boolean) LANGUAGE plpgsql VOLATILE AS $fn$ "
                      "#variable_conflict use_column\n"
                      "DECLARE v_id uuid := " + kSchema + ".uuid_v7(); h int; BEGIN "
                      "IF NOT coalesce(" + kSchema + ".enqueue_ok(enqueue_log.aggregate_type, enqueue_log.aggregate_id, "
                      "enqueue_log.event_type, enqueue_log.payload, enqueue_log.headers, enqueue_log.dedup_key), false) THEN "
                      "PERFORM " + kSchema + ".enqueue_refuse(enqueue_log.aggregate_type, enqueue_log.aggregate_id, "
                      "enqueue_log.event_type, enqueue_log.payload, enqueue_log.headers, enqueue_log.dedup_key); END IF; "
                      "h := hashtext(enqueue_log.aggregate_type || E'\\x1f' || enqueue_log.aggregate_id); "
                      "PERFORM pg_advisory_xact_lock(hashtext('" + kSchema + "'), h); "
                      "INSERT INTO " + kSchema + ".log (slot, event_id, aggregate_type, aggregate_id, event_type, "
                      "payload, headers) VALUES ((h & 2147483647) % 16, v_id, enqueue_log.aggregate_type, "
                      "enqueue_log.aggregate_id, enqueue_log.event_type, enqueue_log.payload, enqueue_log.headers); "
                      "event_id := v_id; enqueued := true; RETURN NEXT; END $fn$");
  // The built log layout (`outboxctl migrate --layout log`): its own enqueue().
  FillLog(admin, url, kLogSchema, 0, 1, 1, 1);
  PQfinish(admin);
}

// One case's extra work inside the transaction, given a random aggregate id.
using PgBody = std::function<void(PGconn*, const std::string& aggregate)>;

PGconn* PgClient(const std::string& url, bool durable, const std::string& session) {
  PGconn* c = MustConnect(url);
  MustExec(c, std::string("SET synchronous_commit = ") + (durable ? "on" : "off"));
  if (!session.empty()) MustExec(c, session);
  PgPrepare(c, "business",
            "INSERT INTO " + kSchema + ".business (customer, note) VALUES ($1, $2)");
  PgPrepare(c, "hand",
            "INSERT INTO " + kSchema +
                ".outbox_hand (aggregate_type, aggregate_id, event_type, payload, headers) "
                "VALUES ('order', $1, 'OrderCreated', $2, $3::jsonb)");
  PgPrepare(c, "hand10",
            "INSERT INTO " + kSchema +
                ".outbox_hand (aggregate_type, aggregate_id, event_type, payload, headers) "
                "SELECT 'order', $1 || '-' || g, 'OrderCreated', $2, $3::jsonb "
                "FROM generate_series(1, 10) g");
  // The floor of any enqueue() on this table: the row as enqueue() writes it,
  // with no function, check or lock.
  PgPrepare(c, "floor",
            "INSERT INTO " + kSchema +
                ".outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers) "
                "VALUES (" + kSchema + ".uuid_v7(), 'order', $1, 'OrderCreated', $2, $3::jsonb)");
  PgPrepare(c, "enqueue",
            "SELECT * FROM " + kSchema +
                ".enqueue('order', $1, 'OrderCreated', $2, $3::jsonb, NULL)");
  PgPrepare(c, "log_floor",
            "INSERT INTO " + kSchema + ".log (slot, event_id, aggregate_type, aggregate_id, event_type, payload, "
                "headers) VALUES ((hashtext('order' || E'\\x1f' || $1) & 2147483647) % 16, " + kSchema +
                ".uuid_v7(), 'order', $1, 'OrderCreated', $2, $3::jsonb)");
  PgPrepare(c, "enqueue_log",
            "SELECT * FROM " + kSchema + ".enqueue_log('order', $1, 'OrderCreated', $2, $3::jsonb, NULL)");
  PgPrepare(c, "enqueue_built_log",
            "SELECT * FROM " + kLogSchema +
                ".enqueue('order', $1, 'OrderCreated', $2, $3::jsonb, NULL)");
  // The same work as one statement, no PL/pgSQL: the quick check (enqueue_ok,
  // a SQL function the planner inlines; enqueue_refuse raises on a refusal),
  // the aggregate's lock, then the INSERT (its pos taken after the lock).
  PgPrepare(c, "log_statement",
            "WITH k AS (SELECT hashtext('order' || E'\\x1f' || $1) AS h), "
            "ok AS (SELECT h, CASE WHEN " + kSchema + ".enqueue_ok('order', $1, 'OrderCreated', $2, $3::jsonb, NULL) "
            "THEN true ELSE " + kSchema + ".enqueue_refuse('order', $1, 'OrderCreated', $2, $3::jsonb, NULL) IS NULL "
            "END AS fine FROM k), "
            "l AS (SELECT h, pg_advisory_xact_lock(hashtext('" + kSchema + "'), h) FROM ok WHERE fine) "
            "INSERT INTO " + kSchema + ".log (slot, event_id, aggregate_type, aggregate_id, event_type, payload, "
            "headers) SELECT (h & 2147483647) % 16, " + kSchema + ".uuid_v7(), 'order', $1, 'OrderCreated', $2, "
            "$3::jsonb FROM l RETURNING event_id");
  if (!Scalar(c, "SELECT to_regproc('" + kSchema + ".enqueue_before')").empty()) {
    PgPrepare(c, "enqueue_before",
              "SELECT * FROM " + kSchema +
                  ".enqueue_before('order', $1, 'OrderCreated', $2, $3::jsonb, NULL)");
  }
  return c;
}

// `clients` threads each run `session(t, stop)` (its own connection and loop of
// transactions, returning how many it committed) for `seconds`; returns
// transactions/s over all of them.
double RunClients(int clients, int seconds,
                  const std::function<long(int t, const std::atomic<bool>& stop)>& session) {
  std::atomic<long> done{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> ts;
  for (int t = 0; t < clients; ++t) ts.emplace_back([&, t] { done += session(t, stop); });
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(seconds));
  stop = true;
  for (auto& t : ts) t.join();
  return static_cast<double>(done.load()) / SecondsSince(t0);
}

double PgRate(const std::string& url, bool durable, int clients, int seconds, int aggregates,
              const std::string& session, const PgBody& body) {
  PGconn* admin = MustConnect(url);
  MustExec(admin, "TRUNCATE " + kSchema + ".business, " + kSchema + ".outbox, " +
                      kSchema + ".outbox_hand, " + kSchema + ".log, " + kLogSchema +
                      ".log");
  MustExec(admin, "CHECKPOINT");
  PQfinish(admin);
  return RunClients(clients, seconds, [&](int t, const std::atomic<bool>& stop) {
    PGconn* c = PgClient(url, durable, session);
    std::mt19937 rng(static_cast<unsigned>(t) * 7919u + 1);
    std::uniform_int_distribution<int> agg(0, aggregates - 1);
    long n = 0;
    for (; !stop.load(std::memory_order_relaxed); ++n) {
      MustExec(c, "BEGIN");
      PgRun(c, "business", {"customer-" + std::to_string(agg(rng)), kBusinessRow});
      body(c, std::to_string(agg(rng)));
      MustExec(c, "COMMIT");
    }
    PQfinish(c);
    return n;
  });
}

// ---- MariaDB ----

MYSQL* MyConnect(const std::string& url) {  // mysql://user@host:port/db (testenv's form)
  std::string s = url.substr(std::string("mysql://").size());
  const std::string user = s.substr(0, s.find('@'));
  s = s.substr(s.find('@') + 1);
  const std::string host = s.substr(0, s.find(':'));
  const unsigned port = static_cast<unsigned>(std::atoi(s.substr(s.find(':') + 1).c_str()));
  const std::string db = s.substr(s.find('/') + 1);
  MYSQL* c = mysql_init(nullptr);
  if (!mysql_real_connect(c, host.c_str(), user.c_str(), nullptr, db.empty() ? nullptr : db.c_str(),
                          port, nullptr, CLIENT_MULTI_RESULTS)) {
    std::fprintf(stderr, "mariadb: %s\n", mysql_error(c));
    std::exit(1);
  }
  return c;
}

void MyExec(MYSQL* c, const std::string& sql) {
  if (mysql_real_query(c, sql.data(), sql.size()) != 0) {
    std::fprintf(stderr, "mariadb: %s: %s\n", sql.substr(0, 80).c_str(), mysql_error(c));
    std::exit(1);
  }
  do {
    if (MYSQL_RES* r = mysql_store_result(c)) mysql_free_result(r);
  } while (mysql_next_result(c) == 0);
}

std::string MyQuote(MYSQL* c, const std::string& v) {
  std::string out(v.size() * 2 + 1, '\0');
  out.resize(mysql_real_escape_string(c, out.data(), v.data(), v.size()));
  return "'" + out + "'";
}

void MySetUp(const std::string& base, const std::string& url) {
  MYSQL* admin = MyConnect(base);
  MyExec(admin, "DROP DATABASE IF EXISTS " + kSchema);
  MyExec(admin, "CREATE DATABASE " + kSchema);
  mysql_close(admin);
  if (!MigrateMariaDb({url}).ok()) {
    std::fprintf(stderr, "cannot migrate MariaDB %s\n", kSchema.c_str());
    std::exit(1);
  }
  MYSQL* c = MyConnect(url);
  MyExec(c, "CREATE TABLE business (id BIGINT AUTO_INCREMENT PRIMARY KEY, customer VARCHAR(64) NOT NULL, "
            "note TEXT NOT NULL, created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))");
  // MariaDB has no partial index: the pending index is on (status, created_at).
  MyExec(c, "CREATE TABLE outbox_hand (id UUID PRIMARY KEY DEFAULT uuid(), "
            "aggregate_type VARCHAR(255) NOT NULL, aggregate_id VARCHAR(255) NOT NULL, "
            "event_type VARCHAR(255) NOT NULL, payload LONGBLOB NOT NULL, headers JSON NOT NULL, "
            "status VARCHAR(16) NOT NULL DEFAULT 'PENDING', "
            "created_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), "
            "KEY outbox_hand_pending (status, created_at))");
  mysql_close(c);
}

using MyBody = std::function<void(MYSQL*, const std::string& aggregate)>;

double MyRate(const std::string& url, bool durable, int clients, int seconds, int aggregates,
              const MyBody& body) {
  MYSQL* admin = MyConnect(url);
  MyExec(admin, "TRUNCATE business");
  MyExec(admin, "TRUNCATE outbox");
  MyExec(admin, "TRUNCATE outbox_hand");
  MyExec(admin, std::string("SET GLOBAL innodb_flush_log_at_trx_commit = ") + (durable ? "1" : "2"));
  mysql_close(admin);
  return RunClients(clients, seconds, [&](int t, const std::atomic<bool>& stop) {
    MYSQL* c = MyConnect(url);
    std::mt19937 rng(static_cast<unsigned>(t) * 7919u + 1);
    std::uniform_int_distribution<int> agg(0, aggregates - 1);
    const std::string row = MyQuote(c, kBusinessRow);
    long n = 0;
    for (; !stop.load(std::memory_order_relaxed); ++n) {
      MyExec(c, "START TRANSACTION");
      MyExec(c, "INSERT INTO business (customer, note) VALUES ('customer-" +
                    std::to_string(agg(rng)) + "', " + row + ")");
      body(c, std::to_string(agg(rng)));
      MyExec(c, "COMMIT");
    }
    mysql_close(c);
    return n;
  });
}

// ---- the cases and the report ----

struct Case {
  std::string database, name;
  int events;             // per transaction
  std::string baseline;   // the hand-rolled case its added cost is compared with ("" = none)
  std::function<double(bool durable)> run;
  std::vector<double> rates[2];  // [durable]
};

void Report(const std::vector<Case>& cases, const std::string& database, bool durable, int clients) {
  const Case* alone = nullptr;
  for (const Case& c : cases) {
    if (c.database == database && c.events == 0) alone = &c;
  }
  if (alone == nullptr || alone->rates[durable].empty()) return;
  const double base_us = 1e6 / Median(alone->rates[durable]);
  auto added = [&](const Case& c) { return 1e6 / Median(c.rates[durable]) - base_us; };
  std::printf("\n%s, %s, %d clients:\n\n", database.c_str(),
              database == "PostgreSQL" ? (durable ? "synchronous_commit = on" : "synchronous_commit = off")
                                       : (durable ? "innodb_flush_log_at_trx_commit = 1"
                                                  : "innodb_flush_log_at_trx_commit = 2"),
              clients);
  std::printf("| the transaction | transactions/s (median) | µs added per transaction | per event | "
              "added cost / hand-rolled's |\n|---|---|---|---|---|\n");
  for (const Case& c : cases) {
    if (c.database != database) continue;
    if (c.events == 0) {
      std::printf("| %s | %.0f | — | — | — |\n", c.name.c_str(), Median(c.rates[durable]));
      continue;
    }
    std::string ratio = "—";
    for (const Case& b : cases) {
      if (b.database == database && b.name == c.baseline) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "**%.2f×**", added(c) / added(b));
        ratio = buf;
      }
    }
    std::printf("| %s | %.0f | %.1f | %.1f | %s |\n", c.name.c_str(), Median(c.rates[durable]),
                added(c), added(c) / c.events, ratio.c_str());
  }
}

// Where an enqueue's server time goes: each step alone, N times in a PL/pgSQL
// loop inside one transaction that is rolled back (no commit, no network, one
// session), microseconds per call, median of `rounds`. Steps that need a
// missing index drop it inside that transaction.
void Breakdown(const std::string& url, int rounds, bool have_before) {
  constexpr int kCalls = 5000;
  const std::string decl =
      "DECLARE h jsonb := '" + kHeaders + "'; p bytea := convert_to(repeat('p', 200), 'UTF8'); ";
  const std::string insert_outbox =
      "INSERT INTO " + kSchema + ".outbox (event_id, aggregate_type, aggregate_id, event_type, "
      "payload, headers) VALUES (" + kSchema + ".uuid_v7(), 'order', i::text, 'OrderCreated', p, h)";
  struct Step {
    std::string name, setup, body;
    std::vector<double> us;
  };
  std::vector<Step> steps = {
      {"hand-rolled INSERT (2 indexes)", "",
       "INSERT INTO " + kSchema + ".outbox_hand (aggregate_type, aggregate_id, event_type, payload, "
       "headers) VALUES ('order', i::text, 'OrderCreated', p, h)", {}},
      {"outbox INSERT as enqueue() writes it (4 indexes, UUIDv7)", "", insert_outbox, {}},
      {"  … without the event_id index (operators' lookups only)",
       "ALTER TABLE " + kSchema + ".outbox DROP CONSTRAINT outbox_event_id_key", insert_outbox, {}},
      {"  … without outbox_aggregate_idx (the claim's head check)",
       "DROP INDEX " + kSchema + ".outbox_aggregate_idx", insert_outbox, {}},
      {"  … without outbox_claim_idx (the claim's walk)", "DROP INDEX " + kSchema + ".outbox_claim_idx",
       insert_outbox, {}},
      {"  … with gen_random_uuid() for the UUIDv7", "",
       "INSERT INTO " + kSchema + ".outbox (event_id, aggregate_type, aggregate_id, event_type, "
       "payload, headers) VALUES (gen_random_uuid(), 'order', i::text, 'OrderCreated', p, h)", {}},
      {"the aggregate's advisory lock", "",
       "PERFORM pg_advisory_xact_lock(hashtext('" + kSchema + "'), hashtext('order' || E'\\x1f' || i::text))",
       {}},
      {"the quick check, enqueue_ok()", "",
       "PERFORM " + kSchema + ".enqueue_ok('order', i::text, 'OrderCreated', p, h, NULL)", {}},
      {"the detailed checks, enqueue_refuse() (migration 4's, as a function)", "",
       "PERFORM " + kSchema + ".enqueue_refuse('order', i::text, 'OrderCreated', p, h, NULL)", {}},
      {"enqueue(), the whole call", "",
       "PERFORM * FROM " + kSchema + ".enqueue('order', i::text, 'OrderCreated', p, h)", {}},
  };
  if (have_before) {
    steps.push_back({"enqueue() before migration 10, the whole call", "",
                     "PERFORM * FROM " + kSchema + ".enqueue_before('order', i::text, 'OrderCreated', p, h)",
                     {}});
  }
  PGconn* c = MustConnect(url);
  for (int r = 0; r < rounds; ++r) {
    for (Step& st : steps) {
      MustExec(c, "BEGIN");
      if (!st.setup.empty()) MustExec(c, st.setup);
      const auto t0 = std::chrono::steady_clock::now();
      MustExec(c, "DO $b$ " + decl + "BEGIN FOR i IN 1.." + std::to_string(kCalls) + " LOOP " +
                      st.body + "; END LOOP; END $b$");
      st.us.push_back(SecondsSince(t0) * 1e6 / kCalls);
      MustExec(c, "ROLLBACK");
    }
  }
  PQfinish(c);
  std::printf("\nPostgreSQL, where the server's time goes (one session, %d calls in a PL/pgSQL loop "
              "inside a transaction rolled back; median of %d):\n\n| step | µs per call |\n|---|---|\n",
              kCalls, rounds);
  for (const Step& st : steps) std::printf("| %s | %.1f |\n", st.name.c_str(), Median(st.us));
}

}  // namespace

int main(int argc, char** argv) {
  Flags f(argc, argv, {{"db", DefaultDb()}, {"clients", "4"}, {"seconds", "10"}, {"rounds", "3"},
                       {"aggregates", "10000"}, {"before", ""}, {"log", "0"}});
  const std::string pg = f.Str("db");
  if (pg.empty()) {
    std::fprintf(stderr, "enqueue_cost: OUTBOX_PG_URL (or --db) required\n");
    return 2;
  }
  const int clients = f.Int("clients"), seconds = f.Int("seconds"), aggs = f.Int("aggregates");
  // --log 1: issue 42's log prototype beside today's enqueue(), PostgreSQL only.
  const bool log_only = f.Int("log") != 0;
  const char* my_env = log_only ? nullptr : std::getenv("OUTBOX_MYSQL_URL");
  const std::string my_base = my_env ? my_env : "";
  const std::string my = my_env ? my_base.substr(0, my_base.rfind('/') + 1) + kSchema : "";

  PgSetUp(pg, f.Str("before"));
  if (my_env) MySetUp(my_base, my);
  auto pg_case = [&](const std::string& name, int events, const std::string& baseline, PgBody body,
                     const std::string& session = "") {
    return Case{"PostgreSQL", name, events, baseline, [=, &pg](bool durable) {
                  return PgRate(pg, durable, clients, seconds, aggs, session, body);
                }, {}};
  };
  auto my_case = [&](const std::string& name, int events, const std::string& baseline, MyBody body) {
    return Case{"MariaDB", name, events, baseline, [=, &my](bool durable) {
                  return MyRate(my, durable, clients, seconds, aggs, body);
                }, {}};
  };
  EnqueueOptions eo;
  eo.schema = kSchema;
  std::vector<Case> cases = {
      pg_case("business INSERT alone", 0, "", [](PGconn*, const std::string&) {}),
      pg_case("+ hand-rolled outbox INSERT", 1, "",
              [](PGconn* c, const std::string& a) { PgRun(c, "hand", {a, kPayload, kHeaders}, 1); }),
      pg_case("+ a bare INSERT into our outbox table (its 4 indexes and UUIDv7; no check, no lock)", 1,
              "+ hand-rolled outbox INSERT",
              [](PGconn* c, const std::string& a) { PgRun(c, "floor", {a, kPayload, kHeaders}, 1); }),
      pg_case("+ `enqueue(...)` in SQL", 1, "+ hand-rolled outbox INSERT",
              [](PGconn* c, const std::string& a) { PgRun(c, "enqueue", {a, kPayload, kHeaders}, 1); }),
      pg_case("+ `enqueue(...)` in SQL, `outbox.notify = on`", 1, "+ hand-rolled outbox INSERT",
              [](PGconn* c, const std::string& a) { PgRun(c, "enqueue", {a, kPayload, kHeaders}, 1); },
              "SET outbox.notify = on"),
      pg_case("+ `enqueue(...)` in SQL, unprepared, `SELECT … FROM enqueue(…)` (C++ `Enqueue` before)", 1,
              "+ hand-rolled outbox INSERT",
              [](PGconn* c, const std::string& a) {
                EnqueueUnprepared(c, a, "SELECT event_id::text, enqueued FROM " + kSchema +
                                            ".enqueue($1, $2, $3, $4, $5::jsonb, $6)");
              }),
      pg_case("+ `enqueue(...)` in SQL, unprepared, `SELECT enqueue(…)` (what C++ `Enqueue` sends)", 1,
              "+ hand-rolled outbox INSERT",
              [](PGconn* c, const std::string& a) {
                EnqueueUnprepared(c, a, "SELECT " + kSchema + ".enqueue($1, $2, $3, $4, $5, $6)");
              }),
      pg_case("+ C++ `Enqueue`", 1, "+ hand-rolled outbox INSERT",
              [eo](PGconn* c, const std::string& a) {
                if (!Enqueue(c, MakeEvent(a), eo).ok()) std::exit(1);
              }),
      pg_case("+ hand-rolled 10-row INSERT", 10, "",
              [](PGconn* c, const std::string& a) { PgRun(c, "hand10", {a, kPayload, kHeaders}, 1); }),
      pg_case("+ C++ `EnqueueBatch` of 10", 10, "+ hand-rolled 10-row INSERT",
              [eo](PGconn* c, const std::string& a) {
                std::vector<Event> batch;
                for (int i = 0; i < 10; ++i) batch.push_back(MakeEvent(a + "-" + std::to_string(i)));
                if (!EnqueueBatch(c, batch, eo).ok()) std::exit(1);
              }),
  };
  if (log_only) {
    // Issue 42: the log prototype's enqueue beside today's and the hand-rolled
    // INSERT only (no MariaDB, no breakdown).
    cases.erase(cases.begin() + 4, cases.end());  // business alone, hand-rolled, our bare INSERT, enqueue()
    cases.push_back(pg_case("+ a bare INSERT into the log (1 index; no check, no lock)", 1,
                            "+ hand-rolled outbox INSERT", [](PGconn* c, const std::string& a) {
                              PgRun(c, "log_floor", {a, kPayload, kHeaders}, 1);
                            }));
    cases.push_back(pg_case("+ `enqueue_log(...)`: enqueue() writing to the log", 1,
                            "+ hand-rolled outbox INSERT", [](PGconn* c, const std::string& a) {
                              PgRun(c, "enqueue_log", {a, kPayload, kHeaders}, 1);
                            }));
    cases.push_back(pg_case("+ one statement: enqueue_log()'s check, lock and INSERT, no PL/pgSQL", 1,
                            "+ hand-rolled outbox INSERT", [](PGconn* c, const std::string& a) {
                              PgRun(c, "log_statement", {a, kPayload, kHeaders}, 1);
                            }));
    // The built log schema's own enqueue(), from SQL and from C++.
    cases.push_back(
        pg_case("+ `enqueue(...)` in SQL on a built log schema (`migrate --layout log`)",
                1, "+ hand-rolled outbox INSERT", [](PGconn* c, const std::string& a) {
                  PgRun(c, "enqueue_built_log", {a, kPayload, kHeaders}, 1);
                }));
    EnqueueOptions lo;
    lo.schema = kLogSchema;
    cases.push_back(pg_case("+ C++ `Enqueue` on a built log schema", 1, "+ hand-rolled outbox INSERT",
                            [lo](PGconn* c, const std::string& a) {
                              if (!Enqueue(c, MakeEvent(a), lo).ok()) std::exit(1);
                            }));
  }
  if (!f.Str("before").empty() && !log_only) {
    cases.insert(cases.begin() + 2,
                 pg_case("+ `enqueue(...)` in SQL, before migration 10", 1,
                         "+ hand-rolled outbox INSERT", [](PGconn* c, const std::string& a) {
                           PgRun(c, "enqueue_before", {a, kPayload, kHeaders}, 1);
                         }));
  }
  if (my_env) {
    cases.push_back(my_case("business INSERT alone", 0, "", [](MYSQL*, const std::string&) {}));
    cases.push_back(my_case("+ hand-rolled outbox INSERT", 1, "", [](MYSQL* c, const std::string& a) {
      MyExec(c, "INSERT INTO outbox_hand (aggregate_type, aggregate_id, event_type, payload, headers) "
                "VALUES ('order', '" + a + "', 'OrderCreated', " + MyQuote(c, kPayload) + ", " +
                    MyQuote(c, kHeaders) + ")");
    }));
    cases.push_back(my_case("+ `CALL outbox_enqueue(...)`", 1, "+ hand-rolled outbox INSERT",
                            [](MYSQL* c, const std::string& a) {
                              MyExec(c, "CALL outbox_enqueue('order', '" + a + "', 'OrderCreated', " +
                                            MyQuote(c, kPayload) + ", " + MyQuote(c, kHeaders) +
                                            ", NULL)");
                            }));
    cases.push_back(my_case("+ C++ `Enqueue`", 1, "+ hand-rolled outbox INSERT",
                            [](MYSQL* c, const std::string& a) {
                              if (!Enqueue(c, MakeEvent(a)).ok()) std::exit(1);
                            }));
  }
  for (int r = 0; r < f.Int("rounds"); ++r) {
    for (bool durable : {false, true}) {
      for (Case& c : cases) c.rates[durable].push_back(c.run(durable));
    }
  }
  for (const std::string db : {"PostgreSQL", "MariaDB"}) {
    for (bool durable : {false, true}) Report(cases, db, durable, clients);
  }
  if (!log_only) Breakdown(pg, std::max(3, f.Int("rounds")), !f.Str("before").empty());
  if (my_env) {
    MYSQL* c = MyConnect(my);
    MyExec(c, "SET GLOBAL innodb_flush_log_at_trx_commit = 1");
    MyExec(c, "DROP DATABASE " + kSchema);
    mysql_close(c);
  }
  PGconn* admin = MustConnect(pg);
  MustExec(admin, "DROP SCHEMA " + kSchema + " CASCADE");
  PQfinish(admin);
  return 0;
}
