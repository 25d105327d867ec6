// outbox-relay and outboxctl on a MariaDB outbox (--db mysql://...): real
// processes against the testenv's MariaDB server and outbox-mock-kafka. The
// relay engine is the same as on PostgreSQL; these tests prove the store under
// it: drain in order, the crash-matrix row between publish and mark, a broker
// outage, bad input refused before anything is touched, and the operator tools.
#include <mysql.h>
#include <signal.h>

#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>

#include "kafka_helpers.h"
#include "mariadb_test_util.h"
#include "outbox/mariadb.h"
#include "prometheus_text.h"
#include "subprocess.h"
#include "test_env.h"

namespace outbox::testing {
namespace {

using namespace std::chrono_literals;

constexpr const char* kTopic = "outbox.event.order";
constexpr int kPartitions = 8;

class RelayMariaDbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    OUTBOX_REQUIRE_ENV(base_, "OUTBOX_MYSQL_URL");
    db_ = "t_" + RandomSuffix();
    admin_ = Open("");
    ASSERT_NE(admin_, nullptr);
    Query(admin_, "CREATE DATABASE " + db_);
    ASSERT_EQ(mysql_select_db(admin_, db_.c_str()), 0);
    url_ = MariaDbUrlFor(base_, db_);
    Status st = MigrateMariaDb({url_}).status();
    ASSERT_TRUE(st.ok()) << st.ToString();
    kafka_ = std::make_unique<MockKafka>(
        3, std::vector<std::string>{std::string(kTopic) + ":" + std::to_string(kPartitions)});
    ASSERT_FALSE(kafka_->bootstrap().empty());
  }
  void TearDown() override {
    relays_.clear();
    if (admin_) {
      Query(admin_, "DROP DATABASE IF EXISTS " + db_);
      mysql_close(admin_);
    }
  }

  MYSQL* Open(const std::string& db) { return OpenMariaDb(base_, db); }
  static std::string Query(MYSQL* c, const std::string& sql) { return MyQuery(c, sql); }

  std::int64_t CountStatus(const std::string& status) {
    return std::stoll(Query(admin_, "SELECT count(*) FROM outbox WHERE status = '" + status + "'"));
  }

  // `producers` connections, each enqueueing `per` events for each of its
  // `aggs` aggregates, 50 per transaction; payload "agg#n".
  void EnqueueMany(int producers, int aggs, int per) {
    std::vector<std::thread> ts;
    std::atomic<int> failures{0};
    std::mutex mu;
    std::string first_error;
    for (int p = 0; p < producers; ++p) {
      ts.emplace_back([&, p] {
        MYSQL* c = Open(db_);
        if (!c) {
          ++failures;
          return;
        }
        std::vector<Event> batch;
        auto flush = [&] {
          if (batch.empty()) return;
          mysql_query(c, "START TRANSACTION");
          auto r = EnqueueBatch(c, batch);
          if (!r.ok()) {
            ++failures;
            std::lock_guard<std::mutex> lock(mu);
            first_error = r.status().ToString();
          }
          mysql_query(c, r.ok() ? "COMMIT" : "ROLLBACK");
          batch.clear();
        };
        for (int n = 0; n < per; ++n) {
          for (int a = 0; a < aggs; ++a) {
            Event e;
            e.aggregate_type = "order";
            e.aggregate_id = "agg-" + std::to_string(p) + "-" + std::to_string(a);
            e.event_type = "OrderChanged";
            e.payload = e.aggregate_id + "#" + std::to_string(n);
            e.headers = {{"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}};
            e.dedup_key = e.payload;
            batch.push_back(std::move(e));
            if (batch.size() == 50) flush();
          }
        }
        flush();
        mysql_close(c);
      });
    }
    for (auto& t : ts) t.join();
    ASSERT_EQ(failures.load(), 0) << first_error;
  }

  Subprocess& StartRelay(std::vector<std::string> sets = {},
                         std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv = {OUTBOX_RELAY_BIN, "--db", url_, "--bootstrap", kafka_->bootstrap()};
    std::vector<std::string> defaults = {
        "http.listen=127.0.0.1:0", "relay.backoff_base_ms=50", "relay.backoff_max_ms=500",
        "relay.poll_max_ms=50", "relay.stats_interval_ms=200", "relay.lease_ms=15000",
        "kafka.properties.message.timeout.ms=3000", "relay.id=relay-" + std::to_string(relays_.size())};
    for (const auto& s : defaults) sets.insert(sets.begin(), s);
    for (const auto& s : sets) {
      argv.push_back("--set");
      argv.push_back(s);
    }
    const std::string log = (std::filesystem::temp_directory_path() /
                             ("outbox-relay-" + db_ + "-" + std::to_string(relays_.size()) + ".log"))
                                .string();
    relays_.push_back(std::make_unique<Subprocess>(argv, env, log));
    return *relays_.back();
  }

  // Per aggregate, the first copies arrive in order "agg#0", "agg#1", ...;
  // every event arrives; event ids as in the table. Returns duplicates.
  std::size_t CheckDelivered(const std::vector<Message>& msgs, int producers, int aggs, int per) {
    std::map<std::string, int> next;
    std::size_t dups = 0;
    std::vector<const Message*> sorted;
    for (const auto& m : msgs) sorted.push_back(&m);
    std::sort(sorted.begin(), sorted.end(), [](const Message* a, const Message* b) {
      return std::tie(a->partition, a->offset) < std::tie(b->partition, b->offset);
    });
    for (const Message* m : sorted) {
      const auto hash = m->value.find('#');
      if (hash == std::string::npos) {
        ADD_FAILURE() << m->value;
        continue;
      }
      const std::string agg = m->value.substr(0, hash);
      const int n = std::stoi(m->value.substr(hash + 1));
      EXPECT_EQ(m->key, agg);
      EXPECT_EQ(m->headers.at("outbox-dedup-key"), m->value);
      int& want = next[agg];
      if (n < want) {
        ++dups;
        continue;
      }
      EXPECT_EQ(n, want) << "aggregate " << agg << ": event " << n << " before " << want;
      want = n + 1;
    }
    EXPECT_EQ(next.size(), static_cast<std::size_t>(producers * aggs));
    for (const auto& [agg, n] : next) EXPECT_EQ(n, per) << agg;
    // Same event ids as the table.
    if (!sorted.empty()) {
      const Message* m = sorted.front();
      EXPECT_EQ(Query(admin_, "SELECT event_id FROM outbox WHERE dedup_key = '" + m->value + "'"),
                m->headers.at("outbox-event-id"));
    }
    return dups;
  }

  // The relay's HTTP port (from its log), and one metric's value (-1 if absent).
  static int HttpPort(Subprocess& relay) { return LoggedHttpPort([&] { return relay.Log(); }); }
  static double Metric(int port, const std::string& name) {
    httplib::Client cli("127.0.0.1", port);
    auto res = cli.Get("/metrics");
    return res ? PrometheusSample(res->body, name) : -1;
  }
  // Short timeouts so lease expiry happens within the test: message.timeout.ms
  // 1000 -> the lease must exceed 6000.
  static std::vector<std::string> Fast(std::vector<std::string> more = {}) {
    std::vector<std::string> s = {"kafka.properties.message.timeout.ms=1000", "relay.lease_ms=6500",
                                  "relay.batch_size=50"};
    s.insert(s.end(), more.begin(), more.end());
    return s;
  }

  std::string base_, url_, db_;
  MYSQL* admin_ = nullptr;
  std::unique_ptr<MockKafka> kafka_;
  std::vector<std::unique_ptr<Subprocess>> relays_;
};

TEST_F(RelayMariaDbTest, TwoRelaysDrainInOrderWithNoDuplicates) {
  constexpr int kProducers = 4, kAggs = 25, kPer = 10;  // 1,000 events
  EnqueueMany(kProducers, kAggs, kPer);
  Subprocess& a = StartRelay();
  Subprocess& b = StartRelay();
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == kProducers * kAggs * kPer; }, 60s))
      << a.Log() << b.Log();
  auto msgs = ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, kProducers * kAggs * kPer,
                        Scaled(30s));
  EXPECT_EQ(CheckDelivered(msgs, kProducers, kAggs, kPer), 0u) << "no fault, so no duplicates";
  EXPECT_EQ(Query(admin_, "SELECT count(*) FROM outbox WHERE attempts <> 1"), "0");
  a.Signal(SIGTERM);
  b.Signal(SIGTERM);
  EXPECT_EQ(a.Wait(Scaled(30s)), 0) << a.Log();
  EXPECT_EQ(b.Wait(Scaled(30s)), 0) << b.Log();
}

// Crash matrix, publish acked -> mark not recorded: the relay dies (as by
// SIGKILL) between the broker's ack and the mark; the lease expires and the
// next relay publishes those rows again. Nothing lost, order kept; the copies
// are the inbox's to absorb.
TEST_F(RelayMariaDbTest, KilledBetweenAckAndMarkRepublishesAndLosesNothing) {
  OUTBOX_REQUIRE_FAULT_POINTS();
  constexpr int kProducers = 2, kAggs = 10, kPer = 10;
  EnqueueMany(kProducers, kAggs, kPer);
  Subprocess& a = StartRelay({"relay.lease_ms=9000"},
                             {{"OUTBOX_FAULTS", "Relay::AfterPublishBeforeMarkSent=crash@1"}});
  EXPECT_EQ(a.Wait(Scaled(30s)), 70) << a.Log();
  EXPECT_GT(CountStatus("PROCESSING"), 0) << "the killed relay's rows are leased, not SENT";
  Subprocess& b = StartRelay({"relay.lease_ms=9000"});
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == kProducers * kAggs * kPer; }, 60s))
      << b.Log();
  auto msgs = ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, kProducers * kAggs * kPer,
                        Scaled(30s));
  EXPECT_GT(CheckDelivered(msgs, kProducers, kAggs, kPer), 0u) << "the killed batch came again";
  b.Signal(SIGTERM);
  EXPECT_EQ(b.Wait(Scaled(30s)), 0) << b.Log();
}

// Crash matrix, claimed -> nothing published: the lease expires, another relay
// publishes; nothing reached the broker twice; the claim's attempt counted.
TEST_F(RelayMariaDbTest, KilledAfterClaimBeforePublishTheLeaseExpiresAndAnotherRelayPublishes) {
  OUTBOX_REQUIRE_FAULT_POINTS();
  constexpr int kProducers = 2, kAggs = 10, kPer = 10;
  EnqueueMany(kProducers, kAggs, kPer);
  Subprocess& a = StartRelay(Fast(), {{"OUTBOX_FAULTS", "Relay::AfterClaim=crash@1"}});
  EXPECT_EQ(a.Wait(Scaled(30s)), 70) << a.Log();
  const auto leased = CountStatus("PROCESSING");
  EXPECT_GT(leased, 0) << "the dead relay's claim is still leased";
  Subprocess& b = StartRelay(Fast());
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == kProducers * kAggs * kPer; }, 60s))
      << b.Log();
  auto msgs = ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, kProducers * kAggs * kPer,
                        Scaled(30s));
  EXPECT_EQ(CheckDelivered(msgs, kProducers, kAggs, kPer), 0u) << "nothing was published before the crash";
  EXPECT_EQ(std::stoll(Query(admin_, "SELECT count(*) FROM outbox WHERE attempts = 2")), leased);
}

// Crash matrix, the mark fails: the rows stay leased, are published again after
// the lease, and end SENT (never FAILED).
TEST_F(RelayMariaDbTest, MarkSentFailsTheRowsArePublishedAgainAfterTheLeaseAndEndSent) {
  OUTBOX_REQUIRE_FAULT_POINTS();
  constexpr int kProducers = 2, kAggs = 10, kPer = 10;
  EnqueueMany(kProducers, kAggs, kPer);
  Subprocess& a = StartRelay(Fast(), {{"OUTBOX_FAULTS", "Relay::MarkSent=error@1"}});
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == kProducers * kAggs * kPer; }, 60s))
      << a.Log();
  EXPECT_EQ(CountStatus("FAILED"), 0);
  auto msgs = ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, kProducers * kAggs * kPer,
                        Scaled(30s));
  EXPECT_GT(CheckDelivered(msgs, kProducers, kAggs, kPer), 0u) << "the unmarked batch came again";
  EXPECT_NE(a.Log().find("could not record transition"), std::string::npos) << a.Log();
}

// A relay stalls after publishing for longer than its lease; another takes the
// rows over; the first one's late marks are refused (fenced) and counted.
TEST_F(RelayMariaDbTest, ALateMarkAfterTheLeaseExpiredIsFenced) {
  OUTBOX_REQUIRE_FAULT_POINTS();
  EnqueueMany(1, 5, 4);  // 20 events: one batch
  Subprocess& a = StartRelay(Fast({"relay.workers=1", "relay.id=relay-A"}),
                             {{"OUTBOX_FAULTS", "Relay::AfterPublishBeforeMarkSent=delay:9000@1"}});
  const int port_a = HttpPort(a);
  ASSERT_TRUE(WaitFor([&] { return CountStatus("PROCESSING") == 20; }, 30s)) << a.Log();
  Subprocess& b = StartRelay(Fast({"relay.id=relay-B"}));
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 20; }, 60s)) << b.Log();
  EXPECT_EQ(Query(admin_, "SELECT count(*) FROM outbox WHERE lease_owner = 'relay-B'"), "20");
  EXPECT_TRUE(WaitFor([&] { return Metric(port_a, "outbox_relay_transitions_fenced_total") == 20; }, 30s))
      << a.Log();
  EXPECT_EQ(Query(admin_, "SELECT count(*) FROM outbox WHERE lease_owner = 'relay-B'"), "20")
      << "the late marks changed nothing";
}

// The whole flow on MariaDB: outbox, relay, and a consumer whose inbox and
// effects live in MariaDB. The consumer dies after committing its effects and
// before committing its offsets (crash matrix, consumer row): the batch comes
// again and is absorbed; every effect once, in order per aggregate.
TEST_F(RelayMariaDbTest, TheWholeFlowOnMariaDbAppliesEachEffectOnceAcrossAConsumerCrash) {
  OUTBOX_REQUIRE_FAULT_POINTS();
  Query(admin_, "CREATE TABLE effects (id BIGINT AUTO_INCREMENT PRIMARY KEY, k VARCHAR(255), "
                "payload VARCHAR(255))");
  constexpr int kProducers = 2, kAggs = 10, kPer = 10;  // 200 events
  EnqueueMany(kProducers, kAggs, kPer);
  Subprocess& relay = StartRelay();
  const std::vector<std::string> argv = {OUTBOX_INBOX_CONSUMER_BIN, "--db", url_, "--bootstrap",
                                         kafka_->bootstrap(), "--schema", "unused", "--topic", kTopic,
                                         "--group", "g-" + db_, "--batch", "20"};
  const auto log = [&](const char* n) {
    return (std::filesystem::temp_directory_path() / ("consumer-" + db_ + n)).string();
  };
  {
    Subprocess crashing(argv, {{"OUTBOX_FAULTS", "Inbox::AfterCommitBeforeOffsetCommit=crash@2"}},
                        log("-1"));
    EXPECT_EQ(crashing.Wait(Scaled(60s)), 70) << crashing.Log();
  }
  Subprocess consumer(argv, {}, log("-2"));
  ASSERT_TRUE(WaitFor([&] {
    return Query(admin_, "SELECT count(DISTINCT payload) FROM effects") == "200";
  }, 60s)) << consumer.Log() << relay.Log();
  EXPECT_EQ(Query(admin_, "SELECT count(*) FROM effects"), "200") << "an effect applied twice";
  EXPECT_EQ(Query(admin_, "SELECT count(*) FROM (SELECT CAST(SUBSTRING_INDEX(payload, '#', -1) AS "
                          "UNSIGNED) AS n, LAG(CAST(SUBSTRING_INDEX(payload, '#', -1) AS UNSIGNED)) "
                          "OVER (PARTITION BY k ORDER BY id) AS prev FROM effects) s "
                          "WHERE prev IS NOT NULL AND n <> prev + 1"),
            "0") << "effects out of order within an aggregate";
  EXPECT_EQ(Query(admin_, "SELECT count(*) FROM inbox_stamps"), "200");
  EXPECT_TRUE(WaitFor([&] {
    return Query(admin_, "SELECT coalesce(sum(duplicates), 0) FROM inbox_stamps") != "0";
  }, 30s)) << "the crashed consumer's committed batch came again and was absorbed";
  consumer.Signal(SIGTERM);
  EXPECT_EQ(consumer.Wait(Scaled(30s)), 0) << consumer.Log();
  // outboxctl reads the MariaDB inbox too (--inbox-db mysql://...).
  const std::string ctl = std::string(OUTBOX_OUTBOXCTL_BIN) + " --db '" + url_ + "' ";
  auto trace = RunCommand(ctl + "trace agg-0-0#0 --inbox-db '" + url_ + "' --json");
  EXPECT_EQ(trace.code, 0) << trace.out;
  EXPECT_NE(trace.out.find("\"inbox\":[{"), std::string::npos) << trace.out;
  EXPECT_NE(trace.out.find("\"topic\":\"" + std::string(kTopic) + "\""), std::string::npos) << trace.out;
  auto status = RunCommand(ctl + "inbox status --inbox-db '" + url_ + "' --json");
  EXPECT_EQ(status.code, 0) << status.out;
  EXPECT_NE(status.out.find("\"stamps\":200"), std::string::npos) << status.out;
  auto bad = RunCommand(ctl + "inbox status --inbox-db 'mysql://root@h:99999/x'");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("--inbox-db"), std::string::npos) << bad.out;
}

TEST_F(RelayMariaDbTest, BrokerDownThenUpLosesNothing) {
  constexpr int kProducers = 2, kAggs = 10, kPer = 5;
  Subprocess& a = StartRelay();
  kafka_->Control("broker-down -1");
  EnqueueMany(kProducers, kAggs, kPer);
  std::this_thread::sleep_for(2s);
  EXPECT_EQ(CountStatus("SENT"), 0);
  kafka_->Control("broker-up -1");
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == kProducers * kAggs * kPer; }, 60s))
      << a.Log();
  EXPECT_EQ(CountStatus("FAILED"), 0);
  auto msgs = ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, kProducers * kAggs * kPer,
                        Scaled(30s));
  CheckDelivered(msgs, kProducers, kAggs, kPer);
}

TEST_F(RelayMariaDbTest, BadUrlOrCdcOnMariaDbExitsTwoBeforeTouchingAnything) {
  const std::string relay = std::string(OUTBOX_RELAY_BIN) + " --bootstrap 127.0.0.1:1 --db ";
  auto bad = RunCommand(relay + "'mysql://root@127.0.0.1:notaport/x'");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("database.url"), std::string::npos) << bad.out;
  auto cdc = RunCommand(relay + "'" + url_ + "' --set relay.source=cdc");
  EXPECT_EQ(cdc.code, 2) << cdc.out;
  EXPECT_NE(cdc.out.find("relay.source"), std::string::npos) << cdc.out;
  auto secret = RunCommand(relay + "'mysql://root:hunter2@127.0.0.1:3306/x' --print-config");
  EXPECT_EQ(secret.code, 0) << secret.out;
  EXPECT_EQ(secret.out.find("hunter2"), std::string::npos) << secret.out;
  EXPECT_NE(secret.out.find("mysql://root:***@127.0.0.1:3306/x"), std::string::npos) << secret.out;
}

// migrate --check on MariaDB: 0 as migrated; 4 naming the table an index was
// dropped from and the procedure replaced by hand; the scratch database it
// builds the reference in is gone afterwards.
TEST_F(RelayMariaDbTest, OutboxctlMigrateCheckReportsDriftOnMariaDb) {
  const std::string ctl = std::string(OUTBOX_OUTBOXCTL_BIN) + " --db '" + url_ + "' ";
  CommandRun clean = RunCommand(ctl + "migrate --check");
  EXPECT_EQ(clean.code, 0) << clean.out;
  EXPECT_EQ(clean.out, "database matches migrations 1-1\n");
  Query(admin_, "ALTER TABLE outbox DROP INDEX outbox_aggregate_state");
  Query(admin_, "CREATE OR REPLACE PROCEDURE outbox_enqueue(IN a INT) BEGIN SELECT a; END");
  CommandRun drift = RunCommand(ctl + "migrate --check");
  EXPECT_EQ(drift.code, 4) << drift.out;
  EXPECT_NE(drift.out.find("drift: table outbox: differs from what the migrations install\n"),
            std::string::npos)
      << drift.out;
  EXPECT_NE(drift.out.find("drift: procedure outbox_enqueue: differs"), std::string::npos)
      << drift.out;
  EXPECT_EQ(Query(admin_, "SELECT count(*) FROM information_schema.schemata WHERE schema_name "
                          "LIKE 'outbox\\_check\\_%'"),
            "0");
}

TEST_F(RelayMariaDbTest, OutboxctlStatusListTraceReplayAndSkipWorkOnMariaDb) {
  const std::string ctl = std::string(OUTBOX_OUTBOXCTL_BIN) + " --db '" + url_ + "' ";
  CommandRun migrated = RunCommand(ctl + "migrate");  // the fixture migrated already
  EXPECT_EQ(migrated.code, 0) << migrated.out;
  EXPECT_EQ(migrated.out, "database is up to date: no migration to apply\n");
  EnqueueMany(1, 2, 2);  // agg-0-0#0, agg-0-1#0, agg-0-0#1, agg-0-1#1
  // Make agg-0-0#0 FAILED, as a fatal publish error would.
  Query(admin_, "UPDATE outbox SET status = 'FAILED', last_error = 'fatal' WHERE dedup_key = 'agg-0-0#0'");
  auto status = RunCommand(ctl + "status --json");
  EXPECT_EQ(status.code, 0) << status.out;
  EXPECT_NE(status.out.find("\"failed\":1"), std::string::npos) << status.out;
  auto list = RunCommand(ctl + "list --state failed --json");
  EXPECT_EQ(list.code, 0) << list.out;
  EXPECT_NE(list.out.find("agg-0-0"), std::string::npos) << list.out;
  auto trace = RunCommand(ctl + "trace agg-0-0#0 --json");
  EXPECT_EQ(trace.code, 0) << trace.out;
  EXPECT_NE(trace.out.find("FAILED"), std::string::npos) << trace.out;
  auto replay = RunCommand(ctl + "replay --failed --json");
  EXPECT_EQ(replay.code, 0) << replay.out;
  EXPECT_EQ(CountStatus("FAILED"), 0);
  const std::string id = Query(admin_, "SELECT event_id FROM outbox WHERE dedup_key = 'agg-0-1#0'");
  auto skip = RunCommand(ctl + "skip --event-id " + id + " --reason test --json");
  EXPECT_EQ(skip.code, 0) << skip.out;
  EXPECT_EQ(CountStatus("SKIPPED"), 1);
  auto bad = RunCommand(std::string(OUTBOX_OUTBOXCTL_BIN) + " --db 'mysql://root@h:99999/x' status");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("port"), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace outbox::testing
