// outbox-relay with relay.transport = rabbitmq, as a real process against the
// real PostgreSQL and the testenv's RabbitMQ node: every event once and in
// order into a queue bound to its exchange, an unroutable event FAILED naming
// the exchange and the key with its aggregate held, an unreachable broker
// failing nothing, and bad settings refused with exit 2 before anything runs.
// And the crash matrix's relay rows that name the broker, on RabbitMQ: a relay
// killed between the confirms and its mark, and the broker SIGKILLed with
// messages unconfirmed (RabbitMqBrokerFaultRelayTest: it needs the node to
// itself; scripts/test runs it alone).
#include <signal.h>

#include <filesystem>
#include <fstream>

#include "outbox/rabbitmq.h"
#include "rabbitmq_helpers.h"
#include "relay_fixture.h"

namespace outbox::testing {
namespace {

class RelayRabbitMqTest : public RelayE2ETest {
 protected:
  void SetUp() override {
    RelayE2ETest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    OUTBOX_REQUIRE_ENV(amqp_, "OUTBOX_AMQP_URL");
    exchange_ = "ex." + schema_ + ".order";
    queue_ = "q." + schema_;
    rabbit_ = std::make_unique<AmqpClient>(amqp_);
    ASSERT_TRUE(rabbit_->ok());
  }
  void TearDown() override {
    if (rabbit_ && rabbit_->ok()) rabbit_->Delete(queue_, exchange_);
    RelayE2ETest::TearDown();
  }
  std::vector<std::string> Rabbit(std::vector<std::string> more = {}) {
    std::vector<std::string> s = {"relay.transport=rabbitmq", "rabbitmq.url=" + amqp_,
                                  "rabbitmq.exchange_template=ex." + schema_ + ".{aggregate_type}",
                                  "rabbitmq.timeout_ms=2000", "relay.lease_ms=6000"};
    s.insert(s.end(), more.begin(), more.end());
    return s;
  }

  // Every event "agg-P-A#n" of EnqueueMany(producers, aggregates, per) in the
  // queue at least once, the first copies of each aggregate in order. Returns
  // how many copies were there beyond the first.
  int ExpectEachOnceInOrder(int producers, int aggregates_each, int per_aggregate) {
    std::map<std::string, int> next;
    std::set<std::string> seen;
    int copies = 0;
    for (const AmqpMessage& m : rabbit_->Drain(queue_)) {
      if (!seen.insert(m.message_id).second) {
        ++copies;
        continue;
      }
      const int n = std::stoi(m.body.substr(m.body.find('#') + 1));
      EXPECT_EQ(n, next[m.routing_key]) << m.routing_key << ": #" << n << " came first";
      next[m.routing_key] = n + 1;
    }
    EXPECT_EQ(seen.size(), static_cast<std::size_t>(producers * aggregates_each * per_aggregate));
    for (const auto& [agg, n] : next) EXPECT_EQ(n, per_aggregate) << agg;
    return copies;
  }

  std::string amqp_, exchange_, queue_;
  std::unique_ptr<AmqpClient> rabbit_;
};

// Crash matrix: the relay dies after the broker confirmed a batch and before
// it marked the rows. Another relay publishes them again; the queue holds every
// event, the first copies in order, and the copies a consumer dedups by
// message_id.
TEST_F(RelayRabbitMqTest, CrashMatrix_RelayDiesBetweenConfirmAndMark_RepublishedInOrder) {
  OUTBOX_REQUIRE_FAULT_POINTS();
  ASSERT_TRUE(rabbit_->DeclareExchange(exchange_));
  ASSERT_TRUE(rabbit_->DeclareQueue(queue_, exchange_));
  EnqueueMany(2, 10, 10);
  Subprocess& a = StartRelay(Rabbit({"relay.batch_size=50"}),
                             {{"OUTBOX_FAULTS", "Relay::AfterPublishBeforeMarkSent=crash@1"}});
  EXPECT_EQ(a.Wait(Scaled(30s)), 70) << a.Log();
  EXPECT_EQ(CountStatus("SENT"), 0);
  Subprocess& b = StartRelay(Rabbit({"relay.batch_size=50"}));
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 200; }, Scaled(30s))) << b.Log();
  EXPECT_GT(ExpectEachOnceInOrder(2, 10, 10), 0) << "the crashed relay's batch went twice";
  EXPECT_EQ(CountStatus("FAILED"), 0);
}

// The node to itself: it is SIGKILLed and started again.
class RabbitMqBrokerFaultRelayTest : public RelayRabbitMqTest {};

// Crash matrix: the broker dies (SIGKILL) while the relay has messages
// unconfirmed. Nothing is FAILED; once it is back every event is in the
// (durable) queue, the first copies in order: what was confirmed was on disk,
// and what was not is published again.
TEST_F(RabbitMqBrokerFaultRelayTest, CrashMatrix_BrokerKilledWithUnconfirmedMessages_NothingLost) {
  const std::string dir = std::filesystem::path(EnvOr("OUTBOX_PG_DATA")).parent_path().string();
  std::string pid;
  std::ifstream(dir + "/rabbitmq/pid") >> pid;
  ASSERT_FALSE(pid.empty()) << "no pid file in " << dir << "/rabbitmq";
  ASSERT_TRUE(rabbit_->DeclareExchange(exchange_));
  ASSERT_TRUE(rabbit_->DeclareQueue(queue_, exchange_));
  rabbit_.reset();
  EnqueueMany(4, 10, 50);  // 2,000 events
  Subprocess& relay = StartRelay(Rabbit({"relay.batch_size=100", "relay.max_attempts=2"}));
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") >= 200; }, Scaled(30s))) << relay.Log();
  ASSERT_EQ(::kill(std::stoi(pid), SIGKILL), 0);
  const std::int64_t sent_at_kill = CountStatus("SENT");
  ASSERT_EQ(std::system((std::string(OUTBOX_TESTENV_SCRIPT) + " restart-rabbitmq '" + dir +
                         "' >/dev/null 2>&1")
                            .c_str()),
            0);
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 2000; }, Scaled(60s))) << relay.Log();
  EXPECT_EQ(CountStatus("FAILED"), 0);
  EXPECT_LT(sent_at_kill, 2000) << "the kill came after the last batch: it proved nothing";
  rabbit_ = std::make_unique<AmqpClient>(amqp_);
  ASSERT_TRUE(rabbit_->ok());
  ExpectEachOnceInOrder(4, 10, 50);
}

// relay.envelope = cloudevents on RabbitMQ: the attributes as cloudEvents:*
// headers (the AMQP binding's application properties).
TEST_F(RelayRabbitMqTest, TheCloudEventsEnvelopeAddsCloudEventsHeaders) {
  ASSERT_TRUE(rabbit_->DeclareExchange(exchange_));
  ASSERT_TRUE(rabbit_->DeclareQueue(queue_, exchange_));
  ASSERT_TRUE(EnqueueOne("ce-1", "payload"));
  Subprocess& relay = StartRelay(Rabbit({"relay.envelope=cloudevents", "relay.cloudevents_source=/shop"}));
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 1; }, Scaled(30s))) << relay.Log();
  auto m = rabbit_->Get(queue_);
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->body, "payload");
  EXPECT_EQ(m->headers.at("cloudEvents:id"), m->message_id);
  EXPECT_EQ(m->headers.at("cloudEvents:source"), "/shop");
  EXPECT_EQ(m->headers.at("cloudEvents:type"), "OrderChanged");
  EXPECT_EQ(m->headers.at("cloudEvents:specversion"), "1.0");
  EXPECT_EQ(m->headers.at("cloudEvents:subject"), "ce-1");
}

TEST_F(RelayRabbitMqTest, DeliversEveryEventOnceInOrderToTheBoundQueue) {
  ASSERT_TRUE(rabbit_->DeclareExchange(exchange_));
  ASSERT_TRUE(rabbit_->DeclareQueue(queue_, exchange_));
  EnqueueMany(2, 5, 20);  // 200 events
  Subprocess& relay = StartRelay(Rabbit());
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 200; }, Scaled(30s))) << relay.Log();
  std::map<std::string, int> next;
  int total = 0;
  for (const AmqpMessage& m : rabbit_->Drain(queue_)) {
    const int n = std::stoi(m.body.substr(m.body.find('#') + 1));
    EXPECT_EQ(m.routing_key, m.headers.at("outbox-aggregate-id"));
    EXPECT_EQ(m.delivery_mode, 2);
    EXPECT_EQ(n, next[m.routing_key]++) << m.routing_key << ": out of order";
    ++total;
  }
  EXPECT_EQ(total, 200);
  const int port = HttpPort(relay);
  int status = 0;
  EXPECT_EQ(WaitReady(port, &status), "ready\n");
  const std::string metrics = Get(port, "/metrics");
  EXPECT_EQ(Metric(metrics, "outbox_relay_events_published_total{transport=\"rabbitmq\"}"), 200)
      << metrics;
}

TEST_F(RelayRabbitMqTest, AnUnroutableEventIsFailedNamingTheExchangeAndKeyAndHoldsItsAggregate) {
  ASSERT_TRUE(rabbit_->DeclareExchange(exchange_));
  ASSERT_TRUE(rabbit_->DeclareQueue(queue_, exchange_, "bound"));
  ASSERT_TRUE(EnqueueOne("bound", "bound#0"));
  ASSERT_TRUE(EnqueueOne("stray", "stray#0"));
  Subprocess& relay = StartRelay(Rabbit());
  ASSERT_TRUE(WaitFor([&] { return CountStatus("FAILED") == 1 && CountStatus("SENT") == 1; },
                      Scaled(30s)))
      << relay.Log();
  const std::string error =
      Exec(admin_.get(), "SELECT last_error FROM " + schema_ + ".outbox WHERE status = 'FAILED'");
  EXPECT_NE(error.find("exchange '" + exchange_ + "'"), std::string::npos) << error;
  EXPECT_NE(error.find("routing key 'stray'"), std::string::npos) << error;
  // The aggregate's next event waits behind its FAILED one (relay.on_failed =
  // hold), while an event of another aggregate enqueued after it goes.
  ASSERT_TRUE(EnqueueOne("stray", "stray#1"));
  ASSERT_TRUE(EnqueueOne("bound", "bound#1"));
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 2; }, Scaled(30s))) << relay.Log();
  EXPECT_EQ(CountStatus("PENDING"), 1) << "stray#1 is held behind its FAILED event";
  EXPECT_EQ(rabbit_->Drain(queue_).size(), 2u);
}

TEST_F(RelayRabbitMqTest, AnUnreachableBrokerFailsNothingAndIsOnReadyz) {
  EnqueueMany(1, 2, 5);
  Subprocess& relay = StartRelay(
      Rabbit({"rabbitmq.url=amqp://guest:hidden-pw@127.0.0.1:1/%2F", "relay.max_attempts=2"}));
  const int port = HttpPort(relay);
  // More claims than max_attempts, each an outage: none counts.
  ASSERT_TRUE(WaitFor([&] {
    return Metric(Get(port, "/metrics"), "outbox_relay_claims_total") >= 4;
  }, Scaled(30s))) << relay.Log();
  EXPECT_EQ(CountStatus("FAILED"), 0) << relay.Log();
  // Between a claim and its give-back the rows are PROCESSING: wait for PENDING.
  EXPECT_TRUE(WaitFor([&] { return CountStatus("PENDING") == 10; }, Scaled(30s)))
      << "PENDING " << CountStatus("PENDING") << ", PROCESSING " << CountStatus("PROCESSING");
  EXPECT_EQ(CountStatus("FAILED"), 0) << relay.Log();
  int status = 0;
  const std::string why = Get(port, "/readyz", &status);
  EXPECT_EQ(status, 503);
  EXPECT_NE(why.find("rabbitmq 127.0.0.1:1"), std::string::npos) << why;
  EXPECT_EQ(relay.Log().find("hidden-pw"), std::string::npos) << relay.Log();
  EXPECT_EQ(why.find("hidden-pw"), std::string::npos) << why;
}

TEST_F(RelayRabbitMqTest, BadSettingsExitTwoNamingTheKeyBeforeAnythingRuns) {
  EnqueueMany(1, 1, 3);
  struct Case {
    std::vector<std::string> sets;
    std::string names;
  };
  const std::vector<Case> cases = {
      {{"relay.transport=rabbitmq"}, "rabbitmq.url is required"},
      {{"relay.transport=rabbitmq", "rabbitmq.url=rabbit://guest:sekrit@h/"}, "rabbitmq.url"},
      {{"relay.transport=rabbitmq", "rabbitmq.url=amqp://guest:sekrit@h:70000/%2F"},
       "rabbitmq.url"},
      {Rabbit({"rabbitmq.exchange_type=fanfare"}), "rabbitmq.exchange_type"},
      {Rabbit({"rabbitmq.exchange_template=x.{aggregate}"}), "rabbitmq.exchange_template"},
      {Rabbit({"rabbitmq.tls_ca_file=/nonexistent/ca.pem"}), "rabbitmq.tls_ca_file"},
      {Rabbit({"rabbitmq.timeout_ms=0"}), "rabbitmq.timeout_ms"},
  };
  for (const Case& c : cases) {
    Subprocess& relay = StartRelay(c.sets);
    const auto code = relay.Wait(Scaled(10s));
    ASSERT_TRUE(code.has_value()) << c.names;
    EXPECT_EQ(*code, 2) << c.names << "\n" << relay.Log();
    EXPECT_NE(relay.Log().find(c.names), std::string::npos) << relay.Log();
    EXPECT_EQ(relay.Log().find("sekrit"), std::string::npos) << relay.Log();
  }
  EXPECT_EQ(CountStatus("PENDING"), 3);
}

}  // namespace
}  // namespace outbox::testing
