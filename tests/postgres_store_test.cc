// The store contract against a real PostgreSQL (both sent modes), plus the
// PostgreSQL-only parts: enqueue into the caller's transaction, the SQL enqueue
// function, migrations, connection loss.
#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <thread>
#include <vector>

#include "outbox/kafka.h"
#include "outbox/postgres.h"
// The store's statements and parameter types, to plan them
// (TheStoresQueriesWalkAnIndexNotTheTable).
#include "../src/store/postgres/log_store.h"
#include "../src/store/postgres/session.h"
#include "../src/store/postgres/sql.h"
#include "store_contract.h"
#include "test_env.h"

namespace outbox::testing {
namespace {

class PostgresHarness : public StoreHarness {
 public:
  explicit PostgresHarness(SentMode mode, bool log = false) : mode_(mode), log_(log) {}
  ~PostgresHarness() override {
    if (admin_) Exec(admin_.get(), "DROP SCHEMA IF EXISTS " + schema_ + " CASCADE");
  }

  bool SetUp(bool* skip) override {
    url_ = EnvOr("OUTBOX_PG_URL");
    if (url_.empty()) {
      if (AllowSkip()) {
        *skip = true;
        return false;
      }
      ADD_FAILURE() << "OUTBOX_PG_URL is not set: run through scripts/test";
      return false;
    }
    schema_ = "t_" + RandomSuffix();
    admin_ = Connect(url_);
    if (PQstatus(admin_.get()) != CONNECTION_OK) return false;
    auto store = NewStore();
    if (!store) return false;
    Status st = store->Migrate().status();
    if (!st.ok()) {
      ADD_FAILURE() << "migrate: " << st.ToString();
      return false;
    }
    return true;
  }

  std::unique_ptr<Store> NewStore() override {
    PostgresStoreOptions o;
    o.conninfo = url_;
    o.schema = schema_;
    o.sent_mode = mode_;
    auto s = log_ ? pg::OpenPostgresLogStore(o) : OpenPostgresStore(o);
    if (!s.ok()) {
      ADD_FAILURE() << s.status().ToString();
      return nullptr;
    }
    return std::move(s).value();
  }

  Result<std::vector<EnqueueResult>> Enqueue(std::span<const Event> events, bool one_txn) override {
    EnqueueOptions o;
    o.schema = schema_;
    std::vector<EnqueueResult> out;
    if (one_txn) {
      Exec(admin_.get(), "BEGIN");
      auto r = EnqueueBatch(admin_.get(), events, o);
      Exec(admin_.get(), r.ok() ? "COMMIT" : "ROLLBACK");
      return r;
    }
    for (const Event& e : events) {
      Exec(admin_.get(), "BEGIN");
      auto r = outbox::Enqueue(admin_.get(), e, o);
      Exec(admin_.get(), r.ok() ? "COMMIT" : "ROLLBACK");
      if (!r.ok()) return r.status();
      out.push_back(*r);
    }
    return out;
  }

  std::optional<RowView> Row(std::int64_t seq) override {
    std::string sql = "SELECT status, attempts, last_error, lease_owner FROM " + schema_ +
                      ".outbox WHERE seq = " + std::to_string(seq);
    PGresult* r = PQexec(admin_.get(), sql.c_str());
    std::optional<RowView> v;
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
      v = RowView{PQgetvalue(r, 0, 0), std::atoi(PQgetvalue(r, 0, 1)), std::nullopt, std::nullopt};
      if (!PQgetisnull(r, 0, 2)) v->last_error = PQgetvalue(r, 0, 2);
      if (!PQgetisnull(r, 0, 3)) v->lease_owner = PQgetvalue(r, 0, 3);
    }
    PQclear(r);
    return v;
  }

  bool PerRowState() const override { return !log_; }

  std::int64_t CountRows() override {
    return std::stoll(Exec(admin_.get(), "SELECT count(*) FROM " + schema_ + ".outbox"));
  }

 private:
  SentMode mode_;
  bool log_;  // the log layout (issue 42) instead of the row store
  std::string url_, schema_;
  PgConn admin_;
};

std::unique_ptr<StoreHarness> MakeUpdateMode() {
  return std::make_unique<PostgresHarness>(SentMode::kUpdate);
}
std::unique_ptr<StoreHarness> MakeDeleteMode() {
  return std::make_unique<PostgresHarness>(SentMode::kDelete);
}

std::string ModeName(const ::testing::TestParamInfo<HarnessFactory>& p) {
  return p.index == 0 ? "SentUpdate" : "SentDelete";
}

INSTANTIATE_TEST_SUITE_P(Postgres, StoreContractTest,
                         ::testing::Values(&MakeUpdateMode, &MakeDeleteMode), ModeName);

std::unique_ptr<StoreHarness> MakeLogLayout() {
  return std::make_unique<PostgresHarness>(SentMode::kUpdate, /*log=*/true);
}
INSTANTIATE_TEST_SUITE_P(PostgresLog, StoreContractTest, ::testing::Values(&MakeLogLayout),
                         [](const auto&) { return std::string("Log"); });

// ---- PostgreSQL-only behaviour -------------------------------------------

class PostgresTest : public ::testing::Test {
 protected:
  void SetUp() override {
    OUTBOX_REQUIRE_ENV(url_, "OUTBOX_PG_URL");
    schema_ = "t_" + RandomSuffix();
    conn_ = Connect(url_);
    ASSERT_EQ(PQstatus(conn_.get()), CONNECTION_OK);
    store_ = OpenStore();
    ASSERT_NE(store_, nullptr);
    Status st = store_->Migrate().status();
    ASSERT_TRUE(st.ok()) << st.ToString();
    Exec(conn_.get(), "CREATE TABLE " + schema_ + ".business (id int PRIMARY KEY)");
    opts_.schema = schema_;
  }
  void TearDown() override {
    if (conn_ && PQstatus(conn_.get()) == CONNECTION_OK) {
      Exec(conn_.get(), "ROLLBACK");  // harmless warning if idle
      Exec(conn_.get(), "DROP SCHEMA IF EXISTS " + schema_ + " CASCADE");
      Exec(conn_.get(), "DROP PUBLICATION IF EXISTS " + DefaultStreamName(schema_));
    }
  }
  std::unique_ptr<Store> OpenStore() {
    PostgresStoreOptions o;
    o.conninfo = url_;
    o.schema = schema_;
    auto s = OpenPostgresStore(o);
    if (!s.ok()) {
      ADD_FAILURE() << s.status().ToString();
      return nullptr;
    }
    return std::move(s).value();
  }
  std::string Count(const std::string& table) {
    return Exec(conn_.get(), "SELECT count(*) FROM " + schema_ + "." + table);
  }
  static Event Valid(const std::string& agg = "1") {
    Event e;
    e.aggregate_type = "order";
    e.aggregate_id = agg;
    e.event_type = "OrderCreated";
    e.payload = "{}";
    return e;
  }

  std::string url_, schema_;
  PgConn conn_;
  std::unique_ptr<Store> store_;
  EnqueueOptions opts_;
};

TEST_F(PostgresTest, EnqueueRequiresAnOpenTransaction) {
  auto r = Enqueue(conn_.get(), Valid(), opts_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("BEGIN"), std::string::npos);
  EXPECT_EQ(Count("outbox"), "0");
}

TEST_F(PostgresTest, EventCommitsAndRollsBackWithTheBusinessData) {
  Exec(conn_.get(), "BEGIN");
  Exec(conn_.get(), "INSERT INTO " + schema_ + ".business VALUES (1)");
  ASSERT_TRUE(Enqueue(conn_.get(), Valid(), opts_).ok());
  Exec(conn_.get(), "ROLLBACK");
  EXPECT_EQ(Count("outbox"), "0");
  EXPECT_EQ(Count("business"), "0");

  Exec(conn_.get(), "BEGIN");
  Exec(conn_.get(), "INSERT INTO " + schema_ + ".business VALUES (1)");
  auto r = Enqueue(conn_.get(), Valid(), opts_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->event_id.size(), 36u);
  EXPECT_TRUE(r->enqueued);
  // Not visible to anyone before commit.
  auto c = store_->Claim(ClaimOptions{});
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->events.empty());
  Exec(conn_.get(), "COMMIT");
  EXPECT_EQ(Count("outbox"), "1");
  EXPECT_EQ(Count("business"), "1");
}

TEST_F(PostgresTest, InvalidEventLeavesTheCallersTransactionUsable) {
  Exec(conn_.get(), "BEGIN");
  Exec(conn_.get(), "INSERT INTO " + schema_ + ".business VALUES (1)");
  Event bad = Valid();
  bad.aggregate_id.clear();
  auto r = Enqueue(conn_.get(), bad, opts_);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find("aggregate_id"), std::string::npos);
  EXPECT_EQ(PQtransactionStatus(conn_.get()), PQTRANS_INTRANS);
  ASSERT_TRUE(Enqueue(conn_.get(), Valid(), opts_).ok());
  Exec(conn_.get(), "COMMIT");
  EXPECT_EQ(Count("outbox"), "1");
  EXPECT_EQ(Count("business"), "1");
}

TEST_F(PostgresTest, BatchReturnsResultsInInputOrderAndKeepsAggregateOrder) {
  std::vector<Event> evs;
  for (int i = 0; i < 30; ++i) {
    Event e = Valid(i % 2 ? "odd" : "even");
    e.aggregate_type = i % 3 ? "b" : "a";  // mixed, so the lock-order sort reorders
    e.payload = std::to_string(i);
    e.dedup_key = "k" + std::to_string(i);
    evs.push_back(e);
  }
  evs.push_back(evs[3]);  // a duplicate inside the batch
  Exec(conn_.get(), "BEGIN");
  auto r = EnqueueBatch(conn_.get(), evs, opts_);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  Exec(conn_.get(), "COMMIT");
  ASSERT_EQ(r->size(), evs.size());
  for (int i = 0; i < 30; ++i) {
    std::string payload = Exec(conn_.get(), "SELECT convert_from(payload, 'UTF8') FROM " + schema_ +
                                                ".outbox WHERE event_id = '" +
                                                (*r)[static_cast<std::size_t>(i)].event_id + "'");
    EXPECT_EQ(payload, std::to_string(i));
  }
  EXPECT_FALSE(r->back().enqueued);
  EXPECT_EQ(r->back().event_id, (*r)[3].event_id);
  // Within each aggregate, seq order is the caller's order.
  std::string misordered = Exec(conn_.get(),
      "SELECT count(*) FROM (SELECT convert_from(payload,'UTF8')::int AS n, "
      "lag(convert_from(payload,'UTF8')::int) OVER (PARTITION BY aggregate_type, aggregate_id "
      "ORDER BY seq) AS prev FROM " + schema_ + ".outbox) s WHERE prev > n");
  EXPECT_EQ(misordered, "0");
}

TEST_F(PostgresTest, BatchIsValidatedBeforeAnythingIsSent) {
  std::vector<Event> evs = {Valid("1"), Valid("2")};
  evs[1].headers = {{"bad name", "x"}};
  Exec(conn_.get(), "BEGIN");
  auto r = EnqueueBatch(conn_.get(), evs, opts_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("event[1]"), std::string::npos) << r.status().message();
  EXPECT_EQ(PQtransactionStatus(conn_.get()), PQTRANS_INTRANS);
  Exec(conn_.get(), "COMMIT");
  EXPECT_EQ(Count("outbox"), "0");
}

TEST_F(PostgresTest, SqlEnqueueFunctionForOtherLanguages) {
  Exec(conn_.get(), "BEGIN");
  std::string id = Exec(conn_.get(),
      "SELECT event_id FROM " + schema_ + ".enqueue('order', '42', 'OrderCreated', "
      "convert_to('{\"id\":42}', 'UTF8'), '{\"traceparent\":\"00-abc-def-01\"}'::jsonb, 'o-42')");
  EXPECT_EQ(id.size(), 36u);
  std::string again = Exec(conn_.get(), "SELECT enqueued FROM " + schema_ +
      ".enqueue('order', '42', 'OrderCreated', ''::bytea, '{}'::jsonb, 'o-42')");
  EXPECT_EQ(again, "f");
  Exec(conn_.get(), "COMMIT");
  // The UUID is version 7.
  EXPECT_EQ(id[14], '7') << id;
  auto c = store_->Claim(ClaimOptions{});
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->events.size(), 1u);
  EXPECT_EQ(c->events[0].event_id, id);
  EXPECT_EQ(c->events[0].event.payload, "{\"id\":42}");
}

TEST_F(PostgresTest, SqlEnqueueFunctionRejectsBadInputNamingTheField) {
  struct Case {
    std::string args, field;
  };
  std::vector<Case> cases = {
      {"'', '1', 'T', ''::bytea", "aggregate_type"},
      {"'a b', '1', 'T', ''::bytea", "aggregate_type"},
      {"'a', '', 'T', ''::bytea", "aggregate_id"},
      {"'a', '1', NULL, ''::bytea", "event_type"},
      {"'a', '1', 'T', NULL", "payload"},
      {"'a', '1', 'T', ''::bytea, '[1]'::jsonb", "headers"},
      {"'a', '1', 'T', ''::bytea, '{\"x\":1}'::jsonb", "header \"x\""},
      {"'a', '1', 'T', ''::bytea, '{\"outbox-id\":\"1\"}'::jsonb", "outbox-id"},
      {"'a', '1', 'T', ''::bytea, '{}'::jsonb, ''", "dedup_key"},
  };
  for (const Case& c : cases) {
    std::string err;
    Exec(conn_.get(), "SELECT * FROM " + schema_ + ".enqueue(" + c.args + ")", true, &err);
    EXPECT_NE(err.find(c.field), std::string::npos) << c.args << " -> " << err;
  }
  std::string err;
  Exec(conn_.get(), "SET outbox.max_payload_bytes = 4");
  Exec(conn_.get(), "SELECT * FROM " + schema_ + ".enqueue('a', '1', 'T', '12345'::bytea)", true,
       &err);
  EXPECT_NE(err.find("payload is 5 bytes; the limit is 4"), std::string::npos) << err;
  EXPECT_EQ(Count("outbox"), "0");
}

// Migration 10's quick check admits a valid event without running the detailed
// checks; at each rule's edge it must agree with them: the last valid value
// goes in, one past it is refused naming the field.
TEST_F(PostgresTest, SqlEnqueueQuickCheckAgreesWithTheDetailedChecksAtEachEdge) {
  struct Case {
    std::string args;
    std::string refused;  // "" = enqueued
  };
  const std::string t255(255, 't'), t256(256, 't'), h128(128, 'h'), h129(129, 'h');
  std::vector<Case> cases = {
      {"'" + t255 + "', '1', 'T', ''::bytea", ""},
      {"'" + t256 + "', '1', 'T', ''::bytea", "limited to 255 bytes"},
      {"'a', '" + t255 + "', 'T', ''::bytea", ""},
      {"'a', '" + t256 + "', 'T', ''::bytea", "limited to 255 bytes"},
      {"'a', '1', '" + t256 + "', ''::bytea", "limited to 255 bytes"},
      {"'a', '1', 'T', ''::bytea, '{}'::jsonb, '" + t255 + "'", ""},
      {"'a', '1', 'T', ''::bytea, '{}'::jsonb, '" + t256 + "'", "limited to 255 bytes"},
      {"'a', '1', 'T', ''::bytea, '{\"" + h128 + "\":\"v\"}'::jsonb", ""},
      {"'a', '1', 'T', ''::bytea, '{\"" + h129 + "\":\"v\"}'::jsonb", "header \"" + h129 + "\""},
      {"'a', '1', 'T', ''::bytea, '{\"\":\"v\"}'::jsonb", "header \"\""},
      {"'a', '1', 'T', ''::bytea, '{\"Outbox-x\":\"v\"}'::jsonb", ""},
      {"'a', '1', 'T', ''::bytea, '{\"x\":null}'::jsonb", "header \"x\""},
      {"'a', '1', 'T', ''::bytea, '{\"x\":{\"y\":\"z\"}}'::jsonb", "header \"x\""},
      {"'a', '1', 'T', ''::bytea, NULL", "headers must be a JSON object"},
      {"'a', '1', 'T', ''::bytea, '\"s\"'::jsonb", "headers must be a JSON object"},
      {"'a.b_c-D9', '1', 'T', ''::bytea", ""},
      {"'a/b', '1', 'T', ''::bytea", "aggregate_type may only contain"},
  };
  for (const Case& c : cases) {
    std::string err;
    Exec(conn_.get(), "SELECT * FROM " + schema_ + ".enqueue(" + c.args + ")", !c.refused.empty(),
         &err);
    if (c.refused.empty()) {
      EXPECT_EQ(err, "") << c.args.substr(0, 80);
    } else {
      EXPECT_NE(err.find(c.refused), std::string::npos) << c.args.substr(0, 80) << " -> " << err;
    }
  }
  // The payload limit, exactly at it and one over.
  Exec(conn_.get(), "SET outbox.max_payload_bytes = 5");
  std::string err;
  Exec(conn_.get(), "SELECT * FROM " + schema_ + ".enqueue('a', '1', 'T', '12345'::bytea)", false, &err);
  EXPECT_EQ(err, "");
  Exec(conn_.get(), "SELECT * FROM " + schema_ + ".enqueue('a', '1', 'T', '123456'::bytea)", true,
       &err);
  EXPECT_NE(err.find("payload is 6 bytes; the limit is 5"), std::string::npos) << err;
  Exec(conn_.get(), "RESET outbox.max_payload_bytes");
  // A value that is not a number names the setting's cast, and changes nothing.
  Exec(conn_.get(), "SET outbox.max_event_bytes = 'lots'");
  Exec(conn_.get(), "SELECT * FROM " + schema_ + ".enqueue('a', '1', 'T', ''::bytea)", true, &err);
  EXPECT_NE(err.find("lots"), std::string::npos) << err;
  Exec(conn_.get(), "RESET outbox.max_event_bytes");
  EXPECT_EQ(Count("outbox"), "7");
}

// enqueue_batch(): the SQL form of EnqueueBatch, for callers in any language.
TEST_F(PostgresTest, SqlEnqueueBatchKeepsOrderDedupsAndNamesTheBadEvent) {
  Exec(conn_.get(), "SELECT * FROM " + schema_ +
                        ".enqueue('order', '1', 'T', ''::bytea, '{}'::jsonb, 'before')");
  const std::string call = "SELECT ord, enqueued, event_id::text FROM " + schema_ + ".enqueue_batch(";
  Exec(conn_.get(), "BEGIN");
  // Four events of aggregate 1, one of 2; the fourth repeats the second's key,
  // the fifth a key that existed before. Every returned row is kept.
  Exec(conn_.get(), "CREATE TEMP TABLE b ON COMMIT DROP AS SELECT * FROM " + schema_ + ".enqueue_batch(" +
      "ARRAY['order','order','order','order','order'], ARRAY['1','2','1','1','1'], "
      "ARRAY['A','B','C','D','E'], ARRAY['1','2','3','4','5']::bytea[], "
      "ARRAY['{\"traceparent\":\"00-x\"}', NULL, '{}', '{}', '{}']::jsonb[], "
      "ARRAY[NULL, 'k2', NULL, 'k2', 'before'])");
  EXPECT_EQ(Exec(conn_.get(), "SELECT string_agg(ord || ':' || enqueued, ',' ORDER BY ord) FROM b"),
            "1:true,2:true,3:true,4:false,5:false");
  // Each returned id is the row's that holds the event (or its key).
  EXPECT_EQ(Exec(conn_.get(), "SELECT string_agg(ord || '=' || coalesce(convert_from(o.payload, 'UTF8'), "
                              "o.dedup_key, '?'), ',' ORDER BY ord) FROM b LEFT JOIN " + schema_ +
                              ".outbox o USING (event_id)"),
            "1=1,2=2,3=3,4=2,5=");  // 5: the row enqueued before, with an empty payload
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM b JOIN " + schema_ +
                              ".outbox o USING (event_id) WHERE b.ord = 5 AND o.dedup_key = 'before'"),
            "1");
  Exec(conn_.get(), "COMMIT");
  EXPECT_EQ(Exec(conn_.get(), "SELECT string_agg(enqueued::text, ',' ORDER BY ord) FROM " + schema_ +
                                  ".enqueue_batch(ARRAY['order'], ARRAY['9'], ARRAY['E'], "
                                  "ARRAY['']::bytea[], NULL, ARRAY['k2'])"),
            "false");
  EXPECT_EQ(Exec(conn_.get(), "SELECT string_agg(convert_from(payload, 'UTF8'), ',' ORDER BY seq) FROM " +
                                  schema_ + ".outbox WHERE aggregate_id = '1'"),
            ",1,3");  // "before", then the batch's 1 and 3 in order; 4 and 5 were duplicates
  EXPECT_EQ(Exec(conn_.get(), "SELECT headers->>'traceparent' FROM " + schema_ +
                                  ".outbox WHERE convert_from(payload, 'UTF8') = '1'"),
            "00-x");
  EXPECT_EQ(Count("outbox"), "4");
  // The duplicates' ids are the originals'.
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(DISTINCT b.event_id) FROM " + schema_ +
                                  ".enqueue_batch(ARRAY['order','order'], ARRAY['1','1'], "
                                  "ARRAY['X','Y'], ARRAY['','']::bytea[], NULL, "
                                  "ARRAY['before','before']) b JOIN " + schema_ +
                                  ".outbox o ON o.event_id = b.event_id AND o.dedup_key = 'before'"),
            "1");
  // A bad event is refused naming its position and field; nothing is written.
  std::string err;
  Exec(conn_.get(), call + "ARRAY['order','order'], ARRAY['1',''], ARRAY['A','B'], "
                          "ARRAY['','']::bytea[])", true, &err);
  EXPECT_NE(err.find("event 2 of 2"), std::string::npos) << err;
  EXPECT_NE(err.find("aggregate_id"), std::string::npos) << err;
  Exec(conn_.get(), call + "ARRAY['order','order'], ARRAY['1'], ARRAY['A','B'], "
                          "ARRAY['','']::bytea[])", true, &err);
  EXPECT_NE(err.find("same length"), std::string::npos) << err;
  // Several bad events: the first in the caller's order is named (a guarantee
  // kept from version 10, whose scan happened to give that order too).
  Exec(conn_.get(), call + "ARRAY['order','order','order'], ARRAY['','1',''], ARRAY['A','B',''], "
                          "ARRAY['','','']::bytea[])", true, &err);
  EXPECT_NE(err.find("event 1 of 3"), std::string::npos) << err;
  EXPECT_EQ(Count("outbox"), "4");
  // Arrays need not start at 1 ('[0:1]={...}' is a text[] too): the id of a
  // duplicate of a row written before the call is still its original's
  // (version 10 read the key at the wrong place and returned NULL).
  Exec(conn_.get(), "BEGIN");
  Exec(conn_.get(), "CREATE TEMP TABLE b0 ON COMMIT DROP AS SELECT * FROM " + schema_ +
                        ".enqueue_batch(ARRAY['order','order'], ARRAY['3','3'], ARRAY['A','B'], "
                        "ARRAY['','']::bytea[], NULL, '[0:1]={z7,before}'::text[])");
  EXPECT_EQ(Exec(conn_.get(), "SELECT string_agg(b0.ord || ':' || b0.enqueued || ':' || "
                              "(b0.event_id IS NOT DISTINCT FROM (SELECT o.event_id FROM " + schema_ +
                              ".outbox o WHERE o.dedup_key = k.key)), ',' ORDER BY b0.ord) "
                              "FROM b0 JOIN (VALUES (1, 'z7'), (2, 'before')) k(ord, key) USING (ord)"),
            "1:true:true,2:false:true");
  Exec(conn_.get(), "COMMIT");
}

// The outbox dropped and migrated afresh (DROP SCHEMA ... CASCADE keeps the
// publication, without the table): migrating adds the table back, and a
// change stream refuses a publication without it, naming the fix, instead of
// streaming nothing (every event would wait for the sweeper).
TEST_F(PostgresTest, APublicationWithoutTheOutboxIsRepairedByMigrateAndRefusedByTheStream) {
  const std::string pub = DefaultStreamName(schema_);
  const std::string published = "SELECT count(*) FROM pg_publication_tables WHERE pubname = '" +
                                pub + "' AND schemaname = '" + schema_ + "' AND tablename = 'outbox'";
  ASSERT_EQ(Exec(conn_.get(), published), "1");
  Exec(conn_.get(), "DROP SCHEMA " + schema_ + " CASCADE");
  store_ = OpenStore();
  ASSERT_NE(store_, nullptr);
  ASSERT_TRUE(store_->Migrate().ok());
  EXPECT_EQ(Exec(conn_.get(), published), "1") << "migrating afresh adds the table back";

  Exec(conn_.get(), "ALTER PUBLICATION " + pub + " DROP TABLE " + schema_ + ".outbox");
  PostgresChangeStreamOptions co;
  co.conninfo = url_;
  co.schema = schema_;
  co.slot = "t_nopub_" + schema_.substr(2);
  auto stream = OpenPostgresChangeStream(co);
  ASSERT_FALSE(stream.ok());
  EXPECT_EQ(stream.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(stream.status().message().find("ALTER PUBLICATION " + pub + " ADD TABLE " + schema_ +
                                           ".outbox"),
            std::string::npos)
      << stream.status().ToString();
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '" +
                                  co.slot + "'"),
            "0")
      << "refused before a slot pins WAL";
}

// One size story: the SQL enqueue() and the C++ enqueue agree on the limit
// (payload + aggregate_id + headers <= 1,000,000 by default), exactly at the
// limit is accepted, one byte over is rejected naming the setting, and the
// relay's producer admits the largest accepted event (kDefaultMessageMaxBytes).
TEST_F(PostgresTest, EventSizeLimitIsPayloadPlusKeyPlusHeadersAndBothEnqueuesAgree) {
  const std::string key = "k-1";
  const std::string hname = "traceparent", hvalue(100, 't');
  const std::size_t room = 1'000'000 - key.size() - hname.size() - hvalue.size();
  auto sql_enqueue = [&](std::size_t payload, std::string* err) {
    return Exec(conn_.get(),
                "SELECT enqueued FROM " + schema_ + ".enqueue('a', '" + key +
                    "', 'T', convert_to(repeat('x', " + std::to_string(payload) +
                    "), 'UTF8'), '{\"" + hname + "\":\"" + hvalue + "\"}'::jsonb)",
                err != nullptr, err);
  };
  EXPECT_EQ(sql_enqueue(room, nullptr), "t");
  std::string err;
  sql_enqueue(room + 1, &err);
  EXPECT_NE(err.find("event is 1000001 bytes"), std::string::npos) << err;
  EXPECT_NE(err.find("outbox.max_event_bytes"), std::string::npos) << err;

  Event e;
  e.aggregate_type = "a";
  e.aggregate_id = key;
  e.event_type = "T";
  e.headers = {{hname, hvalue}};
  e.payload = std::string(room, 'x');
  EnqueueOptions eo;
  eo.schema = schema_;
  Exec(conn_.get(), "BEGIN");
  EXPECT_TRUE(Enqueue(conn_.get(), e, eo).ok());
  e.payload.push_back('x');
  auto over = Enqueue(conn_.get(), e, eo);
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.status().message().find("event is 1000001 bytes"), std::string::npos)
      << over.status().ToString();
  Exec(conn_.get(), "COMMIT");
  EXPECT_EQ(Count("outbox"), "2");
  EXPECT_GT(kDefaultMessageMaxBytes, 1'000'000 + 4096) << "room for the relay's own headers";
}

// Two batches whose aggregates collide on the 32-bit lock hash, in opposite name
// order. Locking in name order (before) deadlocked here every time: D holds H1,
// A queues for H1 first, B takes H2 then queues for H1; D lets go, A gets H1 and
// waits for B's H2. Locking in key order, both queue for H1 first.
TEST_F(PostgresTest, BatchesWhoseAggregatesCollideOnTheLockHashDoNotDeadlock) {
  // Find two pairs of aggregate ids with equal hashtext(type \x1f id).
  const std::string pairs = Exec(
      conn_.get(),
      "SELECT string_agg(ids, ';') FROM (SELECT string_agg('c' || g, ',' ORDER BY g) AS ids "
      "FROM generate_series(1, 400000) g GROUP BY hashtext('order' || E'\\x1f' || 'c' || g) "
      "HAVING count(*) = 2 ORDER BY 1 LIMIT 40) s");
  std::vector<std::pair<std::string, std::string>> collide;
  for (std::size_t pos = 0; pos < pairs.size();) {
    std::size_t end = pairs.find(';', pos);
    if (end == std::string::npos) end = pairs.size();
    const std::string item = pairs.substr(pos, end - pos);
    collide.push_back({item.substr(0, item.find(',')), item.substr(item.find(',') + 1)});
    pos = end + 1;
  }
  ASSERT_GE(collide.size(), 2u) << pairs;
  auto key = [&](const std::string& id) {
    return std::stoll(Exec(conn_.get(), "SELECT hashtext('order' || E'\\x1f' || '" + id + "')"));
  };
  // A = {p, r}, B = {q, t} with hash(p) = hash(q) = H1 < H2 = hash(r) = hash(t),
  // where A's name order is H1, H2 and B's is H2, H1 (swap roles to get there).
  std::string p, q, r, t;
  for (std::size_t i = 0; i < collide.size() && p.empty(); ++i) {
    for (std::size_t j = 0; j < collide.size() && p.empty(); ++j) {
      if (i == j || key(collide[i].first) >= key(collide[j].first)) continue;
      for (int swap_i = 0; swap_i < 2 && p.empty(); ++swap_i) {
        for (int swap_j = 0; swap_j < 2 && p.empty(); ++swap_j) {
          auto [p1, q1] = collide[i];
          auto [r1, t1] = collide[j];
          if (swap_i) std::swap(p1, q1);
          if (swap_j) std::swap(r1, t1);
          if (p1 < r1 && t1 < q1) std::tie(p, q, r, t) = std::tie(p1, q1, r1, t1);
        }
      }
    }
  }
  ASSERT_FALSE(p.empty()) << "no usable pair of collisions in: " << pairs;
  const long long h1 = key(p);
  auto ev = [](const std::string& id) {
    Event e;
    e.aggregate_type = "order";
    e.aggregate_id = id;
    e.event_type = "T";
    e.payload = id;
    return e;
  };
  PgConn d = Connect(url_), a = Connect(url_), b = Connect(url_);
  Exec(d.get(), "BEGIN");
  Exec(d.get(), "SELECT pg_advisory_xact_lock(hashtext('" + schema_ + "'), " + std::to_string(h1) + ")");
  std::atomic<int> deadlocks{0}, ok{0};
  auto run = [&](PGconn* c, std::vector<Event> evs) {
    Exec(c, "BEGIN");
    auto res = EnqueueBatch(c, evs, opts_);
    if (res.ok()) {
      ++ok;
      Exec(c, "COMMIT");
    } else {
      if (res.status().message().find("40P01") != std::string::npos) ++deadlocks;
      Exec(c, "ROLLBACK");
    }
  };
  std::thread ta([&] { run(a.get(), {ev(p), ev(r)}); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::thread tb([&] { run(b.get(), {ev(q), ev(t)}); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  Exec(d.get(), "COMMIT");
  ta.join();
  tb.join();
  EXPECT_EQ(deadlocks.load(), 0);
  EXPECT_EQ(ok.load(), 2);
  EXPECT_EQ(Count("outbox"), "4");
}

TEST_F(PostgresTest, MigrateIsIdempotentAndSafeConcurrently) {
  EXPECT_TRUE(store_->Migrate().ok());
  std::string fresh = "t_" + RandomSuffix();
  std::vector<std::thread> ts;
  std::atomic<int> failures{0};
  for (int i = 0; i < 4; ++i) {
    ts.emplace_back([&] {
      PostgresStoreOptions o;
      o.conninfo = url_;
      o.schema = fresh;
      auto s = OpenPostgresStore(o);
      if (!s.ok() || !(*s)->Migrate().ok()) ++failures;
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(failures.load(), 0);
  // Every version applied exactly once, none skipped.
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) = count(DISTINCT version) AND count(*) = max(version) "
                              "AND count(*) >= 2 FROM " + fresh + ".schema_migrations"),
            "t");
  Exec(conn_.get(), "DROP SCHEMA " + fresh + " CASCADE");
}

TEST_F(PostgresTest, SchemaNameIsValidated) {
  for (const std::string& bad : std::vector<std::string>{"", "Outbox", "1abc", "a;drop table x",
                                                          "a-b", std::string(64, 'a')}) {
    PostgresStoreOptions o;
    o.conninfo = url_;
    o.schema = bad;
    auto s = OpenPostgresStore(o);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
    EXPECT_NE(s.status().message().find("schema"), std::string::npos);
    EnqueueOptions eo;
    eo.schema = bad;
    Exec(conn_.get(), "BEGIN");
    EXPECT_EQ(Enqueue(conn_.get(), Valid(), eo).status().code(), Code::kInvalidArgument);
    Exec(conn_.get(), "ROLLBACK");
  }
}

TEST_F(PostgresTest, UnreachableDatabaseIsRetryableUnavailable) {
  PostgresStoreOptions o;
  o.conninfo = "postgresql://postgres@127.0.0.1:1/outbox_test";
  o.connect_timeout = std::chrono::seconds(2);
  auto s = OpenPostgresStore(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), Code::kUnavailable);
  EXPECT_TRUE(s.status().retryable());
}

TEST_F(PostgresTest, StoreReconnectsAfterItsSessionIsKilled) {
  auto st = store_->Stats();
  ASSERT_TRUE(st.ok());
  Exec(conn_.get(),
       // Only this test's store session (its last query names this schema): tests
       // run in parallel against one server.
       "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
       "WHERE application_name = 'outbox-store' AND pid <> pg_backend_pid() "
       "AND query LIKE '%" + schema_ + ".%'");
  // The first call may see the dead connection; within a few calls it is back.
  Status last;
  for (int i = 0; i < 3; ++i) {
    auto r = store_->Stats();
    last = r.status();
    if (r.ok()) break;
    EXPECT_TRUE(r.status().retryable()) << r.status().ToString();
  }
  EXPECT_TRUE(last.ok()) << last.ToString();
}

TEST_F(PostgresTest, WaitForWorkWakesOnEnqueueOnlyWhenProducersOptIn) {
  auto woken = store_->WaitForWork(std::chrono::milliseconds(50));  // starts listening
  ASSERT_TRUE(woken.ok()) << woken.status().ToString();
  // Without the setting, enqueue does not notify.
  Exec(conn_.get(), "BEGIN");
  ASSERT_TRUE(Enqueue(conn_.get(), Valid("quiet"), opts_).ok());
  Exec(conn_.get(), "COMMIT");
  woken = store_->WaitForWork(std::chrono::milliseconds(300));
  ASSERT_TRUE(woken.ok());
  EXPECT_FALSE(*woken);
  // With it, the commit wakes the listener.
  Exec(conn_.get(), "SET outbox.notify = on");
  Exec(conn_.get(), "BEGIN");
  ASSERT_TRUE(Enqueue(conn_.get(), Valid("loud"), opts_).ok());
  Exec(conn_.get(), "COMMIT");
  woken = store_->WaitForWork(Scaled(std::chrono::milliseconds(5000)));
  ASSERT_TRUE(woken.ok());
  EXPECT_TRUE(*woken);
}

// The CDC sweeper's horizon test (migration 6) widens a row's 32-bit xmin to
// 64 bits against the claim's own snapshot: checked across an epoch boundary,
// for a row written after the reference (locked after an update), and for
// frozen rows.
TEST_F(PostgresTest, XidPassedWidensAcrossTheEpochAndRefusesNewerXids) {
  auto passed = [&](const std::string& xid, const std::string& ref, const std::string& horizon) {
    return Exec(conn_.get(), "SELECT " + schema_ + ".xid_passed('" + xid + "'::xid, " + ref +
                                 ", " + horizon + ")");
  };
  const std::string ref = "4294967306";                        // epoch 1, xid 10
  const std::string horizon = "'4294967295:4294967300:'::pg_snapshot";
  EXPECT_EQ(passed("4294967290", ref, horizon), "t") << "epoch 0, before the horizon";
  EXPECT_EQ(passed("8", ref, horizon), "f") << "epoch 1, after the horizon's xmax";
  EXPECT_EQ(passed("12", ref, horizon), "f") << "newer than the reference";
  EXPECT_EQ(passed("10", ref, horizon), "f") << "equal to the reference";
  EXPECT_EQ(passed("2", ref, horizon), "t") << "frozen";
  EXPECT_EQ(passed("4294967290", ref, "NULL"), "f") << "no horizon yet";
  // epoch 1: xid 5 (full 4294967301) was running, xid 6 had committed
  const std::string running = "'4294967295:4294967310:4294967301'::pg_snapshot";
  EXPECT_EQ(passed("5", "4294967316", running), "f") << "running when the horizon was taken";
  EXPECT_EQ(passed("6", "4294967316", running), "t") << "committed before the horizon";
}

// The change stream's check leaves out its own acked rows by row, not by
// count. Found by a CI run of the poll -> cdc switch: the stream had acked
// rows 1-2 of an aggregate, a polling relay marked them SENT and put 3 back
// for a retry; a count of "2 of ours" then hid 3, and the stream published 4
// before 3's first copy.
TEST_F(PostgresTest, StreamStatesLeavesOutTheCallersAckedRowsByRowNotByCount) {
  std::vector<std::int64_t> seqs;
  for (int i = 0; i < 4; ++i) {
    Exec(conn_.get(), "BEGIN");
    auto r = Enqueue(conn_.get(), Valid("a"), opts_);
    Exec(conn_.get(), "COMMIT");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    seqs.push_back(std::stoll(Exec(conn_.get(), "SELECT seq FROM " + schema_ +
                                                    ".outbox WHERE event_id = '" + r->event_id +
                                                    "'")));
  }
  const std::vector<std::int64_t> last{seqs[3]};
  const std::vector<std::int64_t> ours{seqs[0], seqs[1]};
  auto st = store_->Ledger()->StreamStates(last, true, ours);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  ASSERT_EQ(st->size(), 1u);
  EXPECT_EQ((*st)[0].earlier_unsent, 1) << "rows 1-2 are ours (acked), row 3 is not";
  EXPECT_TRUE((*st)[0].held);
  // Someone else marks 1-2 SENT: still exactly row 3 holds it.
  Exec(conn_.get(), "UPDATE " + schema_ + ".outbox SET status = 'SENT' WHERE seq IN (" +
                        std::to_string(seqs[0]) + "," + std::to_string(seqs[1]) + ")");
  st = store_->Ledger()->StreamStates(last, true, ours);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ((*st)[0].earlier_unsent, 1);
  EXPECT_TRUE((*st)[0].held);
  // Row 3 is ours too: nothing holds row 4.
  const std::vector<std::int64_t> all_ours{seqs[0], seqs[1], seqs[2]};
  st = store_->Ledger()->StreamStates(last, true, all_ours);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ((*st)[0].earlier_unsent, 0);
  EXPECT_FALSE((*st)[0].held);
}

// A CDC sweeper's claim: any stream progress fresher than a minute bounds it.
ClaimOptions SweeperClaim() {
  ClaimOptions sweep;
  sweep.sweep_margin = std::chrono::milliseconds(1);
  sweep.stream_stale_after = std::chrono::milliseconds(60'000);
  sweep.owner = "sweeper";
  return sweep;
}

// A stream announces itself when it opens (before its first keepalive or batch
// has settled): from then on the CDC sweeper takes no row the stream may read.
// Found by a CI run under ASan: the first report came after the sweepers'
// wait, they saw no stream and swept the rows the stream was reading. A new
// reader's announcement keeps the recorded progress and horizon.
TEST_F(PostgresTest, OpenStreamProgressKeepsTheSweeperOffUntilTheStreamHasSettled) {
  Exec(conn_.get(), "BEGIN");
  ASSERT_TRUE(Enqueue(conn_.get(), Valid("before-open"), opts_).ok());
  Exec(conn_.get(), "COMMIT");
  const ClaimOptions sweep = SweeperClaim();
  ASSERT_TRUE(store_->Ledger()->OpenStreamProgress("slot_a", "reader-1").ok());
  auto c = store_->Claim(sweep);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->events.size(), 0u) << "an announced stream with nothing settled yet";
  // The stream settles past its announcement: the row committed before it is
  // the sweeper's (the slot never streams it).
  const auto lsn_now = [&] {
    const std::string t = Exec(conn_.get(), "SELECT pg_current_wal_insert_lsn()::text");
    const auto slash = t.find('/');
    return (std::stoull(t.substr(0, slash), nullptr, 16) << 32) |
           std::stoull(t.substr(slash + 1), nullptr, 16);
  };
  const std::int64_t later_us =
      std::chrono::duration_cast<std::chrono::microseconds>(
          std::chrono::system_clock::now().time_since_epoch() + std::chrono::seconds(5))
          .count();
  ASSERT_TRUE(store_->Ledger()->SaveStreamProgress({"slot_a", "reader-1", lsn_now(), later_us}).ok());
  // A second reader opens the same slot: progress and horizon stay.
  ASSERT_TRUE(store_->Ledger()->OpenStreamProgress("slot_a", "reader-2").ok());
  EXPECT_EQ(Exec(conn_.get(), "SELECT reader || ' ' || (horizon IS NOT NULL) || ' ' || "
                              "(covered_until > now() + interval '2 seconds') FROM " +
                                  schema_ + ".stream_progress WHERE slot = 'slot_a'"),
            "reader-2 true true");
  c = store_->Claim(sweep);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->events.size(), 1u);
  EXPECT_EQ(c->events[0].event.aggregate_id, "before-open");
}

// Migration 7. While a stream is live, the sweeper's time bound looks at the
// 2,000 oldest unsent rows at a time: it used to walk until the first row newer
// than the bound — the whole backlog when the stream drains an old one, on
// every sweeper claim. A due row past the window waits until the rows before
// it go; with no live stream there is no window.
TEST_F(PostgresTest, TheSweeperLooksAtTheOldestTwoThousandUnsentRowsAtATime) {
  Exec(conn_.get(),
       "INSERT INTO " + schema_ + ".outbox (event_id, aggregate_type, aggregate_id, event_type, "
       "payload, headers, attempts, created_at, available_at) SELECT " + schema_ +
       ".uuid_v7(), 'order', 'w-' || i, 'E', '\\x00'::bytea, '{}', 1, "
       "now() - interval '1 hour', CASE WHEN i <= 2000 THEN now() + interval '1 hour' "
       "ELSE now() END FROM generate_series(1, 2500) i");
  const std::int64_t first = std::stoll(Exec(conn_.get(), "SELECT min(seq) FROM " + schema_ + ".outbox"));
  ASSERT_TRUE(store_->Ledger()->OpenStreamProgress("slot_w", "reader").ok());
  const ClaimOptions sweep = SweeperClaim();
  auto c = store_->Claim(sweep);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->events.size(), 0u) << "the window holds the 2,000 rows due in an hour";
  // The first 100 go: the window moves over 100 of the due rows.
  Exec(conn_.get(), "UPDATE " + schema_ + ".outbox SET status = 'SENT', sent_at = now() WHERE seq < " +
                        std::to_string(first + 100));
  c = store_->Claim(sweep);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->events.size(), 100u);
  EXPECT_EQ(c->events.front().ticket.seq, first + 2000);
  EXPECT_EQ(c->events.back().ticket.seq, first + 2099);
  // No live stream: no bound, every due row.
  Exec(conn_.get(), "DELETE FROM " + schema_ + ".stream_progress");
  c = store_->Claim(sweep);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->events.size(), 400u);
}

// Migration 8. Rows held behind a FAILED event (on_failed = hold) wait for an
// operator, maybe for days: they must not fill the sweeper's window. With
// 2,000 of them first, migration 7's window held nothing else, and a retry of
// another aggregate behind them was never swept while the stream was live.
TEST_F(PostgresTest, RowsHeldBehindAFailedEventDoNotFillTheSweepersWindow) {
  const std::string insert =
      "INSERT INTO " + schema_ + ".outbox (event_id, aggregate_type, aggregate_id, event_type, "
      "payload, headers, status, attempts, created_at) SELECT " + schema_ +
      ".uuid_v7(), 'order', '";
  Exec(conn_.get(), insert + "poisoned', 'E', '\\x00'::bytea, '{}', 'FAILED', 5, "
                    "now() - interval '2 hours'");
  Exec(conn_.get(), insert + "poisoned', 'E', '\\x00'::bytea, '{}', 'PENDING', 1, "
                    "now() - interval '2 hours' FROM generate_series(1, 2001) i");
  Exec(conn_.get(), insert + "retry-r', 'E', '\\x00'::bytea, '{}', 'PENDING', 1, "
                    "now() - interval '1 hour'");
  ASSERT_TRUE(store_->Ledger()->OpenStreamProgress("slot_f", "reader").ok());
  ClaimOptions sweep = SweeperClaim();
  ASSERT_TRUE(sweep.failed_holds_aggregate);
  auto c = store_->Claim(sweep);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->events.size(), 1u) << "the retry behind 2,001 held rows";
  EXPECT_EQ(c->events[0].event.aggregate_id, "retry-r");
  // on_failed = pass: the held rows are heads again, the window's oldest.
  sweep.failed_holds_aggregate = false;
  sweep.batch_size = 10;
  c = store_->Claim(sweep);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->events.size(), 10u);
  EXPECT_EQ(c->events[0].event.aggregate_id, "poisoned");
}

// Migration 9. When every head in the oldest unsent rows is in other hands (a
// hot aggregate whose head is in flight), the polling claim finds the heads
// beyond them by aggregate, not by walking the backlog: it walked all 60,000
// rows behind the hot head (one probe each; 1.2 s per empty claim at 200,000
// rows) to find the cold aggregate's. Counted in buffer hits, not timed: the
// walk took one per row (60,828 here); the window and the second pass ~12,000.
TEST_F(PostgresTest, AClaimFindsHeadsBehindAHotAggregateWithoutWalkingItsBacklog) {
  Exec(conn_.get(),
       "INSERT INTO " + schema_ + ".outbox (event_id, aggregate_type, aggregate_id, event_type, "
       "payload, headers) SELECT " + schema_ + ".uuid_v7(), 'order', CASE WHEN i <= 60000 "
       "THEN 'hot' ELSE 'cold-' || i END, 'E', '\\x00'::bytea, '{}' FROM generate_series(1, 60003) i");
  ClaimOptions o;
  o.batch_size = 10;
  o.owner = "first";
  auto c = store_->Claim(o);  // the hot head and its run
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->events.size(), 10u);
  EXPECT_EQ(c->events.back().event.aggregate_id, "hot");
  const std::string claim = "SELECT string_agg(aggregate_id, ',' ORDER BY seq) FROM " + schema_ +
                            ".claim_ordered(10, 'second', 30000, 10, true, 8388608, NULL, 60000)";
  // The backend's counts not yet flushed to the statistics: before and after.
  const std::string hits_now = "SELECT pg_stat_get_xact_blocks_hit('" + schema_ + ".outbox'::regclass)";
  Exec(conn_.get(), "BEGIN");
  const long before = std::stol(Exec(conn_.get(), hits_now));
  EXPECT_EQ(Exec(conn_.get(), claim), "cold-60001,cold-60002,cold-60003");
  const long hits = std::stol(Exec(conn_.get(), hits_now)) - before;
  Exec(conn_.get(), "ROLLBACK");
  EXPECT_LT(hits, 30000) << "the claim walked the hot aggregate's backlog (heap buffer hits)";
}

// Migration 9. With few aggregates and statistics taken before a backlog was
// sent (a queue table's are always stale), the planner answered "an earlier
// unsent event of this aggregate?" by walking the primary key through every
// SENT row (random_page_cost 4 made the aggregate index look dear): 10
// aggregates drained at 2,349 events/s by polling. The claim now plans with
// random_page_cost 1.1. Counted in buffer hits, not timed.
TEST_F(PostgresTest, AClaimWithFewAggregatesDoesNotWalkTheSentRows) {
  Exec(conn_.get(),
       "INSERT INTO " + schema_ + ".outbox (event_id, aggregate_type, aggregate_id, event_type, "
       "payload, headers) SELECT " + schema_ + ".uuid_v7(), 'tenant', 't' || (i % 10), 'E', "
       "'\\x00'::bytea, '{}' FROM generate_series(1, 50010) i");
  Exec(conn_.get(), "ANALYZE " + schema_ + ".outbox");  // every row PENDING
  Exec(conn_.get(), "UPDATE " + schema_ + ".outbox SET status = 'SENT', sent_at = now() WHERE seq < "
                    "(SELECT min(seq) + 50000 FROM " + schema_ + ".outbox)");
  const std::string hits_now = "SELECT pg_stat_get_xact_blocks_hit('" + schema_ + ".outbox'::regclass)";
  Exec(conn_.get(), "BEGIN");
  const long before = std::stol(Exec(conn_.get(), hits_now));
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM " + schema_ +
                                  ".claim_ordered(10, 'w', 30000, 10, true, 8388608, NULL, 60000)"),
            "10");
  const long hits = std::stol(Exec(conn_.get(), hits_now)) - before;
  Exec(conn_.get(), "ROLLBACK");
  EXPECT_LT(hits, 20000) << "the claim walked the SENT rows (heap buffer hits)";
}

// Migration 7. A sweeper claim stops at the first head the stream has not
// passed: skipping on locked it (FOR UPDATE) and walked further, and sweepers
// claiming at once skipped each other's locked heads through the whole
// backlog. The heads after it wait until the stream passes it.
TEST_F(PostgresTest, TheSweeperStopsAtTheFirstHeadTheStreamHasNotPassed) {
  ASSERT_TRUE(store_->Ledger()->OpenStreamProgress("slot_h", "reader").ok());
  for (const char* id : {"stream-s", "retry-r"}) {
    Exec(conn_.get(), "BEGIN");
    ASSERT_TRUE(Enqueue(conn_.get(), Valid(id), opts_).ok());
    Exec(conn_.get(), "COMMIT");
  }
  // The second was handed back by the stream (a retry): attempts 1, due, old.
  Exec(conn_.get(), "UPDATE " + schema_ + ".outbox SET attempts = 1, created_at = now() - "
                    "interval '1 hour' WHERE aggregate_id = 'retry-r'");
  Exec(conn_.get(), "UPDATE " + schema_ + ".outbox SET created_at = now() - interval '1 hour' "
                    "WHERE aggregate_id = 'stream-s'");
  const ClaimOptions sweep = SweeperClaim();
  auto c = store_->Claim(sweep);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->events.size(), 0u) << "the retry waits behind the stream's unpassed head";
  // No live stream: both.
  Exec(conn_.get(), "DELETE FROM " + schema_ + ".stream_progress");
  c = store_->Claim(sweep);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->events.size(), 2u);
}

// Migration 7. A function that turns sequential scans off makes a scan with
// no index to use cost 10^10, past jit_above_cost: PostgreSQL JIT-compiled it
// on every call (40-115 ms per sweeper claim). Every such function of ours
// turns JIT off.
TEST_F(PostgresTest, FunctionsThatTurnSeqScansOffTurnJitOffToo) {
  const std::string offenders = Exec(
      conn_.get(), "SELECT coalesce(string_agg(p.proname, ','), '') FROM pg_proc p "
                   "JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = '" + schema_ +
                   "' AND 'enable_seqscan=off' = ANY(p.proconfig) "
                   "AND NOT 'jit=off' = ANY(p.proconfig)");
  EXPECT_EQ(offenders, "");
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON "
                              "n.oid = p.pronamespace WHERE n.nspname = '" + schema_ +
                              "' AND 'jit=off' = ANY(p.proconfig)"),
            "5");  // claim_ordered, stats, lock_aggregates, stream_sweep_bound (2 and 3 args)
}

// Runs one of the store's statements on `c` with text parameters (nullptr:
// NULL) of the given types (none: the server infers them, as the store lets
// it). Fails the test on error; returns the row count.
int RunStatement(PGconn* c, const std::string& name, const std::string& sql,
                 const std::vector<const char*>& values, const std::vector<Oid>& types) {
  PGresult* r = PQexecParams(c, sql.c_str(), static_cast<int>(values.size()),
                             types.empty() ? nullptr : types.data(),
                             values.empty() ? nullptr : values.data(), nullptr, nullptr, 0);
  const ExecStatusType st = PQresultStatus(r);
  EXPECT_TRUE(st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) << name << ": "
                                                               << PQresultErrorMessage(r);
  const int n = PQntuples(r);
  PQclear(r);
  return n;
}

// The claims' parameters: batch, owner, lease ms, max attempts, FAILED holds,
// batch bytes, CDC sweep margin ms (nullptr: no bound), stream stale after ms.
const std::vector<Oid> kClaimTypes{pg::kInt4Oid, pg::kTextOid, pg::kInt8Oid, pg::kInt4Oid,
                                   pg::kBoolOid, pg::kInt8Oid, pg::kInt8Oid, pg::kInt8Oid};
std::vector<const char*> ClaimValues(const char* batch, const char* sweep_margin) {
  return {batch, "w", "60000", "10", "true", "1000000", sweep_margin, "60000"};
}

// The planner uses a partial index only for a query whose conditions imply the
// index's predicate. Every statement of the store that should walk one of the
// outbox's partial indexes is planned here with sequential scans off, and every
// function's inner statements too (auto_explain logs them): a plan that still
// scans the outbox has no index to use, and one that skips the required
// partial index walks SENT rows. Cheap while the table is small; seconds at
// millions of retained SENT rows, which no functional test would notice.
TEST_F(PostgresTest, TheStoresQueriesWalkAnIndexNotTheTable) {
  const std::string t = schema_ + ".outbox";
  // Statistics from the rows below only (no autovacuum in between).
  Exec(conn_.get(), "ALTER TABLE " + t + " SET (autovacuum_enabled = false)");
  // Rows in every state. Aggregate 'held': a FAILED event, then more events
  // than the claim's window (2,000) held behind it; then one of 'free'. So the
  // ordered claim's first pass finds nothing and its second pass (heads by
  // aggregate) runs.
  Exec(conn_.get(), "INSERT INTO " + t + " (event_id, aggregate_type, aggregate_id, event_type, "
                    "payload) SELECT " + schema_ + ".uuid_v7(), 'order', CASE WHEN i <= 2101 "
                    "THEN 'held' ELSE 'free' END, 'OrderCreated', '\\x7b7d' "
                    "FROM generate_series(1, 2102) i");
  Exec(conn_.get(), "UPDATE " + t + " SET status = 'FAILED', failed_at = now() WHERE seq = 1");
  // Retained SENT rows outnumber the rest, as in a running outbox: an index
  // over all rows (the primary key) is then no near-tie for the partial ones.
  Exec(conn_.get(), "INSERT INTO " + t + " (event_id, aggregate_type, aggregate_id, event_type, "
                    "payload, status, sent_at, skipped_at) SELECT " + schema_ + ".uuid_v7(), 'order', "
                    "'done', 'OrderCreated', '\\x7b7d', s, CASE WHEN s = 'SENT' THEN now() END, "
                    "CASE WHEN s = 'SKIPPED' THEN now() END "
                    "FROM unnest(array_fill('SENT'::text, ARRAY[20000]) || "
                    "ARRAY['SKIPPED', 'PROCESSING']) s");
  Exec(conn_.get(), "INSERT INTO " + schema_ + ".stream_progress (slot, reader, confirmed_lsn, "
                    "covered_until) VALUES ('s', 'r', '0/0', now() + interval '1 hour')");
  Exec(conn_.get(), "VACUUM ANALYZE " + t);
  const std::string failed_id = Exec(conn_.get(), "SELECT event_id FROM " + t + " WHERE seq = 1");

  std::vector<std::string> plans;
  const PQnoticeReceiver previous = PQsetNoticeReceiver(
      conn_.get(),
      [](void* arg, const PGresult* r) {
        static_cast<std::vector<std::string>*>(arg)->push_back(PQresultErrorMessage(r));
      },
      &plans);
  Exec(conn_.get(), "LOAD 'auto_explain'");
  Exec(conn_.get(), "SET auto_explain.log_min_duration = 0");
  Exec(conn_.get(), "SET auto_explain.log_nested_statements = on");
  Exec(conn_.get(), "SET client_min_messages = log");
  Exec(conn_.get(), "SET enable_seqscan = off");
  struct Statement {
    std::string name, sql;
    std::vector<const char*> values;
    std::vector<Oid> types;
    // Partial indexes the statement must walk (where another index would mean
    // walking SENT rows); the planner may choose among the others.
    std::vector<std::string> indexes;
  };
  const std::string claim = "outbox_claim_idx", aggregate = "outbox_aggregate_idx",
                    sent = "outbox_sent_idx", set_aside = "outbox_set_aside_idx";
  const std::vector<Statement> statements{
      {"ordered claim", pg::sql::ClaimOrdered(schema_), ClaimValues("100", nullptr), kClaimTypes,
       {claim, aggregate}},
      {"ordered claim, CDC sweeper", pg::sql::ClaimOrdered(schema_), ClaimValues("100", "1"),
       kClaimTypes, {claim, set_aside}},
      {"unordered claim", pg::sql::ClaimUnordered(schema_), ClaimValues("100", nullptr),
       kClaimTypes, {claim}},
      {"unordered claim, CDC sweeper", pg::sql::ClaimUnordered(schema_), ClaimValues("100", "1"),
       kClaimTypes, {claim}},
      {"stats", pg::sql::Stats(schema_), {}, {}, {claim, set_aside}},
      {"purge", pg::sql::PurgeSent(schema_), {"0", "100"}, {pg::kInt8Oid, pg::kInt4Oid}, {sent}},
      {"oldest unsent", pg::sql::OldestUnsent(schema_), {}, {}, {claim, set_aside}},
      {"count sent", pg::sql::CountSent(schema_), {}, {}, {sent}},
      {"recent activity", pg::sql::RecentActivity(schema_), {"3600"}, {}, {claim, sent, set_aside}},
      {"replay", pg::sql::ReplayFailed(schema_), {"", "", "", "false"}, {}, {set_aside}},
      {"skip", pg::sql::Skip(schema_), {failed_id.c_str(), "who", "why", "false"}, {}, {}},
      {"stream states", pg::sql::StreamStates(schema_), {"{2000,2102}", "true", "{}"}, {}, {}},
  };
  // Custom plans (a statement's first calls), then generic ones (what a
  // function's statements use after five calls).
  for (const char* mode : {"force_custom_plan", "force_generic_plan"}) {
    Exec(conn_.get(), std::string("SET plan_cache_mode = ") + mode);
    for (const Statement& s : statements) {
      plans.clear();
      Exec(conn_.get(), "BEGIN");
      RunStatement(conn_.get(), s.name, s.sql, s.values, s.types);
      Exec(conn_.get(), "ROLLBACK");
      std::string all;
      for (const std::string& p : plans) {
        all += p;
        EXPECT_EQ(p.find("Seq Scan on outbox "), std::string::npos)
            << s.name << " (" << mode << "):\n" << p;
      }
      for (const std::string& index : s.indexes) {
        EXPECT_TRUE(all.find(" using " + index + " ") != std::string::npos ||
                    all.find("Bitmap Index Scan on " + index + " ") != std::string::npos)
            << s.name << " (" << mode << ") walks no " << index << ":\n" << all;
      }
    }
  }
  PQsetNoticeReceiver(conn_.get(), previous, nullptr);
  Exec(conn_.get(), "RESET ALL");
}

TEST_F(PostgresTest, MissingSchemaSaysToMigrate) {
  PostgresStoreOptions o;
  o.conninfo = url_;
  o.schema = "t_never_migrated";
  auto s = OpenPostgresStore(o);
  ASSERT_TRUE(s.ok());
  auto c = (*s)->Claim(ClaimOptions{});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("migrate"), std::string::npos) << c.status().ToString();
}

}  // namespace
}  // namespace outbox::testing
