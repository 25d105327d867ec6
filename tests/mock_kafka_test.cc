// outbox-mock-kafka as a real process: Kafka protocol over TCP for a stock
// librdkafka client, and its control port breaking the broker on purpose.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <librdkafka/rdkafka.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
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

// Just enough of the Kafka protocol (FindCoordinator v0, JoinGroup v0) to put
// the mock's group coordinator into exact states, which a librdkafka consumer
// reaches only by chance: a member's JoinGroup held for the rebalance on one
// connection, that connection closed, the same member joining on another.
class WireConnection {
 public:
  explicit WireConnection(const std::string& host_port) {
    const auto colon = host_port.rfind(':');
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(std::stoi(host_port.substr(colon + 1))));
    inet_pton(AF_INET, host_port.substr(0, colon).c_str(), &sa.sin_addr);
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) Close();
  }
  ~WireConnection() { Close(); }
  WireConnection(const WireConnection&) = delete;
  WireConnection& operator=(const WireConnection&) = delete;

  bool ok() const { return fd_ >= 0; }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  bool Send(int16_t api_key, int32_t correlation_id, const std::string& body) {
    const std::string msg = I16(api_key) + I16(0) + I32(correlation_id) + Str("wire-test") + body;
    const std::string frame = I32(static_cast<int32_t>(msg.size())) + msg;
    return ok() && write(fd_, frame.data(), frame.size()) == static_cast<ssize_t>(frame.size());
  }
  // The next response's bytes after its length (correlation id first).
  std::optional<std::string> Receive(std::chrono::milliseconds timeout) {
    std::string size_bytes;
    if (!ReadExactly(4, timeout, size_bytes)) return std::nullopt;
    uint32_t n = 0;
    std::memcpy(&n, size_bytes.data(), 4);
    std::string body;
    if (!ReadExactly(ntohl(n), timeout, body)) return std::nullopt;
    return body;
  }

  static std::string I16(int16_t v) {
    const uint16_t n = htons(static_cast<uint16_t>(v));
    return std::string(reinterpret_cast<const char*>(&n), 2);
  }
  static std::string I32(int32_t v) {
    const uint32_t n = htonl(static_cast<uint32_t>(v));
    return std::string(reinterpret_cast<const char*>(&n), 4);
  }
  static std::string Str(const std::string& s) { return I16(static_cast<int16_t>(s.size())) + s; }

 private:
  bool ReadExactly(std::size_t n, std::chrono::milliseconds timeout, std::string& out) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    char buf[4096];
    while (out.size() < n) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      pollfd p{fd_, POLLIN, 0};
      if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      const ssize_t r = read(fd_, buf, std::min(sizeof buf, n - out.size()));
      if (r <= 0) return false;
      out.append(buf, static_cast<std::size_t>(r));
    }
    return true;
  }
  int fd_ = -1;
};

// Reads the big-endian integers and strings of a response body.
class WireReader {
 public:
  explicit WireReader(std::string b) : b_(std::move(b)) {}
  int32_t I32() {
    uint32_t n = 0;
    if (Take(4)) std::memcpy(&n, b_.data() + at_ - 4, 4);
    return static_cast<int32_t>(ntohl(n));
  }
  int16_t I16() {
    uint16_t n = 0;
    if (Take(2)) std::memcpy(&n, b_.data() + at_ - 2, 2);
    return static_cast<int16_t>(ntohs(n));
  }
  std::string Str() {
    const int16_t n = I16();
    if (n <= 0 || !Take(static_cast<std::size_t>(n))) return "";
    return b_.substr(at_ - static_cast<std::size_t>(n), static_cast<std::size_t>(n));
  }

 private:
  bool Take(std::size_t n) {
    if (at_ + n > b_.size()) return false;
    at_ += n;
    return true;
  }
  std::string b_;
  std::size_t at_ = 0;
};

constexpr int16_t kFindCoordinator = 10;
constexpr int16_t kJoinGroup = 11;

std::string JoinGroupBody(const std::string& group, int32_t session_ms, const std::string& member) {
  using W = WireConnection;
  return W::Str(group) + W::I32(session_ms) + W::Str(member) + W::Str("consumer") + W::I32(1) +
         W::Str("range") + W::I32(0);
}

struct JoinReply {
  int16_t error = -1;
  int32_t generation = -1;
  std::string member_id;
};

std::optional<JoinReply> ReceiveJoin(WireConnection& c, std::chrono::milliseconds timeout) {
  auto body = c.Receive(timeout);
  if (!body) return std::nullopt;
  WireReader r(*body);
  r.I32();  // correlation id
  JoinReply j;
  j.error = r.I16();
  j.generation = r.I32();
  r.Str();  // protocol
  r.Str();  // leader
  j.member_id = r.Str();
  return j;
}

// HOST:PORT of the group's coordinator, asked of the first bootstrap broker.
std::string FindCoordinator(const std::string& bootstrap, const std::string& group) {
  WireConnection c(bootstrap.substr(0, bootstrap.find(',')));
  if (!c.Send(kFindCoordinator, 1, WireConnection::Str(group))) return "";
  auto body = c.Receive(Scaled(10s));
  if (!body) return "";
  WireReader r(*body);
  r.I32();  // correlation id
  if (r.I16() != 0) return "";
  r.I32();  // node id
  const std::string host = r.Str();
  return host + ":" + std::to_string(r.I32());
}

std::size_t CountOf(const std::string& haystack, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = haystack.find(needle); at != std::string::npos; at = haystack.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

// librdkafka 2.0.2's mock mutes a connection while it holds that connection's
// JoinGroup response for the rebalance, and did not notice the client closing
// it: the member kept the held response, and its next JoinGroup, on a new
// connection, aborted the whole broker process (rdkafka_mock_cgrp.c:567,
// `!member->resp`) -- chaos.short and chaos.mariadb failed on it. This drives
// both sequences that lead there (the held join's connection closed, or still
// open, when the member joins again on a new one) 200 times each, counting in
// the mock's log the times its hooks stepped in (a round where the rebalance
// answered first does not count).
TEST(MockKafka, AMemberJoiningAgainWhileItsFirstJoinIsHeldNeverAbortsTheBroker) {
  MockKafka mk(3, {});
  ASSERT_FALSE(mk.bootstrap().empty());
  const std::string group = "held-join-" + RandomSuffix();
  const std::string coordinator = FindCoordinator(mk.bootstrap(), group);
  ASSERT_FALSE(coordinator.empty());
  // 1,050 ms sessions: the mock holds a join for session - 1,000 = 50 ms.
  constexpr int32_t kSessionMs = 1050;
  WireConnection first(coordinator);
  // An empty group waits 3 s for more members: a longer session for this join.
  ASSERT_TRUE(first.Send(kJoinGroup, 1, JoinGroupBody(group, 6000, "")));
  auto joined = ReceiveJoin(first, Scaled(15s));
  ASSERT_TRUE(joined.has_value());
  ASSERT_EQ(joined->error, 0);
  const std::string member = joined->member_id;
  first.Close();

  // Joins until the coordinator answers, closing each held connection after
  // 300 ms: every join also keeps the member's 1,050 ms session alive.
  auto join_until_answered = [&]() -> std::optional<JoinReply> {
    for (int i = 0; i < 100; ++i) {
      WireConnection c(coordinator);
      if (!c.Send(kJoinGroup, 2, JoinGroupBody(group, kSessionMs, member))) return std::nullopt;
      if (auto r = ReceiveJoin(c, 300ms)) return r;
    }
    return std::nullopt;
  };
  // The first rejoin is held for the old session's 5 s; after it, 50 ms.
  ASSERT_TRUE(join_until_answered().has_value()) << mk.Log();

  // The member joins on a connection, closes it while the join is held, and
  // joins again on a new one, over and over. A round where the rebalance
  // answered first does not count.
  const std::string kSeen = "closed by its client while muted";
  constexpr std::size_t kTimes = 200;
  auto current = std::make_unique<WireConnection>(coordinator);
  ASSERT_TRUE(current->Send(kJoinGroup, 2, JoinGroupBody(group, kSessionMs, member)));
  for (int attempt = 0; attempt < 5 * static_cast<int>(kTimes) && CountOf(mk.Log(), kSeen) < kTimes;
       ++attempt) {
    std::this_thread::sleep_for(3ms);  // the mock reads the join and holds its response
    current->Close();
    current = std::make_unique<WireConnection>(coordinator);
    ASSERT_TRUE(current->Send(kJoinGroup, 3, JoinGroupBody(group, kSessionMs, member)))
        << "attempt " << attempt << "; the mock exited: " << mk.Exited().value_or(0) << "\n"
        << mk.Log();
  }
  auto reply = ReceiveJoin(*current, Scaled(5s));
  ASSERT_TRUE(reply.has_value()) << "no JoinGroup response; the mock exited: "
                                 << mk.Exited().value_or(0) << "\n" << mk.Log();
  EXPECT_EQ(reply->error, 0);
  EXPECT_EQ(reply->member_id, member);
  EXPECT_GT(reply->generation, joined->generation);
  EXPECT_GE(CountOf(mk.Log(), kSeen), kTimes) << "the sequence was driven too rarely to prove anything";
  EXPECT_FALSE(mk.Exited().has_value()) << mk.Log();
  EXPECT_EQ(mk.Log().find("Assertion"), std::string::npos) << mk.Log();

  // The other sequence: the member joins again on a new connection while the
  // old one, holding its first join, is still open. The second join waits in
  // the socket until the first is answered; both get their answer.
  const std::string kWaits = "JoinGroup on fd";
  for (int round = 0; round < 5 * static_cast<int>(kTimes) && CountOf(mk.Log(), kWaits) < kTimes;
       ++round) {
    WireConnection held(coordinator);
    ASSERT_TRUE(held.Send(kJoinGroup, 4, JoinGroupBody(group, kSessionMs, member)));
    std::this_thread::sleep_for(3ms);
    WireConnection again(coordinator);
    ASSERT_TRUE(again.Send(kJoinGroup, 5, JoinGroupBody(group, kSessionMs, member)));
    auto first_reply = ReceiveJoin(held, Scaled(5s));
    auto second_reply = ReceiveJoin(again, Scaled(5s));
    ASSERT_TRUE(first_reply.has_value() && second_reply.has_value())
        << "round " << round << "; the mock exited: " << mk.Exited().value_or(0) << "\n"
        << mk.Log().substr(mk.Log().size() > 3000 ? mk.Log().size() - 3000 : 0);
    EXPECT_EQ(first_reply->error, 0);
    EXPECT_EQ(second_reply->error, 0);
    EXPECT_GT(second_reply->generation, first_reply->generation);
  }
  EXPECT_GE(CountOf(mk.Log(), kWaits), kTimes) << "the sequence was driven too rarely to prove anything";
  EXPECT_FALSE(mk.Exited().has_value()) << mk.Log();

  // The same while the coordinator goes down and comes back between the two
  // joins (the mock closes the connections itself then).
  const std::string id = std::to_string(1 + [&] {
    // Broker ids are 1..3 in bootstrap order.
    std::string rest = mk.bootstrap();
    for (int i = 0; i < 3; ++i) {
      if (rest.substr(0, rest.find(',')) == coordinator) return i;
      rest = rest.substr(rest.find(',') + 1);
    }
    return 0;
  }());
  for (int i = 0; i < 20; ++i) {
    WireConnection held(coordinator);
    ASSERT_TRUE(held.Send(kJoinGroup, 2, JoinGroupBody(group, kSessionMs, member)));
    std::this_thread::sleep_for(5ms);
    ASSERT_EQ(mk.Control("broker-down " + id), "ok");
    ASSERT_EQ(mk.Control("broker-up " + id), "ok");
    held.Close();
    WireConnection again(coordinator);
    ASSERT_TRUE(again.Send(kJoinGroup, 3, JoinGroupBody(group, kSessionMs, member)));
    auto after_outage = ReceiveJoin(again, Scaled(10s));
    ASSERT_TRUE(after_outage.has_value()) << "round " << i << "; the mock exited: " << mk.Exited().value_or(0);
    EXPECT_EQ(after_outage->error, 0);
  }
  EXPECT_FALSE(mk.Exited().has_value()) << mk.Log();
  EXPECT_EQ(mk.Terminate(), 0);
}

// The mock names a new member (a JoinGroup with an empty member id) after its
// struct's address ("%p"): after a member's session expired and its struct was
// freed, the next new member could get the same id while the expired member's
// client still used it, and that client's JoinGroup aborted the broker
// (rdkafka_mock_cgrp.c:567). The hooks give every new member an id of their
// own, never given twice.
TEST(MockKafka, NewMembersGetIdsNeverGivenBeforeEvenAfterAnotherExpired) {
  MockKafka mk(1, {});
  ASSERT_FALSE(mk.bootstrap().empty());
  const std::string group = "new-ids-" + RandomSuffix();
  const std::string coordinator = FindCoordinator(mk.bootstrap(), group);
  ASSERT_FALSE(coordinator.empty());
  // Three new members at once: the empty group holds their joins 3 s.
  std::vector<std::unique_ptr<WireConnection>> conns;
  for (int i = 0; i < 3; ++i) {
    conns.push_back(std::make_unique<WireConnection>(coordinator));
    ASSERT_TRUE(conns.back()->Send(kJoinGroup, 1, JoinGroupBody(group, 4000, "")));
  }
  std::set<std::string> ids;
  for (auto& c : conns) {
    auto reply = ReceiveJoin(*c, Scaled(15s));
    ASSERT_TRUE(reply.has_value()) << mk.Log();
    EXPECT_EQ(reply->error, 0);
    EXPECT_EQ(reply->member_id.rfind("outbox-mock-member-", 0), 0u) << reply->member_id;
    ids.insert(reply->member_id);
  }
  EXPECT_EQ(ids.size(), 3u);
  // No heartbeats: the three sessions (4 s from the joins) end.
  conns.clear();
  std::this_thread::sleep_for(3s);
  // A new member, then a member rejoining with an expired id.
  WireConnection fresh(coordinator);
  ASSERT_TRUE(fresh.Send(kJoinGroup, 2, JoinGroupBody(group, 6000, "")));
  std::this_thread::sleep_for(50ms);
  WireConnection stale(coordinator);
  ASSERT_TRUE(stale.Send(kJoinGroup, 3, JoinGroupBody(group, 6000, *ids.begin())));
  auto fresh_reply = ReceiveJoin(fresh, Scaled(15s));
  auto stale_reply = ReceiveJoin(stale, Scaled(15s));
  ASSERT_TRUE(fresh_reply.has_value() && stale_reply.has_value())
      << "the mock exited: " << mk.Exited().value_or(0) << "\n" << mk.Log();
  EXPECT_EQ(ids.count(fresh_reply->member_id), 0u) << fresh_reply->member_id;
  EXPECT_EQ(stale_reply->member_id, *ids.begin());
  EXPECT_FALSE(mk.Exited().has_value()) << mk.Log();
  EXPECT_EQ(mk.Terminate(), 0);
}

TEST(MockKafka, BadArgumentsExitWithUsage) {
  std::string cmd = std::string(OUTBOX_MOCK_KAFKA_BIN) + " --brokers 0 >/dev/null 2>&1";
  int rc = std::system(cmd.c_str());
  EXPECT_EQ(WEXITSTATUS(rc), 2);
}

}  // namespace
}  // namespace outbox::testing
