// The inbox on RabbitMQ end to end, every part a real process: outbox-relay
// publishes to the testenv's RabbitMQ node, inbox_test_consumer (the C++
// Consumer with the RabbitMQ source and the PostgreSQL inbox) applies one
// effect row per event (effects has no unique key: a double effect shows as
// two rows). Each event once and in order per aggregate, the retry queues
// and the dead-letter queue with Kafka's failure headers, the crash-matrix
// rows of the consumer (killed after the inbox commit and before the ack),
// and ordered handlers sharing one queue through a single active consumer.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "outbox/rabbitmq.h"
#include "rabbitmq_helpers.h"
#include "relay_fixture.h"

namespace outbox::testing {
namespace {

class InboxRabbitMqTest : public RelayE2ETest {
 protected:
  void SetUp() override {
    RelayE2ETest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    OUTBOX_REQUIRE_ENV(amqp_, "OUTBOX_AMQP_URL");
    exchange_ = "ex." + schema_ + ".order";
    group_ = "g-" + schema_;
    queue_ = RabbitMqQueueName(group_, exchange_);
    rabbit_ = std::make_unique<AmqpClient>(amqp_);
    ASSERT_TRUE(rabbit_->ok());
    Exec(admin_.get(), "CREATE TABLE " + schema_ +
                           ".effects (id bigserial PRIMARY KEY, k text, payload text)");
    Exec(admin_.get(), "CREATE TABLE " + schema_ + ".attempts (k text PRIMARY KEY, n int)");
    Exec(admin_.get(), "CREATE TABLE " + schema_ + ".blocklist (k text PRIMARY KEY)");
  }
  void TearDown() override {
    consumers_.clear();
    if (rabbit_ && rabbit_->ok()) {
      for (const char* q : {"", ".retry.1", ".retry.2", ".dlt"}) rabbit_->DeleteQueue(queue_ + q);
      rabbit_->DeleteExchange(exchange_);
    }
    RelayE2ETest::TearDown();
  }

  Subprocess& StartRabbitRelay() {
    return StartRelay({"relay.transport=rabbitmq", "rabbitmq.url=" + amqp_,
                       "rabbitmq.exchange_template=ex." + schema_ + ".{aggregate_type}",
                       "rabbitmq.declare=true", "rabbitmq.timeout_ms=3000"});
  }

  Subprocess& StartConsumer(const std::string& faults = "", bool ordered = false,
                            const std::string& retry = "300,300", std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {OUTBOX_INBOX_CONSUMER_BIN, "--db", url_, "--amqp", amqp_,
                                     "--schema", schema_, "--topic", exchange_, "--group", group_,
                                     "--retry-delays", retry, "--prefetch", "50"};
    if (ordered) {
      argv.push_back("--ordered");
      argv.push_back("1");
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    std::map<std::string, std::string> env;
    if (!faults.empty()) env["OUTBOX_FAULTS"] = faults;
    const std::string log = (std::filesystem::temp_directory_path() /
                             ("inbox-rabbitmq-" + schema_ + "-" + std::to_string(consumers_.size())))
                                .string();
    consumers_.push_back(std::make_unique<Subprocess>(argv, env, log));
    // The relay's messages are unroutable (FAILED) until the group's queue is
    // bound: wait for the consumer to declare it.
    EXPECT_TRUE(WaitFor([&] { return rabbit_->Depth(queue_) >= 0; }, 20s)) << consumers_.back()->Log();
    return *consumers_.back();
  }

  long Num(const std::string& sql) { return std::stol(Exec(admin_.get(), sql)); }
  long Effects() { return Num("SELECT count(*) FROM " + schema_ + ".effects"); }
  long DoubleEffects() {
    return Num("SELECT count(*) FROM (SELECT payload FROM " + schema_ +
               ".effects GROUP BY payload HAVING count(*) > 1) d");
  }
  // Per aggregate, the effects' payloads "agg#n" in n order (by effect id).
  long OutOfOrder() {
    return Num("SELECT count(*) FROM (SELECT k, split_part(payload, '#', 2)::int AS n, "
               "lag(split_part(payload, '#', 2)::int) OVER (PARTITION BY k ORDER BY id) AS prev "
               "FROM " + schema_ + ".effects WHERE payload LIKE '%#%') e WHERE prev IS NOT NULL "
               "AND n < prev");
  }
  // `n` effects, each once and in order per aggregate, and the queue drained;
  // then `c` stops cleanly on SIGTERM.
  void ExpectEachOnceInOrderThenStop(Subprocess& c, long n) {
    ASSERT_TRUE(WaitFor([&] { return Effects() >= n && rabbit_->Depth(queue_) == 0; }, 30s)) << Logs();
    EXPECT_EQ(Effects(), n);
    EXPECT_EQ(DoubleEffects(), 0);
    EXPECT_EQ(OutOfOrder(), 0);
    c.Signal(SIGTERM);
    EXPECT_EQ(c.Wait(Scaled(20s)), 0);
  }
  std::string Logs() {
    std::string s;
    for (auto& c : consumers_) s += "--- consumer\n" + c->Log();
    return s;
  }

  std::string amqp_, exchange_, group_, queue_;
  std::unique_ptr<AmqpClient> rabbit_;
  std::vector<std::unique_ptr<Subprocess>> consumers_;
};

TEST_F(InboxRabbitMqTest, EveryEventIsAppliedOnceInOrderAndAcked) {
  Subprocess& c = StartConsumer();
  StartRabbitRelay();
  EnqueueMany(2, 10, 20);  // 400 events
  ASSERT_TRUE(WaitFor([&] { return Effects() >= 400; }, 60s))
      << Logs() << "\nsent " << CountStatus("SENT") << " effects " << Effects() << " ready "
      << rabbit_->Depth(queue_);
  EXPECT_EQ(Effects(), 400);
  EXPECT_EQ(DoubleEffects(), 0);
  EXPECT_EQ(OutOfOrder(), 0);
  EXPECT_TRUE(WaitFor([&] { return rabbit_->Depth(queue_) == 0; }, 10s)) << "every message acked";
  c.Signal(SIGTERM);
  EXPECT_EQ(c.Wait(Scaled(20s)), 0) << c.Log();
  EXPECT_NE(c.Log().find("counters applied=400"), std::string::npos) << c.Log();
}

// Transient failures go through the group's retry queues (a copy waits there
// until due, then comes back through the main queue); permanent ones and
// those past the last retry go to the dead-letter queue with Kafka's headers.
TEST_F(InboxRabbitMqTest, RetryQueuesThenTheDeadLetterQueueWithTheFailureHeaders) {
  StartConsumer();
  StartRabbitRelay();
  ASSERT_TRUE(EnqueueOne("once-1", "transient-once"));
  ASSERT_TRUE(EnqueueOne("perm-1", "permanent"));
  ASSERT_TRUE(EnqueueOne("forever-1", "transient-forever"));
  ASSERT_TRUE(EnqueueOne("ok-1", "ok"));
  ASSERT_TRUE(WaitFor([&] {
    return Effects() == 2 && rabbit_->Depth(queue_ + ".dlt") == 2;
  }, 30s)) << Logs();
  EXPECT_EQ(Exec(admin_.get(), "SELECT string_agg(k, ',' ORDER BY k) FROM " + schema_ + ".effects"),
            "ok-1,once-1");
  std::map<std::string, AmqpMessage> dead;
  for (AmqpMessage& m : rabbit_->Drain(queue_ + ".dlt")) dead[m.body] = std::move(m);
  ASSERT_EQ(dead.size(), 2u);
  const AmqpMessage& perm = dead.at("permanent");
  EXPECT_EQ(perm.headers.at("outbox-error-class"), "permanent");
  EXPECT_EQ(perm.headers.at("outbox-error-message"), "contract violation");
  EXPECT_EQ(perm.headers.at("outbox-original-topic"), exchange_);
  EXPECT_EQ(perm.headers.at("outbox-attempt"), "1");
  EXPECT_EQ(perm.headers.at(kRabbitMqKeyHeader), "perm-1") << "the key travels with the copy";
  EXPECT_FALSE(perm.message_id.empty());
  EXPECT_EQ(perm.delivery_mode, 2) << "persistent";
  const AmqpMessage& forever = dead.at("transient-forever");
  EXPECT_EQ(forever.headers.at("outbox-error-class"), "transient");
  EXPECT_EQ(forever.headers.at("outbox-attempt"), "3") << "two retries, then the dead letter";
  EXPECT_EQ(forever.headers.at(kRabbitMqKeyHeader), "forever-1");
  EXPECT_EQ(rabbit_->Depth(queue_ + ".retry.1"), 0);
  EXPECT_EQ(rabbit_->Depth(queue_ + ".retry.2"), 0);
}

// outboxctl dlt replay --queue: the matching dead-lettered messages leave the
// dead-letter queue for the group's queue and are applied once; the others
// stay, in place. A dry run and a copy with no queue to go to change nothing.
TEST_F(InboxRabbitMqTest, DltReplayMovesTheMatchingDeadLettersBackToTheGroupsQueue) {
  Exec(admin_.get(), "INSERT INTO " + schema_ + ".blocklist VALUES ('b-1'), ('b-2')");
  StartConsumer();
  StartRabbitRelay();
  ASSERT_TRUE(EnqueueOne("b-1", "blocked"));
  ASSERT_TRUE(EnqueueOne("b-2", "blocked"));
  ASSERT_TRUE(EnqueueOne("ok-1", "ok"));
  const std::string dlt = queue_ + ".dlt";
  ASSERT_TRUE(WaitFor([&] { return Effects() == 1 && rabbit_->Depth(dlt) == 2; }, 30s)) << Logs();
  const std::string ctl = std::string(OUTBOX_OUTBOXCTL_BIN) + " --amqp '" + amqp_ + "' dlt replay --queue " + dlt;

  CommandRun dry = RunCommand(ctl + " --dry-run");
  EXPECT_EQ(dry.code, 0) << dry.out;
  EXPECT_NE(dry.out.find("would replay 2 of 2 dead-lettered messages from " + dlt), std::string::npos) << dry.out;
  // What the command took and did not ack goes back when its connection
  // closes, which the broker handles after the command has exited.
  EXPECT_TRUE(WaitFor([&] { return rabbit_->Depth(dlt) == 2; }, 10s)) << "a dry run leaves every message in place";

  // A copy whose group has no queue: not replayed, named, left in place.
  ASSERT_TRUE(rabbit_->Publish("", dlt, "stray",
                               {{"outbox-original-topic", exchange_}, {"outbox-group", "no-such-group"},
                                {kRabbitMqKeyHeader, "stray-1"}}));
  ASSERT_TRUE(WaitFor([&] { return rabbit_->Depth(dlt) == 3; }, 10s));
  CommandRun stray = RunCommand(ctl + " --key stray-1");
  EXPECT_EQ(stray.code, 0) << stray.out;
  EXPECT_NE(stray.out.find("replayed 0 of 3"), std::string::npos) << stray.out;
  EXPECT_NE(stray.out.find("not replayed: " + dlt + "/2: its group's queue 'no-such-group." + exchange_ +
                           "' does not exist"),
            std::string::npos)
      << stray.out;
  EXPECT_TRUE(WaitFor([&] { return rabbit_->Depth(dlt) == 3; }, 10s));

  Exec(admin_.get(), "DELETE FROM " + schema_ + ".blocklist WHERE k = 'b-1'");
  CommandRun one = RunCommand(ctl + " --key b-1 --json");
  EXPECT_EQ(one.code, 0) << one.out;
  EXPECT_NE(one.out.find("\"replayed\":1"), std::string::npos) << one.out;
  EXPECT_NE(one.out.find("\"scanned\":3"), std::string::npos) << one.out;
  ASSERT_TRUE(WaitFor([&] { return Effects() == 2; }, 20s)) << Logs();
  EXPECT_EQ(Num("SELECT count(*) FROM " + schema_ + ".effects WHERE k = 'b-1'"), 1);
  EXPECT_TRUE(WaitFor([&] { return rabbit_->Depth(dlt) == 2; }, 10s)) << "b-2 and the stray copy stay dead-lettered";

  Exec(admin_.get(), "DELETE FROM " + schema_ + ".blocklist WHERE k = 'b-2'");
  CommandRun again = RunCommand(ctl + " --key b-2");
  EXPECT_EQ(again.code, 0) << again.out;
  ASSERT_TRUE(WaitFor([&] { return Effects() == 3; }, 20s)) << Logs();
  // The stray copy is the one left, untouched.
  ASSERT_TRUE(WaitFor([&] { return rabbit_->Depth(dlt) == 1; }, 10s));
  std::vector<AmqpMessage> left = rabbit_->Drain(dlt);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].body, "stray");
  EXPECT_EQ(Effects(), 3);
  EXPECT_EQ(Num("SELECT count(*) FROM " + schema_ + ".effects WHERE k = 'b-2'"), 1);
  EXPECT_EQ(rabbit_->Depth(queue_), 0);
}

// Crash matrix, consumer side: killed after the inbox committed and before
// the ack. The broker gives the unacked messages to the next consumer; the
// inbox absorbs them: each effect once.
TEST_F(InboxRabbitMqTest, CrashMatrix_ConsumerDiesAfterCommitBeforeAck_EffectsOnce) {
  OUTBOX_REQUIRE_FAULT_POINTS();
  Subprocess& first = StartConsumer("Inbox::AfterCommitBeforeOffsetCommit=crash@1");
  StartRabbitRelay();
  EnqueueMany(1, 10, 10);  // 100 events
  first.Wait(Scaled(30s));
  ASSERT_GT(Effects(), 0) << first.Log();
  Subprocess& second = StartConsumer();
  ExpectEachOnceInOrderThenStop(second, 100);
  if (HasFatalFailure()) return;
  EXPECT_EQ(second.Log().find("duplicates=0"), std::string::npos)
      << "the redelivered batch was absorbed: " << second.Log();
}

// A retry copy delivered before it is due (the consumer that forwarded it ran
// on a clock ahead of this one's): the engine pauses it, the source acks
// nothing at or past it, ends the session and delivers it again once due.
// Every message is applied once, the copy after its due time, and the queue
// ends empty with nothing unacked (a session that went on would stall: its
// acks could never pass the copy).
TEST_F(InboxRabbitMqTest, ARetryCopyDeliveredBeforeItsDueTimeWaitsAndNothingAfterItIsAcked) {
  Subprocess& c = StartConsumer("", false, "300,300", {"--batch", "50"});
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  // Straight into the group's queue, as the retry queue's dead-lettering
  // would put it, but 2 s early; then ten fresh messages behind it.
  ASSERT_TRUE(rabbit_->Publish("", queue_, "early-copy",
                               {{"outbox-event-id", "ev-early"},
                                {"outbox-retry-due-at", std::to_string(now_ms + 2000)},
                                {"outbox-retry-topic", exchange_ + ".retry.1"},
                                {"outbox-message-key", "k-early"},
                                {"outbox-attempt", "1"}}));
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(rabbit_->Publish("", queue_, "fresh-" + std::to_string(i),
                                 {{"outbox-event-id", "ev-fresh-" + std::to_string(i)},
                                  {"outbox-message-key", "k-" + std::to_string(i)}}));
  }
  ASSERT_TRUE(WaitFor([&] { return Effects() >= 11; }, 30s)) << c.Log();
  const auto applied_at = std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  EXPECT_GE(applied_at, now_ms + 2000) << "the copy waited for its due time";
  EXPECT_EQ(DoubleEffects(), 0);
  EXPECT_EQ(Num("SELECT count(*) FROM " + schema_ + ".effects WHERE payload = 'early-copy'"), 1);
  // Everything acked: nothing ready, and the consumer still takes new work.
  ASSERT_TRUE(rabbit_->Publish("", queue_, "after", {{"outbox-event-id", "ev-after"}, {"outbox-message-key", "k-a"}}));
  EXPECT_TRUE(WaitFor([&] { return Effects() >= 12 && rabbit_->Depth(queue_) == 0; }, 20s)) << c.Log();
  c.Signal(SIGTERM);
  EXPECT_EQ(c.Wait(Scaled(20s)), 0) << c.Log();
  // The fresh messages applied in the copy's batch were not acked: they came
  // again in the new session and were absorbed.
  EXPECT_NE(c.Log().find("counters applied=12 "), std::string::npos) << c.Log();
}

// Crash matrix, consumer side: killed inside the inbox transaction (the
// effects written, not committed). Nothing of the batch counts; the broker
// gives the deliveries to the next consumer: each effect once.
TEST_F(InboxRabbitMqTest, CrashMatrix_ConsumerDiesMidTransaction_EffectsOnce) {
  OUTBOX_REQUIRE_FAULT_POINTS();
  Subprocess& first = StartConsumer("Inbox::InsideTransaction=crash@1");
  StartRabbitRelay();
  EnqueueMany(1, 10, 10);  // 100 events
  first.Wait(Scaled(30s));
  EXPECT_EQ(Effects(), 0) << "the transaction died uncommitted: " << first.Log();
  Subprocess& second = StartConsumer();
  ExpectEachOnceInOrderThenStop(second, 100);
}

// Ordered handlers share the queue through x-single-active-consumer: one
// reads, the other stands by and takes over when the first is SIGKILLed;
// per-aggregate order and each effect once hold across the takeover.
TEST_F(InboxRabbitMqTest, OrderedConsumersTakeOverInOrderWithASingleActiveConsumer) {
  // a acks each batch of 10 100 ms after its commit: it still holds
  // deliveries when it is killed, whatever the machine's speed.
  Subprocess& a = StartConsumer("Inbox::AfterCommitBeforeOffsetCommit=delay:100", /*ordered=*/true, "300,300",
                                {"--batch", "10"});
  // a consumes before b subscribes: a is the active consumer.
  ASSERT_TRUE(WaitFor([&] { return rabbit_->Consumers(queue_) == 1; }, 20s)) << a.Log();
  Subprocess& b = StartConsumer("", /*ordered=*/true, "300,300", {"--batch", "10"});
  StartRabbitRelay();
  EnqueueMany(2, 5, 20);  // 200 events
  ASSERT_TRUE(WaitFor([&] { return Effects() >= 60; }, 30s)) << Logs();
  EXPECT_EQ(b.Log().find("batch done"), std::string::npos) << "one consumer reads at a time";
  a.Signal(SIGKILL);
  a.Wait(Scaled(10s));
  EXPECT_LT(Effects(), 200) << "a was killed with deliveries in flight";
  EnqueueMany(2, 5, 40, /*from=*/20);  // 200 more, after the takeover
  ASSERT_TRUE(WaitFor([&] { return Effects() >= 400; }, 60s))
      << Logs() << "\nsent " << CountStatus("SENT") << " effects " << Effects() << " ready "
      << rabbit_->Depth(queue_);
  EXPECT_EQ(Effects(), 400);
  EXPECT_EQ(DoubleEffects(), 0);
  EXPECT_EQ(OutOfOrder(), 0);
  b.Signal(SIGTERM);
  EXPECT_EQ(b.Wait(Scaled(20s)), 0);
}

class RabbitMqBrokerFaultInboxTest : public InboxRabbitMqTest {};

// Crash matrix, the broker on the consumer's side: the node is SIGKILLed
// while the consumer has deliveries unacked (and the relay publishes), then
// restarted with its data. The consumer reconnects; what it had not acked
// comes again and the inbox absorbs it: every effect once, in order per
// aggregate. (It needs the node to itself: scripts/test runs it alone.)
TEST_F(RabbitMqBrokerFaultInboxTest, CrashMatrix_BrokerKilledWhileConsuming_EffectsOnceInOrder) {
  const std::string dir = std::filesystem::path(EnvOr("OUTBOX_PG_DATA")).parent_path().string();
  std::string pid;
  std::ifstream(dir + "/rabbitmq/pid") >> pid;
  ASSERT_FALSE(pid.empty()) << "no pid file in " << dir << "/rabbitmq";
  Subprocess& c = StartConsumer();
  StartRabbitRelay();
  EnqueueMany(2, 10, 50);  // 1,000 events
  ASSERT_TRUE(WaitFor([&] { return Effects() >= 100; }, Scaled(30s))) << Logs();
  rabbit_.reset();
  ASSERT_EQ(::kill(std::stoi(pid), SIGKILL), 0);
  const long at_kill = Effects();
  ASSERT_EQ(std::system((std::string(OUTBOX_TESTENV_SCRIPT) + " restart-rabbitmq '" + dir +
                         "' >/dev/null 2>&1")
                            .c_str()),
            0);
  ASSERT_TRUE(WaitFor([&] { return Effects() >= 1000; }, Scaled(90s)))
      << Logs() << "\neffects " << Effects() << " sent " << CountStatus("SENT");
  EXPECT_LT(at_kill, 1000) << "the kill came after the last effect: it proved nothing";
  EXPECT_EQ(Effects(), 1000);
  EXPECT_EQ(DoubleEffects(), 0);
  EXPECT_EQ(OutOfOrder(), 0);
  EXPECT_NE(c.Log().find("rabbitmq consumer session ended"), std::string::npos) << c.Log();
  rabbit_ = std::make_unique<AmqpClient>(amqp_);  // for TearDown
}

// The source by itself, in process: the queue's depth as lag (messages ready:
// the prefetched ones are not), and Rewind gives the unacked deliveries back
// in their place (the next session starts with the same first message).
TEST_F(InboxRabbitMqTest, TheSourceReportsTheQueueDepthAndRewindsInPlace) {
  StreamLogger logger(false, LogLevel::kWarn);
  RabbitMqInboxSourceOptions o;
  o.broker.url = amqp_;
  o.broker.declare = true;
  o.group = group_;
  o.prefetch = 10;
  auto source = OpenRabbitMqInboxSource(o, logger);
  ASSERT_TRUE(source.ok()) << source.status().ToString();
  InboxSource& src = **source;
  ASSERT_TRUE(src.Subscribe({exchange_}).ok());
  EXPECT_TRUE(src.Poll(1, 10ms).empty());  // connects, declares: nothing yet
  EXPECT_EQ(src.NotReadyReason(), "");
  StartRabbitRelay();
  EnqueueMany(1, 10, 10);  // 100 events
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 100; }, 30s));
  std::vector<InboundMessage> first = src.Poll(5, 50ms);
  ASSERT_EQ(first.size(), 5u);
  EXPECT_EQ(first[0].topic, exchange_);
  EXPECT_FALSE(first[0].key.empty());
  ASSERT_NE(first[0].Header("outbox-event-id"), nullptr);
  std::this_thread::sleep_for(1100ms);  // the depth is read at most once a second
  (void)src.Poll(1, 0ms);
  const std::vector<PartitionLag> lag = src.Lag();
  ASSERT_EQ(lag.size(), 1u);
  EXPECT_EQ(lag[0].tp.topic, exchange_);
  EXPECT_GE(lag[0].lag, 80) << "100 sent, at most 10 + 10 delivered ahead";
  EXPECT_LE(lag[0].lag, 90);
  // Nothing acked: a rewind gives everything back, the first message first.
  src.Rewind({{{first[0].topic, first[0].partition}, first[0].offset}});
  std::vector<InboundMessage> again;
  ASSERT_TRUE(WaitFor([&] {
    auto m = src.Poll(1, 0ms);
    again.insert(again.end(), m.begin(), m.end());
    return !again.empty();
  }, 10s));
  EXPECT_EQ(*again[0].Header("outbox-event-id"), *first[0].Header("outbox-event-id"));
  EXPECT_NE(again[0].partition, first[0].partition) << "a new session";
  // Acks of the ended session are dropped (its deliveries came back).
  EXPECT_TRUE(src.Commit({{{first[0].topic, first[0].partition}, first[4].offset + 1}}).ok());
  EXPECT_TRUE(src.Commit({{{again[0].topic, again[0].partition}, again[0].offset + 1}}).ok());
  std::this_thread::sleep_for(1100ms);
  (void)src.Poll(1, 0ms);
  // 100 - 1 acked - 10 delivered ahead (prefetch); an ack of the ended
  // session honoured would leave 84.
  EXPECT_GE(src.Lag()[0].lag, 88) << "only one message acked";
  EXPECT_LE(src.Lag()[0].lag, 89);
}

// A handler made ordered whose queue exists unordered (declared without
// x-single-active-consumer): the broker refuses the declaration, and
// outbox-consumer exits 2 at start naming the handler and the queue, before it
// touches the database (--migrate creates nothing).
TEST_F(InboxRabbitMqTest, AQueueThatExistsWithOtherArgumentsExitsTwoNamingItTouchingNothing) {
  ASSERT_TRUE(rabbit_->DeclareExchange(exchange_));
  ASSERT_TRUE(rabbit_->DeclareQueue(queue_, exchange_));  // no x-single-active-consumer
  const auto dir = std::filesystem::temp_directory_path();
  const std::string path = (dir / ("outbox-consumer-" + schema_ + "-args.toml")).string();
  std::ofstream(path) << "[[handler]]\ntopic = \"" << exchange_ << "\"\ngroup = \"" << group_
                      << "\"\nbroker = \"rabbitmq\"\nordered = true\nsql = \"SELECT 1\"\n";
  consumers_.push_back(std::make_unique<Subprocess>(
      std::vector<std::string>{OUTBOX_CONSUMER_BIN, "--config", path, "--migrate", "--set",
                               "database.url=" + url_, "--set", "database.inbox_schema=" + schema_ + "_inbox",
                               "--set", "rabbitmq.url=" + amqp_},
      std::map<std::string, std::string>{}, (dir / ("outbox-consumer-" + schema_ + "-args.log")).string()));
  Subprocess& c = *consumers_.back();
  EXPECT_EQ(c.Wait(Scaled(30s)), 2) << c.Log();
  const std::string log = c.Log();
  EXPECT_NE(log.find("handler.0"), std::string::npos) << log;
  EXPECT_NE(log.find(queue_), std::string::npos) << log;
  EXPECT_NE(log.find("PRECONDITION_FAILED"), std::string::npos) << log;
  EXPECT_EQ(Exec(admin_.get(), "SELECT count(*) FROM pg_namespace WHERE nspname = '" + schema_ + "_inbox'"), "0")
      << "the database was touched";
}

// outbox-consumer with a handler on RabbitMQ (broker = "rabbitmq": the
// environment names the testenv's Kafka too): an sql handler applies each event once, /readyz is
// 200, and an unreachable broker is said on /readyz without the password.
TEST_F(InboxRabbitMqTest, OutboxConsumerAppliesEachEventOnceFromRabbitMq) {
  const auto dir = std::filesystem::temp_directory_path();
  const std::string path = (dir / ("outbox-consumer-" + schema_ + ".toml")).string();
  std::ofstream(path) << "[http]\nlisten = \"127.0.0.1:0\"\n[[handler]]\ntopic = \"" << exchange_
                      << "\"\ngroup = \"" << group_ << "\"\nbroker = \"rabbitmq\"\nordered = true\nsql = \"INSERT INTO "
                      << schema_ << ".effects (k, payload) VALUES ($4, convert_from($1, 'UTF8'))\"\n";
  auto start = [&](const std::string& amqp, const std::string& name) {
    std::vector<std::string> argv = {OUTBOX_CONSUMER_BIN, "--config", path, "--migrate",
                                     "--set", "database.url=" + url_,
                                     "--set", "database.inbox_schema=" + schema_,
                                     "--set", "rabbitmq.url=" + amqp};
    consumers_.push_back(std::make_unique<Subprocess>(
        argv, std::map<std::string, std::string>{}, (dir / ("outbox-consumer-" + schema_ + name)).string()));
    return consumers_.back().get();
  };
  // A broker that does not answer: not ready, naming it, the password hidden.
  Subprocess* down = start("amqp://guest:s3cret-pw@127.0.0.1:1/%2F", "-down.log");
  const int down_port = HttpPort(*down);
  int status = 0;
  std::string why;
  EXPECT_TRUE(WaitFor([&] {
    why = Get(down_port, "/readyz", &status);
    return status == 503 && why.find("broker unreachable") != std::string::npos;
  }, 20s)) << why << down->Log();
  EXPECT_EQ(why.find("s3cret-pw"), std::string::npos);
  EXPECT_EQ(down->Log().find("s3cret-pw"), std::string::npos);
  down->Signal(SIGTERM);
  EXPECT_EQ(down->Wait(Scaled(20s)), 0) << down->Log();

  Subprocess* c = start(amqp_, ".log");
  const int port = HttpPort(*c);
  ASSERT_TRUE(WaitFor([&] { Get(port, "/readyz", &status); return status == 200; }, 30s)) << c->Log();
  StartRabbitRelay();
  EnqueueMany(2, 5, 20);  // 200 events
  ASSERT_TRUE(WaitFor([&] { return Effects() >= 200; }, 60s)) << c->Log();
  EXPECT_EQ(Effects(), 200);
  EXPECT_EQ(DoubleEffects(), 0);
  EXPECT_EQ(OutOfOrder(), 0);
  // The lag gauge is the queue's depth: 0 once drained.
  EXPECT_TRUE(WaitFor([&] {
    return Metric(Get(port, "/metrics"), "outbox_inbox_consumer_lag_messages") == 0;
  }, 10s)) << Get(port, "/metrics");
  c->Signal(SIGTERM);
  EXPECT_EQ(c->Wait(Scaled(20s)), 0) << c->Log();
}

}  // namespace
}  // namespace outbox::testing
