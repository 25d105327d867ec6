// outbox-consumer as a real process against the real PostgreSQL and MariaDB
// and a private outbox-mock-kafka: a `sql` handler applies each event once
// through duplicates, SIGKILLs and the crash-matrix points; its errors are
// classed by SQLSTATE (permanent to the dead-letter topic at once, transient
// through the retry topics); an `http` handler POSTs with Idempotency-Key
// through a 503 outage and a kill; a bad configuration exits 2 and touches
// nothing.
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "blackhole_proxy.h"
#include "http_receiver.h"
#include "kafka_helpers.h"
#include "mariadb_test_util.h"
#include "notify_socket.h"
#include "subprocess.h"
#include "test_env.h"

namespace outbox::testing {
namespace {

using namespace std::chrono_literals;

enum class Db { kPostgres, kMariaDb };
void PrintTo(Db d, std::ostream* os) { *os << (d == Db::kPostgres ? "Postgres" : "MariaDb"); }

const char* kTrace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

class ConsumerDaemonTest : public ::testing::TestWithParam<Db> {
 protected:
  bool Maria() const { return GetParam() == Db::kMariaDb; }

  void SetUp() override {
    schema_ = "cd_" + RandomSuffix();
    if (Maria()) {
      OUTBOX_REQUIRE_ENV(base_, "OUTBOX_MYSQL_URL");
      my_ = OpenMariaDb(base_, "");
      ASSERT_NE(my_, nullptr);
      MyQuery(my_, "CREATE DATABASE " + schema_);
      url_ = MariaDbUrlFor(base_, schema_);
      MyQuery(my_, "CREATE TABLE " + schema_ +
                       ".effects (id BIGINT AUTO_INCREMENT PRIMARY KEY, event_id VARCHAR(255), "
                       "k VARCHAR(255), payload LONGTEXT, trace VARCHAR(255))");
      // The effect: a procedure that refuses "permanent" (SQLSTATE 45000) and
      // fails "transient" as a serialization failure would (40001).
      MyQuery(my_, "CREATE PROCEDURE " + schema_ +
                       ".apply_event(p LONGBLOB, h LONGTEXT, id VARCHAR(255), k VARCHAR(255)) BEGIN "
                       "IF p = 'permanent' THEN SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused'; END IF; "
                       "IF p = 'transient' THEN SIGNAL SQLSTATE '40001' SET MESSAGE_TEXT = 'try later'; END IF; "
                       "INSERT INTO " + schema_ + ".effects (event_id, k, payload, trace) "
                       "VALUES (id, k, p, JSON_VALUE(h, '$.traceparent')); END");
      sql_ = "CALL " + schema_ + ".apply_event($1, $2, $3, $4)";
    } else {
      OUTBOX_REQUIRE_ENV(url_, "OUTBOX_PG_URL");
      admin_ = Connect(url_);
      Exec(admin_.get(), "CREATE SCHEMA " + schema_);
      Exec(admin_.get(), "CREATE TABLE " + schema_ +
                             ".effects (id bigserial PRIMARY KEY, event_id text, k text, payload text, trace text)");
      Exec(admin_.get(), "CREATE FUNCTION " + schema_ +
                             ".apply_event(p bytea, h jsonb, id text, k text) RETURNS void "
                             "LANGUAGE plpgsql AS $$ BEGIN "
                             "IF convert_from(p, 'UTF8') = 'permanent' THEN RAISE EXCEPTION 'refused: %', id; END IF; "
                             "IF convert_from(p, 'UTF8') = 'transient' THEN "
                             "  RAISE EXCEPTION 'try later' USING ERRCODE = '40001'; END IF; "
                             "INSERT INTO " + schema_ + ".effects (event_id, k, payload, trace) "
                             "VALUES (id, k, convert_from(p, 'UTF8'), h->>'traceparent'); END $$");
      sql_ = "SELECT " + schema_ + ".apply_event($1, $2, $3, $4)";
    }
    kafka_ = std::make_unique<MockKafka>(
        1, std::vector<std::string>{"lessons:4", "lessons.retry.1:2", "lessons.retry.2:2", "lessons.dlt:2"});
    ASSERT_FALSE(kafka_->bootstrap().empty());
  }
  void TearDown() override {
    consumers_.clear();
    if (admin_) Exec(admin_.get(), "DROP SCHEMA IF EXISTS " + schema_ + " CASCADE");
    if (my_) {
      MyQuery(my_, "DROP DATABASE IF EXISTS " + schema_);
      mysql_close(my_);
    }
  }

  std::string Sql(const std::string& sql) { return Maria() ? MyQuery(my_, sql) : Exec(admin_.get(), sql); }
  long Count(const std::string& sql) { return std::stol(Sql(sql)); }
  long Effects() { return Count("SELECT count(*) FROM " + schema_ + ".effects"); }
  long DoubleEffects() {
    return Count("SELECT count(*) FROM (SELECT event_id FROM " + schema_ +
                 ".effects GROUP BY event_id HAVING count(*) > 1) d");
  }
  long Stamps() { return Count("SELECT count(*) FROM " + schema_ + ".inbox_stamps"); }

  // A config file with one handler (`handler` are its lines), and the process.
  Subprocess& Start(const std::string& handler, std::vector<std::string> sets = {},
                    std::map<std::string, std::string> env = {}) {
    const auto dir = std::filesystem::temp_directory_path();
    const std::string n = std::to_string(consumers_.size());
    const std::string path = (dir / ("outbox-consumer-" + schema_ + "-" + n + ".toml")).string();
    std::ofstream(path) << "[consumer]\nbatch_size = 20\nbatch_wait_ms = 5\n[http]\nlisten = \"127.0.0.1:0\"\n"
                        << "[[handler]]\ntopic = \"lessons\"\ngroup = \"g-" << schema_ << "\"\n"
                        << handler;
    // --set, not the environment: the test's own OUTBOX_* variables name the shared servers.
    std::vector<std::string> argv = {OUTBOX_CONSUMER_BIN, "--config", path,
                                     "--set", "database.url=" + url_,
                                     "--set", "database.inbox_schema=" + schema_,
                                     "--set", "kafka.bootstrap=" + kafka_->bootstrap()};
    for (const auto& s : sets) {
      argv.push_back("--set");
      argv.push_back(s);
    }
    if (migrate_) argv.push_back("--migrate");
    consumers_.push_back(std::make_unique<Subprocess>(
        argv, env, (dir / ("outbox-consumer-" + schema_ + "-" + n + ".log")).string()));
    return *consumers_.back();
  }
  Subprocess& StartSql(std::vector<std::string> sets = {}, std::map<std::string, std::string> env = {}) {
    return Start("sql = \"" + sql_ + "\"\nretries = \"200ms,200ms\"\n", std::move(sets), std::move(env));
  }

  // Events ev-<from>..ev-<from+n-1> on keys agg-0..agg-9, each sent `copies` times.
  void Produce(int n, const std::string& payload, int copies = 1, int from = 0) {
    std::vector<Message> msgs;
    for (int c = 0; c < copies; ++c) {
      for (int i = from; i < from + n; ++i) {
        Message m;
        m.key = "agg-" + std::to_string(i % 10);
        m.value = payload;
        m.headers["outbox-event-id"] = "ev-" + std::to_string(i);
        m.headers["traceparent"] = kTrace;
        msgs.push_back(m);
      }
    }
    ASSERT_EQ(outbox::testing::Produce(kafka_->bootstrap(), "lessons", msgs), static_cast<int>(msgs.size()));
  }

  static int HttpPort(Subprocess& p) { return LoggedHttpPort([&] { return p.Log(); }); }
  static std::string Get(int port, const std::string& path, int* status = nullptr) {
    httplib::Client cli("127.0.0.1", port);
    cli.set_read_timeout(5, 0);
    auto res = cli.Get(path.c_str());
    if (status) *status = res ? res->status : 0;
    return res ? res->body : "";
  }

  std::string url_, schema_, base_, sql_;
  PgConn admin_;
  MYSQL* my_ = nullptr;
  std::unique_ptr<MockKafka> kafka_;
  bool migrate_ = true;  // Start() passes --migrate
  std::vector<std::unique_ptr<Subprocess>> consumers_;
};

TEST_P(ConsumerDaemonTest, SqlHandlerAppliesEachEventOnceThroughCopiesAndKills) {
  Produce(300, "ok");
  Produce(100, "ok", /*copies=*/1, /*from=*/0);  // copies of the first 100
  Subprocess& first = StartSql();
  ASSERT_TRUE(WaitFor([&] { return Effects() >= 60; }, Scaled(60s))) << first.Log();
  first.Signal(SIGKILL);  // mid-stream: effects committed, offsets maybe not
  first.Wait();
  Subprocess& second = StartSql();
  ASSERT_TRUE(WaitFor([&] { return Effects() >= 300; }, Scaled(90s))) << second.Log();
  // Ready once its handler runs. Not necessarily yet: the first may have
  // applied all 300 before its kill landed, and then these effects were in
  // before the second started (a CI-load flake: /readyz answered 503).
  const int port = HttpPort(second);
  EXPECT_TRUE(WaitFor([&] { int s = 0; Get(port, "/readyz", &s); return s == 200; }, Scaled(30s)))
      << second.Log();
  // The engine's metrics carry the handler's group.
  const std::string metrics = Get(port, "/metrics");
  EXPECT_NE(metrics.find("outbox_inbox_applied_total{consumer=\"g-" + schema_ + "\"}"), std::string::npos)
      << metrics;
  second.Signal(SIGTERM);
  EXPECT_EQ(second.Wait(Scaled(30s)), 0) << second.Log();
  EXPECT_EQ(Effects(), 300);
  EXPECT_EQ(DoubleEffects(), 0);
  EXPECT_EQ(Stamps(), 300);
  // $2 headers, $3 event id, $4 key arrived as the handler's parameters.
  EXPECT_EQ(Count("SELECT count(*) FROM " + schema_ + ".effects WHERE trace = '" + kTrace +
                  "' AND event_id LIKE 'ev-%' AND k LIKE 'agg-%' AND payload = 'ok'"),
            300);
}

TEST_P(ConsumerDaemonTest, KilledInsideTheTransactionOrBeforeTheOffsetCommitStillAppliesOnce) {
  OUTBOX_REQUIRE_FAULT_POINTS();
  Produce(40, "ok");
  // The first dies in its second batch (batch_size 20 of 40: the first one
  // committed), the second in its first (whatever is left: its effects commit,
  // its offsets do not, so the last one is handed them again).
  for (const char* fault : {"Inbox::InsideTransaction=crash@2", "Inbox::AfterCommitBeforeOffsetCommit=crash@1"}) {
    Subprocess& c = StartSql({}, {{"OUTBOX_FAULTS", fault}});
    EXPECT_EQ(c.Wait(Scaled(60s)), 70) << fault << ": should die at the fault point:\n" << c.Log();
  }
  Subprocess& last = StartSql();
  ASSERT_TRUE(WaitFor([&] { return Effects() >= 40; }, Scaled(60s))) << last.Log();
  // Ready (its handler running) before the stop: the effects may all be in already.
  const int port = HttpPort(last);
  ASSERT_TRUE(WaitFor([&] { int s = 0; Get(port, "/readyz", &s); return s == 200; }, Scaled(30s))) << last.Log();
  last.Signal(SIGTERM);
  EXPECT_EQ(last.Wait(Scaled(30s)), 0) << last.Log();
  EXPECT_EQ(Effects(), 40);
  EXPECT_EQ(DoubleEffects(), 0);
}

TEST_P(ConsumerDaemonTest, ErrorsAreClassedBySqlState) {
  Produce(1, "permanent", 1, 0);
  Produce(1, "transient", 1, 1);
  Produce(1, "ok", 1, 2);
  Subprocess& c = StartSql();
  // Permanent (a RAISE / SIGNAL 45000): dead-lettered at once. Transient
  // (40001): through both retry topics, then dead-lettered.
  auto dlt = ReadTopic(kafka_->bootstrap(), "lessons.dlt", 2, 2, Scaled(60s));
  ASSERT_EQ(dlt.size(), 2u) << c.Log();
  std::map<std::string, std::string> cls, attempt, message;
  for (const Message& m : dlt) {
    cls[m.headers.at("outbox-event-id")] = m.headers.at("outbox-error-class");
    attempt[m.headers.at("outbox-event-id")] = m.headers.at("outbox-attempt");
    message[m.headers.at("outbox-event-id")] = m.headers.at("outbox-error-message");
  }
  EXPECT_EQ(cls["ev-0"], "permanent");
  EXPECT_EQ(attempt["ev-0"], "1");
  EXPECT_NE(message["ev-0"].find(Maria() ? "45000" : "P0001"), std::string::npos) << message["ev-0"];
  EXPECT_EQ(cls["ev-1"], "transient");
  EXPECT_EQ(attempt["ev-1"], "3") << "two retries, then the dead-letter topic";
  EXPECT_NE(message["ev-1"].find("40001"), std::string::npos) << message["ev-1"];
  EXPECT_EQ(ReadTopic(kafka_->bootstrap(), "lessons.retry.2", 2, 1, Scaled(10s)).size(), 1u);
  EXPECT_EQ(Effects(), 1);
  EXPECT_EQ(Sql("SELECT event_id FROM " + schema_ + ".effects"), "ev-2");
}

// "A consumer never wedges" (docs/inbox.md; issue 41): a statement that always
// runs past database.statement_timeout_ms goes through the retry topics to the
// dead-letter topic alone; a 10,000-byte event id applies; a key with a NUL
// byte is refused on PostgreSQL (its text would cut it) and kept on MariaDB; a
// NULL key reaches the statement as NULL. Every other message applies once.
TEST_P(ConsumerDaemonTest, ASlowStatementFailsAloneAndKeysOfAnyShapeApplyFaithfully) {
  if (Maria()) {
    MyQuery(my_, "CREATE PROCEDURE " + schema_ +
                     ".edge(id LONGTEXT, k LONGBLOB) BEGIN "
                     "IF k LIKE 'slow-%' THEN DO SLEEP(2.5); END IF; "
                     "INSERT INTO " + schema_ + ".effects (event_id, k, payload) "
                     "VALUES (LEFT(id, 255), IF(k IS NULL, '(null)', HEX(k)), length(id)); END");
    sql_ = "CALL " + schema_ + ".edge($3, $4)";
  } else {
    Exec(admin_.get(), "CREATE FUNCTION " + schema_ +
                           ".edge(id text, k text) RETURNS void LANGUAGE plpgsql AS $$ BEGIN "
                           "IF k LIKE 'slow-%' THEN PERFORM pg_sleep(2.5); END IF; "
                           "INSERT INTO " + schema_ + ".effects (event_id, k, payload) VALUES "
                           "(left(id, 255), coalesce(upper(encode(convert_to(k, 'UTF8'), 'hex')), "
                           "'(null)'), length(id)); END $$");
    sql_ = "SELECT " + schema_ + ".edge($3, $4)";
  }
  const std::string long_id(10'000, 'L');
  std::vector<Message> msgs;
  auto add = [&](const std::string& id, const std::string& key, bool key_null = false) {
    Message m;
    m.key = key;
    m.key_null = key_null;
    m.value = "x";
    m.headers["outbox-event-id"] = id;
    msgs.push_back(m);
  };
  for (int i = 0; i < 5; ++i) add("ok-" + std::to_string(i), "ok-" + std::to_string(i));
  // MariaDB's max_statement_time does not bound a SLEEP inside a CALL: the
  // slow case is PostgreSQL's (the split rule itself is the engine's).
  if (!Maria()) add("slow-1", "slow-1");
  for (int i = 5; i < 10; ++i) add("ok-" + std::to_string(i), "ok-" + std::to_string(i));
  add(long_id, "long");
  add("nul", std::string("a\0b'c", 5));
  add("null-key", "", /*key_null=*/true);
  ASSERT_EQ(outbox::testing::Produce(kafka_->bootstrap(), "lessons", msgs), static_cast<int>(msgs.size()));
  Subprocess& c = Start("sql = \"" + sql_ + "\"\nretries = \"200ms,200ms\"\n",
                        {"database.statement_timeout_ms=1000"});
  // Every one but the slow one and, on PostgreSQL, NUL's; on MariaDB every
  // one but the 10,000-byte id (keys of at most 512 characters there).
  const long want = 12;
  ASSERT_TRUE(WaitFor([&] { return Effects() == want; }, Scaled(60s)))
      << Sql("SELECT " + std::string(Maria() ? "group_concat(left(event_id, 12))" : "string_agg(left(event_id, 12), ',')") +
             " FROM " + schema_ + ".effects")
      << "\n" << c.Log();
  if (!Maria()) {
    auto dlt = ReadTopic(kafka_->bootstrap(), "lessons.dlt", 2, 2, Scaled(60s));
    std::map<std::string, Message> dead;
    for (const Message& m : dlt) dead[m.headers.at("outbox-event-id")] = m;
    ASSERT_EQ(dead.count("slow-1"), 1u) << c.Log();
    EXPECT_EQ(dead["slow-1"].headers["outbox-error-class"], "transient");
    EXPECT_NE(dead["slow-1"].headers["outbox-error-message"].find("57014"), std::string::npos);
    EXPECT_EQ(dead["slow-1"].headers["outbox-attempt"], "3") << "two retries, then the dead-letter topic";
    ASSERT_EQ(dead.count("nul"), 1u) << c.Log();
    EXPECT_EQ(dead["nul"].headers["outbox-error-class"], "permanent");
    EXPECT_NE(dead["nul"].headers["outbox-error-message"].find("NUL"), std::string::npos);
    EXPECT_EQ(dead["nul"].key, std::string("a\0b'c", 5)) << "the copy keeps the key's bytes";
    EXPECT_EQ(Sql("SELECT payload FROM " + schema_ + ".effects WHERE event_id = left('" + long_id + "', 255)"),
              "10000");
  } else {
    EXPECT_EQ(Sql("SELECT k FROM " + schema_ + ".effects WHERE event_id = 'nul'"), "6100622763");
    auto dlt = ReadTopic(kafka_->bootstrap(), "lessons.dlt", 2, 1, Scaled(30s));
    ASSERT_EQ(dlt.size(), 1u) << c.Log();
    EXPECT_EQ(dlt[0].headers["outbox-event-id"], long_id);
    EXPECT_EQ(dlt[0].headers["outbox-error-class"], "permanent") << "over MariaDB's 512 characters";
  }
  EXPECT_EQ(Sql("SELECT k FROM " + schema_ + ".effects WHERE event_id = 'null-key'"), "(null)");
  EXPECT_EQ(Sql("SELECT k FROM " + schema_ + ".effects WHERE event_id = 'ok-7'"), "6F6B2D37");
  EXPECT_EQ(DoubleEffects(), 0);
}

// The relay's rules for the consumer (issue 41): a database path that stops
// forwarding without closing is noticed within the statement timeout, a
// 2-second margin and the cancel's 5-second grace, reported on /readyz naming
// the database, and recovered from once it heals; a broker that never answers
// a forward is reported on /readyz until one is acknowledged. Nothing is lost.
TEST_P(ConsumerDaemonTest, AHalfOpenDatabasePathAndASilentBrokerAreReportedOnReadyz) {
  if (Maria()) GTEST_SKIP() << "the proxied path is PostgreSQL's; the broker's half is the same on both";
  std::unique_ptr<BlackholeProxy> proxy;
  // socket.timeout.ms: a fetch the silent broker never answered is given up
  // after 10 s, not librdkafka's 60, once it answers again.
  std::vector<std::string> sets = {"database.statement_timeout_ms=2000", "database.connect_timeout_s=2",
                                   "kafka.properties.socket.timeout.ms=10000"};
  {  // the database's path goes through the proxy
    const std::string pg_port = EnvOr("OUTBOX_PG_PORT");
    ASSERT_FALSE(pg_port.empty());
    proxy = std::make_unique<BlackholeProxy>("127.0.0.1", std::stoi(pg_port));
    const auto at = url_.find(":" + pg_port + "/");
    ASSERT_NE(at, std::string::npos) << url_;
    sets.push_back("database.url=" + url_.substr(0, at) + ":" + std::to_string(proxy->port()) +
                   url_.substr(at + pg_port.size() + 1));
  }
  Produce(5, "ok");
  Subprocess& c = StartSql(sets);
  const int port = HttpPort(c);
  ASSERT_TRUE(WaitFor([&] { return Effects() == 5; }, Scaled(30s))) << c.Log();
  int status = 0;
  std::string why;
  {
    proxy->Darken();
    Produce(5, "ok", 1, 5);
    EXPECT_TRUE(WaitFor([&] { why = Get(port, "/readyz", &status); return status == 503; }, Scaled(25s)))
        << c.Log();
    EXPECT_NE(why.find("inbox database unavailable"), std::string::npos) << why;
    proxy->Heal();
    ASSERT_TRUE(WaitFor([&] { return Effects() == 10; }, Scaled(60s))) << c.Log();
    EXPECT_TRUE(WaitFor([&] { Get(port, "/readyz", &status); return status == 200; }, Scaled(15s)));
  }
  // The broker answers nothing for ten minutes (its connections stay up):
  // the client's own request timeouts say so on /readyz, until it answers.
  ASSERT_EQ(kafka_->Control("rtt -1 600000"), "ok");
  EXPECT_TRUE(WaitFor([&] { why = Get(port, "/readyz", &status); return status == 503; }, Scaled(60s)))
      << c.Log();
  EXPECT_NE(why.find("broker unreachable"), std::string::npos) << why;
  ASSERT_EQ(kafka_->Control("rtt -1 0"), "ok");
  EXPECT_TRUE(WaitFor([&] { Get(port, "/readyz", &status); return status == 200; }, Scaled(60s))) << c.Log();
  Produce(1, "ok", 1, 10);
  EXPECT_TRUE(WaitFor([&] { return Effects() == 11; }, Scaled(60s))) << c.Log();
  EXPECT_EQ(DoubleEffects(), 0);
}

// Started without --migrate against a database without the inbox's tables:
// one error line saying how to migrate, /readyz 503 naming the schema, nothing
// consumed (the offsets stay), until the tables exist; then every event
// applies once (issue 41: it consumed batch after batch, failing each with
// 42P01, forever). The environment's database URL is named in the log.
TEST_P(ConsumerDaemonTest, WithoutTheInboxSchemaNothingIsConsumedUntilItExists) {
  Produce(5, "ok");
  migrate_ = false;
  Subprocess& c = StartSql({}, {{"OUTBOX_LOG_LEVEL", "info"}});
  const int port = HttpPort(c);
  int status = 0;
  std::string why;
  ASSERT_TRUE(WaitFor([&] { why = Get(port, "/readyz", &status); return status == 503 && why.find("inbox") != std::string::npos && why.find("migrate") != std::string::npos; }, Scaled(20s)))
      << why << "\n" << c.Log();
  EXPECT_NE(why.find(Maria() ? "inbox tables are missing" : "inbox schema \"" + schema_ + "\" is missing"),
            std::string::npos) << why;
  std::this_thread::sleep_for(Scaled(2s));
  const std::string log = c.Log();
  // The variable is named (OUTBOX_PG_URL and OUTBOX_KAFKA_BOOTSTRAP, set by
  // the test environment, lose to --set and are not).
  EXPECT_NE(log.find("configuration from the environment, over the file keys=\"log.level=OUTBOX_LOG_LEVEL\""),
            std::string::npos) << log;
  std::size_t lines = 0;
  for (std::size_t at = 0; (at = log.find("inbox schema not ready", at)) != std::string::npos; ++at) ++lines;
  EXPECT_EQ(lines, 1u) << "said once: " << log;
  EXPECT_EQ(log.find("batch not completed"), std::string::npos) << "nothing consumed: " << log;
  Subprocess migrate({OUTBOX_OUTBOXCTL_BIN, "inbox", "migrate", "--inbox-db", url_, "--inbox-schema", schema_},
                     {}, (std::filesystem::temp_directory_path() / ("outboxctl-" + schema_ + ".log")).string());
  EXPECT_EQ(migrate.Wait(Scaled(30s)), 0) << migrate.Log();
  ASSERT_TRUE(WaitFor([&] { return Effects() == 5; }, Scaled(30s))) << c.Log();
  EXPECT_TRUE(WaitFor([&] { Get(port, "/readyz", &status); return status == 200; }, Scaled(10s)));
  EXPECT_EQ(DoubleEffects(), 0);
}

// Two groups on one topic (issue 41): ga fails an event transiently, gb applies
// it. gb skips ga's retry copies and its replay without counting a duplicate;
// ga's dead-letter copy names ga; the replay reaches ga alone.
TEST_P(ConsumerDaemonTest, TwoGroupsOnOneTopicKeepTheirRetriesAndReplaysApart) {
  if (Maria()) GTEST_SKIP() << "the rule is the engine's; one database shows it";
  Exec(admin_.get(), "CREATE TABLE " + schema_ + ".gb_seen (event_id text)");
  Produce(1, "transient");
  const std::string gb = "gb-" + schema_;
  Subprocess& c = Start("sql = \"" + sql_ + "\"\nretries = \"200ms,200ms\"\n[[handler]]\ntopic = \"lessons\"\n"
                        "group = \"" + gb + "\"\nsql = \"INSERT INTO " + schema_ + ".gb_seen VALUES ($3)\"\n");
  const int port = HttpPort(c);
  auto dlt = ReadTopic(kafka_->bootstrap(), "lessons.dlt", 2, 1, Scaled(60s));
  ASSERT_EQ(dlt.size(), 1u) << c.Log();
  EXPECT_EQ(dlt[0].headers["outbox-group"], "g-" + schema_);
  const std::string dup = "outbox_inbox_duplicates_total{consumer=\"" + gb + "\"} ";
  const std::string skipped = "outbox_inbox_other_groups_skipped_total{consumer=\"" + gb + "\"} ";
  auto metric = [&](const std::string& name) {
    const std::string m = Get(port, "/metrics");
    const auto at = m.find(name);
    return at == std::string::npos ? -1L : std::stol(m.substr(at + name.size()));
  };
  ASSERT_TRUE(WaitFor([&] { return metric(skipped) == 2; }, Scaled(30s))) << Get(port, "/metrics");
  EXPECT_EQ(metric(dup), 0) << "ga's two retry copies are not gb's duplicates";
  Subprocess replay({OUTBOX_OUTBOXCTL_BIN, "--bootstrap", kafka_->bootstrap(), "dlt", "replay", "--topic",
                     "lessons.dlt"},
                    {}, (std::filesystem::temp_directory_path() / ("outboxctl-" + schema_ + ".log")).string());
  ASSERT_EQ(replay.Wait(Scaled(60s)), 0) << replay.Log();
  EXPECT_TRUE(WaitFor([&] { return metric(skipped) >= 3; }, Scaled(30s))) << "gb skips the replay too";
  EXPECT_EQ(metric(dup), 0);
  EXPECT_EQ(Sql("SELECT count(*) FROM " + schema_ + ".gb_seen"), "1") << "gb applied the event once";
  // ga consumed the replay: it fails again (transient), so its retry copies come again.
  EXPECT_TRUE(WaitFor([&] { return ReadTopic(kafka_->bootstrap(), "lessons.dlt", 2, 2, 2s).size() == 2; },
                      Scaled(60s)));
  EXPECT_TRUE(WaitFor([&] { return metric(skipped) == 5; }, Scaled(10s))) << "2 retries, the replay, 2 retries";
  EXPECT_EQ(metric(dup), 0);
}

TEST_P(ConsumerDaemonTest, ABadConfigurationExitsTwoNamingTheKeyAndTouchesNothing) {
  Subprocess& c = Start("sql = \"" + sql_ + "\"\ndedup = \"payload:user\"\n");
  EXPECT_EQ(c.Wait(Scaled(20s)), 2) << c.Log();
  EXPECT_NE(c.Log().find("config key handler.0.dedup"), std::string::npos) << c.Log();
  const std::string where = Maria() ? "table_schema = '" + schema_ + "'" : "table_schema = '" + schema_ + "'";
  EXPECT_EQ(Count("SELECT count(*) FROM information_schema.tables WHERE " + where +
                  " AND table_name LIKE 'inbox%'"),
            0)
      << "--migrate must not run with a bad configuration";
  Subprocess& high = Start("sql = \"select f($5)\"\n");
  EXPECT_EQ(high.Wait(Scaled(20s)), 2) << high.Log();
  EXPECT_NE(high.Log().find("handler.0.sql: $5 is not a parameter"), std::string::npos) << high.Log();
}

// The database unreachable at start: the process waits (retrying with
// backoff), says so on /readyz, is READY for systemd all the same (an outage
// does not fail the start), and still stops cleanly on SIGTERM, saying so.
TEST_P(ConsumerDaemonTest, AnUnreachableDatabaseIsRetriedReportedOnReadyzAndAStopIsClean) {
  const std::string down = Maria() ? "mysql://root@127.0.0.1:1/x" : "postgresql://postgres@127.0.0.1:1/x";
  NotifySocket systemd(schema_);
  Subprocess& c = StartSql({"database.url=" + down}, {{"NOTIFY_SOCKET", systemd.path()}});
  const int port = HttpPort(c);
  ASSERT_GT(port, 0) << c.Log();
  std::string body;
  ASSERT_TRUE(WaitFor([&] {
    int status = 0;
    body = Get(port, "/readyz", &status);
    return status == 503 && body.find("inbox database unavailable") != std::string::npos;
  }, Scaled(20s))) << body << c.Log();
  ASSERT_TRUE(WaitFor([&] { return c.Log().find("inbox database unavailable; retrying") != std::string::npos; },
                      Scaled(10s)));
  EXPECT_TRUE(WaitFor([&] { return systemd.Received("READY=1"); }, Scaled(10s))) << systemd.all();
  c.Signal(SIGTERM);
  EXPECT_TRUE(WaitFor([&] { return systemd.Received("STOPPING=1"); }, Scaled(10s))) << systemd.all();
  EXPECT_EQ(c.Wait(Scaled(20s)), 0) << c.Log();
}

INSTANTIATE_TEST_SUITE_P(Stores, ConsumerDaemonTest, ::testing::Values(Db::kPostgres, Db::kMariaDb),
                         [](const auto& p) { return p.param == Db::kPostgres ? "Postgres" : "MariaDb"; });

// The http handler (on PostgreSQL; the effect is the same on MariaDB): a POST per new event
// with Idempotency-Key, stamped after its 2xx. A 503 outage goes through the
// retry topics, a 404 is dead-lettered, a SIGKILL may repeat a POST whose
// stamp did not commit (the documented at-least-once), never lose one.
class ConsumerHttpTest : public ConsumerDaemonTest {};

TEST_P(ConsumerHttpTest, PostsEachEventWithItsKeyThroughAnOutageAndAKill) {
  std::mutex mu;
  std::map<std::string, int> keys;  // Idempotency-Key -> 2xx answers
  int unavailable = 8;               // the first requests get 503
  std::string content_type, trace;
  HttpReceiver receiver([&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard l(mu);
    if (unavailable > 0) {
      --unavailable;
      res.status = 503;
      return;
    }
    if (req.body == "gone") {
      res.status = 404;
      res.body = "no such lesson";
      return;
    }
    res.status = 200;
    ++keys[req.get_header_value("Idempotency-Key")];
    content_type = req.get_header_value("Content-Type");
    trace = req.get_header_value("traceparent");
  });
  Produce(60, "ok");
  Produce(20, "ok", 1, 0);  // copies
  Produce(1, "gone", 1, 60);
  const std::string handler = "http = \"" + receiver.url("/events") + "\"\nretries = \"300ms,300ms,300ms\"\n";
  Subprocess& first = Start(handler);
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard l(mu);
    return keys.size() >= 20;
  }, Scaled(60s))) << first.Log();
  first.Signal(SIGKILL);
  first.Wait();
  Subprocess& second = Start(handler);
  ASSERT_TRUE(WaitFor([&] {
    std::lock_guard l(mu);
    return keys.size() >= 60;
  }, Scaled(90s))) << second.Log();
  auto dlt = ReadTopic(kafka_->bootstrap(), "lessons.dlt", 2, 1, Scaled(30s));
  ASSERT_EQ(dlt.size(), 1u) << second.Log();
  EXPECT_EQ(dlt[0].headers["outbox-error-class"], "permanent");
  EXPECT_NE(dlt[0].headers["outbox-error-message"].find("HTTP 404 from POST"), std::string::npos);
  ASSERT_TRUE(WaitFor([&] { return Stamps() == 60; }, Scaled(30s))) << second.Log();
  second.Signal(SIGTERM);
  EXPECT_EQ(second.Wait(Scaled(30s)), 0) << second.Log();
  std::lock_guard l(mu);
  int repeated = 0;
  for (int i = 0; i < 60; ++i) {
    const int n = keys["ev-" + std::to_string(i)];
    EXPECT_GE(n, 1) << "ev-" << i << " never got a 2xx";
    repeated += n - 1;
  }
  // Only the kill can repeat a POST: at most the batch in flight (20
  // messages). A failed POST (the 503s, the 404) repeats none: the daemon's
  // inbox takes the failed message's stamp back and runs nothing twice
  // (PostgresInboxOptions::effects_outside_transaction).
  EXPECT_LE(repeated, 20);
  EXPECT_EQ(content_type, "application/octet-stream");
  EXPECT_EQ(trace, kTrace);
}

// A receiver down longer than the retries span: the events it caught are
// dead-lettered as transient; once it answers, `outboxctl dlt replay` sends
// them again and each is POSTed and stamped.
TEST_P(ConsumerHttpTest, AnOutageLongerThanTheRetriesSpanIsDeadLetteredThenReplayed) {
  std::mutex mu;
  bool up = false;
  std::map<std::string, int> keys;  // Idempotency-Key -> 2xx answers
  HttpReceiver receiver([&](const httplib::Request& req, httplib::Response& res) {
    std::lock_guard l(mu);
    if (!up) {
      res.status = 503;
      return;
    }
    res.status = 204;
    ++keys[req.get_header_value("Idempotency-Key")];
  });
  Produce(10, "ok");
  Subprocess& c = Start("http = \"" + receiver.url("/events") + "\"\nretries = \"100ms\"\n");
  auto dlt = ReadTopic(kafka_->bootstrap(), "lessons.dlt", 2, 10, Scaled(60s));
  ASSERT_EQ(dlt.size(), 10u) << c.Log();
  for (const Message& m : dlt) {
    EXPECT_EQ(m.headers.at("outbox-error-class"), "transient");
    EXPECT_EQ(m.headers.at("outbox-attempt"), "2") << "one retry, then the dead-letter topic";
    EXPECT_NE(m.headers.at("outbox-error-message").find("HTTP 503 from POST"), std::string::npos);
  }
  EXPECT_EQ(Stamps(), 0);
  {
    std::lock_guard l(mu);
    up = true;
  }
  Subprocess replay({OUTBOX_OUTBOXCTL_BIN, "--bootstrap", kafka_->bootstrap(), "dlt", "replay", "--topic",
                     "lessons.dlt"},
                    {}, (std::filesystem::temp_directory_path() / ("outboxctl-" + schema_ + ".log")).string());
  ASSERT_EQ(replay.Wait(Scaled(60s)), 0) << replay.Log();
  ASSERT_TRUE(WaitFor([&] { return Stamps() == 10; }, Scaled(60s))) << c.Log();
  c.Signal(SIGTERM);
  EXPECT_EQ(c.Wait(Scaled(30s)), 0) << c.Log();
  std::lock_guard l(mu);
  ASSERT_EQ(keys.size(), 10u);
  for (const auto& [key, n] : keys) EXPECT_EQ(n, 1) << key;
}

INSTANTIATE_TEST_SUITE_P(Http, ConsumerHttpTest, ::testing::Values(Db::kPostgres),
                         [](const auto&) { return "Postgres"; });

}  // namespace
}  // namespace outbox::testing
