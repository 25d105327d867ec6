// outbox-relay with relay.transport = rabbitmq, as a real process against the
// real PostgreSQL and the testenv's RabbitMQ node: every event once and in
// order into a queue bound to its exchange, an unroutable event FAILED naming
// the exchange and the key with its aggregate held, an unreachable broker
// failing nothing, and bad settings refused with exit 2 before anything runs.
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

  std::string amqp_, exchange_, queue_;
  std::unique_ptr<AmqpClient> rabbit_;
};

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
  // The aggregate's next event waits behind its FAILED one (relay.on_failed = hold).
  ASSERT_TRUE(EnqueueOne("stray", "stray#1"));
  std::this_thread::sleep_for(Scaled(1s));
  EXPECT_EQ(CountStatus("PENDING"), 1) << "stray#1 is held behind its FAILED event";
  EXPECT_EQ(rabbit_->Drain(queue_).size(), 1u);
}

TEST_F(RelayRabbitMqTest, AnUnreachableBrokerFailsNothingAndIsOnReadyz) {
  EnqueueMany(1, 2, 5);
  Subprocess& relay = StartRelay(
      Rabbit({"rabbitmq.url=amqp://guest:hidden-pw@127.0.0.1:1/%2F", "relay.max_attempts=2"}));
  const int port = HttpPort(relay);
  std::this_thread::sleep_for(Scaled(3s));
  EXPECT_EQ(CountStatus("FAILED"), 0) << relay.Log();
  EXPECT_EQ(CountStatus("PENDING"), 10);
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
