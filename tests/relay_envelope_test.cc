// The relay just past its envelope, each case as a new user would meet it: an
// event that can never be sent in front of later events of its aggregate, a
// broker outage longer than max_attempts would allow, held followers after a
// FAILED head, operator skip, and a lease shorter than a message's life. The
// cases about events run on both layouts of a PostgreSQL schema: the row store
// (Rows/...) and the log (Log/..., issue 42).
#include "relay_fixture.h"

namespace outbox::testing {
namespace {

using CtlRun = CommandRun;

CtlRun Ctl(const std::string& args) {
  return RunCommand(std::string(OUTBOX_OUTBOXCTL_BIN) + " " + args);
}

Event Ev(const std::string& agg, std::string payload) { return OrderEvent(agg, std::move(payload)); }

class RelayEnvelopeTest : public RelayE2ETest {
 protected:
  void EnqueueAll(const std::vector<Event>& evs) {
    EnqueueOptions eo;
    eo.schema = schema_;
    Exec(admin_.get(), "BEGIN");
    auto r = EnqueueBatch(admin_.get(), evs, eo);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    Exec(admin_.get(), "COMMIT");
  }
  std::string Ctl(const std::string& args, int want_code = 0) {
    CtlRun r = testing::Ctl("--db '" + url_ + "' --schema " + schema_ + " " + args);
    EXPECT_EQ(r.code, want_code) << args << "\n" << r.out;
    return r.out;
  }
  std::string IdOf(const std::string& payload) {
    return Exec(admin_.get(), "SELECT event_id FROM " + schema_ +
                                  ".outbox WHERE convert_from(payload, 'UTF8') = '" + payload + "'");
  }
  std::string StatusOf(const std::string& payload) {
    return Exec(admin_.get(), "SELECT status FROM " + schema_ +
                                  ".outbox WHERE convert_from(payload, 'UTF8') = '" + payload + "'");
  }
  // The values on the topic for one aggregate (key), in topic order.
  std::vector<std::string> OnTopic(const std::string& key, std::size_t expected_total,
                                   std::chrono::milliseconds quiet = 1000ms) {
    auto msgs = ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, expected_total, Scaled(20s),
                          quiet);
    std::sort(msgs.begin(), msgs.end(), [](const Message& a, const Message& b) {
      return std::tie(a.partition, a.offset) < std::tie(b.partition, b.offset);
    });
    std::vector<std::string> out;
    for (const auto& m : msgs) {
      if (m.key == key) out.push_back(m.value.size() > 100 ? "<big>" : m.value);
    }
    return out;
  }
};

// The cases that depend on how the schema keeps events, on each layout.
class RelayEnvelopeLayoutTest : public RelayEnvelopeTest,
                                public ::testing::WithParamInterface<StoreLayout> {
 protected:
  void SetUp() override {
    RelayEnvelopeTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    if (GetParam() == StoreLayout::kLog) UseLogLayout();
  }
};

// Issue #10.1: X:1 can never be sent (over the producer's limit); X:2 must not
// reach the topic while X:1 is FAILED — then replay (with the limit raised)
// publishes X:1 and then X:2.
TEST_P(RelayEnvelopeLayoutTest, AFailedEventKeepsItsLaterEventsOffTheTopicUntilReplayed) {
  EnqueueAll({Ev("X", std::string(20000, 'x')), Ev("X", "X#2"), Ev("Y", "Y#1")});
  Subprocess& relay = StartRelay({"kafka.properties.message.max.bytes=10000"});
  ASSERT_TRUE(WaitFor([&] { return StatusOf("Y#1") == "SENT" && CountStatus("FAILED") == 1; }, 30s))
      << relay.Log();
  std::this_thread::sleep_for(Scaled(1000ms));  // several more claim rounds
  EXPECT_EQ(StatusOf("X#2"), "PENDING");
  EXPECT_EQ(Exec(admin_.get(), "SELECT attempts FROM " + schema_ +
                                   ".outbox WHERE convert_from(payload, 'UTF8') = 'X#2'"),
            "0")
      << "a held event that was never produced has used no attempt";
  const std::string err = Exec(admin_.get(), "SELECT last_error FROM " + schema_ +
                                                 ".outbox WHERE status = 'FAILED'");
  EXPECT_NE(err.find("message.max.bytes=10000"), std::string::npos) << err;
  EXPECT_NE(err.find("local producer"), std::string::npos) << err;
  EXPECT_EQ(OnTopic("X", 1), std::vector<std::string>{}) << "X#2 overtook the FAILED X:1";
  relay.Signal(SIGTERM);
  ASSERT_EQ(relay.Wait(Scaled(30s)), 0);

  Subprocess& fixed = StartRelay();  // default limit admits 20 kB
  Ctl("replay --event-id " + IdOf(std::string(20000, 'x')));
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 3; }, 30s)) << fixed.Log();
  EXPECT_EQ(OnTopic("X", 3), (std::vector<std::string>{"<big>", "X#2"}));
  fixed.Signal(SIGTERM);
  EXPECT_EQ(fixed.Wait(Scaled(30s)), 0);
}

// Issue #10.2: the largest event enqueue accepts (1,000,000 bytes of payload +
// key + headers, with the longest dedup key, so the relay's own headers are at
// their largest too) is published by a relay with default settings.
TEST_P(RelayEnvelopeLayoutTest, TheLargestAcceptedEventIsPublishedWithDefaults) {
  Event e = Ev(std::string(255, 'K'), "");
  e.headers = {{"traceparent", std::string(100, 't')}};
  e.payload = std::string(1'000'000 - 255 - 11 - 100, 'p');
  e.dedup_key = std::string(255, 'd');
  e.event_type = std::string(255, 'E');
  EnqueueAll({e, Ev("after", "after#0")});
  Subprocess& relay = StartRelay({"relay.lease_ms=30000"});
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 2; }, 30s))
      << relay.Log() << Exec(admin_.get(), "SELECT last_error FROM " + schema_ + ".outbox");
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0);
}

// Issue #10.4: skip sets the FAILED event aside for good (kept, with who and why)
// and lets the aggregate go on; the topic never gets the skipped event.
TEST_P(RelayEnvelopeLayoutTest, SkipReleasesTheAggregateAndKeepsAnAuditTrail) {
  EnqueueAll({Ev("X", std::string(20000, 'x')), Ev("X", "X#2"), Ev("X", "X#3")});
  Subprocess& relay = StartRelay({"kafka.properties.message.max.bytes=10000"});
  const int port = HttpPort(relay);
  ASSERT_TRUE(WaitFor([&] { return CountStatus("FAILED") == 1; }, 30s)) << relay.Log();
  const std::string id = IdOf(std::string(20000, 'x'));
  // Bad use changes nothing.
  Ctl("skip", 2);
  Ctl("skip --event-id 00000000-0000-0000-0000-000000000000", 3);
  Ctl("skip --event-id " + id + " --dry-run");
  EXPECT_EQ(CountStatus("FAILED"), 1);
  Ctl("skip --event-id " + id + " --reason 'poison: too large, dropped by ticket 42' --by alice");
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 2; }, 30s)) << relay.Log();
  EXPECT_EQ(CountStatus("SKIPPED"), 1);
  EXPECT_EQ(Exec(admin_.get(), "SELECT skipped_by || '|' || skip_reason || '|' || "
                               "(skipped_at IS NOT NULL) FROM " + schema_ + ".outbox WHERE status = 'SKIPPED'"),
            "alice|poison: too large, dropped by ticket 42|true");
  EXPECT_EQ(OnTopic("X", 2), (std::vector<std::string>{"X#2", "X#3"}));
  // Visible in status, list, trace and metrics; a SENT event cannot be skipped.
  EXPECT_NE(Ctl("status --json").find("\"skipped\":1"), std::string::npos);
  EXPECT_NE(Ctl("list --state skipped").find(id), std::string::npos);
  const std::string trace = Ctl("trace " + id);
  EXPECT_NE(trace.find("skip_reason"), std::string::npos) << trace;
  EXPECT_NE(trace.find("alice"), std::string::npos) << trace;
  const std::string sent_id = IdOf("X#2");
  EXPECT_NE(Ctl("skip --event-id " + sent_id, 1).find("SENT"), std::string::npos);
  EXPECT_TRUE(WaitFor([&] { return Metric(Get(port, "/metrics"), "outbox_rows{schema=\"" + schema_ + "\",state=\"skipped\"}") == 1; }, 10s));
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0);
}

// Issue #10.3: the broker is down for far longer than max_attempts claims would
// take; nothing ends FAILED, everything arrives in order once it is back.
TEST_P(RelayEnvelopeLayoutTest, ABrokerOutageLongerThanMaxAttemptsFailsNothing) {
  constexpr int kProducers = 2, kAggs = 10, kPer = 5;  // 100 events
  EnqueueMany(kProducers, kAggs, kPer);
  ASSERT_EQ(kafka_->Control("broker-down -1"), "ok");
  // max_attempts 3 x (500 ms timeout + <= 50 ms backoff) ~ 1.7 s of claims.
  Subprocess& relay = StartRelay({"relay.backoff_base_ms=10", "relay.backoff_max_ms=50",
                                  "kafka.properties.message.timeout.ms=500", "relay.lease_ms=6000",
                                  "relay.max_attempts=3"});
  const int port = HttpPort(relay);
  ASSERT_TRUE(WaitFor([&] {
    return Metric(Get(port, "/metrics"), "outbox_relay_broker_outage_batches_total") >= 3;
  }, 30s)) << relay.Log();
  std::this_thread::sleep_for(Scaled(6000ms));  // >= 3x what max_attempts would take
  EXPECT_EQ(CountStatus("FAILED"), 0) << relay.Log();
  // 1 while the probe's claim is in flight, 0 between probes (all given back).
  EXPECT_LE(std::stoi(Exec(admin_.get(), "SELECT coalesce(max(attempts), 0) FROM " + schema_ + ".outbox")),
            1)
      << "only claims in flight hold an attempt; outage batches give theirs back";
  ASSERT_EQ(kafka_->Control("broker-up -1"), "ok");
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == kProducers * kAggs * kPer; }, 60s))
      << relay.Log();
  EXPECT_EQ(CountStatus("FAILED"), 0);
  auto msgs = ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, kProducers * kAggs * kPer,
                        Scaled(30s));
  CheckDelivered(msgs, kProducers, kAggs, kPer);
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0);
}

// Issue #10.4: a head FAILED after max_attempts of its own errors, its followers
// behind it; one replay delivers the whole aggregate in order, no more action.
TEST_P(RelayEnvelopeLayoutTest, OneReplayOfAFailedHeadDeliversItsWholeAggregate) {
  std::vector<Event> evs;
  for (int i = 0; i < 10; ++i) evs.push_back(Ev("H", "H#" + std::to_string(i)));
  EnqueueAll(evs);
  // Every produce request refused with an error of the request itself (not an
  // outage): retryable for us, permanent for librdkafka.
  ASSERT_EQ(kafka_->Control("request-errors Produce POLICY_VIOLATION 100000"), "ok");
  Subprocess& relay = StartRelay({"relay.max_attempts=3", "relay.backoff_base_ms=10",
                                  "relay.backoff_max_ms=20"});
  ASSERT_TRUE(WaitFor([&] { return StatusOf("H#0") == "FAILED"; }, 30s)) << relay.Log();
  EXPECT_NE(Exec(admin_.get(), "SELECT last_error FROM " + schema_ + ".outbox WHERE status = 'FAILED'")
                .find("gave up after 3 attempts"),
            std::string::npos);
  ASSERT_EQ(kafka_->Control("clear-errors Produce"), "ok");
  std::this_thread::sleep_for(Scaled(500ms));
  EXPECT_EQ(CountStatus("FAILED"), 1) << "only the head FAILED";
  Ctl("replay --failed");
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 10; }, 30s))
      << relay.Log() << Ctl("list");
  EXPECT_EQ(CountStatus("FAILED"), 0);
  std::vector<std::string> want;
  for (int i = 0; i < 10; ++i) want.push_back("H#" + std::to_string(i));
  auto got = OnTopic("H", 10);
  // Copies from before the head failed may precede; the last 10 are the order.
  ASSERT_GE(got.size(), 10u);
  EXPECT_EQ(std::vector<std::string>(got.end() - 10, got.end()), want);
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0);
}

// Issue 42, step 7: a schema a newer release migrated (a version this binary
// does not know) is refused at start, exit 3, naming the versions, before
// anything is written; with --migrate too.
TEST_P(RelayEnvelopeLayoutTest, ASchemaMigratedByANewerReleaseExitsThreeAndWritesNothing) {
  ASSERT_TRUE(EnqueueOne("A", "{}"));
  const std::string table = GetParam() == StoreLayout::kLog ? "log_migrations" : "schema_migrations";
  Exec(admin_.get(), "INSERT INTO " + schema_ + "." + table +
                         " (version, description) VALUES (999, 'from a newer release')");
  for (const std::vector<std::string>& more :
       {std::vector<std::string>{}, std::vector<std::string>{"--migrate"}}) {
    std::vector<std::string> argv = {OUTBOX_RELAY_BIN, "--db", url_, "--bootstrap",
                                     kafka_->bootstrap(), "--set", "database.schema=" + schema_,
                                     "--set", "http.listen=127.0.0.1:0"};
    argv.insert(argv.end(), more.begin(), more.end());
    Subprocess p(argv, {}, (std::filesystem::temp_directory_path() /
                            ("outbox-relay-" + schema_ + "-newer.log")).string());
    EXPECT_EQ(p.Wait(Scaled(15s)).value_or(-1), 3) << p.Log();
    EXPECT_NE(p.Log().find("newer release"), std::string::npos) << p.Log();
    EXPECT_NE(p.Log().find("999"), std::string::npos) << p.Log();
  }
  EXPECT_EQ(Exec(admin_.get(), "SELECT status || ' ' || attempts || ' ' || "
                               "coalesce(lease_owner, '-') FROM " + schema_ + ".outbox"),
            "PENDING 0 -");
  if (GetParam() == StoreLayout::kLog) {
    EXPECT_EQ(Exec(admin_.get(), "SELECT count(*) FROM " + schema_ + ".readers"), "0");
    EXPECT_EQ(Exec(admin_.get(), "SELECT max(token) FROM " + schema_ + ".slots"), "0");
  }
}

// Issue #10.6: every property that lengthens a message's life is checked
// against the lease, whichever alias sets it.
TEST_F(RelayEnvelopeTest, ALeaseShorterThanTheDeliveryTimeoutExitsTwoNamingBothKeys) {
  auto run = [&](std::vector<std::string> sets) {
    std::vector<std::string> argv = {OUTBOX_RELAY_BIN, "--db", url_, "--bootstrap",
                                     kafka_->bootstrap(), "--set", "database.schema=" + schema_,
                                     "--set", "http.listen=127.0.0.1:0"};
    for (const auto& s : sets) {
      argv.push_back("--set");
      argv.push_back(s);
    }
    Subprocess p(argv, {}, (std::filesystem::temp_directory_path() /
                            ("outbox-relay-" + schema_ + "-lease.log")).string());
    const int code = p.Wait(Scaled(10s)).value_or(-1);
    return std::make_pair(code, p.Log());
  };
  auto [code, log] = run({"kafka.properties.delivery.timeout.ms=300000", "relay.lease_ms=20000"});
  EXPECT_EQ(code, 2) << log;
  EXPECT_NE(log.find("relay.lease_ms"), std::string::npos) << log;
  EXPECT_NE(log.find("kafka.properties.delivery.timeout.ms"), std::string::npos) << log;
  // Both aliases at once, disagreeing: which one wins would be an accident.
  std::tie(code, log) = run({"kafka.properties.delivery.timeout.ms=3000",
                             "kafka.properties.message.timeout.ms=4000"});
  EXPECT_EQ(code, 2) << log;
  EXPECT_NE(log.find("delivery.timeout.ms"), std::string::npos) << log;
}

// Issue #10.9: --migrate while the database is down answers /healthz (and 503
// on /readyz) and stops on the first signal. The first wait is the schema
// check's, which runs before the migration (a newer schema is refused first).
TEST_F(RelayEnvelopeTest, MigrateWaitingForADeadDatabaseServesHealthAndStopsOnSigterm) {
  std::vector<std::string> argv = {OUTBOX_RELAY_BIN, "--db", "postgresql://postgres@127.0.0.1:1/x",
                                   "--bootstrap", kafka_->bootstrap(), "--migrate", "--set",
                                   "http.listen=127.0.0.1:0"};
  relays_.push_back(std::make_unique<Subprocess>(
      argv, std::map<std::string, std::string>{},
      (std::filesystem::temp_directory_path() / ("outbox-relay-" + schema_ + "-mig.log")).string()));
  Subprocess& relay = *relays_.back();
  const int port = HttpPort(relay);
  ASSERT_TRUE(WaitFor([&] { return relay.Log().find("schema check: database unavailable") !=
                                   std::string::npos; }, 10s)) << relay.Log();
  int status = 0;
  EXPECT_EQ(Get(port, "/healthz", &status), "ok\n");
  EXPECT_EQ(status, 200);
  Get(port, "/readyz", &status);
  EXPECT_EQ(status, 503);
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(8s)), 0) << relay.Log();
}

INSTANTIATE_TEST_SUITE_P(Rows, RelayEnvelopeLayoutTest, ::testing::Values(StoreLayout::kRows));
INSTANTIATE_TEST_SUITE_P(Log, RelayEnvelopeLayoutTest, ::testing::Values(StoreLayout::kLog));

}  // namespace
}  // namespace outbox::testing
