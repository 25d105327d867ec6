// learning-activity: the consumer side of the seed. Consumes LessonCompleted
// events through the outbox inbox, so each completion takes effect once however
// often it is delivered. Effects, all in the inbox's transaction:
//   1. an experience-history entry (the event carries the fact, value 0, so the
//      points added are 0 — the seed's `addedPoint = value * point`);
//   2. the daily quest "complete N lessons today": progress +1 for the user and
//      the day of the completion; the reward is granted when progress reaches N;
//   3. the group mission (the seed's branch A): when a member completes the
//      mission lesson, the group's count +1; the mission completes when every
//      member has.
// Stamp key: event kind + user id + object id ("LessonCompleted:<user>:<lesson>"),
// a stable business identity, read from the payload. An event without userId or
// objectId breaks the LMS's contract: permanent error, dead-letter topic.
// The reward and mission tables have no unique key on purpose: a double effect
// would show up as two rows, which is what the demo's report checks.
//
//   learning-activity --db URL --bootstrap HOST:PORT[,...] [--topic outbox.event.lesson]
//                     [--group learning-activity] [--quest-lessons 5] [--users 1000]
//                     [--group-size 4] [--mission-lesson 1] [--reward-points 100]
//                     [--batch on|off] [--fetch-wait-ms 20] [--metrics-port -1]
// --batch on (default) applies a whole batch's effects in one statement (a
// BatchHandler); off runs the per-message handler for every message.
// --metrics-port N serves /metrics (outbox_inbox_*), /healthz, /readyz on
// 127.0.0.1:N (0: a free port, logged; -1, the default: off).
// --users/--group-size seed the groups (user u is in group (u-1)/group-size + 1)
// the first time the schema is created.
#include <nlohmann/json.hpp>

#include "common.h"
#include "outbox/consumer.h"
#include "outbox/event.h"
#include "outbox/http.h"
#include "outbox/inbox.h"
#include "outbox/kafka.h"
#include "outbox/log.h"
#include "outbox/postgres_inbox.h"

namespace {

constexpr const char* kSchema = R"SQL(
CREATE SCHEMA IF NOT EXISTS activity;
CREATE TABLE IF NOT EXISTS activity.exp_history (
  id          bigserial   PRIMARY KEY,
  user_id     integer     NOT NULL,
  event_kind  text        NOT NULL,
  object_id   integer     NOT NULL,
  event_id    text,
  value       integer     NOT NULL,
  added_point integer     NOT NULL,
  occurred_at timestamptz NOT NULL,              -- the LMS's completion time
  applied_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS exp_history_user_idx ON activity.exp_history (user_id, object_id);
CREATE TABLE IF NOT EXISTS activity.daily_quest_progress (
  user_id integer NOT NULL,
  day     date    NOT NULL,
  quest   text    NOT NULL,
  done    integer NOT NULL,
  PRIMARY KEY (user_id, day, quest)
);
CREATE TABLE IF NOT EXISTS activity.quest_reward (
  id         bigserial   PRIMARY KEY,
  user_id    integer     NOT NULL,
  day        date        NOT NULL,
  quest      text        NOT NULL,
  points     integer     NOT NULL,
  granted_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS activity.group_member (
  user_id  integer PRIMARY KEY,
  group_id integer NOT NULL
);
CREATE TABLE IF NOT EXISTS activity.group_mission_progress (
  group_id integer PRIMARY KEY,
  done     integer NOT NULL
);
CREATE TABLE IF NOT EXISTS activity.group_mission_completion (
  id           bigserial   PRIMARY KEY,
  group_id     integer     NOT NULL,
  completed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
)SQL";

constexpr long kPoint = 10;  // what one unit of this activity would be worth

struct Completion {
  long user = 0;
  long lesson = 0;
  long value = 0;
  std::string completed_at;
};

// The LMS's contract: eventKind, userId, objectId, value, completedAt.
outbox::Result<Completion> Decode(const outbox::InboundMessage& m) {
  try {
    auto j = nlohmann::json::parse(m.payload);
    Completion c;
    if (j.at("eventKind").get<std::string>() != "LessonCompleted") {
      return outbox::Status::InvalidArgument("eventKind is not LessonCompleted");
    }
    c.user = j.at("userId").get<long>();
    c.lesson = j.at("objectId").get<long>();
    c.value = j.at("value").get<long>();
    c.completed_at = j.at("completedAt").get<std::string>();
    return c;
  } catch (const std::exception& e) {
    return outbox::Status::InvalidArgument(std::string("payload breaks the LessonCompleted contract: ") + e.what());
  }
}

// The event id as the exp_history row records it (for tracing only: the dedup
// key comes from the payload). Header bytes are not always text; a value that
// is not UTF-8 is left out rather than failing the effect.
std::string EventIdText(const outbox::InboundMessage& m) {
  const std::string* id = m.Header("outbox-event-id");
  return id && outbox::IsValidText(*id) ? *id : "";
}

}  // namespace

int main(int argc, char** argv) {
  const lms::StopSignals signals;
  lms::Flags f(argc, argv, "learning-activity",
               {{"db", ""}, {"bootstrap", ""}, {"topic", "outbox.event.lesson"},
                {"group", "learning-activity"}, {"quest-lessons", "5"}, {"users", "1000"},
                {"group-size", "4"}, {"mission-lesson", "1"}, {"reward-points", "100"},
                {"fetch-wait-ms", "20"}, {"batch", "on"}, {"metrics-port", "-1"}});
  if (f.Str("batch") != "on" && f.Str("batch") != "off") f.Usage("--batch must be on or off");
  const std::string db = f.Required("db");
  const std::string quest_lessons = std::to_string(f.Int("quest-lessons", 1));
  const std::string group_size = std::to_string(f.Int("group-size", 1));
  const long mission_lesson = f.Int("mission-lesson", 1);
  const std::string reward_points = std::to_string(f.Int("reward-points", 0));
  const std::string quest = "complete-" + quest_lessons + "-lessons-today";
  outbox::StreamLogger logger(false, outbox::LogLevel::kInfo);

  {
    lms::Conn c = lms::Connect(db);
    if (PQstatus(c.get()) != CONNECTION_OK) {
      std::cerr << "learning-activity: cannot connect to --db: " << PQerrorMessage(c.get());
      return 1;
    }
    if (!lms::Script(c.get(), kSchema, "learning-activity: schema")) return 1;
    if (!lms::Query(c.get(),
                    "INSERT INTO activity.group_member SELECT u, (u - 1) / $2::int + 1 "
                    "FROM generate_series(1, $1::int) u ON CONFLICT DO NOTHING",
                    {std::to_string(f.Int("users", 1)), group_size})) {
      return 1;
    }
  }
  outbox::DedupKeyFn dedup = [](const outbox::InboundMessage& m) -> outbox::Result<std::string> {
    auto c = Decode(m);
    if (!c.ok()) return c.status();
    return lms::CompletionKey(c->user, c->lesson);
  };

  outbox::Handler handler = [&](const outbox::InboundMessage& m, pg_conn* txn) -> outbox::HandlerResult {
    auto c = Decode(m);
    if (!c.ok()) return outbox::HandlerResult::Permanent(c.status().message());
    const std::string user = std::to_string(c->user), lesson = std::to_string(c->lesson);
    const std::string id = EventIdText(m);
    std::string err, state;
    // A failed statement: bad data (SQLSTATE class 22, 23) is permanent, the
    // rest is worth a retry.
    const auto failed = [&](const char* what) {
      return outbox::HandlerResult::FromSqlState(state, std::string(what) + ": " + err);
    };
    const long point = kPoint;
    if (!lms::Query(txn,
                    "INSERT INTO activity.exp_history (user_id, event_kind, object_id, event_id, value, "
                    "added_point, occurred_at) VALUES ($1, 'LessonCompleted', $2, $3, $4, $5, $6)",
                    {user, lesson, id, std::to_string(c->value),
                     std::to_string(c->value * point), c->completed_at},
                    &err, &state)) {
      return failed("exp_history");
    }
    // Daily quest: the row lock of the upsert orders concurrent completions of
    // one user, so exactly one transaction sees `done` reach N.
    lms::Res q = lms::Query(txn,
                            "INSERT INTO activity.daily_quest_progress VALUES ($1, ($2::timestamptz "
                            "AT TIME ZONE 'UTC')::date, $3, 1) ON CONFLICT (user_id, day, quest) DO UPDATE "
                            "SET done = daily_quest_progress.done + 1 RETURNING done, day",
                            {user, c->completed_at, quest}, &err, &state);
    if (!q) return failed("quest progress");
    if (std::string(PQgetvalue(q.get(), 0, 0)) == quest_lessons &&
        !lms::Query(txn, "INSERT INTO activity.quest_reward (user_id, day, quest, points) VALUES ($1, $2, $3, $4)",
                    {user, PQgetvalue(q.get(), 0, 1), quest, reward_points}, &err, &state)) {
      return failed("quest reward");
    }
    if (c->lesson == mission_lesson) {
      lms::Res g = lms::Query(txn,
                              "INSERT INTO activity.group_mission_progress SELECT group_id, 1 FROM "
                              "activity.group_member WHERE user_id = $1 ON CONFLICT (group_id) DO UPDATE "
                              "SET done = group_mission_progress.done + 1 RETURNING group_id, done, "
                              "(SELECT count(*) FROM activity.group_member m WHERE m.group_id = "
                              "group_mission_progress.group_id)",
                              {user}, &err, &state);
      if (!g) return failed("group mission");
      if (PQntuples(g.get()) == 1 &&
          std::string(PQgetvalue(g.get(), 0, 1)) == PQgetvalue(g.get(), 0, 2) &&
          !lms::Query(txn, "INSERT INTO activity.group_mission_completion (group_id) VALUES ($1)",
                      {PQgetvalue(g.get(), 0, 0)}, &err, &state)) {
        return failed("group mission completion");
      }
    }
    return outbox::HandlerResult::Ok();
  };

  // The same effects for a whole batch in one statement (the inbox's fast path);
  // if it fails, the inbox redoes the batch message by message with `handler`.
  // Rewards and missions go to the rows whose count crosses the target in this
  // batch (before < target <= after), which is what `handler` does one at a time.
  const std::string batch_sql = R"SQL(
WITH b AS (
  SELECT * FROM jsonb_to_recordset($1::jsonb) AS x(u int, l int, id text, v int, p int, at timestamptz)
), eh AS (
  INSERT INTO activity.exp_history (user_id, event_kind, object_id, event_id, value, added_point, occurred_at)
  SELECT u, 'LessonCompleted', l, id, v, p, at FROM b
), c AS (
  SELECT u, (at AT TIME ZONE 'UTC')::date AS day, count(*)::int AS k FROM b GROUP BY 1, 2
), q AS (
  INSERT INTO activity.daily_quest_progress AS dq SELECT u, day, $2, k FROM c
  ON CONFLICT (user_id, day, quest) DO UPDATE SET done = dq.done + excluded.done
  RETURNING dq.user_id, dq.day, dq.done
), r AS (
  INSERT INTO activity.quest_reward (user_id, day, quest, points)
  SELECT q.user_id, q.day, $2, $4::int FROM q JOIN c ON c.u = q.user_id AND c.day = q.day
  WHERE q.done - c.k < $3::int AND q.done >= $3::int
), m AS (
  SELECT g.group_id, count(*)::int AS k FROM b JOIN activity.group_member g ON g.user_id = b.u
  WHERE b.l = $5::int GROUP BY 1
), mp AS (
  INSERT INTO activity.group_mission_progress AS gp SELECT group_id, k FROM m
  ON CONFLICT (group_id) DO UPDATE SET done = gp.done + excluded.done
  RETURNING gp.group_id, gp.done
)
INSERT INTO activity.group_mission_completion (group_id)
SELECT mp.group_id FROM mp JOIN m USING (group_id)
  JOIN (SELECT group_id, count(*) AS size FROM activity.group_member GROUP BY 1) s USING (group_id)
WHERE mp.done - m.k < s.size AND mp.done >= s.size
)SQL";
  outbox::BatchHandler batch_handler =
      [&](std::span<const outbox::InboundMessage* const> msgs, pg_conn* txn) -> outbox::HandlerResult {
    nlohmann::json rows = nlohmann::json::array();
    for (const outbox::InboundMessage* m : msgs) {
      auto c = Decode(*m);
      if (!c.ok()) return outbox::HandlerResult::Permanent(c.status().message());  // per message decides
      rows.push_back({{"u", c->user}, {"l", c->lesson}, {"id", EventIdText(*m)}, {"v", c->value},
                      {"p", c->value * kPoint}, {"at", c->completed_at}});
    }
    std::string err, state;
    if (!lms::Query(txn, batch_sql,
                    {rows.dump(), quest, quest_lessons, reward_points, std::to_string(mission_lesson)}, &err,
                    &state)) {
      return outbox::HandlerResult::FromSqlState(state, "batch effects: " + err);
    }
    return outbox::HandlerResult::Ok();
  };

  outbox::PostgresInboxOptions io;
  io.conninfo = db;
  io.consumer = f.Str("group");
  auto inbox = outbox::OpenPostgresInbox(io, handler,
                                         f.Str("batch") == "on" ? batch_handler : nullptr);
  if (!inbox.ok()) {
    std::cerr << "learning-activity: inbox: " << inbox.status().ToString() << "\n";
    return 1;
  }
  if (auto st = (*inbox)->Migrate(); !st.ok()) {
    std::cerr << "learning-activity: inbox migrate: " << st.ToString() << "\n";
    return 1;
  }
  outbox::KafkaInboxSourceOptions so;
  so.properties = {{"bootstrap.servers", f.Required("bootstrap")}, {"group.id", f.Str("group")},
                   {"session.timeout.ms", "6000"}, {"heartbeat.interval.ms", "500"},
                   {"fetch.wait.max.ms", std::to_string(f.Int("fetch-wait-ms", 0))}};
  auto source = outbox::OpenKafkaInboxSource(so, logger);
  if (!source.ok()) {
    std::cerr << "learning-activity: " << source.status().ToString() << "\n";
    return 1;
  }
  outbox::ConsumerOptions co;
  co.topics = {f.Str("topic")};
  co.batch_wait = std::chrono::milliseconds(5);
  outbox::MetricsRegistry metrics;
  auto consumer = outbox::Consumer::Create(co, **source, **inbox, dedup, logger, &metrics);
  if (!consumer.ok()) {
    std::cerr << "learning-activity: " << consumer.status().ToString() << "\n";
    return 1;
  }
  // /metrics (the outbox_inbox_* family) when --metrics-port is given.
  std::unique_ptr<outbox::MetricsServer> metrics_server;
  if (const long port = f.Int("metrics-port", -1); port >= 0) {
    auto ms = outbox::MetricsServer::Start("127.0.0.1", static_cast<int>(port), metrics);
    if (!ms.ok()) {
      std::cerr << "learning-activity: --metrics-port: " << ms.status().ToString() << "\n";
      return 2;
    }
    metrics_server = std::move(ms).value();
    logger.Info("learning-activity: metrics listening",
                {{"address", "127.0.0.1:" + std::to_string(metrics_server->port())}});
  }
  outbox::Consumer* raw = consumer->get();
  signals.OnStop([raw] { raw->Stop(); });
  logger.Info("learning-activity: consuming", {{"topic", f.Str("topic")}, {"quest", quest}});
  outbox::Status st = raw->Run();
  auto n = raw->counters();
  logger.Info("learning-activity: stopped", {{"applied", std::to_string(n.applied)},
                                            {"duplicates", std::to_string(n.duplicates)},
                                            {"dead_lettered", std::to_string(n.dead_lettered)}});
  if (!st.ok()) {
    std::cerr << "learning-activity: " << st.ToString() << "\n";
    return 1;
  }
  return 0;
}
