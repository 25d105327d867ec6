#include <gtest/gtest.h>

#include <map>

#include "outbox/cloudevents.h"
#include "outbox/event.h"
#include "outbox/inbox.h"
#include "outbox/status.h"
#include "outbox/time.h"

namespace outbox {
namespace {

Event Valid() {
  Event e;
  e.aggregate_type = "lesson";
  e.aggregate_id = "user-1/lesson-7";
  e.event_type = "LessonCompleted";
  e.payload = R"({"user":1,"lesson":7})";
  e.headers = {{"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}};
  e.dedup_key = "LessonCompleted:1:7";
  return e;
}

void ExpectInvalid(const Event& e, const std::string& field, const EventLimits& l = {}) {
  Status st = ValidateEvent(e, l);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find(field), std::string::npos)
      << "message should name " << field << ": " << st.message();
  EXPECT_FALSE(st.retryable());
}

TEST(ValidateEvent, AcceptsAWellFormedEvent) { EXPECT_TRUE(ValidateEvent(Valid()).ok()); }

TEST(ValidateEvent, RequiredFieldsMustBeNonEmpty) {
  Event e = Valid();
  e.aggregate_type.clear();
  ExpectInvalid(e, "aggregate_type");
  e = Valid();
  e.aggregate_id.clear();
  ExpectInvalid(e, "aggregate_id");
  e = Valid();
  e.event_type.clear();
  ExpectInvalid(e, "event_type");
  e = Valid();
  e.dedup_key = "";
  ExpectInvalid(e, "dedup_key");
}

TEST(ValidateEvent, EmptyPayloadIsAllowed) {
  Event e = Valid();
  e.payload.clear();
  EXPECT_TRUE(ValidateEvent(e).ok());
}

TEST(ValidateEvent, AggregateTypeMustBeATopicName) {
  Event e = Valid();
  e.aggregate_type = "order items";
  ExpectInvalid(e, "aggregate_type");
  e.aggregate_type = "order/items";
  ExpectInvalid(e, "aggregate_type");
}

TEST(ValidateEvent, SizesAreBounded) {
  EventLimits l;
  l.max_payload_bytes = 10;
  Event e = Valid();
  e.payload = std::string(11, 'x');
  ExpectInvalid(e, "payload", l);
  e.payload = std::string(10, 'x');
  EXPECT_TRUE(ValidateEvent(e, l).ok());
  e = Valid();
  e.aggregate_id = std::string(256, 'a');
  ExpectInvalid(e, "aggregate_id");
  e = Valid();
  e.headers[0].value = std::string(8193, 'v');
  ExpectInvalid(e, "headers[0].value");
  e = Valid();
  e.headers.assign(65, Header{"x", "y"});
  ExpectInvalid(e, "headers");
}

TEST(ValidateEvent, HeaderNamesAreSane) {
  Event e = Valid();
  e.headers = {{"ok-name", "v"}, {"bad name", "v"}};
  ExpectInvalid(e, "headers[1].name");
  e.headers = {{"", "v"}};
  ExpectInvalid(e, "headers[0].name");
  e.headers = {{"outbox-event-id", "v"}};
  ExpectInvalid(e, "reserved");
  e.headers = {{"a", "1"}, {"a", "2"}};
  ExpectInvalid(e, "twice");
}

TEST(ValidateEvent, TextMustBeUtf8WithoutNul) {
  Event e = Valid();
  e.aggregate_id = std::string("a\0b", 3);
  ExpectInvalid(e, "aggregate_id");
  e = Valid();
  e.event_type = "\xC3\x28";  // invalid continuation
  ExpectInvalid(e, "event_type");
  e = Valid();
  e.aggregate_id = "사용자-1";  // Korean is fine
  EXPECT_TRUE(ValidateEvent(e).ok());
  e.payload = std::string("\0\xff\xfe", 3);  // payload is bytes: anything goes
  EXPECT_TRUE(ValidateEvent(e).ok());
}

TEST(IsValidText, RejectsOverlongAndSurrogates) {
  EXPECT_TRUE(IsValidText("plain"));
  EXPECT_FALSE(IsValidText("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(IsValidText("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(IsValidText("\xF4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_TRUE(IsValidText("\xF0\x9F\x98\x80"));   // emoji
  EXPECT_FALSE(IsValidText("\xE2\x82"));          // truncated
}

TEST(Status, CarriesCodeMessageAndRetryability) {
  Status ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.ToString(), "OK");
  Status u = Status::Unavailable("db down");
  EXPECT_FALSE(u.ok());
  EXPECT_TRUE(u.retryable());
  EXPECT_EQ(u.ToString(), "Unavailable: db down (retryable)");
  EXPECT_FALSE(Status::InvalidArgument("x").retryable());
  Result<int> r = 5;
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(*r, 5);
  Result<int> e = Status::NotFound("nope");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace outbox

namespace outbox {
namespace {

TEST(Time, Rfc3339WithTheAskedDigits) {
  const auto tp = std::chrono::system_clock::time_point(std::chrono::microseconds(1'764'518'993'464'546LL));
  EXPECT_EQ(FormatRfc3339(tp, 0), "2025-11-30T16:09:53Z");
  EXPECT_EQ(FormatRfc3339(tp, 3), "2025-11-30T16:09:53.464Z");
  EXPECT_EQ(FormatRfc3339(tp, 6), "2025-11-30T16:09:53.464546Z");
  EXPECT_EQ(FormatRfc3339(std::chrono::system_clock::time_point{}, 3), "1970-01-01T00:00:00.000Z");
}

}  // namespace
}  // namespace outbox

namespace outbox {
namespace {

// A transport that keeps what it was given.
class Recorder final : public Transport {
 public:
  std::vector<ClaimedEvent> got;
  std::vector<PublishResult> Publish(std::span<const ClaimedEvent> events) override {
    got.assign(events.begin(), events.end());
    return std::vector<PublishResult>(events.size(), PublishResult{PublishOutcome::kAcked, ""});
  }
  std::chrono::milliseconds MaxPublishTime() const override { return std::chrono::milliseconds(1234); }
  bool Healthy() const override { return false; }
  std::string UnhealthyReason() const override { return "down for the test"; }
  std::string PeerName() const override { return "peer"; }
};

// relay.envelope = cloudevents: the six attributes with the binding's prefix,
// the event's own headers of those names replaced (HTTP ignores case), the
// rest and the payload unchanged, the inner transport's answers passed on.
TEST(CloudEvents, TheAttributesAreAddedWithTheBindingsPrefixAndThePayloadIsUnchanged) {
  ClaimedEvent e;
  e.event_id = "0190a0b0-0000-7000-8000-000000000001";
  e.event.aggregate_type = "order";
  e.event.aggregate_id = "o-17";
  e.event.event_type = "OrderPlaced";
  e.event.payload = "{\"total\":5}";
  e.event.headers = {{"traceparent", "00-abc-def-01"}, {"CE-Type", "forged"}};
  e.created_at = std::chrono::system_clock::time_point{} + std::chrono::microseconds(1'700'000'000'123'456);
  auto inner = std::make_unique<Recorder>();
  Recorder* rec = inner.get();
  auto t = WithCloudEvents(std::move(inner), kCloudEventsHttpPrefix, "/outbox/app");
  std::vector<ClaimedEvent> batch = {e};
  const auto results = t->Publish(batch);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].outcome, PublishOutcome::kAcked);
  ASSERT_EQ(rec->got.size(), 1u);
  std::map<std::string, std::string> h;
  for (const Header& x : rec->got[0].event.headers) h[x.name] = x.value;
  EXPECT_EQ(h.count("CE-Type"), 0u) << "replaced, whatever its case";
  EXPECT_EQ(h["traceparent"], "00-abc-def-01");
  EXPECT_EQ(h["ce-id"], e.event_id);
  EXPECT_EQ(h["ce-source"], "/outbox/app");
  EXPECT_EQ(h["ce-type"], "OrderPlaced");
  EXPECT_EQ(h["ce-specversion"], "1.0");
  EXPECT_EQ(h["ce-time"], "2023-11-14T22:13:20.123456Z");
  EXPECT_EQ(h["ce-subject"], "o-17");
  EXPECT_EQ(rec->got[0].event.payload, e.event.payload);
  EXPECT_EQ(batch[0].event.headers.size(), 2u) << "the caller's events are not changed";
  EXPECT_EQ(t->MaxPublishTime(), std::chrono::milliseconds(1234));
  EXPECT_FALSE(t->Healthy());
  EXPECT_EQ(t->UnhealthyReason(), "down for the test");
  EXPECT_EQ(t->PeerName(), "peer");
  EXPECT_EQ(CloudEventsAttributes(e, kCloudEventsKafkaPrefix, "s")[0].name, "ce_id");
  EXPECT_EQ(CloudEventsAttributes(e, kCloudEventsAmqpPrefix, "s")[0].name, "cloudEvents:id");
}

// The inbox reads the event id from either envelope, the outbox's first.
TEST(CloudEvents, TheInboxReadsTheEventIdFromEitherEnvelope) {
  InboundMessage m;
  EXPECT_EQ(m.EventId(), nullptr);
  m.headers["ce_id"] = "from-kafka-ce";
  ASSERT_NE(m.EventId(), nullptr);
  EXPECT_EQ(*m.EventId(), "from-kafka-ce");
  m.headers["outbox-event-id"] = "from-outbox";
  EXPECT_EQ(*m.EventId(), "from-outbox");
  InboundMessage amqp;
  amqp.headers["cloudEvents:id"] = "from-amqp";
  EXPECT_EQ(*amqp.EventId(), "from-amqp");
  InboundMessage http;
  http.headers["ce-id"] = "from-http";
  http.headers["outbox-event-id"] = "";  // empty: not an id
  EXPECT_EQ(*http.EventId(), "from-http");
}

}  // namespace
}  // namespace outbox
