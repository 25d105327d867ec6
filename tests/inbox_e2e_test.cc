// The inbox end to end: a real consumer process (inbox_test_consumer) against
// the real PostgreSQL and a private outbox-mock-kafka. Duplicates, kills at the
// crash-matrix points, retry topics, the dead-letter topic and its replay.
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <thread>

#include "kafka_helpers.h"
#include "mariadb_test_util.h"
#include "outbox/kafka.h"
#include "ops_assets.h"
#include "subprocess.h"
#include "test_env.h"

namespace outbox::testing {
namespace {

using namespace std::chrono_literals;

// The same suite against each inbox store: PostgreSQL (tables in a schema of
// its own) and MariaDB (tables in a database of its own; `schema_` names it,
// so "<schema_>.effects" reads the same in both).
enum class Db { kPostgres, kMariaDb };
void PrintTo(Db d, std::ostream* os) { *os << (d == Db::kPostgres ? "Postgres" : "MariaDb"); }

class InboxE2ETest : public ::testing::TestWithParam<Db> {
 protected:
  bool Maria() const { return GetParam() == Db::kMariaDb; }

  void SetUp() override {
    schema_ = "t_" + RandomSuffix();
    if (Maria()) {
      OUTBOX_REQUIRE_ENV(base_, "OUTBOX_MYSQL_URL");
      my_ = OpenMariaDb(base_, "");
      ASSERT_NE(my_, nullptr);
      MyQuery(my_, "CREATE DATABASE " + schema_);
      url_ = MariaDbUrlFor(base_, schema_);
      for (const char* t : {"effects (id BIGINT AUTO_INCREMENT PRIMARY KEY, k VARCHAR(255), payload LONGTEXT, "
                            "applied_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6))",
                            "attempts (k VARCHAR(255) PRIMARY KEY, n INT)",
                            "blocklist (k VARCHAR(255) PRIMARY KEY)"}) {
        MyQuery(my_, "CREATE TABLE " + schema_ + "." + t);
      }
    } else {
      OUTBOX_REQUIRE_ENV(url_, "OUTBOX_PG_URL");
      admin_ = Connect(url_);
      Exec(admin_.get(), "CREATE SCHEMA " + schema_);
      Exec(admin_.get(), "CREATE TABLE " + schema_ +
                             ".effects (id bigserial PRIMARY KEY, k text, payload text, "
                             "applied_at timestamptz DEFAULT clock_timestamp())");
      Exec(admin_.get(), "CREATE TABLE " + schema_ + ".attempts (k text PRIMARY KEY, n int)");
      Exec(admin_.get(), "CREATE TABLE " + schema_ + ".blocklist (k text PRIMARY KEY)");
      Exec(admin_.get(), "CREATE TABLE " + schema_ + ".parent (id text PRIMARY KEY)");
      Exec(admin_.get(), "CREATE TABLE " + schema_ + ".child (pid text REFERENCES " + schema_ +
                             ".parent DEFERRABLE INITIALLY DEFERRED)");
    }
    kafka_ = std::make_unique<MockKafka>(
        1, std::vector<std::string>{"orders:4", "orders.retry.1:2", "orders.retry.2:2", "orders.dlt:2"});
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

  // The first value of `sql` on the test's database.
  std::string Sql(const std::string& sql) { return Maria() ? MyQuery(my_, sql) : Exec(admin_.get(), sql); }
  // "k:payload" of the effects, comma-separated, in `order`.
  std::string EffectList(const std::string& expr_pg, const std::string& expr_my, const std::string& order,
                         const std::string& where = "") {
    const std::string from = " FROM " + schema_ + ".effects" + (where.empty() ? "" : " WHERE " + where);
    return Sql(Maria() ? "SELECT GROUP_CONCAT(" + expr_my + " ORDER BY " + order + " SEPARATOR ',')" + from
                       : "SELECT string_agg(" + expr_pg + ", ',' ORDER BY " + order + ")" + from);
  }
  std::string KeyPayloads(const std::string& order) {
    return EffectList("k || ':' || payload", "CONCAT(k, ':', payload)", order);
  }
  std::string Payloads(const std::string& order, const std::string& where = "") {
    return EffectList("payload", "payload", order, where);
  }

  Subprocess& StartConsumer(const std::string& faults = "", const std::string& retry = "700,700",
                            bool ordered = false, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {OUTBOX_INBOX_CONSUMER_BIN, "--db", url_, "--bootstrap",
                                     kafka_->bootstrap(), "--schema", schema_, "--topic", "orders",
                                     "--group", "g-" + schema_, "--retry-delays", retry};
    if (ordered) {
      argv.push_back("--ordered");
      argv.push_back("1");
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    std::map<std::string, std::string> env;
    if (!faults.empty()) env["OUTBOX_FAULTS"] = faults;
    const std::string log = (std::filesystem::temp_directory_path() /
                             ("inbox-consumer-" + schema_ + "-" + std::to_string(consumers_.size())))
                                .string();
    consumers_.push_back(std::make_unique<Subprocess>(argv, env, log));
    return *consumers_.back();
  }

  // Events ev-0..ev-(n-1) with `payload`, each sent `copies` times.
  void ProduceEvents(int n, const std::string& payload, int copies = 1, const std::string& prefix = "ev-") {
    std::vector<Message> msgs;
    for (int c = 0; c < copies; ++c) {
      for (int i = 0; i < n; ++i) {
        Message m;
        m.key = prefix + std::to_string(i);
        m.value = payload;
        m.headers["outbox-event-id"] = m.key;
        m.headers["traceparent"] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        msgs.push_back(m);
      }
    }
    ASSERT_EQ(Produce(kafka_->bootstrap(), "orders", msgs), static_cast<int>(msgs.size()));
  }

  static Message Keyed(const std::string& key, const std::string& value, const std::string& id) {
    Message m;
    m.key = key;
    m.value = value;
    m.headers["outbox-event-id"] = id;
    return m;
  }

  long Count(const std::string& sql) { return std::stol(Sql(sql)); }
  long Effects() { return Count("SELECT count(*) FROM " + schema_ + ".effects"); }
  long DoubleEffects() {
    return Count("SELECT count(*) FROM (SELECT k FROM " + schema_ +
                 ".effects GROUP BY k HAVING count(*) > 1) d");
  }
  long Stamps() {
    return Count("SELECT count(*) FROM " + schema_ + ".inbox_stamps");
  }

  // Stops the consumer and returns its counters line's value for `name`.
  static std::map<std::string, long> StopAndCount(Subprocess& c) {
    c.Signal(SIGTERM);
    EXPECT_EQ(c.Wait(Scaled(30s)), 0) << c.Log();
    std::map<std::string, long> out;
    std::string log = c.Log();
    auto pos = log.find("counters ");
    if (pos == std::string::npos) {
      ADD_FAILURE() << "no counters line:\n" << log;
      return out;
    }
    std::istringstream in(log.substr(pos + 9));
    for (std::string kv; in >> kv;) {
      auto eq = kv.find('=');
      if (eq != std::string::npos) out[kv.substr(0, eq)] = std::stol(kv.substr(eq + 1));
    }
    return out;
  }

  std::string url_, schema_, base_;
  PgConn admin_;      // PostgreSQL
  MYSQL* my_ = nullptr;  // MariaDB
  std::unique_ptr<MockKafka> kafka_;
  std::vector<std::unique_ptr<Subprocess>> consumers_;
};

// Every outbox_inbox_* metric the shipped alert rules and Grafana dashboard
// use is exported under that name by a running consumer.
TEST_P(InboxE2ETest, TheShippedAlertsAndDashboardUseOnlyMetricsTheConsumerExports) {
  ASSERT_TRUE(MetricNamesInShippedAssets().count("outbox_inbox_consumer_lag_messages"));
  Subprocess& c = StartConsumer("", "700,700", false, {"--metrics-port", "0"});
  ProduceEvents(3, "ok");
  ASSERT_TRUE(WaitFor([&] { return Effects() == 3; }, 60s)) << c.Log();
  const std::string marker = "metrics port=";
  const auto at = c.Log().find(marker);
  ASSERT_NE(at, std::string::npos) << c.Log();
  const int port = std::atoi(c.Log().c_str() + at + marker.size());
  std::set<std::string> missing;
  EXPECT_TRUE(WaitFor(
      [&] {
        httplib::Client cli("127.0.0.1", port);
        auto res = cli.Get("/metrics");
        missing = MissingFromExport(res ? res->body : "", "outbox_inbox_", /*exclude=*/false);
        return missing.empty();
      },
      15s));
  for (const auto& n : missing) ADD_FAILURE() << "used by the shipped assets, not exported: " << n;
}

TEST_P(InboxE2ETest, AnEventDeliveredManyTimesHasOneEffect) {
  Subprocess& c = StartConsumer();
  ProduceEvents(30, "ok", /*copies=*/3);
  ASSERT_TRUE(WaitFor([&] { return Effects() == 30; }, 60s)) << c.Log();
  ASSERT_TRUE(WaitFor([&] { return Stamps() == 30; }, 5s));
  ASSERT_TRUE(WaitFor([&] { return c.Log().find("total_duplicates=60") != std::string::npos; }, 30s))
      << c.Log();
  auto counters = StopAndCount(c);
  EXPECT_EQ(counters["applied"], 30);
  EXPECT_EQ(counters["duplicates"], 60) << "every extra copy counted as a duplicate";
  EXPECT_EQ(DoubleEffects(), 0);
  EXPECT_EQ(Effects(), 30);
}

TEST_P(InboxE2ETest, KilledAfterTheEffectCommitBeforeTheOffsetCommitAppliesOnce) {
  OUTBOX_REQUIRE_FAULT_POINTS();
  ProduceEvents(20, "ok");
  Subprocess& first = StartConsumer("Inbox::AfterCommitBeforeOffsetCommit=crash@1");
  EXPECT_EQ(first.Wait(Scaled(60s)), 70) << "should die at the fault point:\n" << first.Log();
  const long applied_before_crash = Effects();
  ASSERT_GT(applied_before_crash, 0) << "the effect was committed before the crash";
  // Redelivery after restart: the stamps reject the second effect.
  Subprocess& second = StartConsumer();
  ASSERT_TRUE(WaitFor([&] {
    return second.Log().find("total_applied=" + std::to_string(20 - applied_before_crash) +
                             " total_duplicates=" + std::to_string(applied_before_crash)) !=
           std::string::npos;
  }, 60s)) << second.Log();
  EXPECT_EQ(Effects(), 20);
  auto counters = StopAndCount(second);
  EXPECT_EQ(counters["duplicates"], applied_before_crash) << "the redelivered batch was absorbed";
  EXPECT_EQ(counters["applied"], 20 - applied_before_crash);
  EXPECT_EQ(DoubleEffects(), 0);
}

TEST_P(InboxE2ETest, KilledInsideTheTransactionLeavesNoStampAndNoEffect) {
  OUTBOX_REQUIRE_FAULT_POINTS();
  ProduceEvents(20, "ok");
  Subprocess& first = StartConsumer("Inbox::InsideTransaction=crash@1");
  EXPECT_EQ(first.Wait(Scaled(60s)), 70) << first.Log();
  EXPECT_EQ(Effects(), 0);
  EXPECT_EQ(Stamps(), 0);
  Subprocess& second = StartConsumer();
  ASSERT_TRUE(WaitFor([&] { return Effects() == 20; }, 60s)) << second.Log();
  auto counters = StopAndCount(second);
  EXPECT_EQ(counters["applied"], 20);
  EXPECT_EQ(counters["duplicates"], 0);
  EXPECT_EQ(DoubleEffects(), 0);
}

TEST_P(InboxE2ETest, PermanentErrorGoesToTheDeadLetterTopicAtOnceWithHeaders) {
  Subprocess& c = StartConsumer();
  ProduceEvents(1, "permanent", 1, "bad-");
  ProduceEvents(3, "ok");
  auto dlt = ReadTopic(kafka_->bootstrap(), "orders.dlt", 2, 1, Scaled(60s));
  ASSERT_EQ(dlt.size(), 1u) << c.Log();
  const auto& h = dlt[0].headers;
  EXPECT_EQ(dlt[0].key, "bad-0");
  EXPECT_EQ(h.at("outbox-event-id"), "bad-0") << "the event's own headers are kept";
  EXPECT_EQ(h.at("traceparent"), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  EXPECT_EQ(h.at("outbox-original-topic"), "orders");
  EXPECT_FALSE(h.at("outbox-original-partition").empty());
  EXPECT_FALSE(h.at("outbox-original-offset").empty());
  EXPECT_EQ(h.at("outbox-error-class"), "permanent");
  EXPECT_EQ(h.at("outbox-error-message"), "contract violation");
  EXPECT_EQ(h.at("outbox-attempt"), "1");
  EXPECT_FALSE(h.at("outbox-first-failure-at").empty());
  ASSERT_TRUE(WaitFor([&] { return Effects() == 3; }, 30s));
  auto counters = StopAndCount(c);
  EXPECT_EQ(counters["dead_lettered"], 1);
  EXPECT_EQ(counters["retried"], 0) << "permanent errors are not retried";
}

// A 1,040,000-byte value (a real broker's default message.max.bytes takes it)
// that the handler refuses: its dead-letter copy cannot be forwarded whole (it
// was rewound 12-15 times every 30 s, for ever, holding the partition). It is
// dead-lettered cut, the events after it apply, its offset is committed (a
// second consumer does not see it again), and `outboxctl dlt replay` says it
// cannot replay it, naming the original offset.
TEST_P(InboxE2ETest, AMessageTooLargeToForwardWholeIsDeadLetteredCutAndThePartitionMovesOn) {
  Subprocess& c = StartConsumer();
  const std::string value = "permanent-long:" + std::string(1'040'000, 'x');
  ASSERT_EQ(Produce(kafka_->bootstrap(), "orders", {Keyed("big-0", value, "big-0")},
                    {{"message.max.bytes", "4000000"}}),
            1);
  ProduceEvents(3, "ok", 1, "after-");
  auto dlt = ReadTopic(kafka_->bootstrap(), "orders.dlt", 2, 1, Scaled(60s));
  ASSERT_EQ(dlt.size(), 1u) << c.Log();
  const auto& h = dlt[0].headers;
  EXPECT_EQ(dlt[0].key, "big-0");
  EXPECT_EQ(h.at("outbox-original-size"), std::to_string(value.size()));
  EXPECT_NE(h.at("outbox-truncated").find("value cut to"), std::string::npos) << h.at("outbox-truncated");
  EXPECT_LE(dlt[0].value.size(), kMaxForwardMaxBytes);  // the default forward_max_bytes
  EXPECT_LT(dlt[0].value.size(), value.size());
  EXPECT_EQ(dlt[0].value, value.substr(0, dlt[0].value.size()));
  EXPECT_EQ(h.at("outbox-error-class"), "permanent");
  EXPECT_EQ(h.at("outbox-event-id"), "big-0");
  ASSERT_TRUE(WaitFor([&] { return Effects() == 3; }, 30s)) << c.Log();
  EXPECT_TRUE(WaitFor([&] { return c.Log().find("too large to forward whole") != std::string::npos; }, 10s))
      << c.Log();

  CommandRun r = RunCommand(std::string(OUTBOX_OUTBOXCTL_BIN) + " --bootstrap " + kafka_->bootstrap() +
                            " dlt replay --topic orders.dlt 2>&1");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("replayed 0 of 1 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not replayed: orders.dlt/"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("a cut copy of orders/" + h.at("outbox-original-partition") + "/" +
                       h.at("outbox-original-offset") + " (" + std::to_string(value.size()) + " bytes)"),
            std::string::npos)
      << r.out;
  auto counters = StopAndCount(c);
  EXPECT_EQ(counters["dead_lettered"], 1);
  EXPECT_EQ(counters["applied"], 3);
  // The offsets moved past it: the group's next member starts after it.
  Subprocess& again = StartConsumer();
  ProduceEvents(1, "ok", 1, "later-");
  ASSERT_TRUE(WaitFor([&] { return Effects() == 4; }, 60s)) << again.Log();
  auto second = StopAndCount(again);
  EXPECT_EQ(second["dead_lettered"], 0) << again.Log();
  EXPECT_EQ(ReadTopic(kafka_->bootstrap(), "orders.dlt", 2, 2, Scaled(5s)).size(), 1u);
}

// Messages that used to stop the consumer: an event id that is not UTF-8 (threw
// out of Run, then crash-looped on the uncommitted offset), a NULL value
// (forwarded as an empty value), a multi-line error (written into one header),
// and an effect that breaks a deferred constraint at COMMIT (failed the whole
// batch, consumed again forever). Each goes to the dead-letter topic alone; the
// events around them apply.
TEST_P(InboxE2ETest, PoisonMessagesAreDeadLetteredAloneAndTheConsumerKeepsGoing) {
  Subprocess& c = StartConsumer();
  std::vector<Message> poison = {Keyed("p-utf8", "ok", std::string("ev-\x80\xfe\xff", 6)),
                                 Keyed("p-null", "", "p-null"), Keyed("p-multi", "multiline", "p-multi")};
  // A COMMIT-time failure needs a deferred constraint: PostgreSQL only (MariaDB
  // checks every constraint at its statement).
  if (!Maria()) poison.push_back(Keyed("p-orphan", "orphan", "p-orphan"));
  poison[1].value_null = true;
  const long n = static_cast<long>(poison.size());
  ProduceEvents(3, "ok", 1, "before-");
  ASSERT_EQ(Produce(kafka_->bootstrap(), "orders", poison), n);
  ProduceEvents(3, "ok", 1, "after-");
  auto dlt = ReadTopic(kafka_->bootstrap(), "orders.dlt", 2, static_cast<std::size_t>(n), Scaled(60s));
  ASSERT_EQ(dlt.size(), static_cast<std::size_t>(n)) << c.Log();
  std::map<std::string, Message> by_key;
  for (const auto& m : dlt) by_key[m.key] = m;
  EXPECT_EQ(by_key["p-utf8"].headers.at("outbox-event-id"), std::string("ev-\x80\xfe\xff", 6))
      << "the header is forwarded as the bytes it was";
  EXPECT_NE(by_key["p-utf8"].headers.at("outbox-error-message").find("UTF-8"), std::string::npos);
  EXPECT_TRUE(by_key["p-null"].value_null) << "a NULL value stays NULL in the dead-letter topic";
  EXPECT_EQ(by_key["p-multi"].headers.at("outbox-error-message"), "ERROR:  value out of range");
  EXPECT_NE(by_key["p-multi"].headers.at("outbox-error-detail").find("CONTEXT:"), std::string::npos);
  if (!Maria()) {
    EXPECT_EQ(by_key["p-orphan"].headers.at("outbox-error-class"), "permanent");
    EXPECT_NE(by_key["p-orphan"].headers.at("outbox-error-message").find("foreign key"),
              std::string::npos)
        << by_key["p-orphan"].headers.at("outbox-error-message");
  }
  ASSERT_TRUE(WaitFor([&] { return Effects() == 6; }, 30s)) << c.Log();
  if (!Maria()) {
    EXPECT_EQ(Count("SELECT count(*) FROM " + schema_ + ".child"), 0);
  }
  auto counters = StopAndCount(c);
  EXPECT_EQ(counters["dead_lettered"], n);
  EXPECT_EQ(counters["applied"], 6);
}

// Retry topics reorder a key: X1 fails and waits in .retry.1 while X2 applies.
// In ordered mode X1 waits in the inbox database with X2 behind it; Y, another
// key, is not held. Effects: Y, then X1, then X2.
TEST_P(InboxE2ETest, OrderedModeAppliesAKeyInOrderAcrossRetries) {
  Subprocess& c = StartConsumer("", "300,300,300", /*ordered=*/true);
  std::vector<Message> msgs = {Keyed("X", "fail-twice", "x1"), Keyed("X", "ok", "x2"),
                               Keyed("Y", "ok", "y1")};
  ASSERT_EQ(Produce(kafka_->bootstrap(), "orders", msgs), 3);
  ASSERT_TRUE(WaitFor([&] { return Effects() == 3; }, 60s)) << c.Log();
  EXPECT_EQ(KeyPayloads("id"), "Y:ok,X:fail-twice,X:ok");
  EXPECT_EQ(Count("SELECT n FROM " + schema_ + ".attempts WHERE k = 'x1'"), 3);
  EXPECT_EQ(Count("SELECT count(*) FROM " + schema_ + ".inbox_parked"), 0);
  auto retry = ReadTopic(kafka_->bootstrap(), "orders.retry.1", 2, 0, Scaled(3s));
  EXPECT_TRUE(retry.empty()) << "ordered mode keeps its retries in the database";
  auto counters = StopAndCount(c);
  EXPECT_EQ(counters["applied"], 3);
  EXPECT_EQ(counters["dead_lettered"], 0);
}

// Ordered mode, killed after X1 and X2 were parked (and Y applied) but before
// the offsets were committed: the restarted consumer gets all three again,
// parks nothing twice, and applies each once, X1 before X2.
TEST_P(InboxE2ETest, OrderedModeKilledAfterParkingBeforeTheOffsetCommitLosesAndRepeatsNothing) {
  OUTBOX_REQUIRE_FAULT_POINTS();
  std::vector<Message> msgs = {Keyed("X", "fail-twice", "x1"), Keyed("X", "ok", "x2"),
                               Keyed("Y", "ok", "y1")};
  ASSERT_EQ(Produce(kafka_->bootstrap(), "orders", msgs), 3);
  Subprocess& first =
      StartConsumer("Inbox::AfterCommitBeforeOffsetCommit=crash@1", "300,300,300", /*ordered=*/true);
  EXPECT_EQ(first.Wait(Scaled(60s)), 70) << "should die at the fault point:\n" << first.Log();
  Subprocess& second = StartConsumer("", "300,300,300", /*ordered=*/true);
  ASSERT_TRUE(WaitFor([&] { return Effects() == 3; }, 60s)) << second.Log();
  std::this_thread::sleep_for(1s);  // nothing more may come
  EXPECT_EQ(Effects(), 3);
  EXPECT_EQ(KeyPayloads("k, payload"), "X:fail-twice,X:ok,Y:ok") << "each once";
  EXPECT_EQ(Payloads("id", "k = 'X'"), "fail-twice,ok");
  EXPECT_EQ(Count("SELECT count(*) FROM " + schema_ + ".inbox_parked"), 0);
  StopAndCount(second);
}

// The same events without ordered mode: the documented reordering.
TEST_P(InboxE2ETest, UnorderedModeLetsALaterEventOvertakeARetriedOne) {
  Subprocess& c = StartConsumer("", "300,300,300");
  std::vector<Message> msgs = {Keyed("X", "fail-twice", "x1"), Keyed("X", "ok", "x2")};
  ASSERT_EQ(Produce(kafka_->bootstrap(), "orders", msgs), 2);
  ASSERT_TRUE(WaitFor([&] { return Effects() == 2; }, 60s)) << c.Log();
  EXPECT_EQ(Payloads("id"), "ok,fail-twice");
  StopAndCount(c);
}

// A rebalance while a member is filling a batch: the partitions it loses go to
// the other member, which consumes on and commits. The first member must not
// then commit its older offsets of those partitions (with explicit offsets the
// broker accepts that and moves the new owner back). Afterwards a fresh member
// of the group finds nothing to consume again: no copy comes back.
TEST_P(InboxE2ETest, ARebalanceMidBatchNeverMovesTheNewOwnersOffsetBack) {
  ProduceEvents(200, "ok", 1, "first-");
  // A fills one batch for 8 s: the rebalance happens inside it.
  Subprocess& a = StartConsumer("", "700,700", false, {"--batch", "100000", "--batch-wait-ms", "8000"});
  ASSERT_TRUE(WaitFor([&] { return a.Log().find("partitions assigned") != std::string::npos; }, 30s))
      << a.Log();
  std::this_thread::sleep_for(1500ms);  // A has fetched the first 200
  Subprocess& b = StartConsumer();
  ASSERT_TRUE(WaitFor([&] { return b.Log().find("partitions assigned count=") != std::string::npos &&
                                   b.Log().find("partitions assigned count=0") == std::string::npos; },
                      30s))
      << b.Log();
  ProduceEvents(200, "ok", 1, "second-");  // B consumes its share of these and commits
  ASSERT_TRUE(WaitFor([&] { return Effects() == 400; }, 60s)) << a.Log() << b.Log();
  // A's batch ends (8 s after it began) and commits what it may.
  ASSERT_TRUE(WaitFor([&] { return a.Log().find("batch done") != std::string::npos; }, 30s));
  std::this_thread::sleep_for(1s);
  StopAndCount(a);
  StopAndCount(b);
  EXPECT_EQ(DoubleEffects(), 0);
  Subprocess& c = StartConsumer();
  ASSERT_TRUE(WaitFor([&] { return c.Log().find("partitions assigned count=8") != std::string::npos; },
                      30s))
      << c.Log();
  std::this_thread::sleep_for(3s);  // time to consume anything behind the committed offsets
  auto counters = StopAndCount(c);
  EXPECT_EQ(counters["duplicates"], 0) << "committed offsets moved back: copies came again\n"
                                       << a.Log();
  EXPECT_EQ(counters["applied"], 0);
  EXPECT_EQ(Effects(), 400);
}

// The largest event the relay publishes (1,000,000 bytes of payload, as enqueue
// admits) failing with a long error: its dead-letter copy carries ~10 KB of
// failure headers more, and must still be produced (else the consumer would
// consume it again forever).
TEST_P(InboxE2ETest, TheLargestEventIsDeadLetteredWithItsFailureHeaders) {
  Subprocess& c = StartConsumer();
  Message big = Keyed("big", "permanent-long:" + std::string(1'000'000 - 15, 'x'), "big-1");
  ASSERT_EQ(Produce(kafka_->bootstrap(), "orders", {big},
                    {{"message.max.bytes", std::to_string(kDefaultMessageMaxBytes)}}),
            1);
  ProduceEvents(2, "ok", 1, "after-");
  auto dlt = ReadTopic(kafka_->bootstrap(), "orders.dlt", 2, 1, Scaled(60s));
  ASSERT_EQ(dlt.size(), 1u) << c.Log();
  EXPECT_EQ(dlt[0].value.size(), 1'000'000u);
  EXPECT_EQ(dlt[0].headers.at("outbox-error-detail").size(), 8000u);
  EXPECT_EQ(dlt[0].headers.at("outbox-error-message").size(), 1000u);
  ASSERT_TRUE(WaitFor([&] { return Effects() == 2; }, 30s)) << c.Log();
  auto counters = StopAndCount(c);
  EXPECT_EQ(counters["dead_lettered"], 1);
}

TEST_P(InboxE2ETest, TransientErrorIsRetriedAfterADelayThenSucceeds) {
  Subprocess& c = StartConsumer("", "800,800");
  ProduceEvents(1, "transient-once", 1, "flaky-");
  ASSERT_TRUE(WaitFor([&] { return Effects() == 1; }, 60s)) << c.Log();
  auto counters = StopAndCount(c);
  EXPECT_EQ(counters["retried"], 1);
  EXPECT_EQ(counters["dead_lettered"], 0);
  EXPECT_EQ(counters["applied"], 1);
  // It waited on the retry topic: the second attempt came at least ~the delay later.
  EXPECT_EQ(Count("SELECT n FROM " + schema_ + ".attempts WHERE k = 'flaky-0'"), 2);
  auto retry = ReadTopic(kafka_->bootstrap(), "orders.retry.1", 2, 1, Scaled(10s));
  ASSERT_EQ(retry.size(), 1u);
  EXPECT_EQ(retry[0].headers.at("outbox-error-class"), "transient");
  const long long due = std::stoll(retry[0].headers.at("outbox-retry-due-at"));
  const long long applied_ms =
      Count(Maria() ? "SELECT CAST(UNIX_TIMESTAMP(applied_at) * 1000 AS SIGNED) FROM " + schema_ + ".effects"
                    : "SELECT (extract(epoch FROM applied_at) * 1000)::bigint FROM " + schema_ + ".effects");
  EXPECT_GE(applied_ms + 50, due) << "applied before the retry was due";
}

TEST_P(InboxE2ETest, TransientForeverEndsInTheDeadLetterTopicAfterTheLastRetry) {
  Subprocess& c = StartConsumer("", "200,200");
  ProduceEvents(1, "transient-forever", 1, "down-");
  auto dlt = ReadTopic(kafka_->bootstrap(), "orders.dlt", 2, 1, Scaled(60s));
  ASSERT_EQ(dlt.size(), 1u) << c.Log();
  EXPECT_EQ(dlt[0].headers.at("outbox-error-class"), "transient");
  EXPECT_EQ(dlt[0].headers.at("outbox-attempt"), "3") << "first try + 2 retries";
  EXPECT_EQ(dlt[0].headers.at("outbox-original-topic"), "orders");
  auto counters = StopAndCount(c);
  EXPECT_EQ(counters["retried"], 2);
  EXPECT_EQ(counters["dead_lettered"], 1);
  EXPECT_EQ(Effects(), 0);
}

TEST_P(InboxE2ETest, ReplayFromTheDeadLetterTopicAppliesOnce) {
  Sql("INSERT INTO " + schema_ + ".blocklist VALUES ('held-0')");
  Subprocess& c = StartConsumer();
  ProduceEvents(1, "blocked", 1, "held-");
  auto dlt = ReadTopic(kafka_->bootstrap(), "orders.dlt", 2, 1, Scaled(60s));
  ASSERT_EQ(dlt.size(), 1u) << c.Log();
  EXPECT_EQ(Effects(), 0);
  // The operator fixes the cause, then replays from the command line.
  Sql("DELETE FROM " + schema_ + ".blocklist");
  const std::string ctl = std::string(OUTBOX_OUTBOXCTL_BIN) + " --bootstrap " + kafka_->bootstrap() +
                          " dlt replay --topic orders.dlt --key held-0";
  ASSERT_EQ(std::system((ctl + " --dry-run >/dev/null").c_str()), 0);
  ASSERT_EQ(std::system((ctl + " >/dev/null").c_str()), 0);
  ASSERT_TRUE(WaitFor([&] { return Effects() == 1; }, 60s)) << c.Log();
  // Replaying again is harmless: the inbox absorbs it.
  ASSERT_EQ(std::system((ctl + " >/dev/null").c_str()), 0);
  ASSERT_TRUE(WaitFor([&] { return c.Log().find("total_duplicates=1") != std::string::npos; }, 30s))
      << c.Log();
  auto counters = StopAndCount(c);
  EXPECT_EQ(Effects(), 1);
  EXPECT_EQ(counters["applied"], 1);
  EXPECT_EQ(counters["duplicates"], 1);
}

INSTANTIATE_TEST_SUITE_P(Stores, InboxE2ETest, ::testing::Values(Db::kPostgres, Db::kMariaDb),
                         [](const ::testing::TestParamInfo<Db>& i) {
                           return i.param == Db::kPostgres ? "Postgres" : "MariaDb";
                         });

}  // namespace
}  // namespace outbox::testing
