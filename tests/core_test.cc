#include <gtest/gtest.h>

#include "outbox/event.h"
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
