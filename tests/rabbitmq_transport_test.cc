// The RabbitMQ transport against the testenv's real RabbitMQ node: messages
// and their properties, confirms, an unroutable message, a missing exchange,
// an unreachable broker; and (RabbitMqBrokerFaultTest, which needs the node to
// itself) a memory alarm and a restart under the relay's publishes.
#include "outbox/rabbitmq.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "rabbitmq_helpers.h"
#include "test_env.h"

namespace outbox::testing {
namespace {

using std::chrono::milliseconds;

ClaimedEvent Ev(const std::string& type, const std::string& id, int n) {
  ClaimedEvent ce;
  ce.event_id = "00000000-0000-7000-8000-" + std::string(12 - std::to_string(n).size(), '0') +
                std::to_string(n);
  ce.event.aggregate_type = type;
  ce.event.aggregate_id = id;
  ce.event.event_type = "Changed";
  ce.event.payload = id + "#" + std::to_string(n);
  ce.attempts = 1;
  ce.created_at = std::chrono::system_clock::now();
  return ce;
}

class RabbitMqTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    OUTBOX_REQUIRE_ENV(url_, "OUTBOX_AMQP_URL");
    suffix_ = RandomSuffix();
    type_ = "t" + suffix_;
    exchange_ = "outbox.event." + type_;
    queue_ = "q." + suffix_;
    admin_ = std::make_unique<AmqpClient>(url_);
    ASSERT_TRUE(admin_->ok()) << "cannot reach " << RedactAmqpUrl(url_);
  }
  void TearDown() override {
    if (admin_ && admin_->ok()) admin_->Delete(queue_, exchange_);
  }

  std::unique_ptr<Transport> Open(bool declare = true, milliseconds timeout = milliseconds(5000),
                                  std::string url = {}) {
    RabbitMqTransportOptions o;
    o.url = url.empty() ? url_ : url;
    o.declare = declare;
    o.timeout = timeout;
    auto t = OpenRabbitMqTransport(o);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(t).value() : nullptr;
  }

  std::string url_, suffix_, type_, exchange_, queue_;
  std::unique_ptr<AmqpClient> admin_;
};

TEST_F(RabbitMqTransportTest, PublishesPersistentMessagesWithTheOutboxHeadersInOrder) {
  ASSERT_TRUE(admin_->DeclareExchange(exchange_));
  ASSERT_TRUE(admin_->DeclareQueue(queue_, exchange_));
  auto t = Open(/*declare=*/false);
  std::vector<ClaimedEvent> events;
  for (int i = 0; i < 60; ++i) events.push_back(Ev(type_, "a" + std::to_string(i % 4), i));
  events[5].event.headers.push_back({"content-type", "application/json"});
  events[5].event.headers.push_back({"traceparent", "00-abc-def-01"});
  events[7].event.dedup_key = "k7";
  auto results = t->Publish(events);
  ASSERT_EQ(results.size(), events.size());
  for (const auto& r : results) EXPECT_EQ(r.outcome, PublishOutcome::kAcked) << r.error;
  EXPECT_TRUE(t->Healthy());

  auto got = admin_->Drain(queue_);
  ASSERT_EQ(got.size(), events.size());
  for (std::size_t i = 0; i < got.size(); ++i) {  // one queue: the publication order
    EXPECT_EQ(got[i].body, events[i].event.payload);
    EXPECT_EQ(got[i].message_id, events[i].event_id);
    EXPECT_EQ(got[i].routing_key, events[i].event.aggregate_id);
    EXPECT_EQ(got[i].exchange, exchange_);
    EXPECT_EQ(got[i].delivery_mode, 2);
    EXPECT_GT(got[i].timestamp, 1'700'000'000u);
    EXPECT_EQ(got[i].headers["outbox-event-id"], events[i].event_id);
    EXPECT_EQ(got[i].headers["outbox-aggregate-type"], type_);
    EXPECT_EQ(got[i].headers["outbox-aggregate-id"], events[i].event.aggregate_id);
    EXPECT_EQ(got[i].headers["outbox-event-type"], "Changed");
    EXPECT_EQ(got[i].headers["outbox-attempt"], "1");
    EXPECT_FALSE(got[i].headers["outbox-created-at"].empty());
  }
  EXPECT_EQ(got[0].content_type, "application/octet-stream");
  EXPECT_EQ(got[5].content_type, "application/json");
  EXPECT_EQ(got[5].headers["traceparent"], "00-abc-def-01");
  EXPECT_EQ(got[7].headers["outbox-dedup-key"], "k7");
  EXPECT_EQ(got[0].headers.count("outbox-dedup-key"), 0u);

  // The connection is pooled: a second call goes through it.
  auto again = t->Publish(std::vector<ClaimedEvent>{Ev(type_, "a0", 100)});
  EXPECT_EQ(again[0].outcome, PublishOutcome::kAcked) << again[0].error;
}

TEST_F(RabbitMqTransportTest, AnUnroutableMessageIsFatalNamingTheExchangeAndTheKey) {
  ASSERT_TRUE(admin_->DeclareExchange(exchange_));
  ASSERT_TRUE(admin_->DeclareQueue(queue_, exchange_, "routed"));
  auto t = Open(/*declare=*/false);
  const std::vector<ClaimedEvent> events = {Ev(type_, "routed", 1), Ev(type_, "nowhere", 2),
                                            Ev(type_, "routed", 3)};
  auto r = t->Publish(events);
  EXPECT_EQ(r[0].outcome, PublishOutcome::kAcked) << r[0].error;
  EXPECT_EQ(r[1].outcome, PublishOutcome::kFatal);
  EXPECT_NE(r[1].error.find("exchange '" + exchange_ + "'"), std::string::npos) << r[1].error;
  EXPECT_NE(r[1].error.find("routing key 'nowhere'"), std::string::npos) << r[1].error;
  EXPECT_NE(r[1].error.find("NO_ROUTE"), std::string::npos) << r[1].error;
  EXPECT_EQ(r[2].outcome, PublishOutcome::kAcked) << r[2].error;
  EXPECT_EQ(admin_->Drain(queue_).size(), 2u);
}

TEST_F(RabbitMqTransportTest, AMissingExchangeIsRetryableNamingItAndHoldsItsAggregate) {
  const std::string other = "outbox.event.o" + suffix_;
  ASSERT_TRUE(admin_->DeclareExchange(other));
  ASSERT_TRUE(admin_->DeclareQueue(queue_, other));
  auto t = Open(/*declare=*/false);
  std::vector<ClaimedEvent> events = {Ev(type_, "x", 1), Ev("o" + suffix_, "y", 2),
                                      Ev(type_, "x", 3)};
  auto r = t->Publish(events);
  EXPECT_EQ(r[0].outcome, PublishOutcome::kRetryable);
  EXPECT_FALSE(r[0].broker_unavailable) << "a missing exchange is not an outage";
  EXPECT_NE(r[0].error.find("exchange '" + exchange_ + "' does not exist"), std::string::npos)
      << r[0].error;
  EXPECT_NE(r[0].error.find("rabbitmq.declare"), std::string::npos) << r[0].error;
  EXPECT_EQ(r[1].outcome, PublishOutcome::kAcked) << r[1].error;
  EXPECT_EQ(r[2].outcome, PublishOutcome::kNotSent);
  // With declare on, the exchange is made (durable, topic) and the event goes.
  auto d = Open(/*declare=*/true);
  auto ok = d->Publish(std::vector<ClaimedEvent>{Ev(type_, "x", 1)});
  EXPECT_EQ(ok[0].outcome, PublishOutcome::kFatal) << "declared, but no queue is bound yet";
  ASSERT_TRUE(admin_->DeclareQueue(queue_ + "2", exchange_));
  ok = d->Publish(std::vector<ClaimedEvent>{Ev(type_, "x", 1)});
  EXPECT_EQ(ok[0].outcome, PublishOutcome::kAcked) << ok[0].error;
  admin_->Delete(queue_ + "2", other);
}

// What enqueue admits but AMQP cannot carry (a content type over 255 bytes,
// headers over one frame) is FAILED at once, naming why, with its aggregate's
// later events not sent: never an outage that would retry it forever.
TEST_F(RabbitMqTransportTest, AnEventAmqpCannotCarryIsFatalNotAnEndlessOutage) {
  ASSERT_TRUE(admin_->DeclareExchange(exchange_));
  ASSERT_TRUE(admin_->DeclareQueue(queue_, exchange_));
  auto t = Open(false);
  std::vector<ClaimedEvent> events = {Ev(type_, "a", 1), Ev(type_, "a", 2), Ev(type_, "b", 3),
                                      Ev(type_, "c", 4)};
  events[0].event.headers.push_back({"content-type", std::string(256, 'x')});
  for (int i = 0; i < 20; ++i) {
    events[2].event.headers.push_back({"h" + std::to_string(i), std::string(8000, 'y')});
  }
  auto r = t->Publish(events);
  EXPECT_EQ(r[0].outcome, PublishOutcome::kFatal);
  EXPECT_NE(r[0].error.find("content-type"), std::string::npos) << r[0].error;
  EXPECT_EQ(r[1].outcome, PublishOutcome::kNotSent);
  EXPECT_EQ(r[2].outcome, PublishOutcome::kFatal);
  EXPECT_NE(r[2].error.find("header frame"), std::string::npos) << r[2].error;
  EXPECT_EQ(r[3].outcome, PublishOutcome::kAcked) << r[3].error;
  EXPECT_TRUE(t->Healthy());
  EXPECT_EQ(admin_->Drain(queue_).size(), 1u);
}

TEST_F(RabbitMqTransportTest, AnUnreachableBrokerIsAnOutageAndThePasswordIsNeverShown) {
  auto t = Open(true, milliseconds(2000), "amqp://guest:s3cret-pw@127.0.0.1:1/%2F");
  ASSERT_NE(t, nullptr);
  const auto start = std::chrono::steady_clock::now();
  auto r = t->Publish(std::vector<ClaimedEvent>{Ev(type_, "a", 1), Ev(type_, "b", 2)});
  EXPECT_LE(std::chrono::steady_clock::now() - start, t->MaxPublishTime());
  for (const auto& x : r) {
    EXPECT_EQ(x.outcome, PublishOutcome::kRetryable);
    EXPECT_TRUE(x.broker_unavailable);
    EXPECT_EQ(x.error.find("s3cret"), std::string::npos) << x.error;
    EXPECT_NE(x.error.find("127.0.0.1:1"), std::string::npos) << x.error;
  }
  EXPECT_FALSE(t->Healthy());
  EXPECT_EQ(t->UnhealthyReason().find("s3cret"), std::string::npos);
  // A wrong password: refused at login, named as such, not shown.
  std::string bad = url_;
  ASSERT_NE(bad.find(":guest@"), std::string::npos) << "the testenv's URL is guest:guest";
  bad.replace(bad.find(":guest@"), 7, ":wrong-pw@");
  auto w = Open(true, milliseconds(2000), bad);
  auto wr = w->Publish(std::vector<ClaimedEvent>{Ev(type_, "a", 1)});
  EXPECT_TRUE(wr[0].broker_unavailable);
  EXPECT_NE(wr[0].error.find("login as guest"), std::string::npos) << wr[0].error;
  EXPECT_EQ(wr[0].error.find("wrong-pw"), std::string::npos) << wr[0].error;
}

// amqps:// against the node's TLS listener (a certificate from the testenv's
// throwaway CA, naming localhost): verified against rabbitmq.tls_ca_file it
// goes; against the system's CAs it is refused as an outage naming TLS; with
// tls_verify off it goes without a CA.
TEST_F(RabbitMqTransportTest, AmqpsVerifiesTheBrokerAgainstTheConfiguredCa) {
  const std::string amqps = EnvOr("OUTBOX_AMQPS_URL"), ca = EnvOr("OUTBOX_AMQPS_CA");
  const std::string cert = EnvOr("OUTBOX_AMQPS_CLIENT_CERT"), key = EnvOr("OUTBOX_AMQPS_CLIENT_KEY");
  ASSERT_FALSE(amqps.empty() || ca.empty() || cert.empty() || key.empty())
      << "scripts/testenv writes OUTBOX_AMQPS_URL/_CA/_CLIENT_CERT/_CLIENT_KEY";
  ASSERT_TRUE(admin_->DeclareExchange(exchange_));
  ASSERT_TRUE(admin_->DeclareQueue(queue_, exchange_));
  // The testenv's node asks every TLS client for a certificate from its CA.
  auto open = [&](const std::string& ca_file, bool verify, const std::string& cert_file = "",
                  const std::string& key_file = "") {
    RabbitMqTransportOptions o;
    o.url = amqps;
    o.tls_ca_file = ca_file;
    o.tls_verify = verify;
    o.tls_cert_file = cert_file.empty() ? cert : cert_file;
    o.tls_key_file = key_file.empty() ? key : key_file;
    o.timeout = milliseconds(5000);
    auto t = OpenRabbitMqTransport(o);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return std::move(t).value();
  };
  auto verified = open(ca, true)->Publish(std::vector<ClaimedEvent>{Ev(type_, "a", 1)});
  EXPECT_EQ(verified[0].outcome, PublishOutcome::kAcked) << verified[0].error;
  auto unknown = open("", true)->Publish(std::vector<ClaimedEvent>{Ev(type_, "a", 2)});
  EXPECT_EQ(unknown[0].outcome, PublishOutcome::kRetryable);
  EXPECT_TRUE(unknown[0].broker_unavailable);
  EXPECT_NE(unknown[0].error.find("SSL"), std::string::npos) << unknown[0].error;
  auto unverified = open("", false)->Publish(std::vector<ClaimedEvent>{Ev(type_, "a", 3)});
  EXPECT_EQ(unverified[0].outcome, PublishOutcome::kAcked) << unverified[0].error;
  // The client certificate (rabbitmq.tls_cert_file, tls_key_file) is what the
  // node checks: one the CA did not issue is refused, as an outage.
  const std::string dir = cert.substr(0, cert.rfind('/'));
  auto rogue = open(ca, true, dir + "/rogue.crt", dir + "/rogue.key")
                   ->Publish(std::vector<ClaimedEvent>{Ev(type_, "a", 4)});
  EXPECT_EQ(rogue[0].outcome, PublishOutcome::kRetryable) << rogue[0].error;
  EXPECT_TRUE(rogue[0].broker_unavailable);
  RabbitMqTransportOptions no_cert;
  no_cert.url = amqps;
  no_cert.tls_ca_file = ca;
  no_cert.timeout = milliseconds(5000);
  auto no_cert_transport = OpenRabbitMqTransport(no_cert);
  ASSERT_TRUE(no_cert_transport.ok()) << no_cert_transport.status().ToString();
  auto none = (*no_cert_transport)->Publish(std::vector<ClaimedEvent>{Ev(type_, "a", 5)});
  EXPECT_EQ(none[0].outcome, PublishOutcome::kRetryable) << "the node requires a client certificate";
  EXPECT_TRUE(none[0].broker_unavailable);
  EXPECT_EQ(admin_->Drain(queue_).size(), 2u);
}

// A client certificate without its key is refused before any connection,
// naming the keys.
TEST(RabbitMqOptions, AClientCertificateNeedsItsKey) {
  const std::string cert = (std::filesystem::temp_directory_path() / "outbox-client-cert-only.crt").string();
  { std::ofstream(cert) << "-----BEGIN CERTIFICATE-----\n"; }  // readable is all the check needs
  RabbitMqTransportOptions o;
  o.url = "amqps://guest:pw@localhost/%2F";
  o.tls_cert_file = cert;
  Status st = OpenRabbitMqTransport(o).status();
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("rabbitmq.tls_key_file"), std::string::npos) << st.message();
}

TEST(RabbitMqOptions, BadOptionsAreRefusedNamingTheKeyWithoutThePassword) {
  auto open = [](RabbitMqTransportOptions o) { return OpenRabbitMqTransport(o).status(); };
  RabbitMqTransportOptions o;
  o.url = "http://guest:pw-123@h/";
  Status st = open(o);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("rabbitmq.url"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("pw-123"), std::string::npos) << st.message();
  o.url = "amqp://guest:pw-123@h:99999/";
  st = open(o);
  EXPECT_NE(st.message().find("PORT in 1..65535"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("pw-123"), std::string::npos) << st.message();
  o.url = "amqp://guest:pw@h/";
  o.exchange_template = "ev.{aggregate}";
  st = open(o);
  EXPECT_NE(st.message().find("unknown placeholder {aggregate}"), std::string::npos)
      << st.message();
  o.exchange_template = "ev.{aggregate_type}";
  o.exchange_type = "fanfare";
  st = open(o);
  EXPECT_NE(st.message().find("rabbitmq.exchange_type"), std::string::npos) << st.message();
  o.exchange_type = "topic";
  o.tls_ca_file = "/nonexistent/ca.pem";
  st = open(o);
  EXPECT_NE(st.message().find("rabbitmq.tls_ca_file"), std::string::npos) << st.message();
  o.tls_ca_file.clear();
  EXPECT_TRUE(open(o).ok());
  EXPECT_EQ(RedactAmqpUrl("amqps://u:p@h:5671/v"), "amqps://u:***@h:5671/v");
  EXPECT_EQ(RedactAmqpUrl("amqp://u:p@ss@h/v@x"), "amqp://u:***@h/v@x") << "a password with '@'";
  Event e;
  e.aggregate_type = "order line";
  e.event_type = "x/y";
  EXPECT_EQ(RenderExchange("o.{aggregate_type}.{event_type}", e), "o.order_line.x_y");
}

// The node to itself (it is blocked or restarted): tests/CMakeLists.txt and
// scripts/test run these alone.
class RabbitMqBrokerFaultTest : public RabbitMqTransportTest {
 protected:
  void TearDown() override {
    if (alarm_) Ctl("set_vm_memory_high_watermark 0.4");  // whatever the test did
    RabbitMqTransportTest::TearDown();
  }
  static int Ctl(const std::string& args, const std::string& then = ">/dev/null") {
    const std::string ctl = EnvOr("OUTBOX_RABBITMQCTL");
    return std::system((ctl + " -q " + args + " 2>/dev/null " + then).c_str());
  }
  // Raises a memory alarm and waits until the node has it.
  bool RaiseMemoryAlarm() {
    alarm_ = true;
    if (Ctl("set_vm_memory_high_watermark 0.0000001") != 0) return false;
    return WaitFor([] { return Ctl("eval 'rabbit_alarm:get_alarms().'", "| grep -q memory") == 0; },
                   Scaled(milliseconds(10000)));
  }
  bool alarm_ = false;
};

TEST_F(RabbitMqBrokerFaultTest, AMemoryAlarmIsAnOutageWithinTheDeadlineAndEndsWithIt) {
  ASSERT_FALSE(EnvOr("OUTBOX_RABBITMQCTL").empty());
  ASSERT_TRUE(admin_->DeclareExchange(exchange_));
  ASSERT_TRUE(admin_->DeclareQueue(queue_, exchange_));
  auto t = Open(false, milliseconds(2000));
  ASSERT_EQ(t->Publish(std::vector<ClaimedEvent>{Ev(type_, "a", 0)})[0].outcome,
            PublishOutcome::kAcked);
  ASSERT_TRUE(RaiseMemoryAlarm());
  std::vector<ClaimedEvent> events;
  for (int i = 1; i <= 20; ++i) events.push_back(Ev(type_, "a", i));
  const auto start = std::chrono::steady_clock::now();
  auto r = t->Publish(events);
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_EQ(Ctl("set_vm_memory_high_watermark 0.4"), 0);
  EXPECT_LE(took, t->MaxPublishTime());
  for (const auto& x : r) {
    EXPECT_EQ(x.outcome, PublishOutcome::kRetryable);
    EXPECT_TRUE(x.broker_unavailable) << x.error;
  }
  EXPECT_NE(r[0].error.find("blocked"), std::string::npos) << r[0].error;
  EXPECT_FALSE(t->Healthy());
  // Once the alarm is gone, the same events go (what the blocked connection
  // had sent may be routed too: at least once, in order).
  std::vector<PublishResult> ok;
  ASSERT_TRUE(WaitFor(
      [&] {
        ok = t->Publish(events);
        return ok.back().outcome == PublishOutcome::kAcked;
      },
      Scaled(milliseconds(20000))))
      << ok.back().error;
  EXPECT_TRUE(t->Healthy());
  auto got = admin_->Drain(queue_);
  ASSERT_GE(got.size(), 21u);
  // Per aggregate, the first copy of each event comes in order.
  std::set<std::string> seen;
  std::vector<std::string> first;
  for (const auto& m : got) {
    if (seen.insert(m.body).second) first.push_back(m.body);
  }
  ASSERT_EQ(first.size(), 21u);
  for (int i = 0; i <= 20; ++i) EXPECT_EQ(first[static_cast<std::size_t>(i)], "a#" + std::to_string(i));
}

TEST_F(RabbitMqBrokerFaultTest, ARestartIsAnOutageAndPersistentMessagesSurviveIt) {
  const std::string data = EnvOr("OUTBOX_PG_DATA");
  ASSERT_FALSE(data.empty());
  const std::string dir = std::filesystem::path(data).parent_path().string();
  ASSERT_TRUE(admin_->DeclareExchange(exchange_));
  ASSERT_TRUE(admin_->DeclareQueue(queue_, exchange_));
  auto t = Open(false, milliseconds(2000));
  ASSERT_EQ(t->Publish(std::vector<ClaimedEvent>{Ev(type_, "a", 0)})[0].outcome,
            PublishOutcome::kAcked);
  admin_.reset();
  std::thread restart([&] {
    ASSERT_EQ(std::system((std::string(OUTBOX_TESTENV_SCRIPT) + " restart-rabbitmq '" + dir +
                           "' >/dev/null 2>&1")
                              .c_str()),
              0);
  });
  // Publishes during the restart are outages, never FAILED; once it is back,
  // they go through a new connection.
  int n = 1;
  bool saw_outage = false, came_back = false;
  const auto until = std::chrono::steady_clock::now() + Scaled(milliseconds(60000));
  while (std::chrono::steady_clock::now() < until) {
    auto r = t->Publish(std::vector<ClaimedEvent>{Ev(type_, "a", n)});
    if (r[0].outcome == PublishOutcome::kAcked) {
      ++n;
      if (saw_outage) {
        came_back = true;
        break;
      }
    } else {
      EXPECT_EQ(r[0].outcome, PublishOutcome::kRetryable) << r[0].error;
      EXPECT_TRUE(r[0].broker_unavailable) << r[0].error;
      saw_outage = true;
      std::this_thread::sleep_for(milliseconds(200));
    }
  }
  restart.join();
  ASSERT_TRUE(came_back) << "RabbitMQ did not come back";
  admin_ = std::make_unique<AmqpClient>(url_);
  ASSERT_TRUE(admin_->ok());
  // Every acked one, in order (a copy whose confirm the restart took may be
  // there twice: at least once).
  std::set<std::string> seen;
  std::vector<std::string> first;
  for (const auto& m : admin_->Drain(queue_)) {
    if (seen.insert(m.body).second) first.push_back(m.body);
  }
  ASSERT_EQ(first.size(), static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) EXPECT_EQ(first[static_cast<std::size_t>(i)], "a#" + std::to_string(i));
}

}  // namespace
}  // namespace outbox::testing
