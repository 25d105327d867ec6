// inbox_test_consumer: a real consumer process for the inbox tests. It applies
// one effect row per event through the inbox (effects table without any unique
// key, so a double effect would show up as two rows). The payload tells the
// handler how to behave:
//   "ok"                 apply
//   "permanent"          contract violation -> dead-letter topic
//   "transient-once"     fail transiently on the first attempt, then apply
//   "transient-forever"  always fail transiently
//   "blocked"            permanent while the key is in <schema>.blocklist
//   "fail-twice"         fail transiently on the first two attempts (per event id)
//   "multiline"          permanent, with a two-line error
//   "permanent-long:..." permanent, with a 9,000-byte error
//   "orphan"             breaks a deferred foreign key (<schema>.child): fails at COMMIT
//   a NULL value         permanent
// Arguments: --db URL (--bootstrap B | --amqp URL) --schema S --topic T --group G
//            [--retry-delays MS,MS,...] [--batch N] [--batch-wait-ms MS] [--ordered 1]
//            [--prefetch N]  (RabbitMQ: basic.qos; ordered: single active consumer)
//            [--metrics-port N]  (serve /metrics on 127.0.0.1:N, 0: any free port;
//                                 logs "metrics port=P")
// With a mysql:// --db the inbox is MariaDB's (tables in the URL's database,
// --schema unused) and the handler behaves the same, except "orphan" (MariaDB
// has no deferred constraints: it applies).
// On SIGTERM it stops and prints "counters applied=.. duplicates=.. retried=.. dead_lettered=..".
#include <libpq-fe.h>
#include <signal.h>

#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "outbox/consumer.h"
#include "outbox/http.h"
#include "outbox/inbox.h"
#include "outbox/kafka.h"
#include "outbox/mariadb.h"
#include "outbox/mariadb_inbox.h"
#include "outbox/postgres_inbox.h"
#include "outbox/rabbitmq.h"

#include <mysql.h>

namespace {

std::atomic<bool> g_stop{false};

std::string Scalar(PGconn* c, const std::string& sql, const std::string& p1) {
  const char* v[] = {p1.c_str()};
  PGresult* r = PQexecParams(c, sql.c_str(), 1, nullptr, v, nullptr, nullptr, 0);
  std::string out = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) ? PQgetvalue(r, 0, 0) : "";
  PQclear(r);
  return out;
}

// The first value of `sql` on a MariaDB connection ("" if none); false on error.
bool MyScalar(MYSQL* c, const std::string& sql, std::string* out) {
  out->clear();
  if (mysql_real_query(c, sql.data(), sql.size()) != 0) return false;
  if (MYSQL_RES* r = mysql_store_result(c)) {
    if (MYSQL_ROW row = mysql_fetch_row(r); row && row[0]) *out = row[0];
    mysql_free_result(r);
  }
  return true;
}

std::string MyQuote(MYSQL* c, const std::string& s) {
  std::string out(s.size() * 2 + 1, '\0');
  out.resize(mysql_real_escape_string(c, out.data(), s.data(), static_cast<unsigned long>(s.size())));
  return "'" + out + "'";
}

// What the handler needs from its database, so that one behaviour serves both
// stores. `count_attempt` runs on an autocommit side connection (the count must
// survive the handler's rollbacks); the others on the inbox's transaction.
struct Effects {
  std::function<std::string(const std::string& key)> count_attempt;  // the new count
  std::function<bool(const std::string& key)> blocked;
  std::function<bool(const std::string& key)> insert_orphan;          // false: the insert failed
  std::function<bool(const std::string& key, const std::string& payload)> insert;
};

outbox::HandlerResult Behave(const outbox::InboundMessage& m, const Effects& db) {
  if (m.payload_is_null) return outbox::HandlerResult::Permanent("a tombstone was not expected");
  if (m.payload == "permanent") return outbox::HandlerResult::Permanent("contract violation");
  if (m.payload.rfind("permanent-long:", 0) == 0) {  // and a 9,000-byte error text
    return outbox::HandlerResult::Permanent(std::string(9000, 'e'));
  }
  if (m.payload == "multiline") {
    return outbox::HandlerResult::Permanent(
        "ERROR:  value out of range\nCONTEXT:  PL/pgSQL function f() line 3");
  }
  if (m.payload == "orphan" && db.insert_orphan && !db.insert_orphan(m.key)) {
    return outbox::HandlerResult::Transient("child insert failed");
  }
  if (m.payload == "transient-forever") return outbox::HandlerResult::Transient("always down");
  if (m.payload == "fail-twice") {  // counted per event id
    const std::string* id = m.Header("outbox-event-id");
    const std::string n = db.count_attempt(id ? *id : m.key);
    if (n == "1" || n == "2") return outbox::HandlerResult::Transient("attempt " + n + " fails");
  }
  if (m.payload == "transient-once" && db.count_attempt(m.key) == "1") {
    return outbox::HandlerResult::Transient("first attempt fails");
  }
  if (m.payload == "blocked" && db.blocked(m.key)) return outbox::HandlerResult::Permanent("blocked");
  return db.insert(m.key, m.payload) ? outbox::HandlerResult::Ok()
                                     : outbox::HandlerResult::Transient("insert failed");
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGTERM, [](int) { g_stop = true; });
  std::map<std::string, std::string> a;
  for (int i = 1; i + 1 < argc; i += 2) a[std::string(argv[i]).substr(2)] = argv[i + 1];
  const std::string schema = a["schema"];
  const bool maria = outbox::IsMariaDbUrl(a["db"]);
  outbox::StreamLogger logger(false, outbox::LogLevel::kDebug);

  // The autocommit side connection that counts attempts.
  PGconn* side = maria ? nullptr : PQconnectdb(a["db"].c_str());
  MYSQL* my_side = nullptr;
  if (maria) {
    std::string s = a["db"].substr(std::string("mysql://").size());  // user@host:port/db
    const std::string user = s.substr(0, s.find('@'));
    s = s.substr(s.find('@') + 1);
    const std::string host = s.substr(0, s.find(':'));
    const unsigned port = static_cast<unsigned>(std::atoi(s.substr(s.find(':') + 1).c_str()));
    my_side = mysql_init(nullptr);
    if (!mysql_real_connect(my_side, host.c_str(), user.c_str(), nullptr,
                            s.substr(s.find('/') + 1).c_str(), port, nullptr, 0)) {
      std::cerr << "side connection: " << mysql_error(my_side) << "\n";
      return 1;
    }
  }

  outbox::Handler handler = [&](const outbox::InboundMessage& m, pg_conn* txn) {
    Effects db;
    db.count_attempt = [&](const std::string& k) {
      return Scalar(side, "INSERT INTO " + schema + ".attempts VALUES ($1, 1) "
                          "ON CONFLICT (k) DO UPDATE SET n = attempts.n + 1 RETURNING n", k);
    };
    db.blocked = [&](const std::string& k) {
      return !Scalar(txn, "SELECT 1 FROM " + schema + ".blocklist WHERE k = $1", k).empty();
    };
    db.insert_orphan = [&](const std::string& k) {  // breaks a deferred foreign key: fails at COMMIT
      const std::string sql = "INSERT INTO " + schema + ".child VALUES ($1)";
      const char* v[] = {k.c_str()};
      PGresult* r = PQexecParams(txn, sql.c_str(), 1, nullptr, v, nullptr, nullptr, 0);
      const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
      PQclear(r);
      return ok;
    };
    db.insert = [&](const std::string& k, const std::string& p) {
      const std::string sql = "INSERT INTO " + schema + ".effects (k, payload) VALUES ($1, $2)";
      const char* v[] = {k.c_str(), p.c_str()};
      PGresult* r = PQexecParams(txn, sql.c_str(), 2, nullptr, v, nullptr, nullptr, 0);
      const bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
      PQclear(r);
      return ok;
    };
    return Behave(m, db);
  };

  // MariaDB: the same behaviour, in the inbox's transaction on `txn`.
  outbox::MariaDbHandler maria_handler = [&](const outbox::InboundMessage& m, st_mysql* txn) {
    Effects db;
    std::string v;
    db.count_attempt = [&](const std::string& k) {
      const std::string q = MyQuote(my_side, k);
      if (!MyScalar(my_side, "INSERT INTO attempts VALUES (" + q + ", 1) ON DUPLICATE KEY UPDATE n = n + 1", &v) ||
          !MyScalar(my_side, "SELECT n FROM attempts WHERE k = " + q, &v)) {
        return std::string();
      }
      return v;
    };
    db.blocked = [&](const std::string& k) {
      return MyScalar(txn, "SELECT 1 FROM blocklist WHERE k = " + MyQuote(txn, k), &v) && !v.empty();
    };
    db.insert = [&](const std::string& k, const std::string& p) {
      return MyScalar(txn, "INSERT INTO effects (k, payload) VALUES (" + MyQuote(txn, k) + ", " +
                               MyQuote(txn, p) + ")", &v);
    };
    return Behave(m, db);
  };
  outbox::Result<std::unique_ptr<outbox::InboxStore>> inbox =
      outbox::Status::Internal("no inbox");
  if (maria) {
    outbox::MariaDbInboxOptions mo;
    mo.url = a["db"];
    mo.consumer = "test-consumer";
    inbox = outbox::OpenMariaDbInbox(mo, maria_handler);
  } else {
    outbox::PostgresInboxOptions io;
    io.conninfo = a["db"];
    io.schema = schema;
    io.consumer = "test-consumer";
    inbox = outbox::OpenPostgresInbox(io, handler);
  }
  if (!inbox.ok() || !(*inbox)->Migrate().ok()) {
    std::cerr << "inbox: " << inbox.status().ToString() << "\n";
    return 1;
  }
  outbox::Result<std::unique_ptr<outbox::InboxSource>> source = outbox::Status::Internal("no source");
  const bool ordered = a.count("ordered") && a["ordered"] == "1";
  if (a.count("amqp")) {
    outbox::RabbitMqInboxSourceOptions ro;
    ro.broker.url = a["amqp"];
    ro.broker.declare = true;
    ro.broker.timeout = std::chrono::milliseconds(3000);
    ro.group = a["group"];
    ro.single_active_consumer = ordered;
    if (a.count("prefetch")) ro.prefetch = std::atoi(a["prefetch"].c_str());
    source = outbox::OpenRabbitMqInboxSource(ro, logger);
  } else {
    outbox::KafkaInboxSourceOptions so;
    so.properties = {{"bootstrap.servers", a["bootstrap"]}, {"group.id", a["group"]},
                     {"session.timeout.ms", "6000"}, {"heartbeat.interval.ms", "500"}};
    source = outbox::OpenKafkaInboxSource(so, logger);
  }
  if (!source.ok()) {
    std::cerr << "source: " << source.status().ToString() << "\n";
    return 2;
  }
  outbox::ConsumerOptions co;
  co.topics = {a["topic"]};
  if (a.count("retry-delays")) {
    co.retry_delays.clear();
    std::stringstream ss(a["retry-delays"]);
    for (std::string d; std::getline(ss, d, ',');) {
      co.retry_delays.push_back(std::chrono::milliseconds(std::atol(d.c_str())));
    }
  }
  if (a.count("batch")) co.batch_size = std::atoi(a["batch"].c_str());
  if (a.count("batch-wait-ms")) co.batch_wait = std::chrono::milliseconds(std::atol(a["batch-wait-ms"].c_str()));
  co.ordered = ordered;
  if (a.count("amqp")) co.group = a["group"];
  outbox::MetricsRegistry registry;
  auto consumer =
      outbox::Consumer::Create(co, **source, **inbox, outbox::DedupByEventId(), logger, &registry);
  if (!consumer.ok()) {
    std::cerr << "consumer: " << consumer.status().ToString() << "\n";
    return 2;
  }
  std::unique_ptr<outbox::MetricsServer> metrics_server;
  if (a.count("metrics-port")) {
    auto ms = outbox::MetricsServer::Start("127.0.0.1", std::atoi(a["metrics-port"].c_str()), registry);
    if (!ms.ok()) {
      std::cerr << "metrics: " << ms.status().ToString() << "\n";
      return 2;
    }
    metrics_server = std::move(ms).value();
    std::cout << "metrics port=" << metrics_server->port() << std::endl;
  }
  std::thread watcher([&] {
    while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    (*consumer)->Stop();
  });
  outbox::Status st = (*consumer)->Run();
  g_stop = true;
  watcher.join();
  auto c = (*consumer)->counters();
  std::cout << "counters applied=" << c.applied << " duplicates=" << c.duplicates
            << " retried=" << c.retried << " dead_lettered=" << c.dead_lettered << std::endl;
  if (side) PQfinish(side);
  if (my_side) mysql_close(my_side);
  return st.ok() ? 0 : 1;
}
