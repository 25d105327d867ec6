// The inbox engine without processes: its pure plan (plan.h), and its loop with
// in-process fakes of InboxSource and InboxStore. Runs under ASan and TSan.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "metrics_text.h"
#include "outbox/consumer.h"
#include "fakes.h"
#include "plan.h"

namespace outbox {
namespace {

using namespace std::chrono_literals;
using namespace inbox_internal;
using testing::ExpectShortestBucketBounds;

InboundMessage Msg(const std::string& topic, int partition, std::int64_t offset,
                   const std::string& id, const std::string& payload = "ok") {
  InboundMessage m;
  m.topic = topic;
  m.partition = partition;
  m.offset = offset;
  m.key = "k-" + id;
  m.payload = payload;
  m.headers["outbox-event-id"] = id;
  return m;
}

// ---- the plan ------------------------------------------------------------

TEST(InboxPlanTest, RetryTopicsAreRecognisedStrictly) {
  EXPECT_EQ(SplitRetry("orders.retry.2"), std::make_pair(std::string("orders"), 2));
  EXPECT_EQ(SplitRetry("orders"), std::make_pair(std::string("orders"), 0));
  EXPECT_EQ(SplitRetry("orders.retry.x"), std::make_pair(std::string("orders.retry.x"), 0));
  EXPECT_EQ(SplitRetry("orders.retry.2b"), std::make_pair(std::string("orders.retry.2b"), 0));
  EXPECT_EQ(SplitRetry("orders.retry.0"), std::make_pair(std::string("orders.retry.0"), 0));
}

TEST(InboxPlanTest, KeysThatAreNotTextOrThrowAreRejectedBeforeTheStore) {
  std::vector<InboundMessage> msgs = {Msg("t", 0, 0, "good")};
  for (int b = 0x80; b <= 0xff; ++b) {  // every byte that cannot start valid UTF-8 alone
    msgs.push_back(Msg("t", 0, static_cast<std::int64_t>(msgs.size()),
                       std::string("id-") + static_cast<char>(b)));
  }
  msgs.push_back(Msg("t", 0, static_cast<std::int64_t>(msgs.size()), std::string("a\0b", 3)));
  InboundMessage no_id = Msg("t", 0, static_cast<std::int64_t>(msgs.size()), "x");
  no_id.headers.clear();
  msgs.push_back(no_id);
  Intake in = PlanIntake(msgs, 0, DedupByEventId());
  ASSERT_EQ(in.apply.size(), 1u);
  EXPECT_EQ(in.keys[0], "good");
  for (std::size_t i = 1; i < msgs.size(); ++i) {
    ASSERT_TRUE(in.outcomes[i].has_value()) << i;
    EXPECT_EQ(in.outcomes[i]->outcome, Outcome::kPermanent) << i;
    EXPECT_TRUE(in.taken[i]) << "rejected messages are consumed (dead-lettered), not held";
  }
  EXPECT_NE(in.outcomes[1]->error.find("UTF-8"), std::string::npos) << in.outcomes[1]->error;
  EXPECT_NE(in.outcomes.back()->error.find("outbox-event-id"), std::string::npos);

  DedupKeyFn throws = [](const InboundMessage&) -> Result<std::string> {
    throw std::runtime_error("bad payload");
  };
  DedupKeyFn throws_int = [](const InboundMessage&) -> Result<std::string> { throw 42; };
  for (const DedupKeyFn& fn : {throws, throws_int}) {
    Intake t = PlanIntake(std::span(msgs.data(), 1), 0, fn);
    EXPECT_TRUE(t.apply.empty());
    ASSERT_TRUE(t.outcomes[0].has_value());
    EXPECT_EQ(t.outcomes[0]->outcome, Outcome::kPermanent);
    EXPECT_NE(t.outcomes[0]->error.find("threw"), std::string::npos);
  }
}

// Two groups on one topic share its retry and dead-letter topics (issue 41):
// a copy stamped with another group is taken and skipped — not applied, not a
// duplicate, never pausing its partition however far its due time — while its
// own group's copies and unstamped ones (older releases) are consumed.
TEST(InboxPlanTest, CopiesAnotherGroupFailedAreSkippedNotAppliedOrWaitedFor) {
  std::vector<InboundMessage> msgs = {Msg("t.retry.1", 0, 5, "theirs"), Msg("t.retry.1", 0, 6, "mine"),
                                      Msg("t.retry.1", 0, 7, "old"), Msg("t", 1, 3, "replayed")};
  msgs[0].headers[kGroup] = "ga";
  msgs[0].headers[kDueAt] = "999999";  // far ahead: would pause the partition if it were ours
  msgs[1].headers[kGroup] = "gb";
  msgs[3].headers[kGroup] = "ga";  // outboxctl dlt replay keeps the header
  Intake in = PlanIntake(msgs, 5000, DedupByEventId(), "gb");
  EXPECT_EQ(in.apply, (std::vector<std::size_t>{1, 2}));
  EXPECT_TRUE(in.pauses.empty()) << "another group's due time pauses nothing";
  EXPECT_EQ(in.other_groups, 2u);
  EXPECT_EQ(in.taken, (std::vector<bool>{true, true, true, true}));
  EXPECT_EQ(PlanCommit(msgs, in.taken).at({"t.retry.1", 0}), 8);
  Intake legacy = PlanIntake(msgs, 5000, DedupByEventId());  // no group: every copy is ours
  EXPECT_EQ(legacy.other_groups, 0u);

  ConsumerOptions o;
  o.group = "gb";
  o.retry_delays = {100ms};
  std::vector<std::optional<MessageOutcome>> out = {std::nullopt, MessageOutcome{Outcome::kTransient, "x"},
                                                    std::nullopt, std::nullopt};
  Forwards f = PlanForwards(msgs, out, o, 1000, "2026-12-05T00:00:00Z");
  ASSERT_EQ(f.messages.size(), 1u);
  EXPECT_EQ(f.messages[0].headers.at(kGroup), "gb") << "copies are stamped with the group that failed them";
}

TEST(InboxPlanTest, ARetryNotYetDueHoldsItsPartitionOnly) {
  std::vector<InboundMessage> msgs = {Msg("t.retry.1", 0, 5, "a"), Msg("t.retry.1", 0, 6, "b"),
                                      Msg("t.retry.1", 1, 9, "c"), Msg("t", 0, 1, "d")};
  msgs[0].headers[kDueAt] = "2000";  // due
  msgs[1].headers[kDueAt] = "9000";  // not yet: holds partition 0 from offset 6
  msgs[2].headers[kDueAt] = "1000";
  Intake in = PlanIntake(msgs, 5000, DedupByEventId());
  EXPECT_EQ(in.apply, (std::vector<std::size_t>{0, 2, 3}));
  ASSERT_EQ(in.pauses.size(), 1u);
  EXPECT_EQ(in.pauses.begin()->first, (TopicPartition{"t.retry.1", 0}));
  EXPECT_EQ(in.pauses.begin()->second, std::make_pair(std::int64_t{6}, std::int64_t{9000}));
  auto next = PlanCommit(msgs, in.taken);
  EXPECT_EQ(next.at({"t.retry.1", 0}), 6) << "commit stops before the held message";
  EXPECT_EQ(next.at({"t.retry.1", 1}), 10);
  EXPECT_EQ(next.at({"t", 0}), 2);
}

TEST(InboxPlanTest, ForwardsKeepANullValueAndPutOneLineInTheErrorMessage) {
  ConsumerOptions o;
  o.retry_delays = {100ms, 200ms};
  std::vector<InboundMessage> msgs = {Msg("t", 0, 0, "a"), Msg("t.retry.2", 1, 3, "b"),
                                      Msg("t", 0, 1, "c")};
  msgs[0].payload.clear();
  msgs[0].payload_is_null = true;
  msgs[1].headers[kOrigTopic] = "t";
  msgs[1].headers[kFirstFailure] = "earlier";
  msgs[1].headers[kDueAt] = "1";
  const std::string libpq =
      "insert failed: ERROR:  duplicate key value violates unique constraint \"x\"\n"
      "DETAIL:  Key (k)=(1) already exists.\nCONTEXT:  SQL function \"f\" statement 1";
  std::vector<std::optional<MessageOutcome>> out = {
      MessageOutcome{Outcome::kTransient, libpq}, MessageOutcome{Outcome::kTransient, "again"},
      MessageOutcome{Outcome::kApplied, ""}};
  Forwards f = PlanForwards(msgs, out, o, 1000, "2026-11-30T00:00:00Z");
  ASSERT_EQ(f.messages.size(), 2u);
  const OutboundMessage& a = f.messages[0];
  EXPECT_EQ(a.topic, "t.retry.1");
  EXPECT_TRUE(a.payload_is_null) << "a tombstone stays a tombstone";
  EXPECT_EQ(a.headers.at(kErrMessage),
            "insert failed: ERROR:  duplicate key value violates unique constraint \"x\"");
  EXPECT_EQ(a.headers.at(kErrDetail), libpq);
  EXPECT_EQ(a.headers.at(kDueAt), "1100");
  EXPECT_EQ(a.headers.at(kOrigTopic), "t");
  EXPECT_EQ(a.headers.at(kAttempt), "1");
  EXPECT_EQ(f.kinds[0], ForwardKind::kRetry);
  const OutboundMessage& b = f.messages[1];
  EXPECT_EQ(b.topic, "t.dlt") << "after the last retry topic";
  EXPECT_EQ(b.headers.at(kAttempt), "3");
  EXPECT_EQ(b.headers.at(kFirstFailure), "earlier") << "the first failure is kept";
  EXPECT_EQ(b.headers.count(kDueAt), 0u);
  EXPECT_EQ(f.kinds[1], ForwardKind::kDeadLetter);
  EXPECT_EQ(f.classes[1], Outcome::kTransient);
}

// A copy of exactly forward_max_bytes goes whole (to its retry topic); over it
// by no more than its error detail, it goes without the detail; one byte more
// and it is dead-lettered as a bounded record: the value cut to fit exactly,
// its original size and the cut said. A copy whose headers alone are
// too large loses the value, the event's own headers (but its id) and the
// error detail; a huge key is cut.
TEST(InboxPlanTest, ACopyOneByteOverForwardMaxBytesIsDeadLetteredCutToFit) {
  ConsumerOptions o;
  o.retry_delays = {100ms};
  o.forward_max_bytes = kMinForwardMaxBytes * 4;
  const std::vector<std::optional<MessageOutcome>> transient = {MessageOutcome{Outcome::kTransient, "down"}};
  std::vector<InboundMessage> msgs = {Msg("t", 2, 17, "a")};
  const OutboundMessage probe = PlanForwards(msgs, transient, o, 1000, "now").messages.at(0);
  const std::size_t detail = std::string(kErrDetail).size() + std::string("down").size() + 8;
  // The largest value whose copy, without the detail, is exactly the limit.
  const std::size_t fits = o.forward_max_bytes - ForwardBytes(probe) + detail + msgs[0].payload.size();
  msgs[0].payload = std::string(fits - detail, 'x');
  Forwards whole = PlanForwards(msgs, transient, o, 1000, "now");
  ASSERT_EQ(whole.messages.size(), 1u);
  EXPECT_EQ(ForwardBytes(whole.messages[0]), o.forward_max_bytes);
  EXPECT_EQ(whole.messages[0].topic, "t.retry.1");
  EXPECT_EQ(whole.kinds[0], ForwardKind::kRetry);
  EXPECT_EQ(whole.messages[0].payload, msgs[0].payload);
  EXPECT_EQ(whole.messages[0].headers.at(kErrDetail), "down");
  EXPECT_EQ(whole.messages[0].Header(kTruncated), nullptr);

  msgs[0].payload = std::string(fits, 'x');  // over by the detail: it goes without
  Forwards lean = PlanForwards(msgs, transient, o, 1000, "now");
  EXPECT_EQ(ForwardBytes(lean.messages.at(0)), o.forward_max_bytes);
  EXPECT_EQ(lean.messages[0].topic, "t.retry.1");
  EXPECT_EQ(lean.messages[0].payload, msgs[0].payload);
  EXPECT_EQ(lean.messages[0].headers.count(kErrDetail), 0u);
  EXPECT_EQ(lean.messages[0].Header(kTruncated), nullptr);

  msgs[0].payload += 'y';  // one byte over
  Forwards cut = PlanForwards(msgs, transient, o, 1000, "now");
  ASSERT_EQ(cut.messages.size(), 1u);
  const OutboundMessage& c = cut.messages[0];
  EXPECT_EQ(c.topic, "t.dlt") << "a cut copy is not retried";
  EXPECT_EQ(cut.kinds[0], ForwardKind::kDeadLetter);
  EXPECT_EQ(cut.classes[0], Outcome::kTransient);
  EXPECT_LE(ForwardBytes(c), o.forward_max_bytes);
  EXPECT_EQ(c.headers.at(kOrigSize), std::to_string(fits + 1));
  EXPECT_EQ(c.headers.count(kDueAt), 0u);
  EXPECT_EQ(c.payload, msgs[0].payload.substr(0, c.payload.size())) << "the value's first bytes";
  EXPECT_GT(c.payload.size(), fits - 200) << "cut only as much as needed";
  EXPECT_NE(c.headers.at(kTruncated).find("value cut to " + std::to_string(c.payload.size()) + " bytes"),
            std::string::npos) << c.headers.at(kTruncated);
  EXPECT_EQ(c.headers.at(kOrigTopic), "t");
  EXPECT_EQ(c.headers.at(kOrigPartition), "2");
  EXPECT_EQ(c.headers.at(kOrigOffset), "17");
  EXPECT_EQ(c.headers.at(kErrMessage), "down");
  EXPECT_EQ(c.headers.at("outbox-event-id"), "a");

  // Headers alone over the limit: the value, foreign headers (an upstream
  // `outbox-*` one too) and the detail go; what is kept fits.
  msgs[0].payload = "small";
  msgs[0].headers["big"] = std::string(o.forward_max_bytes, 'h');
  msgs[0].headers["outbox-upstream"] = std::string(o.forward_max_bytes, 'u');
  msgs[0].headers[kOrigTopic] = std::string(5000, 't');  // as an upstream copy could carry
  msgs[0].key = std::string(5000, 'k');
  const std::vector<std::optional<MessageOutcome>> permanent = {
      MessageOutcome{Outcome::kPermanent, std::string(5000, 'e')}};
  Forwards bare = PlanForwards(msgs, permanent, o, 1000, "now");
  const OutboundMessage& b = bare.messages.at(0);
  EXPECT_EQ(b.topic, "t.dlt");
  EXPECT_LE(ForwardBytes(b), o.forward_max_bytes);
  EXPECT_TRUE(b.payload.empty());
  EXPECT_EQ(b.headers.count("big"), 0u);
  EXPECT_EQ(b.headers.count("outbox-upstream"), 0u);
  EXPECT_EQ(b.headers.at(kOrigTopic).size(), 1000u);
  EXPECT_EQ(b.headers.count(kErrDetail), 0u);
  EXPECT_EQ(b.headers.at("outbox-event-id"), "a");
  EXPECT_EQ(b.key, std::string(256, 'k'));
  EXPECT_EQ(b.headers.at(kOrigSize), "5");
  EXPECT_NE(b.headers.at(kTruncated).find("value left out, headers other than the event id and the "
                                         "consumer's left out, key cut to 256 bytes"),
            std::string::npos) << b.headers.at(kTruncated);

  // A NULL value stays NULL.
  msgs[0].payload.clear();
  msgs[0].payload_is_null = true;
  const Forwards nulls = PlanForwards(msgs, permanent, o, 1000, "now");
  const OutboundMessage& n = nulls.messages.at(0);
  EXPECT_TRUE(n.payload_is_null);
  EXPECT_TRUE(n.payload.empty());
  EXPECT_EQ(n.headers.at(kOrigSize), "0");
  EXPECT_LE(ForwardBytes(n), o.forward_max_bytes);
}

// ApplyBySplitting with an `apply` that fails any part holding a poisoned
// index, as a statement no transaction with that message can pass would.
struct SplitProbe {
  std::set<std::size_t> poisoned;
  Status poison = Status::Internal("index row requires 10024 bytes [SQLSTATE 54000]");
  int calls = 0;
  std::vector<std::size_t> applied;
  Result<std::vector<MessageOutcome>> operator()(std::span<const std::size_t> idx) {
    ++calls;
    for (std::size_t i : idx) {
      if (poisoned.count(i)) return poison;
    }
    applied.insert(applied.end(), idx.begin(), idx.end());
    return std::vector<MessageOutcome>(idx.size(), MessageOutcome{Outcome::kApplied, ""});
  }
};

TEST(InboxPlanTest, ABatchIsSplitUntilItsFailingMessageStandsAlone) {
  SplitProbe probe;
  probe.poisoned = {5};
  auto out = ApplyBySplitting(8, {}, probe.poison, std::ref(probe));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  for (std::size_t i = 0; i < 8; ++i) {
    EXPECT_EQ((*out)[i].outcome, i == 5 ? Outcome::kTransient : Outcome::kApplied) << i;
  }
  EXPECT_NE((*out)[5].error.find("54000"), std::string::npos) << (*out)[5].error;
  EXPECT_EQ(probe.applied, (std::vector<std::size_t>{0, 1, 2, 3, 4, 6, 7})) << "in batch order";
  EXPECT_LE(probe.calls, 2 * 3) << "two parts per level, log2(8) levels";
}

TEST(InboxPlanTest, SplittingHoldsTheOrderKeyOfAMessageThatFailedAlone) {
  SplitProbe probe;
  probe.poisoned = {1};
  const std::vector<std::string> order = {"a", "b", "a", "b", "c", "b"};
  auto out = ApplyBySplitting(6, order, probe.poison, std::ref(probe));
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const std::vector<Outcome> want = {Outcome::kApplied, Outcome::kTransient, Outcome::kApplied,
                                     Outcome::kHeld,    Outcome::kApplied,   Outcome::kHeld};
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ((*out)[i].outcome, want[i]) << i;
  EXPECT_EQ(std::count(probe.applied.begin(), probe.applied.end(), 3u), 0) << "held, never tried";
}

TEST(InboxPlanTest, SplittingStopsWhenTheDatabaseNotAMessageIsAtFault) {
  SplitProbe every;
  every.poisoned = {0, 1, 2, 3};
  auto out = ApplyBySplitting(4, {}, every.poison, std::ref(every));
  ASSERT_FALSE(out.ok()) << "every message failing alone is the database's fault";
  EXPECT_EQ(out.status().message(), every.poison.message());

  SplitProbe outage;
  outage.poisoned = {2};
  outage.poison = Status::Unavailable("connection to PostgreSQL lost");
  EXPECT_FALSE(SplitsOn(outage.poison));
  EXPECT_FALSE(SplitsOn(Status::PermissionDenied("role refused")));
  EXPECT_FALSE(SplitsOn(Status::FailedPrecondition("relation inbox.inbox_stamps does not exist")));
  EXPECT_FALSE(SplitsOn(Status::DeadlineExceeded("canceling statement due to statement timeout")));
  EXPECT_FALSE(SplitsOn(Status::Internal("deadlock detected [SQLSTATE 40P01]", /*retryable=*/true)));
  EXPECT_TRUE(SplitsOn(Status::Internal("index row requires 10024 bytes [SQLSTATE 54000]")));
  auto down = ApplyBySplitting(4, {}, Status::Internal("first"), std::ref(outage));
  ASSERT_FALSE(down.ok());
  EXPECT_EQ(down.status().code(), Code::kUnavailable) << "an outage in a part ends the split";

  // A key's poisoned head, its followers held behind it: one message tried,
  // and it failed alone; the batch is not "every message failed".
  SplitProbe head;
  head.poisoned = {0};
  const std::vector<std::string> one_key = {"k", "k", "k"};
  auto held = ApplyBySplitting(3, one_key, head.poison, std::ref(head));
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_EQ((*held)[0].outcome, Outcome::kTransient);
  EXPECT_EQ((*held)[1].outcome, Outcome::kHeld);
  EXPECT_EQ((*held)[2].outcome, Outcome::kHeld);

  SplitProbe alone;
  alone.poisoned = {0};
  auto one = ApplyBySplitting(1, {}, alone.poison, std::ref(alone));
  ASSERT_TRUE(one.ok());
  EXPECT_EQ((*one)[0].outcome, Outcome::kTransient);
  EXPECT_EQ(alone.calls, 0) << "a batch of one that failed twice is not tried a third time";
}

TEST(InboxPlanTest, LongErrorsAreCutOnACharacterBoundary) {
  const std::string han = "\xED\x95\x9C";  // one Hangul syllable, 3 bytes
  std::string s;
  for (int i = 0; i < 400; ++i) s += han;  // 1200 bytes
  const std::string cut = FirstLine(s, 1000);
  EXPECT_EQ(cut.size(), 999u);
  EXPECT_EQ(CutUtf8(s, 8000), s);
  EXPECT_EQ(FirstLine("  one  \r\ntwo", 100), "  one");
}

// ---- the loop, with fakes ---------------------------------------------------

using test_util::FakeSource;
using FakeStore = test_util::FakeInboxStore;

class NullLog final : public Logger {
 public:
  void Log(LogLevel, std::string_view, std::initializer_list<LogField>) override {}
};

class InboxEngineTest : public ::testing::Test {
 protected:
  // Runs the consumer until `done` holds (or 10 s), then stops it.
  void RunUntil(const std::function<bool()>& done, DedupKeyFn dedup = DedupByEventId(),
                bool ordered = false) {
    ConsumerOptions o;
    o.topics = {"t"};
    o.retry_delays = {10ms};
    if (ordered) {
      o.ordered = true;
      o.retry_delays = {20ms, 20ms, 20ms};
    }
    o.clock = &clock_;
    auto c = Consumer::Create(o, source_, store_, std::move(dedup), log_, &metrics_);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    Status result;
    std::thread t([&] { result = (*c)->Run(); });
    // The engine's time moves 1 ms per step, whatever the machine's load.
    for (int i = 0; i < 10'000 && !done(); ++i) {
      clock_.Advance(1ms);
      std::this_thread::sleep_for(1ms);
    }
    StopAndJoin(**c, t);
    EXPECT_TRUE(result.ok()) << "Run() returns, it does not throw or fail: " << result.ToString();
    counters_ = (*c)->counters();
  }

  void SetUp() override { store_.clock = &clock_; }

  // Stops the consumer, moving its clock on while it finishes a backoff sleep.
  void StopAndJoin(Consumer& c, std::thread& t) {
    c.Stop();
    test_util::JoinAdvancing(t, clock_, 10ms);
  }

  test_util::FakeClock clock_;
  FakeSource source_;
  FakeStore store_;
  NullLog log_;
  MetricsRegistry metrics_;
  ConsumerCounters counters_;
};

TEST_F(InboxEngineTest, PoisonMessagesAreDeadLetteredAndTheConsumerGoesOn) {
  source_.Add(Msg("t", 0, 0, "a"));
  source_.Add(Msg("t", 0, 1, std::string("\x80\xff", 2)));  // event id not UTF-8
  InboundMessage null_value = Msg("t", 0, 2, "c", "");
  null_value.payload_is_null = true;
  null_value.headers.erase("outbox-event-id");  // and no identity
  source_.Add(null_value);
  source_.Add(Msg("t", 0, 3, "d"));
  RunUntil([&] { return source_.Committed({"t", 0}) == 4; });
  EXPECT_EQ(source_.subscribed, (std::vector<std::string>{"t", "t.retry.1"}));
  EXPECT_EQ(store_.applied, (std::vector<std::string>{"a", "d"}));
  ASSERT_EQ(source_.forwarded.size(), 2u);
  EXPECT_EQ(source_.forwarded[0].topic, "t.dlt");
  EXPECT_EQ(source_.forwarded[0].headers.at("outbox-error-class"), "permanent");
  EXPECT_EQ(source_.forwarded[0].headers.at("outbox-event-id"), std::string("\x80\xff", 2))
      << "headers are forwarded as the bytes they were";
  EXPECT_TRUE(source_.forwarded[1].payload_is_null);
  EXPECT_EQ(counters_.dead_lettered, 2u);
  EXPECT_EQ(counters_.applied, 2u);
}

TEST_F(InboxEngineTest, AThrowingDedupFunctionDeadLettersTheMessage) {
  source_.Add(Msg("t", 0, 0, "a"));
  source_.Add(Msg("t", 0, 1, "b", "explode"));
  source_.Add(Msg("t", 0, 2, "c"));
  DedupKeyFn fn = [](const InboundMessage& m) -> Result<std::string> {
    if (m.payload == "explode") throw std::runtime_error("cannot decode");
    return *m.Header("outbox-event-id");
  };
  RunUntil([&] { return source_.Committed({"t", 0}) == 3; }, fn);
  EXPECT_EQ(store_.applied, (std::vector<std::string>{"a", "c"}));
  ASSERT_EQ(source_.forwarded.size(), 1u);
  EXPECT_NE(source_.forwarded[0].headers.at("outbox-error-message").find("cannot decode"),
            std::string::npos);
}

TEST_F(InboxEngineTest, NothingIsCommittedWhenTheStoreOrTheForwardFails) {
  source_.Add(Msg("t", 0, 0, "a", "down"));
  RunUntil([&] {
    std::lock_guard<std::mutex> l(source_.mu);
    return source_.rewinds >= 1;
  });
  EXPECT_EQ(source_.Committed({"t", 0}), 0u);
  source_.fail_forward = true;
  source_.Add(Msg("t", 0, 1, "b", "permanent"));
  RunUntil([&] {
    std::lock_guard<std::mutex> l(source_.mu);
    return source_.rewinds >= 2;
  });
  EXPECT_EQ(source_.Committed({"t", 0}), 0u) << "a forward that was not acked moves no offset";
}

// "A consumer never wedges": a message that fails every transaction it is in
// (the database, not its handler, refuses it) is found by splitting the batch
// and takes the retry path alone; its neighbours apply and the offsets move.
TEST_F(InboxEngineTest, AMessageThatFailsEveryBatchItIsInIsFoundBySplittingAndRetriedAlone) {
  source_.replay_on_rewind = true;
  for (int i = 0; i < 12; ++i) {
    source_.Add(Msg("t", 0, i, "m" + std::to_string(i), i == 7 ? "poison" : "ok"));
  }
  RunUntil([&] {
    std::lock_guard<std::mutex> l(source_.mu);
    return source_.committed[{"t", 0}] == 12 && !source_.forwarded.empty();
  });
  EXPECT_EQ(store_.Applied().size(), 11u);
  ASSERT_GE(source_.forwarded.size(), 1u);
  EXPECT_EQ(source_.forwarded[0].topic, "t.retry.1");
  EXPECT_EQ(source_.forwarded[0].headers.at("outbox-event-id"), "m7");
  EXPECT_NE(source_.forwarded[0].headers.at("outbox-error-message").find("failed alone"),
            std::string::npos);
  EXPECT_EQ(source_.Committed({"t", 0}), 12u);
}

// A database outage is not split: no message is sent to a retry topic for it.
TEST_F(InboxEngineTest, AnOutageIsNeverSplitIntoRetries) {
  source_.replay_on_rewind = true;
  source_.Add(Msg("t", 0, 0, "a"));
  source_.Add(Msg("t", 0, 1, "b", "down"));
  RunUntil([&] {
    std::lock_guard<std::mutex> l(source_.mu);
    return source_.rewinds >= 4;
  });
  std::lock_guard<std::mutex> l(source_.mu);
  ASSERT_GE(source_.rewinds, 4) << "the batch failed again and again";
  EXPECT_TRUE(source_.forwarded.empty());
  EXPECT_EQ(source_.committed.count({"t", 0}), 0u);
}

// A message too large to forward whole does not wedge its partition: it is
// dead-lettered cut, counted, and the offset moves past it.
TEST_F(InboxEngineTest, AMessageTooLargeToForwardIsDeadLetteredCutAndItsOffsetCommitted) {
  source_.Add(Msg("t", 0, 0, "a", "permanent"));
  InboundMessage big = Msg("t", 0, 1, "b", "permanent:" + std::string(1'040'000, 'x'));
  source_.Add(big);
  source_.Add(Msg("t", 0, 2, "c"));
  RunUntil([&] { return source_.Committed({"t", 0}) == 3; });
  ASSERT_EQ(source_.forwarded.size(), 2u);
  const OutboundMessage& cut = source_.forwarded[1];
  EXPECT_EQ(cut.topic, "t.dlt");
  EXPECT_LE(ForwardBytes(cut), ConsumerOptions().forward_max_bytes);
  EXPECT_EQ(cut.headers.at(kOrigSize), std::to_string(big.payload.size()));
  EXPECT_EQ(source_.forwarded[0].Header(kTruncated), nullptr);
  const std::string text = metrics_.RenderPrometheus();
  EXPECT_NE(text.find("outbox_inbox_dead_letters_truncated_total 1\n"), std::string::npos) << text;
  // A limit outside its range is refused naming it.
  for (std::size_t bad : {kMinForwardMaxBytes - 1, kMaxForwardMaxBytes + 1}) {
    ConsumerOptions o;
    o.topics = {"t"};
    o.forward_max_bytes = bad;
    auto c = Consumer::Create(o, source_, store_, DedupByEventId(), log_);
    ASSERT_FALSE(c.ok());
    EXPECT_NE(c.status().message().find("forward_max_bytes"), std::string::npos) << c.status().ToString();
  }
}

TEST_F(InboxEngineTest, MetricsCountOutcomesPerRetryTopicAndClass) {
  source_.Add(Msg("t", 0, 0, "a"));
  source_.Add(Msg("t", 0, 1, "a"));  // duplicate
  source_.Add(Msg("t", 0, 2, "b", "transient"));
  source_.Add(Msg("t", 0, 3, "c", "permanent"));
  RunUntil([&] { return source_.Committed({"t", 0}) == 4; });
  const std::string text = metrics_.RenderPrometheus();
  EXPECT_EQ(ExpectShortestBucketBounds(text), 12) << text;  // batch_seconds
  EXPECT_NE(text.find("outbox_inbox_batch_seconds_bucket{le=\"0.025\"}"), std::string::npos) << text;
  EXPECT_NE(text.find("outbox_inbox_applied_total 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("outbox_inbox_duplicates_total 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("outbox_inbox_retried_total{topic=\"t.retry.1\"} 1\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("outbox_inbox_dead_lettered_total{class=\"permanent\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("outbox_inbox_consumer_lag_messages{topic=\"t\",partition=\"0\"} 7\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("outbox_inbox_seconds_since_last_apply "), std::string::npos) << text;
  EXPECT_NE(text.find("outbox_inbox_batch_seconds_count "), std::string::npos) << text;
}

// Ordered mode: X1 fails twice then succeeds, X2 (same key, behind it) waits
// and applies after it; Y flows at once; a key whose head runs out of retries
// is dead-lettered and releases the key.
TEST_F(InboxEngineTest, OrderedModeHoldsOnlyTheKeyOfAFailedMessage) {
  auto keyed = [](const std::string& key, std::int64_t offset, const std::string& id,
                  const std::string& payload) {
    InboundMessage m = Msg("t", 0, offset, id, payload);
    m.key = key;
    return m;
  };
  source_.Add(keyed("X", 0, "x1", "fail-2"));
  source_.Add(keyed("X", 1, "x2", "ok"));
  source_.Add(keyed("Y", 2, "y1", "ok"));
  source_.Add(keyed("Z", 3, "z1", "fail-9"));  // more failures than retries
  source_.Add(keyed("Z", 4, "z2", "ok"));
  RunUntil(
      [&] {
        if (store_.Applied().size() != 4) return false;
        std::lock_guard<std::mutex> l(source_.mu);
        return !source_.forwarded.empty();
      },
      DedupByEventId(), /*ordered=*/true);
  const auto applied = store_.Applied();
  ASSERT_EQ(applied.size(), 4u);
  EXPECT_EQ(applied[0], "y1") << "other keys flow while X and Z wait";
  auto pos = [&](const std::string& k) {
    return std::find(applied.begin(), applied.end(), k) - applied.begin();
  };
  EXPECT_LT(pos("x1"), pos("x2")) << "x2 waits for x1";
  EXPECT_LT(pos("y1"), pos("x1"));
  EXPECT_EQ(store_.tries["x1"], 3);
  EXPECT_EQ(store_.tries["x2"], 1) << "a held message is not tried while it waits";
  ASSERT_EQ(source_.forwarded.size(), 1u);
  EXPECT_EQ(source_.forwarded[0].topic, "t.dlt");
  EXPECT_EQ(source_.forwarded[0].headers.at("outbox-event-id"), "z1");
  EXPECT_EQ(source_.forwarded[0].headers.at("outbox-attempt"), "4");
  EXPECT_NE(std::find(applied.begin(), applied.end(), "z2"), applied.end())
      << "a dead-lettered head releases its key";
  EXPECT_EQ(store_.Parked(), 0u);
  EXPECT_EQ(source_.Committed({"t", 0}), 5u) << "parked messages' offsets are committed";
  for (const auto& f : source_.forwarded) {
    EXPECT_EQ(f.topic.find(".retry."), std::string::npos) << "ordered mode uses no retry topics";
  }
}

// Ordered mode on the engine's clock: a failed head waits for its retry time
// (20 s here) on a stopped clock however long the machine takes, and goes as
// soon as that time has passed — no test sleeps 20 s.
TEST_F(InboxEngineTest, AParkedHeadIsRetriedWhenItsTimeComesOnTheEnginesClock) {
  InboundMessage m = Msg("t", 0, 0, "x1", "fail-1");
  m.key = "X";
  source_.Add(m);
  ConsumerOptions o;
  o.topics = {"t"};
  o.ordered = true;
  o.retry_delays = {20s};
  o.clock = &clock_;
  auto c = Consumer::Create(o, source_, store_, DedupByEventId(), log_, &metrics_);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  std::thread t([&] { (void)(*c)->Run(); });
  auto wait = [](const std::function<bool()>& f) {
    for (int i = 0; i < 5000 && !f(); ++i) std::this_thread::sleep_for(1ms);
    return f();
  };
  EXPECT_TRUE(wait([&] { return store_.Parked() == 1; })) << "the failed head is parked";
  std::this_thread::sleep_for(200ms);  // real time; the engine's is stopped
  EXPECT_EQ(store_.Parked(), 1u);
  EXPECT_TRUE(store_.Applied().empty()) << "not retried before its time";
  clock_.Advance(19s);
  std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(store_.Applied().empty()) << "19 s is not 20 s";
  clock_.Advance(1s);
  EXPECT_TRUE(wait([&] { return store_.Applied().size() == 1; })) << "retried once due";
  StopAndJoin(**c, t);
  EXPECT_EQ(store_.Parked(), 0u);
}

}  // namespace
}  // namespace outbox

namespace outbox {
namespace {

// DedupByEventId: the outbox's id first; else a CloudEvents id with its
// source, of any binding (an id is unique within its source only).
TEST(DedupByEventIdTest, ACloudEventsIdIsKeyedWithItsSource) {
  const DedupKeyFn key = DedupByEventId();
  InboundMessage a;
  a.headers = {{"ce_id", "1"}, {"ce_source", "/shop"}};
  InboundMessage b;
  b.headers = {{"cloudEvents:id", "1"}, {"cloudEvents:source", "/billing"}};
  ASSERT_TRUE(key(a).ok());
  EXPECT_EQ(*key(a), "ce:/shop 1");
  EXPECT_EQ(*key(b), "ce:/billing 1");
  EXPECT_NE(*key(a), *key(b)) << "two sources' id 1 are two events";
  a.headers["outbox-event-id"] = "0190a0b0-0000-7000-8000-000000000001";
  EXPECT_EQ(*key(a), "0190a0b0-0000-7000-8000-000000000001");
  InboundMessage none;
  none.headers = {{"ce-source", "/x"}};
  EXPECT_FALSE(key(none).ok());
}

}  // namespace
}  // namespace outbox
