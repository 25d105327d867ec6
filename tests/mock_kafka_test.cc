// outbox-mock-kafka as a real process: Kafka protocol over TCP for a stock
// librdkafka client, and its control port breaking the broker on purpose.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "kafka_helpers.h"
#include "test_env.h"

namespace outbox::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

struct DeliveryCount {
  int ok = 0;
  int failed = 0;
  rd_kafka_resp_err_t last_error = RD_KAFKA_RESP_ERR_NO_ERROR;
};

void OnDelivery(rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
  auto* c = static_cast<DeliveryCount*>(opaque);
  if (m->err) {
    ++c->failed;
    c->last_error = m->err;
  } else {
    ++c->ok;
  }
}

rd_kafka_t* NewProducer(const std::string& bootstrap, DeliveryCount* counts,
                        const std::string& timeout_ms = "10000") {
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap.c_str(), err, sizeof err);
  rd_kafka_conf_set(conf, "enable.idempotence", "true", err, sizeof err);
  rd_kafka_conf_set(conf, "acks", "all", err, sizeof err);
  rd_kafka_conf_set(conf, "message.timeout.ms", timeout_ms.c_str(), err, sizeof err);
  rd_kafka_conf_set(conf, "log_level", "0", err, sizeof err);
  rd_kafka_conf_set_opaque(conf, counts);
  rd_kafka_conf_set_dr_msg_cb(conf, OnDelivery);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
  EXPECT_NE(rk, nullptr) << err;
  return rk;
}

void Produce(rd_kafka_t* rk, const std::string& topic, int n) {
  for (int i = 0; i < n; ++i) {
    std::string v = "value-" + std::to_string(i);
    std::string k = "key-" + std::to_string(i % 7);
    // librdkafka's RD_KAFKA_V_* macros use C casts.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wold-style-cast"
    rd_kafka_resp_err_t e = rd_kafka_producev(
        rk, RD_KAFKA_V_TOPIC(topic.c_str()), RD_KAFKA_V_KEY(k.data(), k.size()),
        RD_KAFKA_V_VALUE(v.data(), v.size()), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
        RD_KAFKA_V_END);
#pragma GCC diagnostic pop
    ASSERT_EQ(e, RD_KAFKA_RESP_ERR_NO_ERROR) << rd_kafka_err2str(e);
  }
  rd_kafka_flush(rk, static_cast<int>(Scaled(30s).count()));
}

TEST(MockKafka, ProducedMessagesCanBeConsumedBack) {
  MockKafka mk(3, {"events:4"});
  ASSERT_FALSE(mk.bootstrap().empty()) << "no bootstrap file written";
  EXPECT_EQ(mk.Control("ping"), "ok pong");
  DeliveryCount counts;
  rd_kafka_t* p = NewProducer(mk.bootstrap(), &counts);
  Produce(p, "events", 200);
  EXPECT_EQ(counts.ok, 200);
  EXPECT_EQ(counts.failed, 0);
  rd_kafka_destroy(p);

  // Read back every partition from the beginning (no consumer group: no join wait).
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  rd_kafka_conf_set(conf, "bootstrap.servers", mk.bootstrap().c_str(), err, sizeof err);
  rd_kafka_conf_set(conf, "group.id", "reader", err, sizeof err);
  rd_kafka_conf_set(conf, "enable.auto.commit", "false", err, sizeof err);
  rd_kafka_conf_set(conf, "log_level", "0", err, sizeof err);
  rd_kafka_t* c = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
  ASSERT_NE(c, nullptr) << err;
  rd_kafka_topic_partition_list_t* parts = rd_kafka_topic_partition_list_new(4);
  for (int i = 0; i < 4; ++i) {
    rd_kafka_topic_partition_list_add(parts, "events", i)->offset = RD_KAFKA_OFFSET_BEGINNING;
  }
  ASSERT_EQ(rd_kafka_assign(c, parts), RD_KAFKA_RESP_ERR_NO_ERROR);
  rd_kafka_topic_partition_list_destroy(parts);
  int got = 0;
  auto deadline = std::chrono::steady_clock::now() + Scaled(30s);
  while (got < 200 && std::chrono::steady_clock::now() < deadline) {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(c, 200);
    if (!m) continue;
    if (!m->err) ++got;
    rd_kafka_message_destroy(m);
  }
  EXPECT_EQ(got, 200);
  rd_kafka_consumer_close(c);
  rd_kafka_destroy(c);
  EXPECT_EQ(mk.Terminate(), 0) << "SIGTERM must end it cleanly";
}

TEST(MockKafka, BrokerDownFailsDeliveryAndBrokerUpRecovers) {
  MockKafka mk(1, {"t:1"});
  ASSERT_FALSE(mk.bootstrap().empty());
  EXPECT_EQ(mk.Control("broker-down -1"), "ok");
  DeliveryCount down;
  rd_kafka_t* p = NewProducer(mk.bootstrap(), &down, "1500");
  Produce(p, "t", 5);
  EXPECT_EQ(down.ok, 0);
  EXPECT_EQ(down.failed, 5);
  EXPECT_EQ(down.last_error, RD_KAFKA_RESP_ERR__MSG_TIMED_OUT);
  rd_kafka_destroy(p);

  EXPECT_EQ(mk.Control("broker-up -1"), "ok");
  DeliveryCount up;
  p = NewProducer(mk.bootstrap(), &up);
  Produce(p, "t", 5);
  EXPECT_EQ(up.ok, 5);
  rd_kafka_destroy(p);
}

TEST(MockKafka, InjectedRequestErrorsReachTheClient) {
  MockKafka mk(1, {"t:1"});
  ASSERT_FALSE(mk.bootstrap().empty());
  DeliveryCount warm;
  rd_kafka_t* p = NewProducer(mk.bootstrap(), &warm);
  Produce(p, "t", 1);  // connect and learn metadata first
  ASSERT_EQ(warm.ok, 1);
  rd_kafka_destroy(p);
  // A non-retryable produce error fails the message.
  EXPECT_EQ(mk.Control("request-errors Produce MSG_SIZE_TOO_LARGE 1"), "ok");
  DeliveryCount fatal;
  p = NewProducer(mk.bootstrap(), &fatal);
  Produce(p, "t", 1);
  EXPECT_EQ(fatal.failed, 1);
  EXPECT_EQ(fatal.last_error, RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE);
  rd_kafka_destroy(p);
  EXPECT_EQ(mk.Control("rtt -1 50"), "ok");
  EXPECT_EQ(mk.Control("clear-errors Produce"), "ok");
}

TEST(MockKafka, ControlRejectsMalformedCommands) {
  MockKafka mk(1, {});
  ASSERT_FALSE(mk.bootstrap().empty());
  EXPECT_EQ(mk.Control("bootstrap"), "ok " + mk.bootstrap());
  EXPECT_EQ(mk.Control("no-such-command").rfind("error", 0), 0u);
  EXPECT_EQ(mk.Control("request-errors Produce NOT_AN_ERROR 1").rfind("error unknown error", 0), 0u);
  EXPECT_EQ(mk.Control("broker-down x").rfind("error", 0), 0u);
}

TEST(MockKafka, BadArgumentsExitWithUsage) {
  std::string cmd = std::string(OUTBOX_MOCK_KAFKA_BIN) + " --brokers 0 >/dev/null 2>&1";
  int rc = std::system(cmd.c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 2);
}

}  // namespace
}  // namespace outbox::testing
