// The inbox against a real PostgreSQL: stamps and effects commit together,
// duplicates are absorbed, failures undo only their own message; saga guards.
#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <map>
#include <set>
#include <stdexcept>

#include "outbox/inbox.h"
#include "outbox/postgres_inbox.h"
#include "outbox/saga.h"
#include "test_env.h"

namespace outbox::testing {
namespace {

class InboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    OUTBOX_REQUIRE_ENV(url_, "OUTBOX_PG_URL");
    schema_ = "t_" + RandomSuffix();
    conn_ = Connect(url_);
    auto inbox = OpenPostgresInbox(Options("test-consumer"), EffectHandler());
    ASSERT_TRUE(inbox.ok()) << inbox.status().ToString();
    inbox_ = std::move(inbox).value();
    ASSERT_TRUE(inbox_->Migrate().ok());
    ASSERT_TRUE(inbox_->Migrate().ok()) << "migrate twice";
    Exec(conn_.get(), "CREATE TABLE " + schema_ + ".effects (k text, v text)");
  }
  void TearDown() override {
    if (conn_) Exec(conn_.get(), "DROP SCHEMA IF EXISTS " + schema_ + " CASCADE");
  }

  PostgresInboxOptions Options(const std::string& consumer) {
    PostgresInboxOptions o;
    o.conninfo = url_;
    o.schema = schema_;
    o.consumer = consumer;
    return o;
  }

  // What the consumer engine does: key each message, then apply the batch.
  Result<std::vector<MessageOutcome>> Process(std::span<const InboundMessage> batch,
                                              const DedupKeyFn& dedup = DedupByEventId(),
                                              InboxStore* store = nullptr) {
    std::vector<std::string> keys;
    for (const auto& m : batch) keys.push_back(dedup(m).value());
    return (store ? *store : *inbox_).Apply(batch, keys);
  }

  InboundMessage Msg(const std::string& id, const std::string& payload) {
    InboundMessage m;
    m.topic = "orders";
    m.offset = next_offset_++;
    m.key = id;
    m.payload = payload;
    m.headers["outbox-event-id"] = id;
    return m;
  }

  // Inserts an effect row; the payload decides how the handler ends.
  Handler EffectHandler() {
    return [this](const InboundMessage& m, pg_conn* txn) -> HandlerResult {
      const std::string sql = "INSERT INTO " + schema_ + ".effects VALUES ($1, $2)";
      const char* vals[] = {m.key.c_str(), m.payload.c_str()};
      PGresult* r = PQexecParams(txn, sql.c_str(), 2, nullptr, vals, nullptr, nullptr, 0);
      bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
      PQclear(r);
      if (!ok) return HandlerResult::Transient("insert failed");
      if (m.payload == "permanent") return HandlerResult::Permanent("contract violation");
      if (m.payload == "transient") return HandlerResult::Transient("downstream timeout");
      if (m.payload == "throw") throw std::runtime_error("boom");
      if (m.payload == "orphan") {  // passes now, breaks the deferred foreign key at COMMIT
        const std::string child = "INSERT INTO " + schema_ + ".child VALUES ($1)";
        PGresult* c = PQexecParams(txn, child.c_str(), 1, nullptr, vals, nullptr, nullptr, 0);
        const bool inserted = PQresultStatus(c) == PGRES_COMMAND_OK;
        PQclear(c);
        if (!inserted) return HandlerResult::Transient("child insert failed");
      }
      if (m.payload == "slow") {  // runs past the inbox's statement timeout
        PGresult* b = PQexec(txn, "SELECT pg_sleep(5)");
        const bool slept = PQresultStatus(b) == PGRES_TUPLES_OK;
        PQclear(b);
        if (!slept) return HandlerResult::Transient("slow statement cancelled");
      }
      if (m.payload == "bad-sql") {
        PGresult* b = PQexec(txn, "SELECT * FROM no_such_table");
        PQclear(b);
      }
      return HandlerResult::Ok();
    };
  }

  std::string Effects(const std::string& where = "true") {
    return Exec(conn_.get(), "SELECT count(*) FROM " + schema_ + ".effects WHERE " + where);
  }
  std::string Stamps() {
    return Exec(conn_.get(), "SELECT count(*) FROM " + schema_ + ".inbox_stamps");
  }

  std::string url_, schema_;
  PgConn conn_;
  std::unique_ptr<InboxStore> inbox_;
  std::int64_t next_offset_ = 0;
};

// Through PgBouncer in transaction pooling: the statement timeout is set for
// each transaction alone (SET LOCAL), so it bounds the handler's own
// statements, and no pooled server connection keeps it afterwards.
TEST_F(InboxTest, ThroughPgBouncerTheTimeoutBoundsTheHandlerAndLeavesNoSetting) {
  std::string bouncer;
  OUTBOX_REQUIRE_ENV(bouncer, "OUTBOX_PGBOUNCER_URL");
  PostgresInboxOptions o = Options("pooled-consumer");
  o.conninfo = bouncer;
  o.statement_timeout = std::chrono::milliseconds(500);
  auto pooled = OpenPostgresInbox(o, EffectHandler());
  ASSERT_TRUE(pooled.ok()) << pooled.status().ToString();
  std::vector<InboundMessage> batch = {Msg("p1", "ok"), Msg("p2", "slow"), Msg("p3", "ok")};
  const auto start = std::chrono::steady_clock::now();
  auto r = Process(batch, DedupByEventId(), pooled->get());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4))
      << "the 5 s sleep was cancelled at 500 ms";
  EXPECT_EQ((*r)[0].outcome, Outcome::kApplied);
  EXPECT_EQ((*r)[1].outcome, Outcome::kTransient) << (*r)[1].error;
  EXPECT_EQ((*r)[2].outcome, Outcome::kApplied);
  EXPECT_EQ(Effects(), "2");
  auto again = Process(batch, DedupByEventId(), pooled->get());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)[0].outcome, Outcome::kDuplicate);
  EXPECT_EQ((*again)[2].outcome, Outcome::kDuplicate);
  PgConn app = Connect(bouncer);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(Exec(app.get(), "SHOW statement_timeout"), "0");
}

TEST_F(InboxTest, NewMessagesApplyOnceAndDuplicatesAreAbsorbed) {
  std::vector<InboundMessage> batch = {Msg("e1", "ok"), Msg("e2", "ok"), Msg("e1", "ok")};
  auto r = Process(batch);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].outcome, Outcome::kApplied);
  EXPECT_EQ((*r)[1].outcome, Outcome::kApplied);
  EXPECT_EQ((*r)[2].outcome, Outcome::kDuplicate) << "same event twice in one batch";
  // Redelivered later (re-publish, consumer restart, DLT replay): nothing happens.
  std::vector<InboundMessage> again = {Msg("e2", "ok"), Msg("e1", "ok")};
  auto r2 = Process(again);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ((*r2)[0].outcome, Outcome::kDuplicate);
  EXPECT_EQ((*r2)[1].outcome, Outcome::kDuplicate);
  EXPECT_EQ(Effects(), "2");
  EXPECT_EQ(Stamps(), "2");
  // Each absorbed copy is counted on its stamp (what `outboxctl trace` shows).
  EXPECT_EQ(Exec(conn_.get(), "SELECT string_agg(dedup_key || '=' || duplicates, ',' ORDER BY dedup_key) FROM " +
                                  schema_ + ".inbox_stamps"),
            "e1=2,e2=1");
}

TEST_F(InboxTest, DuplicateCountingCanBeTurnedOff) {
  PostgresInboxOptions o = Options("quiet-consumer");
  o.count_duplicates = false;
  auto quiet = OpenPostgresInbox(o, EffectHandler());
  ASSERT_TRUE(quiet.ok());
  std::vector<InboundMessage> batch = {Msg("q1", "ok"), Msg("q1", "ok")};
  auto r = Process(batch, DedupByEventId(), quiet->get());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[1].outcome, Outcome::kDuplicate);
  std::vector<InboundMessage> mixed = {Msg("q1", "ok"), Msg("q2", "permanent")};  // careful path
  auto r2 = Process(mixed, DedupByEventId(), quiet->get());
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ((*r2)[0].outcome, Outcome::kDuplicate);
  EXPECT_EQ(Exec(conn_.get(), "SELECT duplicates FROM " + schema_ + ".inbox_stamps WHERE dedup_key = 'q1'"), "0");
  EXPECT_EQ(Effects("k = 'q1'"), "1");
}

TEST_F(InboxTest, AFailingHandlerUndoesOnlyItsOwnMessage) {
  std::vector<InboundMessage> batch = {Msg("a", "ok"), Msg("b", "permanent"), Msg("c", "ok"),
                                       Msg("d", "transient"), Msg("e", "throw"), Msg("f", "bad-sql"),
                                       Msg("g", "ok")};
  auto r = Process(batch);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].outcome, Outcome::kApplied);
  EXPECT_EQ((*r)[1].outcome, Outcome::kPermanent);
  EXPECT_EQ((*r)[1].error, "contract violation");
  EXPECT_EQ((*r)[2].outcome, Outcome::kApplied);
  EXPECT_EQ((*r)[3].outcome, Outcome::kTransient);
  EXPECT_EQ((*r)[4].outcome, Outcome::kTransient) << "exceptions count as transient";
  EXPECT_NE((*r)[4].error.find("boom"), std::string::npos);
  EXPECT_EQ((*r)[5].outcome, Outcome::kTransient) << "a failed statement inside the handler";
  EXPECT_EQ((*r)[6].outcome, Outcome::kApplied);
  // The failed ones left neither their writes nor their stamps behind.
  EXPECT_EQ(Effects(), "3");
  EXPECT_EQ(Effects("k IN ('b','d','e','f')"), "0");
  EXPECT_EQ(Stamps(), "3");
  // ... so a retry of a transient one can still apply (once).
  std::vector<InboundMessage> retry = {Msg("d", "ok")};
  auto r2 = Process(retry);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ((*r2)[0].outcome, Outcome::kApplied);
  EXPECT_EQ(Effects("k = 'd'"), "1");
  // A duplicate met on the careful (savepoint) path is counted too, once.
  std::vector<InboundMessage> mixed = {Msg("a", "ok"), Msg("h", "permanent")};
  auto r3 = Process(mixed);
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ((*r3)[0].outcome, Outcome::kDuplicate);
  EXPECT_EQ(Exec(conn_.get(), "SELECT duplicates FROM " + schema_ + ".inbox_stamps WHERE dedup_key = 'a'"), "1");
}

// An effect outside the database (the consumer daemon's HTTP POST): with
// effects_outside_transaction a failed message is its own outcome and the
// messages before it are not run again; with the default they are (the batch
// is redone with a savepoint per message), which a SQL effect needs. Ordered:
// a later message of a key that failed transiently is held, and neither keeps
// a stamp.
TEST_F(InboxTest, AnEffectOutsideTheTransactionFailsAloneAndRunsNothingTwice) {
  for (const bool outside : {true, false}) {
    SCOPED_TRACE(outside ? "effects_outside_transaction" : "default");
    std::map<std::string, int> calls;
    Handler post = [&](const InboundMessage& m, pg_conn*) -> HandlerResult {
      ++calls[m.headers.at("outbox-event-id")];
      if (m.payload == "permanent") return HandlerResult::Permanent("HTTP 404");
      if (m.payload == "transient") return HandlerResult::Transient("HTTP 503");
      return HandlerResult::Ok();
    };
    PostgresInboxOptions o = Options(outside ? "outside" : "inside");
    o.effects_outside_transaction = outside;
    auto inbox = OpenPostgresInbox(o, post);
    ASSERT_TRUE(inbox.ok()) << inbox.status().ToString();
    const std::string p = outside ? "o-" : "i-";
    std::vector<InboundMessage> batch = {Msg(p + "a", "ok"), Msg(p + "b", "permanent"),
                                         Msg(p + "c", "ok"), Msg(p + "d", "transient"),
                                         Msg(p + "e", "ok"), Msg(p + "f", "ok")};
    std::vector<std::string> keys, order = {"k1", "k2", "k1", "k3", "k2", "k3"};
    for (const auto& m : batch) keys.push_back(m.headers.at("outbox-event-id"));
    auto r = (*inbox)->Apply(batch, keys, order);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ((*r)[0].outcome, Outcome::kApplied);
    EXPECT_EQ((*r)[1].outcome, Outcome::kPermanent);
    EXPECT_EQ((*r)[1].error, "HTTP 404");
    EXPECT_EQ((*r)[2].outcome, Outcome::kApplied);
    EXPECT_EQ((*r)[3].outcome, Outcome::kTransient);
    EXPECT_EQ((*r)[4].outcome, Outcome::kApplied) << "k2's failure was permanent: not held";
    EXPECT_EQ((*r)[5].outcome, Outcome::kHeld) << "behind d, k3's transient failure";
    EXPECT_EQ(calls[p + "b"], 1);
    EXPECT_EQ(calls[p + "d"], 1);
    EXPECT_EQ(calls.count(p + "f"), 0u);
    // The difference: the message before the first failure runs once, or twice.
    EXPECT_EQ(calls[p + "a"], outside ? 1 : 2);
    EXPECT_EQ(calls[p + "c"], 1);
    EXPECT_EQ(calls[p + "e"], 1);
    // Stamps for the applied ones only, so the others can apply later, once.
    EXPECT_EQ(Exec(conn_.get(), "SELECT string_agg(dedup_key, ',' ORDER BY dedup_key) FROM " + schema_ +
                                    ".inbox_stamps WHERE consumer = '" + o.consumer + "'"),
              p + "a," + p + "c," + p + "e");
    std::vector<InboundMessage> again = {Msg(p + "d", "ok"), Msg(p + "f", "ok"), Msg(p + "a", "ok")};
    std::vector<std::string> again_keys = {p + "d", p + "f", p + "a"};
    auto r2 = (*inbox)->Apply(again, again_keys, std::vector<std::string>{"k3", "k3", "k1"});
    ASSERT_TRUE(r2.ok()) << r2.status().ToString();
    EXPECT_EQ((*r2)[0].outcome, Outcome::kApplied);
    EXPECT_EQ((*r2)[1].outcome, Outcome::kApplied);
    EXPECT_EQ((*r2)[2].outcome, Outcome::kDuplicate);
    EXPECT_EQ(calls[p + "a"], outside ? 1 : 2) << "a duplicate runs no handler";
  }
}

// A handler that reports its failed statement with FromSqlState: bad data
// (class 22: header bytes that are not UTF-8 written to a text column; class
// 23: a unique violation) is permanent — dead-lettered, not retried for ever —
// and anything else (a missing table, 42P01) stays transient.
TEST_F(InboxTest, AFailedStatementIsPermanentOnlyWhenItsSqlStateSaysTheDataIsWrong) {
  Exec(conn_.get(), "CREATE UNIQUE INDEX ON " + schema_ + ".effects (v)");
  const std::string table = schema_ + ".effects";
  Handler by_state = [&](const InboundMessage& m, pg_conn* txn) -> HandlerResult {
    const std::string sql = m.payload == "no-table" ? "INSERT INTO no_such_table VALUES ($1, $2)"
                                                    : "INSERT INTO " + table + " VALUES ($1, $2)";
    const std::string& trace = *m.Header("trace");
    const char* vals[] = {trace.c_str(), m.payload.c_str()};
    PGresult* r = PQexecParams(txn, sql.c_str(), 2, nullptr, vals, nullptr, nullptr, 0);
    HandlerResult out;
    if (PQresultStatus(r) != PGRES_COMMAND_OK) {
      const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
      out = HandlerResult::FromSqlState(state ? state : "", PQresultErrorMessage(r));
    }
    PQclear(r);
    return out;
  };
  auto inbox = OpenPostgresInbox(Options("by-state"), by_state);
  ASSERT_TRUE(inbox.ok()) << inbox.status().ToString();
  std::vector<InboundMessage> batch = {Msg("a", "v1"), Msg("b", "v2"), Msg("c", "v1"), Msg("d", "no-table")};
  for (auto& m : batch) m.headers["trace"] = "ok";
  batch[1].headers["trace"] = std::string("\xff\xfe") + " not UTF-8";
  auto r = Process(batch, DedupByEventId(), inbox->get());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].outcome, Outcome::kApplied);
  EXPECT_EQ((*r)[1].outcome, Outcome::kPermanent) << (*r)[1].error;
  EXPECT_NE((*r)[1].error.find("[SQLSTATE 22021]"), std::string::npos) << (*r)[1].error;
  EXPECT_EQ((*r)[2].outcome, Outcome::kPermanent) << (*r)[2].error;
  EXPECT_NE((*r)[2].error.find("[SQLSTATE 23505]"), std::string::npos) << (*r)[2].error;
  EXPECT_EQ((*r)[3].outcome, Outcome::kTransient) << (*r)[3].error;
  EXPECT_NE((*r)[3].error.find("[SQLSTATE 42P01]"), std::string::npos) << (*r)[3].error;
  EXPECT_EQ(Effects(), "1");
}

// A failure at COMMIT (here a DEFERRABLE INITIALLY DEFERRED foreign key that
// one message's handler breaks) used to fail the whole batch, which the
// consumer then consumed again forever. Now the batch is redone a transaction
// per message: that message fails alone and the others apply.
TEST_F(InboxTest, ACommitFailureFailsOnlyTheMessageThatCausedIt) {
  Exec(conn_.get(), "CREATE TABLE " + schema_ + ".parent (id text PRIMARY KEY)");
  Exec(conn_.get(), "CREATE TABLE " + schema_ + ".child (pid text REFERENCES " + schema_ +
                        ".parent DEFERRABLE INITIALLY DEFERRED)");
  for (const char* mode : {"fast", "careful"}) {
    SCOPED_TRACE(mode);
    const std::string p = mode;
    std::vector<InboundMessage> batch = {Msg(p + "-a", "ok"), Msg(p + "-b", "orphan"),
                                         Msg(p + "-c", "ok")};
    if (p == "careful") batch.push_back(Msg(p + "-d", "permanent"));  // a handler fails too
    auto r = Process(batch);
    ASSERT_TRUE(r.ok()) << "one message's commit failure is not the batch's: "
                        << r.status().ToString();
    EXPECT_EQ((*r)[0].outcome, Outcome::kApplied);
    EXPECT_EQ((*r)[1].outcome, Outcome::kPermanent) << (*r)[1].error;
    EXPECT_NE((*r)[1].error.find("foreign key"), std::string::npos) << (*r)[1].error;
    EXPECT_EQ((*r)[2].outcome, Outcome::kApplied);
    if (p == "careful") {
      EXPECT_EQ((*r)[3].outcome, Outcome::kPermanent);
    }
    EXPECT_EQ(Effects("k IN ('" + p + "-a', '" + p + "-c')"), "2");
    EXPECT_EQ(Effects("k = '" + p + "-b'"), "0");
    EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM " + schema_ + ".inbox_stamps WHERE dedup_key = '" +
                                    p + "-b'"),
              "0")
        << "its stamp went with it, so a fixed re-delivery can still apply";
  }
  // Delivered again: the applied ones are duplicates, nothing applies twice.
  std::vector<InboundMessage> again = {Msg("fast-a", "ok"), Msg("fast-c", "ok")};
  auto r = Process(again);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].outcome, Outcome::kDuplicate);
  EXPECT_EQ((*r)[1].outcome, Outcome::kDuplicate);
}

TEST_F(InboxTest, KeysPostgreSQLCannotStoreFailAloneWhenCalledDirectly) {
  std::vector<InboundMessage> batch = {Msg("k1", "ok"), Msg("k2", "ok")};
  std::vector<std::string> keys = {"k1", std::string("\xff\xfe", 2)};
  auto r = inbox_->Apply(batch, keys);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].outcome, Outcome::kApplied);
  EXPECT_EQ((*r)[1].outcome, Outcome::kPermanent);
}

TEST_F(InboxTest, BusinessIdentityDedupesRepublishesWithNewIds) {
  // Per handler: the seed's stamp key (event kind + user + object), not the id.
  DedupKeyFn by_business = [](const InboundMessage& m) -> Result<std::string> {
    return "LessonCompleted:" + m.payload;
  };
  std::vector<InboundMessage> batch = {Msg("id-1", "user7:lesson3"), Msg("id-2", "user7:lesson3")};
  auto r = Process(batch, by_business);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].outcome, Outcome::kApplied);
  EXPECT_EQ((*r)[1].outcome, Outcome::kDuplicate);
  EXPECT_EQ(Effects(), "1");
}

TEST_F(InboxTest, PurgeRemovesOnlyOldStamps) {
  std::vector<InboundMessage> batch = {Msg("p1", "ok"), Msg("p2", "ok")};
  ASSERT_TRUE(Process(batch).ok());
  auto kept = inbox_->PurgeStamps(std::chrono::hours(24), 100);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_EQ(*kept, 0);
  Exec(conn_.get(), "UPDATE " + schema_ + ".inbox_stamps SET applied_at = now() - interval '2 days'");
  auto p = inbox_->PurgeStamps(std::chrono::hours(24), 1);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, 1) << "bounded batch";
  EXPECT_EQ(Stamps(), "1");
}

TEST_F(InboxTest, BatchHandlerAppliesAllAtOnceAndFallsBackPerMessageOnFailure) {
  int batch_calls = 0;
  BatchHandler batch = [&](std::span<const InboundMessage* const> msgs, pg_conn* txn) {
    ++batch_calls;
    for (const InboundMessage* m : msgs) {
      if (m->payload != "ok") return HandlerResult::Transient("one of them is not ok");
    }
    std::string keys = "{";
    for (const InboundMessage* m : msgs) keys += (keys.size() > 1 ? ",\"" : "\"") + m->key + "\"";
    keys += "}";
    const std::string sql = "INSERT INTO " + schema_ + ".effects SELECT k, 'ok' FROM unnest($1::text[]) k";
    const char* v[] = {keys.c_str()};
    PGresult* r = PQexecParams(txn, sql.c_str(), 1, nullptr, v, nullptr, nullptr, 0);
    bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
    PQclear(r);
    return ok ? HandlerResult::Ok() : HandlerResult::Transient("insert failed");
  };
  std::vector<InboundMessage> good = {Msg("b1", "ok"), Msg("b2", "ok"), Msg("b1", "ok")};
  auto batched = OpenPostgresInbox(Options("test-consumer"), EffectHandler(), batch);
  ASSERT_TRUE(batched.ok());
  auto r = Process(good, DedupByEventId(), batched->get());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(batch_calls, 1);
  EXPECT_EQ((*r)[0].outcome, Outcome::kApplied);
  EXPECT_EQ((*r)[1].outcome, Outcome::kApplied);
  EXPECT_EQ((*r)[2].outcome, Outcome::kDuplicate);
  EXPECT_EQ(Effects(), "2");
  // One bad message: the batch handler fails, the batch is redone per message.
  std::vector<InboundMessage> mixed = {Msg("b3", "ok"), Msg("b4", "permanent"), Msg("b2", "ok")};
  auto r2 = Process(mixed, DedupByEventId(), batched->get());
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ((*r2)[0].outcome, Outcome::kApplied);
  EXPECT_EQ((*r2)[1].outcome, Outcome::kPermanent);
  EXPECT_EQ((*r2)[2].outcome, Outcome::kDuplicate);
  EXPECT_EQ(Effects(), "3");
  EXPECT_EQ(Effects("k = 'b4'"), "0");
}

// A handler that queues its statement on the sink: the statements of a batch go
// in one pipeline; one that PostgreSQL rejects fails its message alone
// (permanent for bad data), and the others apply, each exactly once.
TEST_F(InboxTest, SinkHandlerStatementsRunInOnePipelineAndFailAlone) {
  Exec(conn_.get(), "CREATE TABLE " + schema_ + ".sunk (k text PRIMARY KEY, v int CHECK (v >= 0))");
  const std::string insert = "INSERT INTO " + schema_ + ".sunk VALUES ($1, $2::int)";
  Exec(conn_.get(), "CREATE TABLE " + schema_ + ".parent (id text PRIMARY KEY)");
  Exec(conn_.get(), "CREATE TABLE " + schema_ + ".child (pid text REFERENCES " + schema_ +
                        ".parent DEFERRABLE INITIALLY DEFERRED)");
  const std::string child = "INSERT INTO " + schema_ + ".child VALUES ($1)";
  int calls = 0;
  SinkHandler sink_handler = [&](const InboundMessage& m, StatementSink& sink) {
    ++calls;
    if (m.payload == "permanent") return HandlerResult::Permanent("contract violation");
    sink.Add(insert, {m.key, m.payload == "negative" ? "-1" : "1"});
    if (m.payload == "null") sink.Add("SELECT $1::text IS NULL", {std::nullopt});
    if (m.payload == "orphan") sink.Add(child, {m.key});  // fails only at COMMIT
    return HandlerResult::Ok();
  };
  auto sunk = OpenPostgresInbox(Options("sink-consumer"), sink_handler);
  ASSERT_TRUE(sunk.ok()) << sunk.status().ToString();
  std::vector<InboundMessage> good = {Msg("s1", "ok"), Msg("s2", "null"), Msg("s1", "ok")};
  auto r = Process(good, DedupByEventId(), sunk->get());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].outcome, Outcome::kApplied);
  EXPECT_EQ((*r)[1].outcome, Outcome::kApplied);
  EXPECT_EQ((*r)[2].outcome, Outcome::kDuplicate);
  EXPECT_EQ(calls, 2) << "the handler runs once per new message on the fast path";
  std::vector<InboundMessage> mixed = {Msg("s3", "ok"), Msg("s4", "negative"), Msg("s5", "permanent"),
                                       Msg("s6", "ok")};
  auto r2 = Process(mixed, DedupByEventId(), sunk->get());
  ASSERT_TRUE(r2.ok()) << r2.status().ToString();
  EXPECT_EQ((*r2)[0].outcome, Outcome::kApplied);
  EXPECT_EQ((*r2)[1].outcome, Outcome::kPermanent) << "a CHECK violation is bad data";
  EXPECT_NE((*r2)[1].error.find("check constraint"), std::string::npos) << (*r2)[1].error;
  EXPECT_EQ((*r2)[2].outcome, Outcome::kPermanent);
  EXPECT_EQ((*r2)[3].outcome, Outcome::kApplied);
  EXPECT_EQ(Exec(conn_.get(), "SELECT string_agg(k, ',' ORDER BY k) FROM " + schema_ + ".sunk"),
            "s1,s2,s3,s6");
  // The batch's COMMIT (sent in the same pipeline) fails on one message's write.
  std::vector<InboundMessage> deferred = {Msg("s7", "ok"), Msg("s8", "orphan"), Msg("s9", "ok")};
  auto r3 = Process(deferred, DedupByEventId(), sunk->get());
  ASSERT_TRUE(r3.ok()) << r3.status().ToString();
  EXPECT_EQ((*r3)[0].outcome, Outcome::kApplied);
  EXPECT_EQ((*r3)[1].outcome, Outcome::kPermanent) << (*r3)[1].error;
  EXPECT_EQ((*r3)[2].outcome, Outcome::kApplied);
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM " + schema_ + ".child"), "0");
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM " + schema_ +
                                  ".inbox_stamps WHERE consumer = 'sink-consumer'"),
            "6");
}

// A sink statement that runs past the statement timeout is its message's own
// transient failure: the others apply in the same call (issue 41: it failed
// the whole batch, which was consumed again forever).
TEST_F(InboxTest, ASinkStatementPastTheTimeoutFailsAloneAndTheOthersApply) {
  Exec(conn_.get(), "CREATE TABLE " + schema_ + ".sunk (k text PRIMARY KEY)");
  const std::string insert = "INSERT INTO " + schema_ + ".sunk VALUES ($1)";
  SinkHandler sink_handler = [&](const InboundMessage& m, StatementSink& sink) {
    if (m.payload == "slow") sink.Add("SELECT pg_sleep(2.5)", {});
    sink.Add(insert, {m.key});
    return HandlerResult::Ok();
  };
  PostgresInboxOptions o = Options("timeout-sink");
  o.statement_timeout = std::chrono::milliseconds(1000);
  o.classify_sqlstate = SqlHandlerErrorClass;
  auto sunk = OpenPostgresInbox(o, sink_handler);
  ASSERT_TRUE(sunk.ok()) << sunk.status().ToString();
  std::vector<InboundMessage> batch = {Msg("ok-0", "ok"), Msg("ok-1", "ok"), Msg("slow-1", "slow"),
                                       Msg("ok-2", "ok"), Msg("ok-3", "ok")};
  auto r = Process(batch, DedupByEventId(), sunk->get());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (std::size_t i = 0; i < batch.size(); ++i) {
    EXPECT_EQ((*r)[i].outcome, i == 2 ? Outcome::kTransient : Outcome::kApplied) << i;
  }
  EXPECT_NE((*r)[2].error.find("57014"), std::string::npos) << (*r)[2].error;
  EXPECT_EQ(Exec(conn_.get(), "SELECT string_agg(k, ',' ORDER BY k) FROM " + schema_ + ".sunk"),
            "ok-0,ok-1,ok-2,ok-3");
}

// Dedup and order keys of any length: a btree entry holds about 2,700 bytes,
// so a 10 KB event id failed its batch with SQLSTATE 54000 (issue 41). Long
// keys are indexed by their SHA-256 and compared whole.
TEST_F(InboxTest, KeysOfTenKilobytesApplyOnceParkAndAreCountedAsDuplicates) {
  std::string long_id(10'000, 'x');
  for (std::size_t i = 0; i < long_id.size(); i += 7) long_id[i] = static_cast<char>('a' + i % 26);
  std::string other = long_id;
  other.back() = '!';  // same 512-byte prefix, same length: only the whole key tells them apart
  std::string edge(513, 'e');  // one byte past the keys kept as they are
  std::vector<InboundMessage> batch = {Msg(long_id, "ok"), Msg(other, "ok"), Msg(edge, "ok"),
                                       Msg(std::string(512, 'e'), "ok"), Msg(long_id, "ok")};
  auto r = Process(batch);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].outcome, Outcome::kApplied);
  EXPECT_EQ((*r)[1].outcome, Outcome::kApplied);
  EXPECT_EQ((*r)[2].outcome, Outcome::kApplied);
  EXPECT_EQ((*r)[3].outcome, Outcome::kApplied);
  EXPECT_EQ((*r)[4].outcome, Outcome::kDuplicate);
  auto again = Process(std::span(batch.data(), 2));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)[0].outcome, Outcome::kDuplicate);
  EXPECT_EQ((*again)[1].outcome, Outcome::kDuplicate);
  EXPECT_EQ(Exec(conn_.get(), "SELECT duplicates FROM " + schema_ +
                                  ".inbox_stamps WHERE dedup_key = '" + long_id + "'"),
            "2");
  // The SQL inbox takes the same keys.
  const auto try_apply = [&](const std::string& key) {  // keys of letters and '!' only
    return Exec(conn_.get(), "SELECT " + schema_ + ".try_apply('sql', '" + key + "')");
  };
  EXPECT_EQ(try_apply(long_id), "t");
  EXPECT_EQ(try_apply(other), "t");
  EXPECT_EQ(try_apply(long_id), "f");
  // Ordered mode's parked queue: a 10 KB order key (the message key).
  ParkedMessage p;
  p.order_key = long_id;
  p.dedup_key = other;
  p.message = Msg("parked", "ok");
  p.message.key_is_null = true;
  p.message.key.clear();
  ASSERT_TRUE(inbox_->Park(std::span(&p, 1)).ok());
  ASSERT_TRUE(inbox_->Park(std::span(&p, 1)).ok()) << "parking again changes nothing";
  auto keys = inbox_->ParkedKeys(std::vector<std::string>{long_id, other});
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  EXPECT_EQ(*keys, std::set<std::string>{long_id});
  auto due = inbox_->Due(10);
  ASSERT_TRUE(due.ok()) << due.status().ToString();
  ASSERT_EQ(due->size(), 1u);
  EXPECT_EQ((*due)[0].order_key, long_id);
  EXPECT_TRUE((*due)[0].message.key_is_null) << "a NULL message key comes back NULL";
}

// An inbox schema made before the shared migration runner (its
// inbox_migrations table had no description column; versions 1 and 2 applied)
// upgrades in place: the column is added, version 3 (the parked queue) applied,
// the stamps kept.
TEST_F(InboxTest, AnInboxSchemaFromBeforeTheSharedRunnerUpgradesInPlace) {
  const std::string old = schema_ + "_old";
  Exec(conn_.get(), "DROP SCHEMA IF EXISTS " + old + " CASCADE");
  Exec(conn_.get(), "CREATE SCHEMA " + old);
  Exec(conn_.get(), "CREATE TABLE " + old + ".inbox_migrations (version integer PRIMARY KEY, "
                        "applied_at timestamptz NOT NULL DEFAULT now())");
  Exec(conn_.get(), "CREATE TABLE " + old + ".inbox_stamps (consumer text NOT NULL, dedup_key text "
                        "NOT NULL, topic text, partition integer, \"offset\" bigint, applied_at "
                        "timestamptz NOT NULL DEFAULT now(), duplicates integer NOT NULL DEFAULT 0, "
                        "last_duplicate_at timestamptz, PRIMARY KEY (consumer, dedup_key))");
  Exec(conn_.get(), "INSERT INTO " + old + ".inbox_migrations (version) VALUES (1), (2)");
  Exec(conn_.get(), "INSERT INTO " + old + ".inbox_stamps (consumer, dedup_key) VALUES ('c', 'kept')");
  PostgresInboxOptions o = Options("c");
  o.schema = old;
  auto inbox = OpenPostgresInbox(o, EffectHandler());
  ASSERT_TRUE(inbox.ok());
  ASSERT_TRUE((*inbox)->Migrate().ok());
  ASSERT_TRUE((*inbox)->Migrate().ok()) << "twice";
  EXPECT_EQ(Exec(conn_.get(), "SELECT string_agg(version || ':' || (description <> ''), ',' ORDER BY "
                                  "version) FROM " + old + ".inbox_migrations"),
            "1:false,2:false,3:true,4:true,5:true");
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM " + old + ".inbox_parked"), "0");
  std::vector<InboundMessage> again = {Msg("kept", "ok")};
  std::vector<std::string> keys = {"kept"};
  auto r = (*inbox)->Apply(again, keys);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)[0].outcome, Outcome::kDuplicate) << "the old stamp still absorbs";
  Exec(conn_.get(), "DROP SCHEMA " + old + " CASCADE");
}

// ---- saga guards --------------------------------------------------------

class SagaTest : public InboxTest {
 protected:
  void SetUp() override {
    InboxTest::SetUp();
    Exec(conn_.get(), "CREATE TABLE " + schema_ +
                          ".reservations (id text PRIMARY KEY, state text NOT NULL, version bigint NOT NULL DEFAULT 0)");
    Exec(conn_.get(), "INSERT INTO " + schema_ + ".reservations VALUES ('r1', 'NEW', 0)");
    col_ = {schema_ + ".reservations", "id", "state"};
  }
  std::string State() {
    return Exec(conn_.get(), "SELECT state FROM " + schema_ + ".reservations WHERE id = 'r1'");
  }
  saga::StateColumn col_;
};

TEST_F(SagaTest, CompensationBeforeItsForwardEventChangesNothing) {
  const std::vector<std::string> reserved = {"RESERVED"};
  auto c = saga::Compensate(conn_.get(), col_, "r1", reserved, "RELEASED");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_FALSE(*c);
  EXPECT_EQ(State(), "NEW");
  // The forward event arrives afterwards and applies; then the compensation would.
  const std::vector<std::string> from_new = {"NEW"};
  auto f = saga::Transition(conn_.get(), col_, "r1", from_new, "RESERVED");
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(*f);
  EXPECT_EQ(State(), "RESERVED");
}

TEST_F(SagaTest, DuplicateForwardEventChangesNothing) {
  const std::vector<std::string> from_new = {"NEW"};
  auto first = saga::Transition(conn_.get(), col_, "r1", from_new, "RESERVED");
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(*first);
  Exec(conn_.get(), "UPDATE " + schema_ + ".reservations SET state = 'CONFIRMED'");
  auto dup = saga::Transition(conn_.get(), col_, "r1", from_new, "RESERVED");
  ASSERT_TRUE(dup.ok());
  EXPECT_FALSE(*dup) << "a late duplicate must not move CONFIRMED back to RESERVED";
  EXPECT_EQ(State(), "CONFIRMED");
}

TEST_F(SagaTest, VersionGuardIgnoresStaleEvents) {
  auto v2 = saga::AdvanceVersion(conn_.get(), schema_ + ".reservations", "id", "version", "r1", 2);
  ASSERT_TRUE(v2.ok());
  EXPECT_TRUE(*v2);
  auto v1 = saga::AdvanceVersion(conn_.get(), schema_ + ".reservations", "id", "version", "r1", 1);
  ASSERT_TRUE(v1.ok());
  EXPECT_FALSE(*v1) << "step 1 arrived after step 2";
  auto v2again = saga::AdvanceVersion(conn_.get(), schema_ + ".reservations", "id", "version", "r1", 2);
  ASSERT_TRUE(v2again.ok());
  EXPECT_FALSE(*v2again) << "duplicate";
}

TEST_F(SagaTest, NamesAreValidated) {
  saga::StateColumn bad = {"reservations; drop table x", "id", "state"};
  const std::vector<std::string> from = {"NEW"};
  auto r = saga::Transition(conn_.get(), bad, "r1", from, "X");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace outbox::testing
