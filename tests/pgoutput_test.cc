// The replication stream decoder (src/store/postgres/pgoutput.h): frames,
// pgoutput messages and the outbox row, built byte by byte as PostgreSQL 15
// sends them; every truncation of a valid message is an error, never a crash.
#include <gtest/gtest.h>

#include "pgoutput.h"
#include "session.h"

namespace outbox::pg::pgoutput {
namespace {

void U8(std::string* s, int v) { s->push_back(static_cast<char>(v)); }
void U16(std::string* s, std::uint16_t v) {
  U8(s, v >> 8);
  U8(s, v & 0xff);
}
void U32(std::string* s, std::uint32_t v) {
  for (int i = 3; i >= 0; --i) U8(s, static_cast<int>((v >> (8 * i)) & 0xff));
}
void U64(std::string* s, std::uint64_t v) {
  for (int i = 7; i >= 0; --i) U8(s, static_cast<int>((v >> (8 * i)) & 0xff));
}
void Str(std::string* s, const std::string& v) {
  s->append(v);
  s->push_back('\0');
}
void Col(std::string* s, const std::string& bytes) {
  U8(s, 'b');
  U32(s, static_cast<std::uint32_t>(bytes.size()));
  s->append(bytes);
}
std::string BigEndian(std::uint64_t v, int n) {
  std::string s;
  for (int i = n - 1; i >= 0; --i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

const char* kColumns[] = {"seq",        "event_id", "aggregate_type", "aggregate_id", "event_type",
                          "payload",    "headers",  "dedup_key",      "status",       "created_at"};

std::string RelationMsg() {
  std::string m;
  U8(&m, 'R');
  U32(&m, 16384);
  Str(&m, "outbox");
  Str(&m, "outbox");
  U8(&m, 'd');
  U16(&m, 10);
  for (const char* c : kColumns) {
    U8(&m, 0);
    Str(&m, c);
    U32(&m, 25);
    U32(&m, 0xffffffff);
  }
  return m;
}

// created_at: 2025-12-31T00:00:00Z in PostgreSQL's µs since 2000.
constexpr std::int64_t kCreatedPg = 820'454'400'000'000;

std::string InsertMsg(bool with_dedup) {
  std::string m;
  U8(&m, 'I');
  U32(&m, 16384);
  U8(&m, 'N');
  U16(&m, 10);
  Col(&m, BigEndian(42, 8));
  Col(&m, std::string("\x01\x8f\x2a\x3b\x4c\x5d\x7e\x6f\x80\x91\xa2\xb3\xc4\xd5\xe6\xf7", 16));
  Col(&m, "order");
  Col(&m, "o-1");
  Col(&m, "OrderCreated");
  Col(&m, std::string("\x00\xffpayload", 9));
  Col(&m, std::string("\x01{\"traceparent\": \"00-ab\"}"));
  if (with_dedup) {
    Col(&m, "order-1-created");
  } else {
    U8(&m, 'n');
  }
  Col(&m, "PENDING");
  Col(&m, BigEndian(static_cast<std::uint64_t>(kCreatedPg), 8));
  return m;
}

TEST(Pgoutput, DecodesAnOutboxInsertToTheEventItCarries) {
  auto rel = DecodeMessage(RelationMsg());
  ASSERT_TRUE(rel.ok()) << rel.status().ToString();
  auto layout = LayoutOf(std::get<Relation>(*rel));
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  const std::string insert_bytes = InsertMsg(true);  // the values point into it
  auto ins = DecodeMessage(insert_bytes);
  ASSERT_TRUE(ins.ok()) << ins.status().ToString();
  auto ev = EventOf(std::get<Insert>(*ins), *layout);
  ASSERT_TRUE(ev.ok()) << ev.status().ToString();
  EXPECT_EQ(ev->ticket.seq, 42);
  EXPECT_EQ(ev->ticket.token, 0);
  EXPECT_EQ(ev->event_id, "018f2a3b-4c5d-7e6f-8091-a2b3c4d5e6f7");
  EXPECT_EQ(ev->event.aggregate_type, "order");
  EXPECT_EQ(ev->event.aggregate_id, "o-1");
  EXPECT_EQ(ev->event.event_type, "OrderCreated");
  EXPECT_EQ(ev->event.payload, std::string("\x00\xffpayload", 9)) << "bytea arrives raw";
  ASSERT_EQ(ev->event.headers.size(), 1u);
  EXPECT_EQ(ev->event.headers[0].name, "traceparent");
  EXPECT_EQ(ev->event.dedup_key, "order-1-created");
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::seconds>(ev->created_at.time_since_epoch()).count(),
            (kCreatedPg + kPgEpochUnixUs) / 1'000'000);
  const std::string no_dedup_bytes = InsertMsg(false);
  auto no_dedup = EventOf(std::get<Insert>(*DecodeMessage(no_dedup_bytes)), *layout);
  ASSERT_TRUE(no_dedup.ok());
  EXPECT_FALSE(no_dedup->event.dedup_key.has_value());
}

TEST(Pgoutput, ARelationWithoutAnOutboxColumnIsASetupErrorNamingIt) {
  Relation r;
  r.nspname = "public";
  r.relname = "orders";
  r.columns = {{"id", 20}};
  auto l = LayoutOf(r);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(l.status().message().find("public.orders has no column seq"), std::string::npos);
}

TEST(Pgoutput, EveryTruncationIsAnErrorNeverAReadPastTheEnd) {
  for (const std::string& full : {RelationMsg(), InsertMsg(true)}) {
    for (std::size_t n = 0; n < full.size(); ++n) {
      auto m = DecodeMessage(std::string_view(full).substr(0, n));
      EXPECT_FALSE(m.ok()) << "length " << n << " of " << full.size();
    }
  }
  // A text-format column: the stream asked for binary; refuse, do not guess.
  std::string text_col = InsertMsg(true);
  text_col[8] = 't';  // the first column's kind byte
  EXPECT_FALSE(DecodeMessage(text_col).ok());
}

TEST(Pgoutput, BeginCommitKeepaliveAndXLogDataCarryPositionsAndUnixTimes) {
  std::string begin;
  U8(&begin, 'B');
  U64(&begin, 0x16B374D848);
  U64(&begin, static_cast<std::uint64_t>(kCreatedPg));
  U32(&begin, 777);
  auto b = DecodeMessage(begin);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(std::get<Begin>(*b).commit_time_us, kCreatedPg + kPgEpochUnixUs);
  std::string commit;
  U8(&commit, 'C');
  U8(&commit, 0);
  U64(&commit, 100);
  U64(&commit, 200);
  U64(&commit, static_cast<std::uint64_t>(kCreatedPg));
  auto c = DecodeMessage(commit);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(std::get<Commit>(*c).end_lsn, 200u);

  std::string k;
  U8(&k, 'k');
  U64(&k, 5000);
  U64(&k, 0);
  U8(&k, 1);
  auto kf = DecodeFrame(k);
  ASSERT_TRUE(kf.ok());
  EXPECT_EQ(std::get<Keepalive>(*kf).wal_end, 5000u);
  EXPECT_TRUE(std::get<Keepalive>(*kf).reply_requested);
  EXPECT_FALSE(DecodeFrame(k.substr(0, 10)).ok());

  std::string w;
  U8(&w, 'w');
  U64(&w, 1);
  U64(&w, 2);
  U64(&w, 3);
  w += commit;
  auto wf = DecodeFrame(w);
  ASSERT_TRUE(wf.ok());
  EXPECT_EQ(std::get<XLogData>(*wf).data, commit);
  EXPECT_FALSE(DecodeFrame("x").ok());
  // A time no clock can hold is refused, not overflowed (found by fuzz_pgoutput).
  std::string far;
  U8(&far, 'k');
  U64(&far, 1);
  U64(&far, 0x7fffffffffffffffULL);
  U8(&far, 0);
  EXPECT_FALSE(DecodeFrame(far).ok());
}

TEST(Pgoutput, TheStatusUpdateConfirmsOnePositionThreeTimes) {
  const std::string s = StatusUpdate(0x0000001600000010ULL, kPgEpochUnixUs + 5, true);
  ASSERT_EQ(s.size(), 34u);
  EXPECT_EQ(s[0], 'r');
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(s.substr(1 + 8 * i, 8), BigEndian(0x0000001600000010ULL, 8));
  }
  EXPECT_EQ(s.substr(25, 8), BigEndian(5, 8));
  EXPECT_EQ(s[33], 1);
}

TEST(Pgoutput, WalPositionsPrintAndParseAsPostgresWritesThem) {
  EXPECT_EQ(LsnText(0x16B374D848ULL), "16/B374D848");
  auto p = ParseLsn("16/B374D848");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, 0x16B374D848ULL);
  for (const char* bad : {"", "16", "/1", "16/", "G/1", "1/123456789", "1/2/3"}) {
    EXPECT_FALSE(ParseLsn(bad).ok()) << bad;
  }
}

}  // namespace
}  // namespace outbox::pg::pgoutput
