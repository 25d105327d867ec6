// lms-service: the LMS of the seed. Records that a user completed a lesson and,
// in the same local transaction, enqueues a LessonCompleted event into the
// outbox (aggregate lesson/<lesson>/<user>, dedup key
// "LessonCompleted:<user>:<lesson>"). It never talks to Kafka or to the
// learning-activity service: the relay publishes what this transaction commits.
//
//   POST /completions   {"user": 42, "lesson": 7}
//     201 {"completed": true, "event_id": "..."}      recorded, event enqueued
//     200 {"completed": false, "reason": "already completed"}   nothing written
//     400 malformed request, 404 unknown lesson, 503 database unavailable (retry)
//   GET /healthz
//
// Validation and look-ups (is the lesson in the catalogue?) happen before the
// transaction opens, so it holds no locks while waiting on anything else.
//
//   lms-service --db URL [--listen 127.0.0.1:0] [--port-file PATH] [--lessons 20]
//               [--outbox-schema outbox] [--notify on|off]
// --notify on sets outbox.notify for its sessions, so each commit wakes the
// relays (LISTEN/NOTIFY) instead of leaving the event to their next poll.
// On start it creates the schema `lms` (lesson catalogue with --lessons lessons,
// lesson_completion) if missing; the outbox schema must exist (outboxctl migrate).
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "common.h"
#include "outbox/event.h"
#include "outbox/postgres.h"

namespace {

constexpr const char* kSchema = R"SQL(
CREATE SCHEMA IF NOT EXISTS lms;
CREATE TABLE IF NOT EXISTS lms.lesson (id integer PRIMARY KEY, title text NOT NULL);
CREATE TABLE IF NOT EXISTS lms.lesson_completion (
  user_id      integer     NOT NULL,
  lesson_id    integer     NOT NULL REFERENCES lms.lesson (id),
  completed_at timestamptz NOT NULL,
  PRIMARY KEY (user_id, lesson_id)
);
)SQL";

std::string g_db;
bool g_notify = true;
outbox::EnqueueOptions g_enqueue;

// One connection per server thread; re-established after a failure.
PGconn* ThreadConn() {
  thread_local lms::Conn conn;
  if (!conn || PQstatus(conn.get()) != CONNECTION_OK) {
    conn = lms::Connect(g_db);
    // Wake idle relays at commit (LISTEN/NOTIFY) instead of waiting for their poll.
    if (g_notify && PQstatus(conn.get()) == CONNECTION_OK) lms::Query(conn.get(), "SET outbox.notify = on");
  }
  return PQstatus(conn.get()) == CONNECTION_OK ? conn.get() : nullptr;
}

void Reply(httplib::Response& res, int code, const nlohmann::json& body) {
  res.status = code;
  res.set_content(body.dump(), "application/json");
}

void Complete(const httplib::Request& req, httplib::Response& res) {
  // 1. Validate the request.
  long user = 0, lesson = 0;
  try {
    auto j = nlohmann::json::parse(req.body);
    user = j.at("user").get<long>();
    lesson = j.at("lesson").get<long>();
  } catch (const std::exception& e) {
    return Reply(res, 400, {{"error", std::string("expected {\"user\": int, \"lesson\": int}: ") + e.what()}});
  }
  if (user <= 0 || lesson <= 0) return Reply(res, 400, {{"error", "user and lesson must be positive"}});
  PGconn* c = ThreadConn();
  if (!c) return Reply(res, 503, {{"error", "database unavailable"}});
  // 2. Look-ups, outside the transaction.
  std::string err;
  lms::Res found = lms::Query(c, "SELECT 1 FROM lms.lesson WHERE id = $1", {std::to_string(lesson)}, &err);
  if (!found) return Reply(res, 503, {{"error", "lesson look-up failed: " + err}});
  if (PQntuples(found.get()) == 0) return Reply(res, 404, {{"error", "no lesson " + std::to_string(lesson)}});

  // 3. One local transaction: the business row and the outbox row.
  auto fail = [&](const std::string& what) {
    lms::Res rb(PQexec(c, "ROLLBACK"));
    Reply(res, 503, {{"error", what}});
  };
  if (!lms::Query(c, "BEGIN", {}, &err)) return fail("begin: " + err);
  lms::Res row = lms::Query(c,
                            "INSERT INTO lms.lesson_completion VALUES ($1, $2, clock_timestamp()) "
                            "ON CONFLICT DO NOTHING RETURNING "
                            "to_char(completed_at, 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
                            {std::to_string(user), std::to_string(lesson)}, &err);
  if (!row) return fail("insert: " + err);
  if (PQntuples(row.get()) == 0) {  // a second click: nothing to record, no event
    lms::Res rb(PQexec(c, "ROLLBACK"));
    return Reply(res, 200, {{"completed", false}, {"reason", "already completed"}});
  }
  // The event carries the fact (value 0), not points: the learning-activity
  // service decides what it is worth.
  nlohmann::json payload = {{"eventKind", "LessonCompleted"}, {"userId", user},
                            {"objectId", lesson}, {"value", 0},
                            {"completedAt", PQgetvalue(row.get(), 0, 0)}};
  outbox::Event e;
  e.aggregate_type = "lesson";
  e.aggregate_id = std::to_string(lesson) + "/" + std::to_string(user);
  e.event_type = "LessonCompleted";
  e.payload = payload.dump();
  e.dedup_key = lms::CompletionKey(user, lesson);
  if (auto it = req.headers.find("traceparent"); it != req.headers.end()) {
    e.headers.push_back({"traceparent", it->second});
  }
  auto enq = outbox::Enqueue(c, e, g_enqueue);
  if (!enq.ok()) return fail("enqueue: " + enq.status().ToString());
  if (!lms::Query(c, "COMMIT", {}, &err)) return fail("commit: " + err);
  Reply(res, 201, {{"completed", true}, {"event_id", enq->event_id}});
}

}  // namespace

int main(int argc, char** argv) {
  const lms::StopSignals signals;
  lms::Flags f(argc, argv, "lms-service",
               {{"db", ""}, {"listen", "127.0.0.1:0"}, {"port-file", ""}, {"lessons", "20"},
                {"outbox-schema", "outbox"}, {"notify", "on"}});
  g_db = f.Required("db");
  g_enqueue.schema = f.Str("outbox-schema");
  if (f.Str("notify") != "on" && f.Str("notify") != "off") f.Usage("--notify must be on or off");
  g_notify = f.Str("notify") == "on";
  const long lessons = f.Int("lessons", 1);
  const std::string listen = f.Str("listen");
  const auto colon = listen.rfind(':');
  if (colon == std::string::npos) f.Usage("--listen must be HOST:PORT");

  lms::Conn c = lms::Connect(g_db);
  if (PQstatus(c.get()) != CONNECTION_OK) {
    std::cerr << "lms-service: cannot connect to --db: " << PQerrorMessage(c.get());
    return 1;
  }
  if (!lms::Script(c.get(), kSchema, "lms-service: schema")) return 1;
  if (!lms::Query(c.get(),
                  "INSERT INTO lms.lesson SELECT g, 'Lesson ' || g FROM generate_series(1, $1::int) g "
                  "ON CONFLICT DO NOTHING",
                  {std::to_string(lessons)})) {
    return 1;
  }
  if (lms::Scalar(c.get(), "SELECT to_regclass($1)", {g_enqueue.schema + ".outbox"}).empty()) {
    std::cerr << "lms-service: no table " << g_enqueue.schema << ".outbox; run `outboxctl migrate` first\n";
    return 1;
  }
  c.reset();

  httplib::Server server;
  server.set_tcp_nodelay(true);  // headers and body go out in separate writes
  signals.OnStop([&server] { server.stop(); });
  server.Post("/completions", Complete);
  server.Get("/healthz", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });
  const std::string host = listen.substr(0, colon);
  int port = std::atoi(listen.c_str() + colon + 1);
  if (port == 0) {
    port = server.bind_to_any_port(host);
  } else if (!server.bind_to_port(host, port)) {
    port = -1;
  }
  if (port <= 0) {
    std::cerr << "lms-service: cannot listen on " << listen << "\n";
    return 1;
  }
  if (!f.Str("port-file").empty() && !lms::WriteFileAtomically(f.Str("port-file"), std::to_string(port) + "\n")) {
    std::cerr << "lms-service: cannot write --port-file\n";
    return 1;
  }
  std::cerr << "lms-service: listening on " << host << ":" << port << "\n";
  server.listen_after_bind();
  return 0;
}
