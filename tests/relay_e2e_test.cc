// outbox-relay as a real process against the real PostgreSQL and a private
// outbox-mock-kafka: end to end, broker outage, fatal errors, several relays,
// graceful stop.
#include "blackhole_proxy.h"
#include "notify_socket.h"
#include "outbox/version.h"
#include "relay_fixture.h"

namespace outbox::testing {
namespace {

TEST_F(RelayE2ETest, DeliversEverythingInOrderWithKeysAndHeaders) {
  constexpr int kProducers = 4, kAggs = 25, kPer = 20;  // 2,000 events
  EnqueueMany(kProducers, kAggs, kPer);
  Subprocess& relay = StartRelay();
  const int port = HttpPort(relay);
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == kProducers * kAggs * kPer; }, 60s))
      << relay.Log();
  auto msgs = ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, kProducers * kAggs * kPer, Scaled(30s));
  EXPECT_EQ(CheckDelivered(msgs, kProducers, kAggs, kPer), 0u) << "no fault, so no duplicates";
  int status = 0;
  const std::string ready = WaitReady(port, &status);
  EXPECT_EQ(status, 200) << ready;
  const std::string metrics = Get(port, "/metrics");
  EXPECT_EQ(Metric(metrics, "outbox_relay_events_published_total"), kProducers * kAggs * kPer);
  EXPECT_GT(Metric(metrics, "outbox_relay_commit_to_ack_seconds_count"), 0);
  EXPECT_GE(Metric(metrics, "outbox_relay_claim_batch_rows_count"), 1);
  EXPECT_NE(metrics.find("outbox_build_info{version=\"" OUTBOX_VERSION_STRING "\"} 1"), std::string::npos)
      << metrics;
  EXPECT_TRUE(WaitFor([&] { return Metric(Get(port, "/metrics"), "outbox_rows{schema=\"" + schema_ + "\",state=\"pending\"}") == 0; }, 5s));
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0) << relay.Log();
}

// relay.envelope = cloudevents (issue 43): binary-mode CloudEvents 1.0 as
// Kafka headers ce_*, beside the outbox's own; the payload unchanged. A bad
// envelope exits 2 naming the key.
TEST_F(RelayE2ETest, TheCloudEventsEnvelopeAddsCeHeadersAndLeavesThePayload) {
  ASSERT_TRUE(EnqueueOne("ce-1", "{\"n\":1}"));
  Subprocess& relay = StartRelay({"relay.envelope=cloudevents"});
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 1; }, Scaled(30s))) << relay.Log();
  auto msgs = ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, 1, Scaled(30s));
  ASSERT_EQ(msgs.size(), 1u);
  const Message& m = msgs[0];
  EXPECT_EQ(m.value, "{\"n\":1}");
  EXPECT_EQ(m.headers.at("ce_id"), m.headers.at("outbox-event-id"));
  EXPECT_EQ(m.headers.at("ce_source"), "/outbox/" + schema_);
  EXPECT_EQ(m.headers.at("ce_type"), "OrderChanged");
  EXPECT_EQ(m.headers.at("ce_specversion"), "1.0");
  EXPECT_EQ(m.headers.at("ce_subject"), "ce-1");
  EXPECT_EQ(m.headers.at("ce_time").substr(0, 26), m.headers.at("outbox-created-at").substr(0, 26));
  Subprocess& bad = StartRelay({"relay.envelope=cloud"});
  EXPECT_EQ(bad.Wait(Scaled(20s)), 2);
  EXPECT_NE(bad.Log().find("relay.envelope"), std::string::npos) << bad.Log();
}

// Under systemd (Type=notify, packaging/systemd/outbox-relay.service): the
// relay says READY=1 once it runs, pings the watchdog while its threads go
// round, reports /readyz in STATUS=, and says STOPPING=1 on SIGTERM. Here the
// test is systemd: a datagram socket in NOTIFY_SOCKET.
TEST_F(RelayE2ETest, UnderSystemdItNotifiesReadyPingsTheWatchdogAndSaysStopping) {
  NotifySocket systemd(schema_);
  Subprocess& relay = StartRelay({}, {{"NOTIFY_SOCKET", systemd.path()}, {"WATCHDOG_USEC", "1000000"}});
  EXPECT_TRUE(WaitFor([&] { return systemd.Received("READY=1"); }, 20s)) << systemd.all() << relay.Log();
  EXPECT_TRUE(WaitFor([&] { return systemd.Received("STATUS=ready: database and broker reachable"); }, 20s))
      << systemd.all();
  systemd.Clear();
  EXPECT_TRUE(WaitFor([&] { return systemd.Received("WATCHDOG=1"); }, 5s)) << systemd.all() << relay.Log();
  relay.Signal(SIGTERM);
  EXPECT_TRUE(WaitFor([&] { return systemd.Received("STOPPING=1"); }, 10s)) << systemd.all();
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0) << relay.Log();
}

// librdkafka's errors reach the relay's log with their reason text, in the
// configured format (JSON here): the first thing an operator needs when TLS,
// SASL or the address is wrong.
TEST_F(RelayE2ETest, KafkaClientErrorsAreLoggedWithTheirReasonInJson) {
  Subprocess& relay = StartRelay({"kafka.properties.bootstrap.servers=127.0.0.1:1", "log.format=json"});
  ASSERT_TRUE(WaitFor([&] { return relay.Log().find("kafka client error") != std::string::npos; }, 20s))
      << relay.Log();
  const std::string log = relay.Log();
  const auto at = log.rfind('\n', log.find("kafka client error"));
  const std::string line = log.substr(at == std::string::npos ? 0 : at + 1,
                                      log.find('\n', log.find("kafka client error")) - (at + 1));
  EXPECT_EQ(line.front(), '{') << line;
  EXPECT_NE(line.find("\"code\":\"_"), std::string::npos) << line;
  EXPECT_NE(line.find("127.0.0.1:1"), std::string::npos) << "the reason names the broker: " << line;
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0) << relay.Log();
}

// A relay configured for SASL over TLS, pointed at a plain-text listener (the
// classic first-day mistake), says so with librdkafka's reason, is not ready,
// moves nothing, and never prints the SASL password (from the environment).
TEST_F(RelayE2ETest, ATlsOrSaslMismatchIsLoggedWithItsReasonAndThePasswordNeverShows) {
  ASSERT_TRUE(EnqueueOne("tls-agg", "tls-agg#0"));
  const std::string password = "pw-" + RandomSuffix();
  Subprocess& relay = StartRelay({"kafka.properties.security.protocol=SASL_SSL",
                                  "kafka.properties.sasl.mechanisms=PLAIN",
                                  "kafka.properties.sasl.username=relay", "log.level=debug"},
                                 {{"OUTBOX_KAFKA_PROPERTIES_SASL_PASSWORD", password}});
  const int port = HttpPort(relay);
  ASSERT_TRUE(WaitForLog(relay, "SSL handshake failed")) << relay.Log();
  // Not ready once librdkafka reports every broker down (after each one failed).
  EXPECT_TRUE(WaitFor(
      [&] {
        int status = 0;
        Get(port, "/readyz", &status);
        return status == 503;
      },
      15s))
      << relay.Log();
  EXPECT_EQ(CountStatus("SENT"), 0);
  EXPECT_EQ(CountStatus("FAILED"), 0);
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0) << relay.Log();
  EXPECT_EQ(relay.Log().find(password), std::string::npos) << "the SASL password was printed";
  CommandRun printed = RunCommand("OUTBOX_KAFKA_PROPERTIES_SASL_PASSWORD=" + password + " " +
                                  OUTBOX_RELAY_BIN + " --db x --bootstrap y --print-config");
  EXPECT_EQ(printed.code, 0) << printed.out;
  EXPECT_NE(printed.out.find("sasl.password"), std::string::npos) << printed.out;
  EXPECT_EQ(printed.out.find(password), std::string::npos) << printed.out;
}

// A role without UPDATE on the outbox table: a configuration error, not an
// outage — its own log line naming the table and the privilege, the reason on
// /readyz, a metric, the usual backoff (no hot loop). Once an operator grants
// the privilege the rows go, with no restart.
TEST_F(RelayE2ETest, AMissingPrivilegeIsReportedAsSuchAndRetriedUntilGranted) {
  EnqueueMany(1, 2, 5);  // 10 events
  const std::string role = "r_" + schema_;
  Exec(admin_.get(), "CREATE ROLE " + role + " LOGIN");
  Exec(admin_.get(), "GRANT USAGE ON SCHEMA " + schema_ + " TO " + role);
  Exec(admin_.get(), "GRANT SELECT ON ALL TABLES IN SCHEMA " + schema_ + " TO " + role);
  const std::string admin_url = url_;
  const auto at = url_.find("postgres@");
  ASSERT_NE(at, std::string::npos) << url_;
  url_ = url_.substr(0, at) + role + "@" + url_.substr(at + 9);  // the relay's role (trust auth)
  Subprocess& relay = StartRelay({"relay.db_retry_max_ms=1000"});
  url_ = admin_url;
  const int port = HttpPort(relay);
  EXPECT_TRUE(WaitForLog(relay, "database refused the relay's role", Scaled(10s))) << relay.Log();
  EXPECT_NE(relay.Log().find("permission denied for table outbox"), std::string::npos) << relay.Log();
  EXPECT_NE(relay.Log().find("`claim` needs SELECT and UPDATE on that table"), std::string::npos)
      << relay.Log();
  EXPECT_EQ(relay.Log().find("database unavailable"), std::string::npos) << "not an outage";
  int status = 0;
  std::string ready;
  EXPECT_TRUE(WaitFor([&] {
    ready = Get(port, "/readyz", &status);
    return status == 503 && ready.find("permission denied for table outbox") != std::string::npos;
  }, Scaled(10s))) << status << " " << ready;
  EXPECT_NE(ready.find("refused the relay's role"), std::string::npos) << ready;
  // Backoff, not a hot loop: over 3 s, at most a few tries per worker.
  const double before = Metric(Get(port, "/metrics"), "outbox_relay_db_permission_denied_total");
  EXPECT_GT(before, 0);
  std::this_thread::sleep_for(3s);
  const std::string metrics = Get(port, "/metrics");
  EXPECT_LT(Metric(metrics, "outbox_relay_db_permission_denied_total") - before, 40) << metrics;
  EXPECT_GE(Metric(metrics, "outbox_relay_db_errors_total"),
            Metric(metrics, "outbox_relay_db_permission_denied_total"));
  EXPECT_EQ(CountStatus("SENT"), 0);

  // Half the fix: the next refusal (the claim's lease token) is logged anew.
  Exec(admin_.get(), "GRANT UPDATE, DELETE ON ALL TABLES IN SCHEMA " + schema_ + " TO " + role);
  EXPECT_TRUE(WaitForLog(relay, "permission denied for sequence lease_token_seq", Scaled(10s))) << relay.Log();
  EXPECT_NE(relay.Log().find("`claim` needs USAGE on that sequence"), std::string::npos) << relay.Log();
  Exec(admin_.get(), "GRANT USAGE ON ALL SEQUENCES IN SCHEMA " + schema_ + " TO " + role);
  EXPECT_TRUE(WaitFor([&] { return CountStatus("SENT") == 10; }, Scaled(20s))) << relay.Log();
  EXPECT_TRUE(WaitFor([&] { Get(port, "/readyz", &status); return status == 200; }, Scaled(10s)));
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0) << relay.Log();
  relays_.clear();
  Exec(admin_.get(), "DROP OWNED BY " + role);
  Exec(admin_.get(), "DROP ROLE " + role);
}

TEST_F(RelayE2ETest, BrokerDownThenUpLosesNothingAndRetriesShowInMetrics) {
  constexpr int kProducers = 2, kAggs = 10, kPer = 10;  // 200 events
  ASSERT_EQ(kafka_->Control("broker-down -1"), "ok");
  Subprocess& relay = StartRelay({"kafka.properties.message.timeout.ms=1000", "relay.lease_ms=10000",
                                  "relay.max_attempts=1000"});
  const int port = HttpPort(relay);
  EnqueueMany(kProducers, kAggs, kPer);
  // Publishing fails and rows are rescheduled with backoff while the broker is down.
  ASSERT_TRUE(WaitFor([&] {
    return Metric(Get(port, "/metrics"), "outbox_relay_rows_rescheduled_total") > 0;
  }, 30s)) << relay.Log();
  int status = 0;
  std::string why;
  EXPECT_TRUE(WaitFor([&] { why = Get(port, "/readyz", &status); return status == 503; }, 15s))
      << "readyz should report the broker outage";
  EXPECT_EQ(why, "not ready: broker unreachable\n") << "the part that is down, nothing stale";
  EXPECT_EQ(CountStatus("SENT"), 0);
  EXPECT_EQ(CountStatus("FAILED"), 0) << "an outage must not fail rows";
  ASSERT_EQ(kafka_->Control("broker-up -1"), "ok");
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == kProducers * kAggs * kPer; }, 90s))
      << relay.Log();
  auto msgs = ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, kProducers * kAggs * kPer, Scaled(30s));
  CheckDelivered(msgs, kProducers, kAggs, kPer);
  const std::string m = Get(port, "/metrics");
  EXPECT_GT(Metric(m, "outbox_relay_publish_failures_total{class=\"retriable\"}"), 0);
  EXPECT_TRUE(WaitFor([&] { Get(port, "/readyz", &status); return status == 200; }, 15s));
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0);
}

// Every broker black-holed (its answers never come; librdkafka keeps its
// connections up): from the first batch the relay classifies as an outage,
// /readyz answers 503 naming the broker and the error, until a batch is acked
// (issue 41: it stayed 200 for the whole minute).
TEST_F(RelayE2ETest, ABlackHoledBrokerIsReportedOnReadyzUntilABatchIsAcked) {
  Subprocess& relay = StartRelay({"kafka.properties.message.timeout.ms=1500", "relay.max_attempts=1000"});
  const int port = HttpPort(relay);
  EnqueueMany(1, 2, 2);
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 4; }, Scaled(30s))) << relay.Log();
  int status = 0;
  const std::string ready = WaitReady(port, &status);
  ASSERT_EQ(status, 200) << ready << relay.Log();
  ASSERT_EQ(kafka_->Control("rtt -1 600000"), "ok");  // every answer ten minutes late
  EnqueueMany(1, 2, 6, 2);  // the same aggregates, events 2..5
  std::string why;
  EXPECT_TRUE(WaitFor([&] { why = Get(port, "/readyz", &status); return status == 503; }, Scaled(20s)))
      << relay.Log();
  EXPECT_NE(why.find("broker unreachable: no acknowledgement for a whole batch"), std::string::npos) << why;
  EXPECT_EQ(CountStatus("FAILED"), 0) << "an outage fails nothing";
  ASSERT_EQ(kafka_->Control("rtt -1 0"), "ok");
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 12; }, Scaled(60s))) << relay.Log();
  EXPECT_TRUE(WaitFor([&] { Get(port, "/readyz", &status); return status == 200; }, Scaled(15s)));
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0) << relay.Log();
}

// A database path that stops forwarding without closing (a proxy, a load
// balancer, a lost NAT entry): within the statement timeout plus the cancel's
// 5-second grace, /readyz answers 503 naming the database, and the relay does
// not hang on the cancel request (which the same path swallows); once the path
// heals it reconnects and delivers everything (issue 41: /readyz stayed 200 for
// two minutes, nothing published, until the path healed).
TEST_F(RelayE2ETest, AHalfOpenDatabasePathIsReportedOnReadyzAndRecoveredFrom) {
  const std::string pg_port = EnvOr("OUTBOX_PG_PORT");
  ASSERT_FALSE(pg_port.empty());
  BlackholeProxy proxy("127.0.0.1", std::stoi(pg_port));
  const std::string direct = url_;
  const auto at = url_.find(":" + pg_port + "/");
  ASSERT_NE(at, std::string::npos) << url_;
  url_ = direct.substr(0, at) + ":" + std::to_string(proxy.port()) + direct.substr(at + pg_port.size() + 1);
  Subprocess& relay = StartRelay({"database.statement_timeout_ms=2000", "database.connect_timeout_s=2"});
  url_ = direct;
  const int port = HttpPort(relay);
  EnqueueMany(1, 2, 2);
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 4; }, Scaled(30s))) << relay.Log();
  int status = 0;
  const std::string ready = WaitReady(port, &status);
  ASSERT_EQ(status, 200) << ready << relay.Log();
  proxy.Darken();
  const auto dark_at = std::chrono::steady_clock::now();
  std::string why;
  EXPECT_TRUE(WaitFor([&] { why = Get(port, "/readyz", &status); return status == 503; }, Scaled(25s)))
      << relay.Log();
  const auto noticed = std::chrono::steady_clock::now() - dark_at;
  EXPECT_NE(why.find("database unreachable"), std::string::npos) << why;
  // 2 s timeout + 5 s grace + a poll round; the claim may start just before the dark.
  EXPECT_LE(noticed, Scaled(15s)) << "noticed after "
      << std::chrono::duration_cast<std::chrono::milliseconds>(noticed).count() << " ms";
  EnqueueMany(1, 2, 6, 2);  // the same aggregates, events 2..5
  std::this_thread::sleep_for(3s);
  EXPECT_EQ(CountStatus("SENT"), 4) << "nothing reaches the database while the path is dark";
  proxy.Heal();
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 12; }, Scaled(60s))) << relay.Log();
  EXPECT_TRUE(WaitFor([&] { Get(port, "/readyz", &status); return status == 200; }, Scaled(15s)));
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0) << relay.Log();
}

// Started without --migrate against a schema the outbox was never migrated
// into: /readyz names the missing schema and how to migrate (it said
// "database unreachable"); once migrated, the relay is ready without a restart.
TEST_F(RelayE2ETest, WithoutTheOutboxSchemaReadyzSaysHowToMigrate) {
  const std::string other = schema_ + "_m";
  Subprocess& relay = StartRelay({"database.schema=" + other});
  const int port = HttpPort(relay);
  int status = 0;
  std::string why;
  EXPECT_TRUE(WaitFor([&] { why = Get(port, "/readyz", &status); return why.find("migrate") != std::string::npos; },
                      Scaled(15s)))
      << why << relay.Log();
  EXPECT_EQ(status, 503);
  EXPECT_NE(why.find("the outbox schema is missing or not migrated"), std::string::npos) << why;
  EXPECT_NE(why.find(other), std::string::npos) << why;
  PostgresStoreOptions o;
  o.conninfo = url_;
  o.schema = other;
  auto store = OpenPostgresStore(o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ASSERT_TRUE((*store)->Migrate().ok());
  EXPECT_TRUE(WaitFor([&] { Get(port, "/readyz", &status); return status == 200; }, Scaled(20s))) << relay.Log();
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0) << relay.Log();
  Exec(admin_.get(), "DROP SCHEMA " + other + " CASCADE");
}

TEST_F(RelayE2ETest, FatalPublishErrorFailsThatRowOnlyAndHoldsItsAggregate) {
  // A payload larger than the producer's message.max.bytes can never be sent.
  Exec(admin_.get(), "BEGIN");
  EnqueueOptions eo;
  eo.schema = schema_;
  std::vector<Event> evs;
  auto ev = OrderEvent;
  evs.push_back(ev("big", std::string(20000, 'x')));
  evs.push_back(ev("big", "after-the-big-one"));
  for (int i = 0; i < 20; ++i) evs.push_back(ev("small-" + std::to_string(i), "fine#0"));
  ASSERT_TRUE(EnqueueBatch(admin_.get(), evs, eo).ok());
  Exec(admin_.get(), "COMMIT");
  Subprocess& relay = StartRelay({"kafka.properties.message.max.bytes=10000"});
  const int port = HttpPort(relay);
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 20 && CountStatus("FAILED") == 1; }, 30s))
      << relay.Log();
  std::string err = Exec(admin_.get(), "SELECT last_error FROM " + schema_ +
                                           ".outbox WHERE status = 'FAILED'");
  EXPECT_NE(err.find("MSG_SIZE_TOO_LARGE"), std::string::npos) << err;
  // The next event of the same aggregate is held (default on_failed = hold).
  EXPECT_EQ(Exec(admin_.get(), "SELECT status FROM " + schema_ +
                                   ".outbox WHERE convert_from(payload, 'UTF8') = 'after-the-big-one'"),
            "PENDING");
  EXPECT_TRUE(WaitFor([&] {
    const std::string m = Get(port, "/metrics");
    return Metric(m, "outbox_held_aggregates{schema=\"" + schema_ + "\"}") == 1 &&
           Metric(m, "outbox_relay_rows_failed_total{reason=\"fatal\"}") == 1;
  }, 10s)) << Get(port, "/metrics");
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0);
}

TEST_F(RelayE2ETest, ThreeRelaysAtOnceDeliverEachEventOnce) {
  constexpr int kProducers = 3, kAggs = 30, kPer = 30;  // 2,700 events
  for (int i = 0; i < 3; ++i) StartRelay({"relay.batch_size=50"});
  // Every relay ready (database and broker reached) before the events come:
  // otherwise the first two can drain all of them while the third is still
  // starting (seen under ASan on a loaded machine), and "all three took part"
  // below would test start-up speed, not the claim.
  for (auto& r : relays_) {
    const int port = HttpPort(*r);
    ASSERT_TRUE(WaitFor([&] {
      int status = 0;
      Get(port, "/readyz", &status);
      return status == 200;
    }, Scaled(20s))) << r->Log();
  }
  EnqueueMany(kProducers, kAggs, kPer);
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == kProducers * kAggs * kPer; }, 90s));
  auto msgs = ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, kProducers * kAggs * kPer, Scaled(30s));
  EXPECT_EQ(CheckDelivered(msgs, kProducers, kAggs, kPer), 0u)
      << "a duplicate without any fault means two live claims held one event";
  EXPECT_EQ(msgs.size(), static_cast<std::size_t>(kProducers * kAggs * kPer));
  // All three took part (each row keeps the id of the relay that sent it).
  EXPECT_EQ(Exec(admin_.get(), "SELECT count(DISTINCT lease_owner) FROM " + schema_ + ".outbox"),
            "3");
  for (auto& r : relays_) {
    r->Signal(SIGTERM);
    EXPECT_EQ(r->Wait(Scaled(30s)), 0) << r->Log();
  }
}

TEST_F(RelayE2ETest, SigtermDuringABusyRunExitsZeroAndLeavesNoLiveLease) {
  EnqueueMany(4, 50, 50);  // 10,000 events
  Subprocess& relay = StartRelay({"relay.batch_size=200"});
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") > 500; }, 60s)) << relay.Log();
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(40s)), 0) << relay.Log();
  EXPECT_EQ(Exec(admin_.get(), "SELECT count(*) FROM " + schema_ +
                                   ".outbox WHERE status = 'PROCESSING' AND available_at > now()"),
            "0");
  // A second relay finishes the job.
  Subprocess& second = StartRelay();
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 10000; }, 90s)) << second.Log();
  second.Signal(SIGTERM);
  EXPECT_EQ(second.Wait(Scaled(30s)), 0);
}

TEST_F(RelayE2ETest, NotifyWakesAnIdleRelayLongBeforeItsNextPoll) {
  // Idle polling every 5-10 s; the producer opts in to NOTIFY.
  Subprocess& relay = StartRelay({"relay.poll_min_ms=5000", "relay.poll_max_ms=10000"});
  HttpPort(relay);
  std::this_thread::sleep_for(1s);  // the relay is idle now, sleeping its poll interval
  Exec(admin_.get(), "SET outbox.notify = on");
  ASSERT_TRUE(EnqueueOne("wake", "wake#0"));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 1; }, 10s)) << relay.Log();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, Scaled(3000ms))
      << "woken by the notification, not by the 5 s poll";
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0);
}

TEST_F(RelayE2ETest, BadConfigurationExitsTwoNamingTheKey) {
  Subprocess& relay = StartRelay({"relay.batch_size=0"});
  EXPECT_EQ(relay.Wait(Scaled(10s)), 2);
  EXPECT_NE(relay.Log().find("relay.batch_size"), std::string::npos) << relay.Log();
  // A directory as --config is not an empty file: exit 2, no start on defaults.
  const std::string dir = std::filesystem::temp_directory_path().string();
  CommandRun r = RunCommand(std::string(OUTBOX_RELAY_BIN) + " --config " + dir + " --db '" + url_ +
                            "' --bootstrap " + kafka_->bootstrap() + " 2>&1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("cannot read config file " + dir + ": it is a directory"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace outbox::testing
