// The MariaDB store against a real MariaDB 10.11 server (scripts/testenv):
// migrations, enqueue in the caller's transaction (C++ and the procedure for
// other languages), and the per-aggregate lock that keeps seq order = commit
// order without advisory locks.
#include <mysql.h>

#include <atomic>
#include <future>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "claim_plan.h"
#include "outbox/mariadb.h"
#include "outbox/mariadb_inbox.h"
#include "store_contract.h"
#include "test_env.h"

namespace outbox::testing {
namespace {

using namespace std::chrono_literals;

struct MyConn {
  MYSQL* c = nullptr;
  MyConn() = default;
  MyConn(const MyConn&) = delete;
  MyConn& operator=(const MyConn&) = delete;
  ~MyConn() {
    if (c) mysql_close(c);
  }
};

// host, port, user from mysql://user@host:port/db (the testenv's form).
struct Target {
  std::string user, host, db;
  unsigned port = 0;
};
Target ParseTestUrl(const std::string& url) {
  Target t;
  std::string s = url.substr(std::string("mysql://").size());
  t.user = s.substr(0, s.find('@'));
  s = s.substr(s.find('@') + 1);
  t.host = s.substr(0, s.find(':'));
  t.port = static_cast<unsigned>(std::stoi(s.substr(s.find(':') + 1)));
  t.db = s.substr(s.find('/') + 1);
  return t;
}

class MariaDbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    OUTBOX_REQUIRE_ENV(base_, "OUTBOX_MYSQL_URL");
    target_ = ParseTestUrl(base_);
    db_ = "t_" + RandomSuffix();
    admin_ = Open("");
    ASSERT_NE(admin_->c, nullptr);
    Run(*admin_, "CREATE DATABASE " + db_);
    url_ = base_.substr(0, base_.rfind('/') + 1) + db_;
    auto applied = MigrateMariaDb({url_});
    ASSERT_TRUE(applied.ok()) << applied.status().ToString();
    fresh_versions_ = *applied;
    conn_ = Open(db_);
    Run(*conn_, "CREATE TABLE business (id INT PRIMARY KEY)");
  }
  void TearDown() override {
    if (admin_ && admin_->c) Run(*admin_, "DROP DATABASE IF EXISTS " + db_);
  }

  std::unique_ptr<MyConn> Open(const std::string& db) {
    auto m = std::make_unique<MyConn>();
    m->c = mysql_init(nullptr);
    if (!mysql_real_connect(m->c, target_.host.c_str(), target_.user.c_str(), nullptr,
                            db.empty() ? nullptr : db.c_str(), target_.port, nullptr, 0)) {
      ADD_FAILURE() << "connect: " << mysql_error(m->c);
      mysql_close(m->c);
      m->c = nullptr;
    }
    return m;
  }
  // Runs `sql`; the first column of the first row ("" if none); fails the test on error.
  static std::string Run(MyConn& m, const std::string& sql) {
    std::string out;
    if (mysql_real_query(m.c, sql.data(), sql.size()) != 0) {
      ADD_FAILURE() << sql << ": " << mysql_error(m.c);
      return out;
    }
    do {
      if (MYSQL_RES* r = mysql_store_result(m.c)) {
        MYSQL_ROW row = mysql_fetch_row(r);
        if (row && row[0] && out.empty()) out = row[0];
        mysql_free_result(r);
      }
    } while (mysql_next_result(m.c) == 0);
    return out;
  }
  // The error text of `sql`, which must fail.
  static std::string RunError(MyConn& m, const std::string& sql) {
    if (mysql_real_query(m.c, sql.data(), sql.size()) == 0) {
      do {
        if (MYSQL_RES* r = mysql_store_result(m.c)) mysql_free_result(r);
      } while (mysql_next_result(m.c) == 0);
      return mysql_errno(m.c) ? mysql_error(m.c) : "";
    }
    return mysql_error(m.c);
  }
  std::string Count(const std::string& table) { return Run(*admin_, "SELECT count(*) FROM " + db_ + "." + table); }

  static Event Valid(const std::string& agg = "1") {
    Event e;
    e.aggregate_type = "order";
    e.aggregate_id = agg;
    e.event_type = "OrderCreated";
    e.payload = "{}";
    return e;
  }

  std::string base_, url_, db_;
  std::vector<int> fresh_versions_;  // what the first migration of db_ applied
  Target target_;
  std::unique_ptr<MyConn> admin_, conn_;
};

TEST_F(MariaDbTest, MigrateIsIdempotentAndSafeConcurrently) {
  // The fresh database got every version, in order; later runs apply none.
  ASSERT_FALSE(fresh_versions_.empty());
  for (std::size_t i = 0; i < fresh_versions_.size(); ++i) {
    EXPECT_EQ(fresh_versions_[i], static_cast<int>(i) + 1);
  }
  std::vector<std::future<Result<std::vector<int>>>> runs;
  for (int i = 0; i < 4; ++i) {
    runs.push_back(std::async(std::launch::async, [&] { return MigrateMariaDb({url_}); }));
  }
  for (auto& r : runs) {
    auto applied = r.get();
    ASSERT_TRUE(applied.ok()) << applied.status().ToString();
    EXPECT_TRUE(applied->empty()) << "already up to date";
  }
  EXPECT_EQ(Count("outbox_migrations"), "1");
  EXPECT_EQ(Count("outbox"), "0");
  EXPECT_EQ(Count("outbox_aggregate_locks"), "65536") << "every lock bucket exists";
}

TEST_F(MariaDbTest, BadUrlIsRejectedNamingThePartAndADeadServerIsUnavailable) {
  Status st = MigrateMariaDb({"postgresql://x@h/db"}).status();
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("mysql://"), std::string::npos) << st.ToString();
  st = MigrateMariaDb({"mysql://root@127.0.0.1:notaport/db"}).status();
  EXPECT_NE(st.message().find("port"), std::string::npos) << st.ToString();
  st = MigrateMariaDb({"mysql://root@127.0.0.1:1/db"}).status();
  EXPECT_EQ(st.code(), Code::kUnavailable) << st.ToString();
  st = MigrateMariaDb({"mysql://root:s3cret@127.0.0.1:1/db"}).status();
  EXPECT_EQ(st.message().find("s3cret"), std::string::npos) << "never print the password";
}

TEST_F(MariaDbTest, EventCommitsAndRollsBackWithTheBusinessData) {
  Run(*conn_, "START TRANSACTION");
  Run(*conn_, "INSERT INTO business VALUES (1)");
  auto r = Enqueue(conn_->c, Valid());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->event_id.size(), 36u);
  EXPECT_TRUE(r->enqueued);
  Run(*conn_, "COMMIT");
  Run(*conn_, "START TRANSACTION");
  Run(*conn_, "INSERT INTO business VALUES (2)");
  ASSERT_TRUE(Enqueue(conn_->c, Valid()).ok());
  Run(*conn_, "ROLLBACK");
  EXPECT_EQ(Count("business"), "1");
  EXPECT_EQ(Count("outbox"), "1");
  EXPECT_EQ(Run(*admin_, "SELECT concat(status, ' ', attempts) FROM " + db_ + ".outbox"), "PENDING 0");
}

TEST_F(MariaDbTest, EnqueueRequiresAnOpenTransaction) {
  auto r = Enqueue(conn_->c, Valid());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("START TRANSACTION"), std::string::npos);
  EXPECT_EQ(Count("outbox"), "0");
}

TEST_F(MariaDbTest, InvalidEventIsRejectedBeforeAnythingIsSentAndTheTransactionGoesOn) {
  Run(*conn_, "START TRANSACTION");
  Run(*conn_, "INSERT INTO business VALUES (1)");
  Event bad = Valid();
  bad.aggregate_id = "";
  std::vector<Event> batch = {Valid("2"), bad};
  auto r = EnqueueBatch(conn_->c, batch);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("event[1]"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("aggregate_id"), std::string::npos) << r.status().ToString();
  Run(*conn_, "COMMIT");
  EXPECT_EQ(Count("business"), "1");
  EXPECT_EQ(Count("outbox"), "0") << "nothing of the batch was sent";
}

TEST_F(MariaDbTest, DuplicateDedupKeyWritesNothingAndReturnsTheFirstId) {
  Event e = Valid();
  e.dedup_key = "order-1-created";
  Run(*conn_, "START TRANSACTION");
  auto first = Enqueue(conn_->c, e);
  Run(*conn_, "COMMIT");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  Run(*conn_, "START TRANSACTION");
  auto second = Enqueue(conn_->c, e);
  Run(*conn_, "COMMIT");
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_FALSE(second->enqueued);
  EXPECT_EQ(second->event_id, first->event_id);
  EXPECT_EQ(Count("outbox"), "1");
}

// Two producers (different aggregates) enqueue one dedup key at once: the
// second waits for the first's commit and gets its event id; one row.
TEST_F(MariaDbTest, ConcurrentEnqueuesOfOneDedupKeyWriteOneRow) {
  auto a = Open(db_);
  auto b = Open(db_);
  Event ea = Valid("x");
  ea.dedup_key = "same";
  Event eb = Valid("y");
  eb.dedup_key = "same";
  Run(*a, "START TRANSACTION");
  auto first = Enqueue(a->c, ea);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = std::async(std::launch::async, [&] {
    Run(*b, "START TRANSACTION");
    auto r = Enqueue(b->c, eb);
    Run(*b, "COMMIT");
    return r;
  });
  EXPECT_EQ(second.wait_for(300ms), std::future_status::timeout) << "the second must wait";
  Run(*a, "COMMIT");
  auto r = second.get();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->enqueued);
  EXPECT_EQ(r->event_id, first->event_id);
  EXPECT_EQ(Count("outbox"), "1");
}

TEST_F(MariaDbTest, BatchKeepsInputOrderPerAggregateAndPayloadBytesRoundTrip) {
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
  std::vector<Event> batch;
  for (int i = 0; i < 6; ++i) {
    Event e = Valid(i % 2 ? "b" : "a");
    e.payload = std::to_string(i) + bytes;
    e.headers = {{"traceparent", "00-x-" + std::to_string(i)}};
    batch.push_back(e);
  }
  Run(*conn_, "START TRANSACTION");
  auto r = EnqueueBatch(conn_->c, batch);
  Run(*conn_, "COMMIT");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 6u);
  EXPECT_EQ(Run(*admin_, "SELECT group_concat(left(payload, 1) ORDER BY seq SEPARATOR '') FROM " +
                             db_ + ".outbox WHERE aggregate_id = 'a'"),
            "024");
  EXPECT_EQ(Run(*admin_, "SELECT count(*) FROM " + db_ + ".outbox WHERE substr(payload, 2) = " +
                             "unhex('" + [&] {
                               std::string h;
                               char buf[3];
                               for (char ch : bytes) {
                                 const auto c = static_cast<unsigned char>(ch);
                                 std::snprintf(buf, sizeof buf, "%02X", c);
                                 h += buf;
                               }
                               return h;
                             }() + "')"),
            "6");
  EXPECT_EQ(Run(*admin_, "SELECT json_value(headers, '$.traceparent') FROM " + db_ +
                             ".outbox WHERE event_id = '" + (*r)[3].event_id + "'"),
            "00-x-3");
}

TEST_F(MariaDbTest, ProcedureForOtherLanguagesRejectsBadInputNamingTheField) {
  Run(*conn_, "START TRANSACTION");
  EXPECT_EQ(Run(*conn_, "CALL outbox_enqueue('order', '7', 'OrderCreated', '{}', '{\"k\":\"v\"}', NULL)").size(), 36u);
  const std::string e1 = RunError(*conn_, "CALL outbox_enqueue('or der', '7', 'X', '', NULL, NULL)");
  EXPECT_NE(e1.find("aggregate_type"), std::string::npos) << e1;
  const std::string e2 = RunError(*conn_, "CALL outbox_enqueue('order', '7', 'X', '', '{\"outbox-id\":\"v\"}', NULL)");
  EXPECT_NE(e2.find("header \"outbox-id\""), std::string::npos) << e2;
  const std::string e3 = RunError(*conn_, "CALL outbox_enqueue('order', '7', 'X', '', '{\"n\":1}', NULL)");
  EXPECT_NE(e3.find("header \"n\""), std::string::npos) << e3;
  const std::string e4 = RunError(*conn_, "CALL outbox_enqueue('order', '7', 'X', NULL, NULL, NULL)");
  EXPECT_NE(e4.find("payload"), std::string::npos) << e4;
  Run(*conn_, "SET @outbox_max_event_bytes = 10");
  // 10 bytes exactly is admitted (payload 9 + key 1); one more is not.
  EXPECT_EQ(Run(*conn_, "CALL outbox_enqueue('order', '7', 'X', '123456789', NULL, NULL)").size(), 36u);
  const std::string e5 = RunError(*conn_, "CALL outbox_enqueue('order', '7', 'X', '1234567890', NULL, NULL)");
  EXPECT_NE(e5.find("event is 11 bytes"), std::string::npos) << e5;
  EXPECT_NE(e5.find("@outbox_max_event_bytes"), std::string::npos) << e5;
  Run(*conn_, "COMMIT");
  EXPECT_EQ(Count("outbox"), "2") << "only the valid calls wrote rows";
}

// The ordered claim's plan: heads in seq order, runs behind them, the batch
// and byte bounds, and no run behind a head that turns FAILED.
TEST(MariaDbClaimPlan, HeadsThenContiguousRunsWithinTheBounds) {
  using maria::UnsentRow;
  std::vector<UnsentRow> heads = {{1, "o", "a", true, 0, 10}, {2, "o", "b", true, 0, 10},
                                  {9, "o", "c", true, 5, 10}};
  std::vector<UnsentRow> behind = {{4, "o", "a", true, 0, 10}, {3, "o", "a", true, 0, 10},
                                   {6, "o", "a", false, 0, 10},  // not due: ends a's run
                                   {7, "o", "a", true, 0, 10},   {5, "o", "b", true, 0, 10},
                                   {10, "o", "c", true, 0, 10}};
  auto p = maria::PlanOrderedClaim(heads, behind, 100, 1000, /*max_attempts=*/5);
  ASSERT_EQ(p.heads, (std::vector<std::int64_t>{1, 2, 9}));
  EXPECT_EQ(p.runs[0], (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(p.runs[1], (std::vector<std::int64_t>{5}));
  EXPECT_TRUE(p.runs[2].empty()) << "head 9 reached max_attempts: it turns FAILED, alone";
  EXPECT_EQ(p.size(), 6u);
  auto cut = maria::PlanOrderedClaim(heads, behind, 2, 1000, 5);
  EXPECT_EQ(cut.heads, (std::vector<std::int64_t>{1}));
  EXPECT_EQ(cut.runs[0], (std::vector<std::int64_t>{3})) << "the batch size cuts the run";
  auto bytes = maria::PlanOrderedClaim(heads, behind, 100, 25, 5);
  EXPECT_EQ(bytes.size(), 2u) << "stops before going over 25 bytes";
  auto one = maria::PlanOrderedClaim(heads, behind, 100, 1, 5);
  EXPECT_EQ(one.heads, (std::vector<std::int64_t>{1})) << "one row always comes";
  EXPECT_TRUE(one.runs[0].empty());
}

// A killed session is reopened by the next call: a transition that fails on
// the dead connection is Unavailable (retryable), the one after it applies.
TEST_F(MariaDbTest, StoreReconnectsAfterItsSessionIsKilled) {
  Run(*conn_, "START TRANSACTION");
  ASSERT_TRUE(Enqueue(conn_->c, Valid()).ok());
  Run(*conn_, "COMMIT");
  MariaDbStoreOptions o;
  o.url = url_;
  auto store = OpenMariaDbStore(o);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  ClaimOptions co;
  co.owner = "t";
  auto c = (*store)->Claim(co);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->events.size(), 1u);
  // Every session on the test's database dies (the admin one has none).
  const std::string ids = Run(*admin_, "SELECT group_concat(id) FROM information_schema.processlist "
                                       "WHERE db = '" + db_ + "'");
  std::stringstream ss(ids);
  for (std::string id; std::getline(ss, id, ',');) Run(*admin_, "KILL " + id);
  RescheduleItem item{c->events[0].ticket, std::chrono::milliseconds(0), "it's retried", false};
  auto first = (*store)->Reschedule(std::span(&item, 1));
  if (!first.ok()) {
    EXPECT_TRUE(first.status().retryable()) << first.status().ToString();
    auto again = (*store)->Reschedule(std::span(&item, 1));
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->applied, 1u);
  } else {
    EXPECT_EQ(first->applied, 1u);
  }
}

// The mechanism that replaces PostgreSQL's transaction-scoped advisory locks:
// a second producer of the same aggregate waits for the first one's COMMIT
// before it takes a seq, so the aggregate's seqs are in commit order; another
// aggregate does not wait.
TEST_F(MariaDbTest, TwoProducersOfOneAggregateTakeSeqsInCommitOrder) {
  auto a = Open(db_);
  auto b = Open(db_);
  auto c = Open(db_);
  Run(*a, "START TRANSACTION");
  auto ea = Valid("hot");
  ea.payload = "a";
  ASSERT_TRUE(Enqueue(a->c, ea).ok());
  std::atomic<bool> b_done{false};
  std::int64_t b_seq_committed_after = 0;
  std::thread tb([&] {
    Run(*b, "START TRANSACTION");
    Event eb = Valid("hot");
    eb.payload = "b";
    auto r = Enqueue(b->c, eb);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    b_done = true;
    Run(*b, "COMMIT");
    b_seq_committed_after = 1;
  });
  // Another aggregate goes through while "hot" is locked.
  Run(*c, "START TRANSACTION");
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(Enqueue(c->c, Valid("cold")).ok());
  Run(*c, "COMMIT");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  std::this_thread::sleep_for(500ms);
  EXPECT_FALSE(b_done.load()) << "the second producer of the aggregate must wait for the first";
  Run(*a, "COMMIT");
  tb.join();
  EXPECT_TRUE(b_done.load());
  EXPECT_EQ(b_seq_committed_after, 1);
  EXPECT_EQ(Run(*admin_, "SELECT group_concat(payload ORDER BY seq SEPARATOR '') FROM " + db_ +
                             ".outbox WHERE aggregate_id = 'hot'"),
            "ab");
}

// ---- The inbox on MariaDB -----------------------------------------------------

InboundMessage Msg(const std::string& id, std::int64_t offset, std::string payload = "p") {
  InboundMessage m;
  m.topic = "outbox.event.order";
  m.partition = 1;
  m.offset = offset;
  m.key = "k";
  m.payload = std::move(payload);
  m.headers = {{"outbox-event-id", id}, {"bin", std::string("\0\xff", 2)}};
  m.timestamp = std::chrono::system_clock::time_point(std::chrono::milliseconds(1700000000123));
  return m;
}

class MariaDbInboxTest : public MariaDbTest {
 protected:
  void SetUp() override {
    MariaDbTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    Run(*conn_, "CREATE TABLE effects (id VARCHAR(64) PRIMARY KEY, payload TEXT)");
  }
  // The operators' side of the same inbox (summary, find, purge).
  std::unique_ptr<InboxView> OpenView(const std::string& consumer = "c1") {
    MariaDbInboxOptions o;
    o.url = url_;
    o.consumer = consumer;
    auto view = OpenMariaDbInboxView(o);
    EXPECT_TRUE(view.ok()) << view.status().ToString();
    return view.ok() ? std::move(view).value() : nullptr;
  }

  // A handler that inserts one effect row; payload "fail-transient" /
  // "fail-permanent" fail after writing, "throw" throws.
  std::unique_ptr<InboxStore> OpenInbox(const std::string& consumer = "c1") {
    MariaDbInboxOptions o;
    o.url = url_;
    o.consumer = consumer;
    auto inbox = OpenMariaDbInbox(o, [](const InboundMessage& m, st_mysql* txn) {
      const std::string sql = "INSERT INTO effects VALUES ('" + *m.Header("outbox-event-id") +
                              "', '" + m.payload + "')";
      if (mysql_query(txn, sql.c_str()) != 0) return HandlerResult::Transient(mysql_error(txn));
      if (m.payload == "fail-transient") return HandlerResult::Transient("try later");
      if (m.payload == "fail-permanent") return HandlerResult::Permanent("bad payload");
      if (m.payload == "throw") throw std::runtime_error("boom");
      return HandlerResult::Ok();
    });
    EXPECT_TRUE(inbox.ok()) << inbox.status().ToString();
    if (!inbox.ok()) return nullptr;
    Status st = (*inbox)->Migrate();
    EXPECT_TRUE(st.ok()) << st.ToString();
    return std::move(inbox).value();
  }
};

TEST_F(MariaDbInboxTest, EffectsApplyOnceAndDuplicatesAreCountedOnTheStamp) {
  auto inbox = OpenInbox();
  ASSERT_NE(inbox, nullptr);
  std::vector<InboundMessage> msgs = {Msg("e1", 1), Msg("e2", 2), Msg("e1", 3)};
  std::vector<std::string> keys = {"e1", "e2", "e1"};
  auto r = inbox->Apply(msgs, keys);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].outcome, Outcome::kApplied);
  EXPECT_EQ((*r)[1].outcome, Outcome::kApplied);
  EXPECT_EQ((*r)[2].outcome, Outcome::kDuplicate) << "a copy in the same batch";
  auto again = inbox->Apply(msgs, keys);
  ASSERT_TRUE(again.ok());
  for (const auto& o : *again) EXPECT_EQ(o.outcome, Outcome::kDuplicate);
  EXPECT_EQ(Count("effects"), "2");
  EXPECT_EQ(Run(*admin_, "SELECT duplicates FROM " + db_ + ".inbox_stamps WHERE dedup_key = 'e1'"), "3");
  auto found = OpenView()->FindStamps(std::vector<std::string>{"e1"});
  ASSERT_TRUE(found.ok());
  ASSERT_EQ(found->size(), 1u);
  EXPECT_EQ((*found)[0].offset, "1");
  EXPECT_EQ((*found)[0].duplicates, 3);
  // Another consumer of the same database has its own stamps.
  auto other = OpenInbox("c2");
  auto theirs = other->Apply(std::vector<InboundMessage>{Msg("e9", 9)}, std::vector<std::string>{"e9"});
  ASSERT_TRUE(theirs.ok());
  EXPECT_EQ((*theirs)[0].outcome, Outcome::kApplied);
}

TEST_F(MariaDbInboxTest, AFailingHandlerUndoesOnlyItsOwnStampAndWrites) {
  auto inbox = OpenInbox();
  ASSERT_NE(inbox, nullptr);
  std::vector<InboundMessage> msgs = {Msg("a", 1), Msg("b", 2, "fail-transient"),
                                      Msg("c", 3, "fail-permanent"), Msg("d", 4, "throw"),
                                      Msg("e", 5)};
  std::vector<std::string> keys = {"a", "b", "c", "d", "e"};
  auto r = inbox->Apply(msgs, keys);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].outcome, Outcome::kApplied);
  EXPECT_EQ((*r)[1].outcome, Outcome::kTransient);
  EXPECT_EQ((*r)[2].outcome, Outcome::kPermanent);
  EXPECT_EQ((*r)[3].outcome, Outcome::kTransient);
  EXPECT_NE((*r)[3].error.find("boom"), std::string::npos);
  EXPECT_EQ((*r)[4].outcome, Outcome::kApplied);
  EXPECT_EQ(Run(*admin_, "SELECT group_concat(id ORDER BY id) FROM " + db_ + ".effects"), "a,e");
  EXPECT_EQ(Run(*admin_, "SELECT group_concat(dedup_key ORDER BY dedup_key) FROM " + db_ + ".inbox_stamps"),
            "a,e");
  EXPECT_EQ(Run(*admin_, "SELECT count(*) FROM " + db_ + ".effects WHERE id = 'b'"), "0");
  // The failed ones apply on their next delivery.
  auto later = inbox->Apply(std::vector<InboundMessage>{Msg("b", 2)}, std::vector<std::string>{"b"});
  ASSERT_TRUE(later.ok());
  EXPECT_EQ((*later)[0].outcome, Outcome::kApplied);
}

TEST_F(MariaDbInboxTest, OrderedModeHoldsTheRestOfAFailedKeyAndTheParkedQueueWorks) {
  auto inbox = OpenInbox();
  ASSERT_NE(inbox, nullptr);
  std::vector<InboundMessage> msgs = {Msg("x1", 1, "fail-transient"), Msg("y1", 2), Msg("x2", 3)};
  std::vector<std::string> keys = {"x1", "y1", "x2"};
  std::vector<std::string> order = {"X", "Y", "X"};
  auto r = inbox->Apply(msgs, keys, order);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].outcome, Outcome::kTransient);
  EXPECT_EQ((*r)[1].outcome, Outcome::kApplied);
  EXPECT_EQ((*r)[2].outcome, Outcome::kHeld) << "x2 must not pass x1";
  // Park x1 (due now) and x2 behind it; parking again changes nothing.
  std::vector<ParkedMessage> park = {{0, "X", "x1", msgs[0], 1, "try later", std::chrono::milliseconds(0)},
                                     {0, "X", "x2", msgs[2], 0, "", std::chrono::milliseconds(0)}};
  ASSERT_TRUE(inbox->Park(park).ok());
  ASSERT_TRUE(inbox->Park(park).ok());
  auto keys_parked = inbox->ParkedKeys(std::vector<std::string>{"X", "Y"});
  ASSERT_TRUE(keys_parked.ok());
  EXPECT_EQ(*keys_parked, (std::set<std::string>{"X"}));
  auto due = inbox->Due(10);
  ASSERT_TRUE(due.ok()) << due.status().ToString();
  ASSERT_EQ(due->size(), 2u);
  EXPECT_EQ((*due)[0].dedup_key, "x1");
  EXPECT_EQ((*due)[0].attempts, 1);
  EXPECT_EQ((*due)[0].last_error, "try later");
  EXPECT_EQ((*due)[0].message.headers, msgs[0].headers) << "header bytes round-trip";
  EXPECT_EQ((*due)[0].message.timestamp, msgs[0].timestamp);
  EXPECT_EQ((*due)[1].dedup_key, "x2");
  // The head fails again: nothing of X is due for an hour.
  ASSERT_TRUE(inbox->Reschedule((*due)[0].id, 2, "again", std::chrono::hours(1)).ok());
  auto none = inbox->Due(10);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  ASSERT_TRUE(inbox->Unpark(std::vector<std::int64_t>{(*due)[0].id, (*due)[1].id}).ok());
  EXPECT_EQ(Count("inbox_parked"), "0");
  auto view = OpenView();
  auto summary = view->Summary(std::chrono::hours(1));
  ASSERT_TRUE(summary.ok());
  ASSERT_EQ(summary->size(), 1u);
  EXPECT_EQ((*summary)[0].stamps, 1);
  EXPECT_EQ((*summary)[0].older, 0);
  auto purged = inbox->PurgeStamps(std::chrono::seconds(0), 10);
  ASSERT_TRUE(purged.ok());
  EXPECT_EQ(*purged, 1);
}

TEST_F(MariaDbInboxTest, ABadDedupKeyFailsAloneAndAnOperatorInboxNeedsAConsumer) {
  auto inbox = OpenInbox();
  ASSERT_NE(inbox, nullptr);
  auto r = inbox->Apply(std::vector<InboundMessage>{Msg("ok", 1), Msg("bad", 2)},
                        std::vector<std::string>{"ok", std::string("\xff", 1)});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].outcome, Outcome::kApplied);
  EXPECT_EQ((*r)[1].outcome, Outcome::kPermanent);
  MariaDbInboxOptions o;
  o.url = url_;
  o.consumer = "ops";
  ASSERT_TRUE(OpenMariaDbInboxView(o).ok());
  o.consumer = "";
  EXPECT_EQ(OpenMariaDbInboxView(o).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace outbox::testing

// ---- The store contract suite, unchanged, on MariaDB -------------------------

namespace outbox::testing {
namespace {

class MariaDbHarness : public StoreHarness {
 public:
  explicit MariaDbHarness(SentMode mode) : mode_(mode) {}
  ~MariaDbHarness() override {
    if (admin_.c) mysql_query(admin_.c, ("DROP DATABASE IF EXISTS " + db_).c_str());
  }

  bool SetUp(bool* skip) override {
    const std::string base = EnvOr("OUTBOX_MYSQL_URL");
    if (base.empty()) {
      if (AllowSkip()) {
        *skip = true;
        return false;
      }
      ADD_FAILURE() << "OUTBOX_MYSQL_URL is not set: run through scripts/test";
      return false;
    }
    const Target t = ParseTestUrl(base);
    db_ = "t_" + RandomSuffix();
    admin_.c = mysql_init(nullptr);
    if (!mysql_real_connect(admin_.c, t.host.c_str(), t.user.c_str(), nullptr, nullptr, t.port,
                            nullptr, 0) ||
        mysql_query(admin_.c, ("CREATE DATABASE " + db_).c_str()) != 0 ||
        mysql_select_db(admin_.c, db_.c_str()) != 0) {
      ADD_FAILURE() << "MariaDB: " << mysql_error(admin_.c);
      return false;
    }
    url_ = base.substr(0, base.rfind('/') + 1) + db_;
    Status st = MigrateMariaDb({url_}).status();
    if (!st.ok()) {
      ADD_FAILURE() << "migrate: " << st.ToString();
      return false;
    }
    return true;
  }

  std::unique_ptr<Store> NewStore() override {
    MariaDbStoreOptions o;
    o.url = url_;
    o.sent_mode = mode_;
    auto s = OpenMariaDbStore(o);
    if (!s.ok()) {
      ADD_FAILURE() << s.status().ToString();
      return nullptr;
    }
    return std::move(s).value();
  }

  Result<std::vector<EnqueueResult>> Enqueue(std::span<const Event> events, bool one_txn) override {
    std::vector<EnqueueResult> out;
    if (one_txn) {
      mysql_query(admin_.c, "START TRANSACTION");
      auto r = EnqueueBatch(admin_.c, events);
      mysql_query(admin_.c, r.ok() ? "COMMIT" : "ROLLBACK");
      return r;
    }
    for (const Event& e : events) {
      mysql_query(admin_.c, "START TRANSACTION");
      auto r = outbox::Enqueue(admin_.c, e);
      mysql_query(admin_.c, r.ok() ? "COMMIT" : "ROLLBACK");
      if (!r.ok()) return r.status();
      out.push_back(*r);
    }
    return out;
  }

  std::optional<RowView> Row(std::int64_t seq) override {
    const std::string sql = "SELECT status, attempts, last_error, lease_owner FROM outbox WHERE seq = " +
                            std::to_string(seq);
    std::optional<RowView> v;
    if (mysql_query(admin_.c, sql.c_str()) != 0) return v;
    MYSQL_RES* r = mysql_store_result(admin_.c);
    if (!r) return v;
    if (MYSQL_ROW row = mysql_fetch_row(r)) {
      v = RowView{row[0], std::atoi(row[1]), std::nullopt, std::nullopt};
      if (row[2]) v->last_error = row[2];
      if (row[3]) v->lease_owner = row[3];
    }
    mysql_free_result(r);
    return v;
  }

  std::int64_t CountRows() override {
    std::int64_t n = -1;
    if (mysql_query(admin_.c, "SELECT count(*) FROM outbox") != 0) return n;
    MYSQL_RES* r = mysql_store_result(admin_.c);
    if (MYSQL_ROW row = r ? mysql_fetch_row(r) : nullptr) n = std::stoll(row[0]);
    if (r) mysql_free_result(r);
    return n;
  }

 private:
  SentMode mode_;
  std::string db_, url_;
  MyConn admin_;
};

std::unique_ptr<StoreHarness> MakeUpdateMode() {
  return std::make_unique<MariaDbHarness>(SentMode::kUpdate);
}
std::unique_ptr<StoreHarness> MakeDeleteMode() {
  return std::make_unique<MariaDbHarness>(SentMode::kDelete);
}

std::string ModeName(const ::testing::TestParamInfo<HarnessFactory>& p) {
  return p.index == 0 ? "SentUpdate" : "SentDelete";
}

INSTANTIATE_TEST_SUITE_P(MariaDb, StoreContractTest,
                         ::testing::Values(&MakeUpdateMode, &MakeDeleteMode), ModeName);

}  // namespace
}  // namespace outbox::testing
