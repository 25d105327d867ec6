// outboxctl as a real process against the real PostgreSQL.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sys/wait.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "outbox/postgres_inbox.h"
#include "outbox/postgres.h"
#include "kafka_helpers.h"
#include "test_env.h"

namespace outbox::testing {
namespace {

using CtlRun = CommandRun;

CtlRun Ctl(const std::string& args) {
  return RunCommand(std::string(OUTBOX_OUTBOXCTL_BIN) + " " + args);
}

class OutboxctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    OUTBOX_REQUIRE_ENV(url_, "OUTBOX_PG_URL");
    schema_ = "t_" + RandomSuffix();
    conn_ = Connect(url_);
    base_ = "--db '" + url_ + "' --schema " + schema_;
    CtlRun m = Ctl(base_ + " migrate");
    ASSERT_EQ(m.code, 0) << m.out;
    PostgresStoreOptions o;
    o.conninfo = url_;
    o.schema = schema_;
    store_ = std::move(OpenPostgresStore(o)).value();
  }
  void TearDown() override {
    if (conn_) {
      Exec(conn_.get(), "DROP SCHEMA IF EXISTS " + schema_ + " CASCADE");
      Exec(conn_.get(), "DROP SCHEMA IF EXISTS " + schema_ + "_inbox CASCADE");
    }
  }
  std::string EnqueueOne(const std::string& agg, const std::string& dedup) {
    Event e;
    e.aggregate_type = "lesson";
    e.aggregate_id = agg;
    e.event_type = "LessonCompleted";
    e.payload = "{}";
    e.dedup_key = dedup;
    EnqueueOptions eo;
    eo.schema = schema_;
    Exec(conn_.get(), "BEGIN");
    auto r = Enqueue(conn_.get(), e, eo);
    Exec(conn_.get(), "COMMIT");
    EXPECT_TRUE(r.ok());
    return r.ok() ? r->event_id : "";
  }
  std::string url_, schema_, base_;
  PgConn conn_;
  std::unique_ptr<Store> store_;
};

TEST_F(OutboxctlTest, StatusListTraceReplayPurge) {
  const std::string id1 = EnqueueOne("u1/l1", "LessonCompleted:u1:l1");
  const std::string id2 = EnqueueOne("u2/l2", "LessonCompleted:u2:l2");
  auto status = nlohmann::json::parse(Ctl(base_ + " --json status").out);
  EXPECT_EQ(status["pending"], 2);

  // One event sent, one failed.
  ClaimOptions co;
  auto c = store_->Claim(co);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->events.size(), 2u);
  std::vector<Ticket> sent = {c->events[0].ticket};
  ASSERT_TRUE(store_->MarkSent(sent).ok());
  FailItem fi{c->events[1].ticket, "MSG_SIZE_TOO_LARGE: too large"};
  ASSERT_TRUE(store_->MarkFailed(std::span(&fi, 1)).ok());

  CtlRun list = Ctl(base_ + " list --state failed");
  EXPECT_EQ(list.code, 0);
  EXPECT_NE(list.out.find(id2), std::string::npos) << list.out;
  EXPECT_EQ(list.out.find(id1), std::string::npos) << list.out;
  auto lj = nlohmann::json::parse(Ctl(base_ + " --json list").out);
  EXPECT_EQ(lj["rows"].size(), 2u);

  // Trace by dedup key: where did it stop?
  CtlRun t = Ctl(base_ + " trace LessonCompleted:u2:l2");
  EXPECT_EQ(t.code, 0) << t.out;
  EXPECT_NE(t.out.find("FAILED"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("MSG_SIZE_TOO_LARGE"), std::string::npos) << t.out;
  EXPECT_EQ(Ctl(base_ + " trace no-such-key").code, 3);

  // Replay the FAILED one.
  CtlRun dry = Ctl(base_ + " replay --failed --dry-run");
  EXPECT_NE(dry.out.find("would replay 1"), std::string::npos) << dry.out;
  CtlRun rep = Ctl(base_ + " replay --event-id " + id2);
  EXPECT_EQ(rep.code, 0) << rep.out;
  EXPECT_NE(rep.out.find("replayed 1"), std::string::npos) << rep.out;
  auto again = store_->Claim(co);
  ASSERT_TRUE(again.ok());
  ASSERT_EQ(again->events.size(), 1u);
  EXPECT_EQ(again->events[0].event_id, id2);
  EXPECT_EQ(again->events[0].attempts, 1) << "attempts start over";

  // Purge the SENT one.
  CtlRun p = Ctl(base_ + " purge --retention-s 0");
  EXPECT_EQ(p.code, 0) << p.out;
  EXPECT_NE(p.out.find("purged 1"), std::string::npos) << p.out;
}

TEST_F(OutboxctlTest, TraceFollowsTheEventIntoTheConsumersInbox) {
  const std::string id = EnqueueOne("u3/l3", "LessonCompleted:u3:l3");
  PostgresInboxOptions io;
  io.conninfo = url_;
  io.schema = schema_ + "_inbox";
  io.consumer = "quest-service";
  auto inbox = OpenPostgresInbox(io, [](const InboundMessage&, pg_conn*) { return HandlerResult::Ok(); });
  ASSERT_TRUE(inbox.ok());
  ASSERT_TRUE((*inbox)->Migrate().ok());
  const std::string inbox_args = " --inbox-db '" + url_ + "' --inbox-schema " + schema_ + "_inbox";
  CtlRun before = Ctl(base_ + " trace " + id + inbox_args);
  EXPECT_NE(before.out.find("no stamp"), std::string::npos) << before.out;
  InboundMessage m;
  m.topic = "outbox.event.lesson";
  m.headers["outbox-event-id"] = id;
  auto r = (*inbox)->Apply(std::span(&m, 1), std::span(&id, 1));  // keyed by event id
  ASSERT_TRUE(r.ok());
  CtlRun after = Ctl(base_ + " trace LessonCompleted:u3:l3" + inbox_args);
  EXPECT_EQ(after.code, 0);
  EXPECT_NE(after.out.find("applied by consumer \"quest-service\""), std::string::npos) << after.out;
}

// The command line (CLI11): help per command on stdout, `--x=y`, global
// options after the command, and --json with numbers as numbers.
TEST_F(OutboxctlTest, HelpPerCommandEqualsFormAndTypedJson) {
  for (const char* cmd : {"", "purge ", "inbox purge ", "dlt replay ", "trace "}) {
    CtlRun h = RunCommand(std::string(OUTBOX_OUTBOXCTL_BIN) + " " + cmd + "--help 2>/dev/null");
    EXPECT_EQ(h.code, 0) << cmd << h.out;
    EXPECT_NE(h.out.find("Usage: outboxctl " + std::string(cmd)), std::string::npos) << cmd << h.out;
  }
  EXPECT_NE(Ctl("purge --help").out.find("--retention-s"), std::string::npos);
  EXPECT_NE(Ctl("inbox purge --help").out.find("--broker-retention"), std::string::npos);

  const std::string id = EnqueueOne("u9/l9", "LessonCompleted:u9:l9");
  CtlRun st = Ctl("status --json --db='" + url_ + "' --schema=" + schema_);
  ASSERT_EQ(st.code, 0) << st.out;
  auto status = nlohmann::json::parse(st.out);
  EXPECT_TRUE(status["pending"].is_number_integer()) << st.out;
  EXPECT_EQ(status["pending"], 1);

  auto list = nlohmann::json::parse(Ctl(base_ + " --json list").out);
  ASSERT_EQ(list["rows"].size(), 1u);
  const auto& row = list["rows"][0];
  EXPECT_TRUE(row["seq"].is_number_integer()) << row.dump();
  EXPECT_TRUE(row["attempts"].is_number_integer()) << row.dump();
  EXPECT_TRUE(row["age_s"].is_number()) << row.dump();
  EXPECT_EQ(row["event_id"], id);
  auto trace = nlohmann::json::parse(Ctl(base_ + " --json trace " + id).out);
  EXPECT_TRUE(trace["outbox"][0]["seq"].is_number_integer()) << trace.dump();

  // A usage error says what is wrong and where to look, on stderr, and exits 2.
  CtlRun bad = Ctl(base_ + " purge --batch=0");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.out.find("--batch"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("outboxctl purge --help"), std::string::npos) << bad.out;
}

// A long purge shows its progress on a terminal (stderr, rewritten in place)
// and never in a pipe or a log.
TEST_F(OutboxctlTest, PurgeShowsProgressOnATerminalOnly) {
  for (int i = 0; i < 3; ++i) EnqueueOne("p" + std::to_string(i), "progress-" + std::to_string(i));
  auto c = store_->Claim(ClaimOptions{});
  ASSERT_TRUE(c.ok() && c->events.size() == 3);
  std::vector<Ticket> tickets;
  for (const auto& e : c->events) tickets.push_back(e.ticket);
  ASSERT_TRUE(store_->MarkSent(tickets).ok());
  // `script` gives the command a terminal (util-linux, in every Debian).
  CtlRun tty = RunCommand("script -qec \"" + std::string(OUTBOX_OUTBOXCTL_BIN) + " " + base_ +
                          " purge --retention-s 0 --batch 1\" /dev/null");
  EXPECT_EQ(tty.code, 0) << tty.out;
  EXPECT_NE(tty.out.find("purge: 1 SENT rows deleted so far"), std::string::npos) << tty.out;
  EXPECT_NE(tty.out.find("purged 3 SENT rows"), std::string::npos) << tty.out;
  for (int i = 0; i < 2; ++i) EnqueueOne("q" + std::to_string(i), "progress-q" + std::to_string(i));
  auto c2 = store_->Claim(ClaimOptions{});
  ASSERT_TRUE(c2.ok() && c2->events.size() == 2);
  tickets.clear();
  for (const auto& e : c2->events) tickets.push_back(e.ticket);
  ASSERT_TRUE(store_->MarkSent(tickets).ok());
  CtlRun piped = Ctl(base_ + " purge --retention-s 0 --batch 1");
  EXPECT_EQ(piped.code, 0) << piped.out;
  EXPECT_EQ(piped.out.find("so far"), std::string::npos) << piped.out;
  EXPECT_NE(piped.out.find("purged 2 SENT rows"), std::string::npos) << piped.out;
}

TEST_F(OutboxctlTest, BadUsageExitsTwo) {
  EXPECT_EQ(Ctl(base_ + " frobnicate").code, 2);
  EXPECT_EQ(Ctl(base_ + " list --bogus 1").code, 2);
  EXPECT_EQ(Ctl(base_ + " replay").code, 2);
  EXPECT_EQ(Ctl("--db x --schema Bad-Name status").code, 2);
  // A directory as --config (or --token-file) is not an empty file.
  const std::string dir = std::filesystem::temp_directory_path().string();
  for (const std::string& args : {"--config " + dir + " status", "serve --token-file " + dir}) {
    CtlRun r = Ctl(base_ + " " + args + " 2>&1");
    EXPECT_EQ(r.code, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find("cannot read config file " + dir + ": it is a directory"), std::string::npos)
        << args << ": " << r.out;
  }
}

// `migrate` says which versions it applied, and that there was nothing to do
// on the next run (it said "up to date" after applying all of them).
TEST_F(OutboxctlTest, MigrateSaysWhichVersionsItApplied) {
  const std::string fresh = schema_ + "_m", fresh_json = schema_ + "_j";
  CtlRun first = Ctl("--db '" + url_ + "' --schema " + fresh + " migrate");
  EXPECT_EQ(first.code, 0) << first.out;
  EXPECT_NE(first.out.find("schema " + fresh + ": applied migrations 1, 2, 3, "), std::string::npos) << first.out;
  CtlRun again = Ctl("--db '" + url_ + "' --schema " + fresh + " migrate");
  EXPECT_EQ(again.out, "schema " + fresh + " is up to date: no migration to apply\n");
  CtlRun j = Ctl("--db '" + url_ + "' --schema " + fresh_json + " --json migrate");
  const nlohmann::json applied = nlohmann::json::parse(j.out, nullptr, false)["applied"];
  ASSERT_TRUE(applied.is_array()) << j.out;
  ASSERT_GE(applied.size(), 9u) << j.out;
  for (std::size_t i = 0; i < applied.size(); ++i) EXPECT_EQ(applied[i], i + 1) << j.out;
  const std::string last = std::to_string(applied.size());
  EXPECT_NE(first.out.find(", " + last + "; it is up to date\n"), std::string::npos) << first.out;
  j = Ctl("--db '" + url_ + "' --schema " + fresh_json + " --json migrate");
  EXPECT_EQ(nlohmann::json::parse(j.out, nullptr, false)["applied"], nlohmann::json::array()) << j.out;
  for (const std::string& s : {fresh, fresh_json}) Exec(conn_.get(), "DROP SCHEMA IF EXISTS " + s + " CASCADE");
}

// migrate --check compares the schema with what its migrations install and
// changes nothing: 0 when it matches; 4 naming each hand-edited object (an
// index dropped, one added, a function altered); 5 for versions newer than
// this binary; 1 for a schema never migrated.
TEST_F(OutboxctlTest, MigrateCheckReportsDriftAndChangesNothing) {
  const std::string db = "--db '" + url_ + "' --schema " + schema_;
  CtlRun clean = Ctl(db + " migrate --check");
  EXPECT_EQ(clean.code, 0) << clean.out;
  EXPECT_NE(clean.out.find("schema " + schema_ + " matches migrations 1-"), std::string::npos)
      << clean.out;

  Exec(conn_.get(), "DROP INDEX " + schema_ + ".outbox_sent_idx");
  Exec(conn_.get(), "CREATE INDEX by_hand_idx ON " + schema_ + ".outbox (event_type)");
  Exec(conn_.get(), "ALTER FUNCTION " + schema_ + ".lock_aggregates(text[], text[]) SET jit = on");
  CtlRun drift = Ctl(db + " migrate --check");
  EXPECT_EQ(drift.code, 4) << drift.out;
  for (const char* line :
       {"drift: index outbox_sent_idx: missing\n",
        "drift: index by_hand_idx: not installed by the migrations\n",
        "drift: function lock_aggregates(p_types text[], p_ids text[]): differs from what the "
        "migrations install\n",
        "3 object(s) differ"}) {
    EXPECT_NE(drift.out.find(line), std::string::npos) << line << " in:\n" << drift.out;
  }
  CtlRun j = Ctl(db + " --json migrate --check");
  EXPECT_EQ(j.code, 4);
  const auto parsed = nlohmann::json::parse(j.out, nullptr, false);
  EXPECT_EQ(parsed["ok"], false) << j.out;
  EXPECT_EQ(parsed["drift"].size(), 3u) << j.out;
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'outbox_check_%'"),
            "0")
      << "the scratch schema is rolled back";
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM pg_indexes WHERE schemaname = '" + schema_ +
                                  "' AND indexname = 'by_hand_idx'"),
            "1")
      << "--check repairs nothing";

  Exec(conn_.get(), "DROP INDEX " + schema_ + ".by_hand_idx");
  Exec(conn_.get(), "CREATE INDEX outbox_sent_idx ON " + schema_ +
                        ".outbox (sent_at) WHERE status = 'SENT'");
  Exec(conn_.get(), "ALTER FUNCTION " + schema_ + ".lock_aggregates(text[], text[]) SET jit = off");
  EXPECT_EQ(Ctl(db + " migrate --check").code, 0) << "put back as the migrations install it";
  // A newer release migrated this schema: its version and its objects, which
  // this binary's files cannot build, are reported as versions (5), not drift.
  Exec(conn_.get(), "INSERT INTO " + schema_ + ".schema_migrations (version, description) VALUES "
                    "(9999, 'from a newer release')");
  Exec(conn_.get(), "CREATE INDEX newer_release_idx ON " + schema_ + ".outbox (event_type)");
  CtlRun newer = Ctl(db + " migrate --check");
  EXPECT_EQ(newer.code, 5) << newer.out;
  EXPECT_NE(newer.out.find("versions 9999 are from a newer release"), std::string::npos) << newer.out;

  CtlRun none = Ctl("--db '" + url_ + "' --schema " + schema_ + "_never migrate --check");
  EXPECT_EQ(none.code, 1) << none.out;
  EXPECT_NE(none.out.find("run `outboxctl migrate` first"), std::string::npos) << none.out;
}

// outboxctl reads the relay's configuration the relay's way: --config FILE,
// OUTBOX_DATABASE_URL (and its _FILE form), OUTBOX_KAFKA_PROPERTIES_*; flags
// win. A bad key or value in what it reads ([database], [kafka.properties])
// exits 2 naming it; the relay's own sections are accepted unread.
TEST_F(OutboxctlTest, ReadsTheRelaysConfigFileAndEnvironment) {
  EnqueueOne("c1", "cfg-1");
  const std::string dir = ::testing::TempDir();
  const std::string file = dir + "/outboxctl-relay-" + schema_ + ".toml";
  {
    std::ofstream f(file);
    f << "[database]\nurl = \"" << url_ << "\"\nschema = \"" << schema_ << "\"\n";
  }
  CtlRun st = Ctl("--config " + file + " --json status");
  EXPECT_EQ(st.code, 0) << st.out;
  EXPECT_NE(st.out.find("\"pending\":1"), std::string::npos) << st.out;
  // The environment, with the URL from a file (never on the command line).
  const std::string url_file = dir + "/outboxctl-url-" + schema_;
  { std::ofstream(url_file) << url_ << "\n"; }
  CtlRun env = RunCommand("env -u OUTBOX_PG_URL OUTBOX_DATABASE_URL_FILE=" + url_file +
                          " OUTBOX_DATABASE_SCHEMA=" + schema_ + " " + OUTBOX_OUTBOXCTL_BIN +
                          " trace cfg-1");
  EXPECT_EQ(env.code, 0) << env.out;
  // dlt replay takes the broker's properties from the file: a bad one is the
  // broker client's error naming it, not a silent plain connection.
  {
    std::ofstream f(file, std::ios::app);
    f << "[kafka.properties]\n\"bootstrap.servers\" = \"127.0.0.1:1\"\n"
         "\"security.protocol\" = \"no-such-protocol\"\n";
  }
  CtlRun dlt = Ctl("--config " + file + " dlt replay --topic x.dlt --dry-run");
  EXPECT_NE(dlt.code, 0) << dlt.out;
  EXPECT_NE(dlt.out.find("security.protocol"), std::string::npos) << dlt.out;
  // dlt replay --queue takes RabbitMQ's connection from the relay's file
  // (rabbitmq.url): the broker's address in the error, never the password; a
  // malformed URL exits 2 naming the key.
  {
    std::ofstream f(file, std::ios::app);
    f << "[rabbitmq]\nurl = \"amqp://u:hunter2@127.0.0.1:1/%2F\"\ntimeout_ms = 2000\n";
  }
  CtlRun rmq = Ctl("--config " + file + " dlt replay --queue g.orders.dlt --dry-run");
  EXPECT_EQ(rmq.code, 1) << rmq.out;
  EXPECT_NE(rmq.out.find("rabbitmq 127.0.0.1:1"), std::string::npos) << rmq.out;
  EXPECT_EQ(rmq.out.find("hunter2"), std::string::npos) << rmq.out;
  CtlRun bad_url = Ctl("--config " + file + " --amqp amqp://u:hunter2@host:99999/%2F dlt replay --queue g.orders.dlt");
  EXPECT_EQ(bad_url.code, 2) << bad_url.out;
  EXPECT_NE(bad_url.out.find("rabbitmq.url"), std::string::npos) << bad_url.out;
  EXPECT_EQ(bad_url.out.find("hunter2"), std::string::npos) << bad_url.out;
  // What outboxctl reads is checked strictly; the relay's own sections are the
  // relay's to check (outbox-relay --print-config), not outboxctl's.
  for (const auto& [text, key] : std::vector<std::pair<std::string, std::string>>{
           {"[database]\nsent_mode = \"archive\"\n", "database.sent_mode"},
           {"[database]\nurll = \"x\"\n", "database.urll"},
           {"[databse]\nurl = \"x\"\n", "databse.url"},
           {"[database]\nschema = \"x; DROP TABLE y\"\n", "database.schema"}}) {
    {
      std::ofstream f(file);
      f << text;
    }
    CtlRun bad = Ctl("--config " + file + " status");
    EXPECT_EQ(bad.code, 2) << text << bad.out;
    EXPECT_NE(bad.out.find(key), std::string::npos) << text << bad.out;
  }
  {
    std::ofstream f(file);
    f << "[database]\nurl = \"" << url_ << "\"\nschema = \"" << schema_
      << "\"\n[relay]\nworkers = 8\n[log]\nformat = \"json\"\n";
  }
  CtlRun relays_own = Ctl("--config " + file + " status");
  EXPECT_EQ(relays_own.code, 0) << relays_own.out;
}

// A bad number never reaches the database: "abc" used to purge every SENT row
// (read as 0) and "7d" was read as 7 s.
TEST_F(OutboxctlTest, BadNumbersExitTwoNamingTheFlagAndChangeNothing) {
  EnqueueOne("1", "n-1");
  auto c = store_->Claim(ClaimOptions{});
  ASSERT_TRUE(c.ok() && c->events.size() == 1);
  ASSERT_TRUE(store_->MarkSent(std::vector<Ticket>{c->events[0].ticket}).ok());
  Exec(conn_.get(), "UPDATE " + schema_ + ".outbox SET sent_at = now() - interval '1 hour'");
  for (const char* args : {" purge --retention-s abc", " purge --retention-s 7w",
                           " purge --retention-s -1", " purge --batch 0", " purge --batch 10x",
                           " list --limit many", " list --older-than soon"}) {
    CtlRun r = Ctl(base_ + args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    const std::string flag = std::string(args).substr(std::string(args).find("--"),
                                                      std::string(args).find(' ', 8) - std::string(args).find("--"));
    EXPECT_NE(r.out.find(flag), std::string::npos) << args << "\n" << r.out;
  }
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM " + schema_ + ".outbox"), "1");
  // Units are read as written: 7d keeps a row sent an hour ago, 30m purges it.
  CtlRun keep = Ctl(base_ + " purge --retention-s 7d");
  EXPECT_EQ(keep.code, 0) << keep.out;
  EXPECT_NE(keep.out.find("purged 0"), std::string::npos) << keep.out;
  CtlRun go = Ctl(base_ + " purge --retention-s 30m");
  EXPECT_NE(go.out.find("purged 1"), std::string::npos) << go.out;
}

// The stamp horizon rule: stamps go once older than the longer of the broker
// retention -- the longest retention.ms of the consumer's topics, read from the
// broker -- and the age of the oldest event the outbox may still publish (plus
// an hour). A shorter figure of one's own, or a topic that keeps its messages
// forever, is refused unless --force; bad input exits 2 and deletes nothing.
TEST_F(OutboxctlTest, InboxPurgeKeepsStampsAnUnsentEventMayStillNeed) {
  MockKafka kafka(1, {"quest-events:1", "quest-events.retry.1:1", "quest-events.dlt:1"});
  ASSERT_FALSE(kafka.bootstrap().empty());
  // Messages stay readable up to retention.ms + segment.ms: 3 d + 1 h for the
  // main topic, 1 d + 1 h and 2 d + 1 h for its retry and dead-letter topics.
  ASSERT_EQ(kafka.Control("topic-config quest-events retention.ms 259200000"), "ok");
  ASSERT_EQ(kafka.Control("topic-config quest-events.retry.1 retention.ms 86400000"), "ok");
  ASSERT_EQ(kafka.Control("topic-config quest-events.dlt retention.ms 172800000"), "ok");
  for (const char* t : {"quest-events", "quest-events.retry.1", "quest-events.dlt"}) {
    ASSERT_EQ(kafka.Control(std::string("topic-config ") + t + " segment.ms 3600000"), "ok");
  }
  PostgresInboxOptions io;
  io.conninfo = url_;
  io.schema = schema_ + "_inbox";
  io.consumer = "quest";
  auto inbox = OpenPostgresInbox(io, [](const InboundMessage&, pg_conn*) { return HandlerResult::Ok(); });
  ASSERT_TRUE(inbox.ok());
  ASSERT_TRUE((*inbox)->Migrate().ok());
  std::vector<InboundMessage> msgs(2);
  std::vector<std::string> keys = {"old", "recent"};
  ASSERT_TRUE((*inbox)->Apply(msgs, keys).ok());
  const std::string stamps = schema_ + "_inbox.inbox_stamps";
  Exec(conn_.get(), "UPDATE " + stamps + " SET applied_at = now() - interval '10 days' WHERE dedup_key = 'old'");
  Exec(conn_.get(), "UPDATE " + stamps + " SET applied_at = now() - interval '2 days' WHERE dedup_key = 'recent'");
  const std::string purge = base_ + " --bootstrap " + kafka.bootstrap() + " inbox purge --inbox-db '" + url_ +
                            "' --inbox-schema " + schema_ + "_inbox --consumer quest";
  const std::string args = purge + " --topic quest-events";
  auto count = [&] { return Exec(conn_.get(), "SELECT count(*) FROM " + stamps); };

  CtlRun status = Ctl("inbox status --inbox-db '" + url_ + "' --inbox-schema " + schema_ + "_inbox");
  EXPECT_EQ(status.code, 0) << status.out;
  EXPECT_NE(status.out.find("quest"), std::string::npos) << status.out;
  for (const std::string bad : {" --broker-retention 3x", " --broker-retention -1"}) {
    CtlRun r = Ctl(args + bad);
    EXPECT_EQ(r.code, 2) << bad << ": " << r.out;
    EXPECT_NE(r.out.find("--broker-retention"), std::string::npos) << r.out;
  }
  // Without --topic the broker is not asked: a figure of one's own needs --force.
  for (const std::string bad : {"", " --broker-retention 3d"}) {
    CtlRun r = Ctl(purge + bad);
    EXPECT_EQ(r.code, 2) << bad << ": " << r.out;
    EXPECT_NE(r.out.find("--topic"), std::string::npos) << r.out;
  }
  // A topic the broker does not have.
  CtlRun unknown = Ctl(purge + " --topic no-such-topic");
  EXPECT_EQ(unknown.code, 1) << unknown.out;
  EXPECT_NE(unknown.out.find("no topic no-such-topic"), std::string::npos) << unknown.out;
  EXPECT_EQ(count(), "2") << "bad input changes nothing";

  // An event enqueued 20 days ago is still PENDING: it may yet be published
  // (again), so stamps younger than 20 days stay.
  EnqueueOne("u9/l9", "LessonCompleted:u9:l9");
  Exec(conn_.get(), "UPDATE " + schema_ + ".outbox SET created_at = now() - interval '20 days'");
  CtlRun held = Ctl(args);
  EXPECT_EQ(held.code, 0) << held.out;
  EXPECT_NE(held.out.find("purged 0"), std::string::npos) << held.out;
  EXPECT_EQ(count(), "2");

  // Once nothing is unsent, the broker's longest retention (3 d + 1 h, of the
  // main topic) + 1 h decides.
  Exec(conn_.get(), "UPDATE " + schema_ + ".outbox SET status = 'SENT', sent_at = now()");
  CtlRun dry = Ctl(args + " --dry-run --topic quest-events");  // repeated: read once
  EXPECT_EQ(dry.code, 0) << dry.out;
  EXPECT_NE(dry.out.find("would purge 1"), std::string::npos) << dry.out;
  EXPECT_NE(dry.out.find("retention.ms + segment.ms of quest-events (73 h)"), std::string::npos) << dry.out;
  EXPECT_EQ(count(), "2");

  // A figure shorter than the broker's is refused, naming the topic, down to
  // one second short; an equal one is accepted; a shorter one with --force.
  CtlRun shorter = Ctl(args + " --broker-retention 1d");
  EXPECT_EQ(shorter.code, 2) << shorter.out;
  EXPECT_NE(shorter.out.find("shorter than the retention.ms + segment.ms of quest-events (73 h)"),
            std::string::npos)
      << shorter.out;
  CtlRun just_below = Ctl(args + " --broker-retention 262799s --dry-run");
  EXPECT_EQ(just_below.code, 2) << just_below.out;
  CtlRun equal = Ctl(args + " --broker-retention 73h --dry-run");
  EXPECT_EQ(equal.code, 0) << equal.out;
  CtlRun forced = Ctl(args + " --broker-retention 1d --force --dry-run --json");
  EXPECT_EQ(forced.code, 0) << forced.out;
  EXPECT_NE(forced.out.find("\"older\":2"), std::string::npos) << forced.out;
  EXPECT_EQ(count(), "2");

  // A dead-letter topic that keeps its messages forever: any stamp may be
  // needed. So does a compacted one, and one whose retention overflows.
  ASSERT_EQ(kafka.Control("topic-config quest-events.dlt retention.ms -1"), "ok");
  CtlRun forever = Ctl(args);
  EXPECT_EQ(forever.code, 2) << forever.out;
  EXPECT_NE(forever.out.find("topic quest-events.dlt keeps messages forever"), std::string::npos) << forever.out;
  ASSERT_EQ(kafka.Control("topic-config quest-events.dlt retention.ms 9223372036854775807"), "ok");
  CtlRun huge = Ctl(args);
  EXPECT_EQ(huge.code, 2) << huge.out;
  EXPECT_NE(huge.out.find("topic quest-events.dlt keeps messages forever"), std::string::npos) << huge.out;
  ASSERT_EQ(kafka.Control("topic-config quest-events.dlt retention.ms 172800000"), "ok");
  ASSERT_EQ(kafka.Control("topic-config quest-events.dlt cleanup.policy compact"), "ok");
  CtlRun compacted = Ctl(args);
  EXPECT_EQ(compacted.code, 2) << compacted.out;
  EXPECT_NE(compacted.out.find("cleanup.policy compact"), std::string::npos) << compacted.out;
  // Under another dead-letter suffix that topic is not this consumer's.
  CtlRun other_suffix = Ctl(args + " --dlt-suffix .dead --dry-run");
  EXPECT_EQ(other_suffix.code, 0) << other_suffix.out;
  ASSERT_EQ(kafka.Control("topic-config quest-events.dlt cleanup.policy delete"), "ok");
  // A value that is not a number is reported, not guessed.
  ASSERT_EQ(kafka.Control("topic-config quest-events.dlt retention.ms 2d"), "ok");
  CtlRun nan = Ctl(args);
  EXPECT_EQ(nan.code, 1) << nan.out;
  EXPECT_NE(nan.out.find("not a number"), std::string::npos) << nan.out;
  EXPECT_EQ(count(), "2");

  ASSERT_EQ(kafka.Control("topic-config quest-events.dlt retention.ms 172800000"), "ok");
  CtlRun go = Ctl(args);
  EXPECT_EQ(go.code, 0) << go.out;
  EXPECT_NE(go.out.find("purged 1"), std::string::npos) << go.out;
  EXPECT_EQ(Exec(conn_.get(), "SELECT string_agg(dedup_key, ',') FROM " + stamps), "recent");
}

}  // namespace
}  // namespace outbox::testing
