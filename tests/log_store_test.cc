// The PostgreSQL log layout (issue 42) against a real server: what the store
// contract cannot say because it is about how the log writes, not what it
// hands out — each event written once, a long-open transaction neither
// stalling the others nor skipped, the slots spread over relays and taken over
// after a lease, a crash loop split until the event that kills the relay
// stands alone, and rotation giving the disk back.
#include "../src/store/postgres/log_store.h"

#include <gtest/gtest.h>
#include <libpq-fe.h>

#include <atomic>
#include <map>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "../src/store/postgres/log_page.h"
#include "../src/store/postgres/migrate.h"
#include "../src/store/postgres/session.h"
#include "outbox/postgres.h"
#include "test_env.h"

namespace outbox::testing {
namespace {

class LogStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    OUTBOX_REQUIRE_ENV(url_, "OUTBOX_PG_URL");
    schema_ = "t_" + RandomSuffix();
    conn_ = Connect(url_);
    ASSERT_EQ(PQstatus(conn_.get()), CONNECTION_OK);
    auto store = Open();
    ASSERT_NE(store, nullptr);
    Status st = store->Migrate().status();
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  void TearDown() override {
    if (conn_ && PQstatus(conn_.get()) == CONNECTION_OK) {
      Exec(conn_.get(), "ROLLBACK");
      DropSchemaRetrying(conn_.get(), schema_);
    }
  }

  PostgresStoreOptions Options() const {
    PostgresStoreOptions o;
    o.conninfo = url_;
    o.schema = schema_;
    return o;
  }

  std::unique_ptr<Store> Open() { return Open(Options()); }
  std::unique_ptr<Store> Open(const PostgresStoreOptions& options) {
    auto s = pg::OpenPostgresLogStore(options);
    if (!s.ok()) {
      ADD_FAILURE() << s.status().ToString();
      return nullptr;
    }
    return std::move(s).value();
  }

  // Fewer slots, before any event is written.
  void Shape(int slots) {
    Exec(conn_.get(),
         "UPDATE " + schema_ + ".log_settings SET slots = " + std::to_string(slots));
    Exec(conn_.get(),
         "DELETE FROM " + schema_ + ".slots WHERE slot >= " + std::to_string(slots));
  }
  // The partition producers write.
  std::string Current() {
    return Exec(conn_.get(), "SELECT cur FROM " + schema_ + ".log_settings");
  }
  // The current partition made `minutes` old.
  void AgeCurrent(int minutes) {
    Exec(conn_.get(), "UPDATE " + schema_ +
                          ".log_parts p SET opened_at = now() - interval '" +
                          std::to_string(minutes) + " minutes' FROM " + schema_ +
                          ".log_settings c WHERE p.part = c.cur");
  }
  std::int64_t Purge(Store& s, std::chrono::seconds retention) {
    auto r = s.PurgeSent(retention, 1000);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : -1;
  }

  std::string Enqueue(PGconn* c, const std::string& aggregate, bool commit = true) {
    if (commit) Exec(c, "BEGIN");
    Event e;
    e.aggregate_type = "order";
    e.aggregate_id = aggregate;
    e.event_type = "OrderCreated";
    e.payload = "{}";
    EnqueueOptions o;
    o.schema = schema_;
    auto r = outbox::Enqueue(c, e, o);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (commit) Exec(c, "COMMIT");
    return r.ok() ? r->event_id : "";
  }

  void EnqueueMany(int n, int aggregates) {
    Exec(conn_.get(), "BEGIN");
    for (int i = 0; i < n; ++i)
      Enqueue(conn_.get(), "agg-" + std::to_string(i % aggregates), false);
    Exec(conn_.get(), "COMMIT");
  }

  // Claims the one event due and marks it FAILED with `error`.
  void FailTheNext(Store& s, const std::string& error) {
    auto c = s.Claim(Opts(1));
    ASSERT_TRUE(c.ok() && c->events.size() == 1u);
    FailItem fail{c->events[0].ticket, error};
    ASSERT_TRUE(s.MarkFailed(std::span(&fail, 1)).ok());
  }

  // Claims the one event due with `o` and hands it back as a retry due after
  // `delay` (its attempt counted); `id` gets its id.
  void RetryTheNext(Store& s, std::chrono::milliseconds delay, std::string* id,
                    const ClaimOptions& o = Opts(1)) {
    auto c = s.Claim(o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_EQ(c->events.size(), 1u);
    *id = c->events[0].event_id;
    RescheduleItem back{c->events[0].ticket, delay, "again", true};
    ASSERT_TRUE(s.Reschedule(std::span(&back, 1)).ok());
  }

  // Every event's status as the view shows it, in seq order, comma-separated.
  std::string Statuses() {
    return Exec(conn_.get(), "SELECT string_agg(status, ',' ORDER BY seq) FROM " +
                                 schema_ + ".outbox");
  }

  static ClaimOptions Opts(int batch = 500) {
    ClaimOptions o;
    o.batch_size = batch;
    o.owner = "relay-test";
    return o;
  }

  // Claims and marks sent until a claim comes back empty; the ids in order.
  std::vector<std::string> Drain(Store& s, const ClaimOptions& o = Opts()) {
    std::vector<std::string> ids;
    for (int round = 0; round < 1000; ++round) {
      auto c = s.Claim(o);
      EXPECT_TRUE(c.ok()) << c.status().ToString();
      if (!c.ok() || c->events.empty()) break;
      std::vector<Ticket> t;
      for (const auto& e : c->events) ids.push_back(e.event_id), t.push_back(e.ticket);
      auto m = s.MarkSent(t);
      EXPECT_TRUE(m.ok() && m->refused.empty());
    }
    return ids;
  }

  std::string url_, schema_;
  PgConn conn_;
};

pg::log::Entry At(std::int64_t pos) {
  pg::log::Entry e;
  e.pos = pos;
  e.txid = "10";
  return e;
}

TEST(LogPage, ACrashLoopHalvesThePageUntilTheKillerStandsAlone) {
  EXPECT_EQ(pg::log::PageLimit(0, 3, 500), 500);
  EXPECT_EQ(pg::log::PageLimit(2, 3, 500), 500);
  EXPECT_EQ(pg::log::PageLimit(3, 3, 500), 250);
  EXPECT_EQ(pg::log::PageLimit(4, 3, 500), 125);
  EXPECT_EQ(pg::log::PageLimit(40, 3, 500), 1);
  EXPECT_FALSE(pg::log::KillerStandsAlone(2, 3, 1));  // not a crash loop yet
  EXPECT_FALSE(pg::log::KillerStandsAlone(3, 3, 2));
  EXPECT_TRUE(pg::log::KillerStandsAlone(3, 3, 1));
}

TEST(LogPage, ATransactionRunningAtANewUpperEndKeepsItsBoundOrTakesLosPosition) {
  pg::log::RangeEnd lo;
  lo.pos_before = 100;
  lo.running = {{"50", 40}, {"60", 100}};
  // 50 was running at lo too (its bound stays); 70 got its id after lo's reads.
  const auto at = pg::log::RunningAt(lo, {"50", "70"});
  EXPECT_EQ(at, (std::map<std::string, std::int64_t>{{"50", 40}, {"70", 100}}));
  EXPECT_TRUE(pg::log::RunningAt(lo, {}).empty());
}

TEST(LogPage, AStragglersSpanRunsFromItsBoundOrThePosDoneToLosPosition) {
  pg::log::RangeEnd lo;
  lo.pos_before = 100;
  lo.running = {{"50", 40}, {"60", 100}, {"61", 99}};
  auto xs = pg::log::Stragglers(lo, 0);
  ASSERT_EQ(xs.size(), 2u);  // 60's span (100, 100] is empty
  EXPECT_EQ(xs[0].txid, "50");
  EXPECT_EQ(xs[0].from, 40);
  EXPECT_EQ(xs[0].to, 100);
  EXPECT_EQ(xs[1].txid, "61");
  EXPECT_EQ(xs[1].from, 99);
  xs = pg::log::Stragglers(lo, 99);  // a page of the range is done up to pos 99
  ASSERT_EQ(xs.size(), 2u);
  EXPECT_EQ(xs[0].from, 99);
  EXPECT_TRUE(pg::log::Stragglers(lo, 100).empty());
}

TEST(LogPage, AnOutageWritesNothingAndAnyImplicatedEventWrites) {
  pg::log::Page p;
  p.Add(At(1));
  p.Add(At(2));
  pg::log::SlotCut cut;
  cut.token = 7;
  cut.hi.snapshot = "10:11:";
  cut.done_pos = 2;
  p.Cut(cut);
  EXPECT_FALSE(p.Complete());
  EXPECT_TRUE(p.Settle(1, pg::log::Outcome::kRetry, /*attempt_counts=*/false, 500));
  EXPECT_FALSE(p.Settle(3, pg::log::Outcome::kSent));  // not in the page
  EXPECT_TRUE(p.Settle(2, pg::log::Outcome::kRetry, false, 200));
  EXPECT_TRUE(p.Complete());
  EXPECT_TRUE(p.WritesNothing());
  EXPECT_EQ(p.MinDelayMs(), 200);

  pg::log::Page q;
  q.Add(At(1));
  q.Add(At(2));
  q.Hold(At(3));
  EXPECT_FALSE(q.Settle(3, pg::log::Outcome::kSent));  // held back: not handed out
  q.Settle(1, pg::log::Outcome::kSent);
  q.Settle(2, pg::log::Outcome::kRetry, true, 0, "broker said no");
  EXPECT_FALSE(q.WritesNothing());
  auto x = q.Exceptions();
  ASSERT_EQ(x.size(), 2u);  // the retry and the held event, not the sent one
  EXPECT_EQ(x[0].pos, 2);
  EXPECT_EQ(x[1].outcome, pg::log::Outcome::kHeld);
  // A settlement whose statement failed is reopened (a held event stays held).
  q.Reopen(2);
  q.Reopen(3);
  EXPECT_FALSE(q.Complete());
  EXPECT_EQ(q.Find(2)->error, "");
  EXPECT_EQ(q.Find(3)->outcome, pg::log::Outcome::kHeld);
  EXPECT_TRUE(q.Settle(2, pg::log::Outcome::kSent));
  EXPECT_TRUE(q.Complete());
}

TEST_F(LogStoreTest, EachEventIsWrittenOnceAndNeverUpdated) {
  EnqueueMany(1000, 50);
  auto s = Open();
  auto ids = Drain(*s);
  EXPECT_EQ(ids.size(), 1000u);
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), 1000u);
  // No log row was updated, deleted or locked (xmax stays 0), and no event
  // needed an exception row.
  EXPECT_EQ(
      Exec(conn_.get(), "SELECT count(*) FROM " + schema_ + ".log WHERE xmax <> '0'"),
      "0");
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM " + schema_ + ".exceptions"), "0");
  EXPECT_EQ(Exec(conn_.get(),
                 "SELECT count(*) FROM " + schema_ + ".outbox WHERE status = 'SENT'"),
            "1000");
  EXPECT_TRUE(Drain(*s).empty());
}

TEST_F(LogStoreTest, ALongOpenTransactionNeitherStallsTheOthersNorIsSkipped) {
  PgConn slow = Connect(url_);
  PgConn reader = Connect(url_);
  Exec(slow.get(), "BEGIN");
  const std::string late = Enqueue(slow.get(), "slow", /*commit=*/false);
  // A report holding its snapshot, too.
  Exec(reader.get(), "BEGIN ISOLATION LEVEL REPEATABLE READ");
  Exec(reader.get(), "SELECT count(*) FROM " + schema_ + ".log");
  std::vector<std::string> first;
  for (int i = 0; i < 3; ++i)
    first.push_back(Enqueue(conn_.get(), "fast-" + std::to_string(i)));
  auto s = Open();
  EXPECT_EQ(Drain(*s), first);  // not stalled behind the open transaction
  Exec(slow.get(), "COMMIT");
  const std::string after = Enqueue(conn_.get(), "fast-0");
  auto rest = Drain(*s);
  ASSERT_EQ(rest.size(), 2u);  // the late commit is not skipped
  EXPECT_EQ(std::set<std::string>(rest.begin(), rest.end()),
            (std::set<std::string>{late, after}));
  Exec(reader.get(), "COMMIT");
  EXPECT_EQ(Exec(conn_.get(),
                 "SELECT count(*) FROM " + schema_ + ".outbox WHERE status <> 'SENT'"),
            "0");
}

// The read in pos order (log set version 7) bounds each range by the pos
// sequence read before its upper snapshot. A transaction that drew its pos
// before that read and commits after the snapshot (a straggler) is read through
// the bounds its range carries. Here its id is above the snapshot's xmax (no
// later transaction has completed), so only pg_locks shows it running: without
// that read its event is lost (checked by removing it from open_range()).
TEST_F(LogStoreTest, ATransactionRunningAboveTheSnapshotsXmaxIsReadOnceItCommits) {
  PgConn early = Connect(url_);
  PgConn slow = Connect(url_);
  auto s = Open();
  EXPECT_TRUE(Drain(*s).empty());  // the relay's own writes (its lease) come first
  // An aggregate of slow's slot: its range is done while slow runs.
  const std::string same_slot = Exec(
      conn_.get(), "SELECT 'early-' || g FROM generate_series(1, 1000) g WHERE " +
                       schema_ + ".slot_of('order', 'early-' || g, 16) = " + schema_ +
                       ".slot_of('order', 'slow', 16) LIMIT 1");
  Exec(early.get(), "BEGIN");
  const std::string first = Enqueue(early.get(), same_slot, /*commit=*/false);
  Exec(slow.get(), "BEGIN");
  const std::string late = Enqueue(slow.get(), "slow", /*commit=*/false);
  Exec(early.get(), "COMMIT");  // the latest completed id is below slow's
  const std::string xid = Exec(slow.get(), "SELECT pg_current_xact_id()");
  // open_range() names it among the transactions that may be running, whichever
  // part of the snapshot (or neither) has it.
  EXPECT_EQ(Exec(conn_.get(),
                 "SELECT '" + xid + "' = ANY(running) FROM " + schema_ + ".open_range()"),
            "t");
  EXPECT_EQ(Drain(*s), std::vector<std::string>{first});
  // The range done carries slow in its bounds. Whether its snapshot's xmax was
  // still at or below slow's id (the bound from pg_locks alone) depends on the
  // server: another session's transaction completing in between puts slow in the
  // snapshot's xip instead. Both must deliver; the log says which path ran.
  const std::string above =
      Exec(conn_.get(), "SELECT (p.lo_bounds ? '" + xid +
                            "')::text || ' ' || (pg_snapshot_xmax(p.lo) <= '" + xid +
                            "'::xid8)::text FROM " + schema_ +
                            ".positions p WHERE p.slot = " + schema_ +
                            ".slot_of('order', 'slow', 16)");
  EXPECT_EQ(above.substr(0, 4), "true") << above;
  std::printf("slow's id above the range's xmax (pg_locks alone): %s\n",
              above.substr(5).c_str());
  Exec(slow.get(), "COMMIT");
  EXPECT_EQ(Drain(*s), std::vector<std::string>{late});
  EXPECT_TRUE(Drain(*s).empty());
  EXPECT_EQ(Statuses(), "SENT,SENT");
}

// pg_locks shows 32-bit transaction ids; open_range() widens each to the xid8
// nearest the snapshot's xmax, which stays right across an epoch's wrap.
TEST_F(LogStoreTest, A32BitTransactionIdIsWidenedToTheNearestXid8AcrossAnEpochsWrap) {
  auto near = [&](const std::string& xid, const std::string& at) {
    return Exec(conn_.get(),
                "SELECT " + schema_ + ".xid8_near(" + xid + ", '" + at + "')");
  };
  EXPECT_EQ(near("5", "4294967300"), "4294967301");  // epoch 1, just after
  EXPECT_EQ(near("4294967295", "4294967297"),
            "4294967295");                           // epoch 0's last, seen from 1
  EXPECT_EQ(near("1", "8589934590"), "8589934593");  // epoch 2's first, seen from 1
  EXPECT_EQ(near("1000", "1000"), "1000");
  EXPECT_EQ(near("3", "2147483650"), "3");  // 2^31 - 1 behind: the same epoch
}

// Upgrading a log schema with events to log migration 7 starts each slot's
// read at its own unpassed events, not at the log's first event: lo_pos from
// the events its lo may not show, else the sequence's last value. (Left at 0,
// the first read after the upgrade scans every event kept, and a big log then
// runs each claim into the statement timeout, every time.)
TEST_F(LogStoreTest, AnUpgradeToThePosOrderReadStartsEachSlotAtItsUnpassedEvents) {
  const std::string old = schema_ + "_v6";
  auto session = pg::Session::Connect({.conninfo = url_});
  ASSERT_TRUE(session.ok()) << session.status().ToString();
  ASSERT_TRUE(pg::RunMigrations(**session, old, pg::kLogSet, nullptr, 6).ok());
  const std::string fill =
      "SELECT count(*) FROM generate_series(1, 1500) g, LATERAL " + old +
      ".enqueue('order', 'a' || (g % 50), 'OrderCreated', convert_to('{}', 'UTF8')) e";
  Exec(conn_.get(), fill);
  Exec(conn_.get(),
       "UPDATE " + old + ".slots SET lo = pg_current_snapshot()");  // all passed
  Exec(conn_.get(),
       "SELECT count(*) FROM generate_series(1, 100) g, LATERAL " + old +
           ".enqueue('order', 'b' || g, 'OrderCreated', convert_to('{}', 'UTF8')) e");
  ASSERT_TRUE(pg::RunMigrations(**session, old, pg::kLogSet).ok());
  EXPECT_EQ(Exec(conn_.get(), "SELECT min(lo_pos) >= 1500 AND max(lo_pos) <= 1600 FROM " +
                                  old + ".slots"),
            "t")
      << Exec(conn_.get(), "SELECT string_agg(lo_pos::text, ',') FROM " + old + ".slots");
  PostgresStoreOptions o = Options();
  o.schema = old;
  auto s = Open(o);
  EXPECT_EQ(Drain(*s).size(), 100u);
  s.reset();
  DropSchemaRetrying(conn_.get(), old);
}

// A relay of an earlier build moves a slot row's hi (its release, its take-over)
// without the bounds that go with it: the trigger clears them, so a hi_pos of
// an older range end never cuts the new one short. Moved with its bounds (this
// build's statements), they stay.
TEST_F(LogStoreTest, ASlotsHiMovedWithoutItsBoundsLosesThem) {
  const std::string row =
      "SELECT coalesce(hi_lo_pos::text, '-') || ' ' || "
      "coalesce(hi_pos::text, '-') || ' ' || coalesce(hi_bounds::text, '-') "
      "FROM " +
      schema_ + ".slots WHERE slot = 0";
  Exec(conn_.get(), "UPDATE " + schema_ +
                        ".slots SET hi = '10:10:', hi_lo_pos = 5, "
                        "hi_pos = 7, hi_bounds = '{\"9\": 3}' WHERE slot = 0");
  EXPECT_EQ(Exec(conn_.get(), row), "5 7 {\"9\": 3}");
  Exec(conn_.get(),
       "UPDATE " + schema_ + ".slots SET hi = '10:10:' WHERE slot = 0");  // unchanged
  EXPECT_EQ(Exec(conn_.get(), row), "5 7 {\"9\": 3}");
  Exec(conn_.get(), "UPDATE " + schema_ +
                        ".slots SET hi = '12:12:' WHERE slot = 0");  // an older build
  EXPECT_EQ(Exec(conn_.get(), row), "- - -");
}

// A transaction open across many ranges, with an event written before the
// first and one after the last: both are read once it commits, in order (the
// first a straggler whose bound each range carried on, the second in the
// range's own pos span), and every other event once.
TEST_F(LogStoreTest, ATransactionOpenAcrossManyRangesIsReadOnceInOrderWhenItCommits) {
  PgConn slow = Connect(url_);
  Exec(slow.get(), "BEGIN");
  const std::string before = Enqueue(slow.get(), "slow", /*commit=*/false);
  auto s = Open();
  std::vector<std::string> fast;
  for (int range = 0; range < 5; ++range) {
    const std::string id = Enqueue(conn_.get(), "fast-" + std::to_string(range));
    fast.push_back(id);
    EXPECT_EQ(Drain(*s), std::vector<std::string>{id}) << "range " << range;
  }
  const std::string after = Enqueue(slow.get(), "slow", /*commit=*/false);
  Exec(slow.get(), "COMMIT");
  // The gauges find both (unpassed(): `before` only through the bounds its
  // slot's written position carries, its pos being below that position's lo_pos).
  EXPECT_EQ(Exec(conn_.get(), "SELECT p.lo_bounds <> '{}' AND p.lo_pos >= " + schema_ +
                                  ".pos_of('" + before + "') FROM " + schema_ +
                                  ".positions p WHERE p.slot = " + schema_ +
                                  ".slot_of('order', 'slow', 16)"),
            "t");
  auto stats = s->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->pending, 2);
  EXPECT_EQ(Drain(*s), (std::vector<std::string>{before, after}));
  EXPECT_TRUE(Drain(*s).empty());
  // A relay that takes the slots over later reads nothing again.
  auto taker = Open();
  s.reset();
  EXPECT_TRUE(Drain(*taker).empty());
  EXPECT_EQ(Statuses(), "SENT,SENT,SENT,SENT,SENT,SENT,SENT");
}

// Producers write while a relay reads, for three seconds: four sessions commit
// small transactions, and a fifth keeps each of its transactions open across
// many ranges (300 ms), so ranges keep having stragglers. Every committed event
// is handed out once, each aggregate's in pos order (enqueue() draws pos under
// the aggregate's lock, so pos order is the aggregate's commit order).
TEST_F(LogStoreTest,
       UnderConcurrentProducersEveryCommittedEventIsReadOnceInAggregateOrder) {
  std::atomic<bool> stop{false};
  auto produce = [&](unsigned seed, std::chrono::milliseconds hold) {
    PgConn c = Connect(url_);
    unsigned x = seed;
    auto next = [&x] { return x = x * 1103515245u + 12345u, (x >> 16) & 0x7fff; };
    while (!stop.load()) {
      Exec(c.get(), "BEGIN");
      // Each transaction takes its aggregates' locks in one order: no deadlock.
      std::set<int> aggregates;
      for (unsigned i = 1 + next() % 4; i > 0; --i) aggregates.insert(10 + next() % 64);
      for (int a : aggregates) {
        Enqueue(c.get(), "a" + std::to_string(a), /*commit=*/false);
        std::this_thread::sleep_for(hold / aggregates.size());
      }
      Exec(c.get(), "COMMIT");
    }
  };
  std::vector<std::thread> producers;
  for (unsigned p = 0; p < 4; ++p)
    producers.emplace_back(produce, p + 1, std::chrono::milliseconds(2));
  producers.emplace_back(produce, 99, std::chrono::milliseconds(300));
  auto s = Open();
  std::vector<std::pair<std::string, std::int64_t>>
      got;  // aggregate, pos; in hand-out order
  auto claim_all = [&] {
    auto c = s->Claim(Opts(50));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    if (!c.ok()) return false;
    std::vector<Ticket> t;
    for (const auto& e : c->events) {
      got.emplace_back(e.event.aggregate_id, e.ticket.seq);
      t.push_back(e.ticket);
    }
    if (!t.empty()) {
      EXPECT_TRUE(s->MarkSent(t).ok());
    }
    return !c->events.empty();
  };
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (std::chrono::steady_clock::now() < end) claim_all();
  stop = true;
  for (auto& p : producers) p.join();
  for (int round = 0; round < 1000 && claim_all(); ++round) {
  }
  EXPECT_FALSE(claim_all());
  // What committed, per aggregate in pos order, against what was handed out.
  std::map<std::string, std::vector<std::int64_t>> want, have;
  const std::string rows = Exec(conn_.get(),
                                "SELECT string_agg(aggregate_id || ':' || pos, ',' "
                                "ORDER BY pos) FROM " +
                                    schema_ + ".log");
  for (std::size_t at = 0; at < rows.size();) {
    const std::size_t comma = std::min(rows.find(',', at), rows.size());
    const std::string item = rows.substr(at, comma - at);
    const std::size_t colon = item.find(':');
    want[item.substr(0, colon)].push_back(std::stoll(item.substr(colon + 1)));
    at = comma + 1;
  }
  for (const auto& [aggregate, pos] : got) have[aggregate].push_back(pos);
  EXPECT_GT(got.size(), 20u);
  EXPECT_EQ(have, want) << "handed out " << got.size() << " events";
}

// read_range() is plpgsql: its plan is made in a relay's first calls, while the
// log may be empty, and kept for the session's life. read_keys() (version 5)
// once kept such a plan that read every event of each slot's partition at
// every call (docs/benchmarks.md). Counted in index entries read, not timed:
// with 20,000 events passed and 10 new, a read from the slots' lo_pos touches
// a few dozen entries of the (pos, slot) index, not 20,000.
TEST_F(LogStoreTest, AReadPlannedOnAnEmptyLogReadsOnlyTheNewEventsOnceItHoldsThousands) {
  PgConn c = Connect(url_);
  // The plan made on the empty log is kept: generic from the first call, and
  // no autoanalyze of the partitions to invalidate it while they fill.
  Exec(c.get(), "SET plan_cache_mode = force_generic_plan");
  for (int part = 0; part < 8; ++part)
    Exec(conn_.get(), "ALTER TABLE " + schema_ + ".log_" + std::to_string(part) +
                          " SET (autovacuum_enabled = false)");
  const std::string call =
      "SELECT count(*) FROM (SELECT array_agg(slot) AS slots, array_agg(token) AS "
      "tokens, "
      "array_agg(lo::text) AS los, array_agg(pg_current_snapshot()::text) AS his, "
      "array_agg(lo_pos) AS froms, array_agg(NULL::bigint) AS hi_pos FROM " +
      schema_ + ".slots) s CROSS JOIN LATERAL " + schema_ +
      ".read_range(s.slots, s.tokens, s.los, s.his, s.froms, s.hi_pos, '{}', '{}', '{}', "
      "'{}', "
      "20000, false, true)";
  for (int i = 0; i < 10; ++i) EXPECT_EQ(Exec(c.get(), call), "0");  // planned on the empty log
  EnqueueMany(20000, 1000);
  EXPECT_EQ(Exec(c.get(), call), "20000");
  Exec(conn_.get(),
       "UPDATE " + schema_ + ".slots SET lo = pg_current_snapshot(), lo_pos = " +
           "(SELECT last_value FROM " + schema_ + ".log_pos)");  // all passed
  for (int i = 0; i < 10; ++i) Enqueue(conn_.get(), "new-" + std::to_string(i));
  const std::string read_entries =
      "SELECT sum(idx_tup_read) FROM pg_stat_user_indexes WHERE schemaname = '" +
      schema_ + "' AND indexrelname LIKE 'log\\_%\\_pos\\_slot\\_idx'";
  Exec(c.get(), "SELECT pg_stat_force_next_flush()");
  const std::int64_t before = std::stoll(Exec(c.get(), read_entries));
  EXPECT_EQ(Exec(c.get(), call), "10");
  Exec(c.get(), "SELECT pg_stat_force_next_flush()");
  const std::int64_t read = std::stoll(Exec(c.get(), read_entries)) - before;
  EXPECT_GT(read, 0) << "the statistics were not flushed: the check proves nothing";
  EXPECT_LT(read, 500) << "index entries read for 10 new events among 20,000 passed";
}

TEST_F(LogStoreTest, RelaysSplitTheSlotsAndAStandbyTakesOverAnExpiredLease) {
  auto a = Open();
  auto b = Open();
  ClaimOptions o = Opts();
  o.lease = std::chrono::milliseconds(60'000);
  ASSERT_TRUE(a->Claim(o).ok());
  auto owners = [&] {
    return Exec(conn_.get(),
                "SELECT count(DISTINCT owner) || '/' || count(*) FILTER (WHERE owner IS "
                "NOT NULL) FROM " +
                    schema_ + ".slots");
  };
  EXPECT_EQ(owners(), "1/16");    // alone: every slot
  ASSERT_TRUE(b->Claim(o).ok());  // b is seen; a gives back what is over its share
  std::this_thread::sleep_for(
      std::chrono::milliseconds(1100));  // a looks at the share every second
  ASSERT_TRUE(a->Claim(o).ok());
  ASSERT_TRUE(b->Claim(o).ok());
  EXPECT_EQ(owners(), "2/16");
  EXPECT_EQ(Exec(conn_.get(), "SELECT max(n) FROM (SELECT count(*) AS n FROM " + schema_ +
                                  ".slots GROUP BY owner) c"),
            "8");
  // Every event still goes out exactly once across the two.
  EnqueueMany(200, 40);
  auto x = Drain(*a, o);
  auto y = Drain(*b, o);
  std::set<std::string> all(x.begin(), x.end());
  all.insert(y.begin(), y.end());
  EXPECT_EQ(all.size(), 200u);
  EXPECT_EQ(x.size() + y.size(), 200u);

  // a stops answering (its lease is not renewed): after the lease, a standby
  // takes its slots over, a restart counted on each, and a's late mark is refused.
  EnqueueMany(20, 20);
  ClaimOptions short_lease = o;
  short_lease.lease = std::chrono::milliseconds(200);
  std::this_thread::sleep_for(
      std::chrono::milliseconds(100));  // a renews at a third of the lease
  auto c1 = a->Claim(short_lease);      // renews a's slots with the short lease
  ASSERT_TRUE(c1.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  auto standby = Open();
  auto t0 = standby->Claim(o);  // its first page, read while taking the slots over
  ASSERT_TRUE(t0.ok());
  // The slots a's claim had events in were taken over with a restart counted.
  EXPECT_NE(
      Exec(conn_.get(), "SELECT count(*) FROM " + schema_ + ".slots WHERE restarts = 1"),
      "0");
  std::vector<std::string> taken;
  std::vector<Ticket> t0_tickets;
  for (const auto& e : t0->events)
    taken.push_back(e.event_id), t0_tickets.push_back(e.ticket);
  ASSERT_TRUE(standby->MarkSent(t0_tickets).ok());
  for (const auto& id : Drain(*standby, o)) taken.push_back(id);
  std::vector<Ticket> late;
  for (const auto& e : c1->events) late.push_back(e.ticket);
  ASSERT_FALSE(late.empty()) << "a's 8 slots got none of 20 aggregates";
  auto m = a->MarkSent(late);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->refused.size(), late.size());
  const std::set<std::string> taken_ids(taken.begin(), taken.end());
  for (const auto& e : c1->events) {
    EXPECT_TRUE(taken_ids.count(e.event_id)) << "the standby published " << e.event_id;
  }
}

TEST_F(LogStoreTest,
       ARelayThatDiesOnTheSameBatchIsSplitUntilTheKillerStandsAloneAndFails) {
  Shape(/*slots=*/1);
  EnqueueMany(8, 8);
  ClaimOptions o = Opts(8);
  o.lease = std::chrono::milliseconds(0);  // every claim's holder "dies" at once
  o.max_attempts = 2;
  o.failed_holds_aggregate = false;
  std::vector<std::unique_ptr<Store>> dead;  // never settle, never release
  std::vector<std::size_t> sizes;
  std::vector<std::int64_t> failed;
  for (int i = 0; i < 8 && failed.empty(); ++i) {
    dead.push_back(Open());
    auto c = dead.back()->Claim(o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    sizes.push_back(c->events.size());
    failed = c->expired_to_failed;
  }
  EXPECT_EQ(sizes, (std::vector<std::size_t>{8, 8, 4, 2, 1, 0}));
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(Exec(conn_.get(), "SELECT status FROM " + schema_ +
                                  ".outbox WHERE seq = " + std::to_string(failed[0])),
            "FAILED");
  // The others go out; the killer stays FAILED for an operator.
  auto s = Open();
  ClaimOptions ok = Opts(8);
  ok.max_attempts = 2;
  EXPECT_EQ(Drain(*s, ok).size(), 7u);
}

TEST_F(LogStoreTest, RotationTruncatesPassedPartitionsAndGivesTheDiskBack) {
  // An event that fails for good; operators must still see it once its
  // partition is gone.
  const std::string poison = Enqueue(conn_.get(), "poison");
  auto s = Open();
  ASSERT_NO_FATAL_FAILURE(FailTheNext(*s, "poison"));
  EnqueueMany(449, 30);
  ASSERT_EQ(Drain(*s).size(), 449u);
  auto size = [&] {
    return std::stoll(
        Exec(conn_.get(), "SELECT pg_relation_size('" + schema_ + ".log_0')"));
  };
  EXPECT_GT(size(), 0);
  // Retention 1 h: the current partition moves on after 10 minutes (a sixth of
  // it, the ring being 8), and goes an hour after it closed.
  AgeCurrent(9);
  EXPECT_EQ(Purge(*s, std::chrono::hours(1)), 0);
  EXPECT_EQ(Current(), "0");
  AgeCurrent(11);
  EXPECT_EQ(Purge(*s, std::chrono::hours(1)), 0);
  EXPECT_EQ(Current(), "1") << "moved on";
  EXPECT_GT(size(), 0) << "closed, but not an hour ago";
  EXPECT_EQ(Purge(*s, std::chrono::seconds(0)), 449) << "the FAILED one stays listed";
  EXPECT_EQ(size(), 0);  // the file went back to the operating system
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM " + schema_ + ".log"), "0");
  EXPECT_EQ(Exec(conn_.get(), "SELECT status FROM " + schema_ + ".outbox WHERE seq = 1"),
            "FAILED");
  auto found = s->Find(poison);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  ASSERT_EQ(found->size(), 1u);
  EXPECT_EQ((*found)[0].status, "FAILED");
  EXPECT_EQ((*found)[0].last_error, "poison");

  // A partition with an unsent event stays, whatever its age.
  EnqueueMany(100, 30);  // into partition 1
  EXPECT_EQ(Purge(*s, std::chrono::seconds(0)), 0);
  EXPECT_EQ(Current(), "2");
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM " + schema_ + ".log_1"), "100");
  EXPECT_EQ(Drain(*s).size(), 100u);
  EXPECT_EQ(Purge(*s, std::chrono::seconds(0)), 100);
  EXPECT_EQ(Current(), "2") << "an empty partition is not left for the next";
}

// The ring full (the retention outlasts it, or slots lag): the current
// partition stays and grows until the next one can be emptied; nothing is
// written into a partition that still holds events.
TEST_F(LogStoreTest, TheCurrentPartitionWaitsForAnEmptyOneWhenTheRingIsFull) {
  auto s = Open();
  for (int part = 0; part < 8; ++part) {
    EnqueueMany(5, 5);
    EXPECT_EQ(Purge(*s, std::chrono::seconds(0)), 0);  // nothing sent yet
  }
  EXPECT_EQ(Current(), "7") << "partition 0 still holds events";
  EnqueueMany(5, 5);
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM " + schema_ + ".log_7"), "10");
  EXPECT_EQ(Drain(*s).size(), 45u);
  EXPECT_EQ(Purge(*s, std::chrono::seconds(0)), 35);  // 0..6; 7 is current
  EXPECT_EQ(Current(), "7");
  EXPECT_EQ(Purge(*s, std::chrono::seconds(0)), 10);
  EXPECT_EQ(Current(), "0") << "round the ring";
}

// A partition's dedup keys go with it and no other's: across laps of the ring,
// and while another partition (not passed) keeps its events.
TEST_F(LogStoreTest, RotationForgetsOnlyThePartitionsOwnDedupKeysAcrossLapsOfTheRing) {
  EnqueueOptions eo;
  eo.schema = schema_;
  auto enqueue = [&](int i) {
    Event e;
    e.aggregate_type = "order";
    e.aggregate_id = "agg-" + std::to_string(i % 7);
    e.event_type = "OrderCreated";
    e.payload = "{}";
    e.dedup_key = "k" + std::to_string(i);
    Exec(conn_.get(), "BEGIN");
    auto r = outbox::Enqueue(conn_.get(), e, eo);
    Exec(conn_.get(), "COMMIT");
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() && r->enqueued;
  };
  auto s = Open();
  for (int lap = 0; lap < 9; ++lap) {  // partitions 0..7, then 0 again
    for (int i = 0; i < 10; ++i) ASSERT_TRUE(enqueue(lap * 10 + i));
    ASSERT_EQ(Drain(*s).size(), 10u);
    EXPECT_EQ(Purge(*s, std::chrono::seconds(0)), 10) << "lap " << lap;
  }
  EXPECT_EQ(Current(), "1");
  for (int i = 90; i < 100; ++i) ASSERT_TRUE(enqueue(i));  // partition 1, not sent
  for (int i = 100; i < 110; ++i) ASSERT_TRUE(enqueue(i));
  EXPECT_EQ(Purge(*s, std::chrono::seconds(0)), 0);
  EXPECT_EQ(Current(), "2");
  EXPECT_FALSE(enqueue(95)) << "a kept event's key was forgotten";
  EXPECT_FALSE(enqueue(109));
  EXPECT_TRUE(enqueue(85)) << "a rotated event's key is forgotten with it";
  EXPECT_TRUE(enqueue(5)) << "and one of the ring's first lap";
  EXPECT_EQ(
      Exec(conn_.get(), "SELECT count(*) FROM " + schema_ + ".dedup WHERE part = 1"),
      "20");
}

// A purge that cannot lock a partition in time (a producer holds it) fails,
// and leaves the store's session usable; the next purge does the work.
TEST_F(LogStoreTest, APurgeThatCannotLockItsPartitionFailsAndLeavesTheSessionUsable) {
  EnqueueMany(150, 10);
  auto s = Open();
  ASSERT_EQ(Drain(*s).size(), 150u);
  PgConn holder = Connect(url_);
  Exec(holder.get(), "BEGIN");
  Exec(holder.get(), "LOCK TABLE " + schema_ + ".log_0 IN ROW EXCLUSIVE MODE");
  auto blocked = s->PurgeSent(std::chrono::seconds(0), 1000);
  EXPECT_FALSE(blocked.ok());
  Exec(holder.get(), "ROLLBACK");
  auto stats = s->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(Current(), "1");
  EXPECT_EQ(Purge(*s, std::chrono::seconds(0)), 150);
}

// Two events of one aggregate become exceptions (the first failed, the second
// waits behind it); the first is handed out again and stays in flight (its
// claimer gave the page up). The second, due, must not go before it: an
// exception in flight holds its aggregate's later events as a waiting one
// does, until its lease ends.
TEST_F(LogStoreTest, AnExceptionStillInFlightHoldsItsAggregatesLaterExceptions) {
  Shape(/*slots=*/1);
  const std::string first = Enqueue(conn_.get(), "a");
  const std::string second = Enqueue(conn_.get(), "a");
  auto s = Open();
  auto page = s->Claim(Opts());
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->events.size(), 2u);
  std::vector<RescheduleItem> back(2);
  back[0].ticket = page->events[0].ticket;
  back[0].error = "broker said no";
  back[1].ticket = page->events[1].ticket;
  back[1].error = "held behind an earlier event of its aggregate";
  back[1].attempt_counts = false;
  auto r = s->Reschedule(back);
  ASSERT_TRUE(r.ok() && r->refused.empty()) << r.status().ToString();

  ClaimOptions one = Opts(/*batch=*/1);
  one.lease = std::chrono::milliseconds(60000);  // ends below, by hand: no race with time
  auto retry = s->Claim(one);
  ASSERT_TRUE(retry.ok()) << retry.status().ToString();
  ASSERT_EQ(retry->events.size(), 1u);
  EXPECT_EQ(retry->events[0].event_id, first);
  // Given up after a shorter lease than the one the first retry holds.
  ClaimOptions quick = Opts();
  quick.lease = std::chrono::milliseconds(50);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto next = s->Claim(quick);
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  for (const auto& e : next->events) {
    EXPECT_NE(e.event_id, second) << "handed out while the first retry is in flight";
  }
  // Once the first retry's lease ends, both go, in order (a lease ended by
  // another hand is seen at the store's next look for exceptions, within a second).
  Exec(conn_.get(), "UPDATE " + schema_ + ".exceptions SET lease_until = now() WHERE lease_until IS NOT NULL");
  ClaimOptions later = Opts();
  later.lease = std::chrono::milliseconds(5000);
  std::vector<std::string> drained;
  const auto start = std::chrono::steady_clock::now();
  while (drained.size() < 2 && std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
    for (const std::string& id : Drain(*s, later)) drained.push_back(id);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(drained, (std::vector<std::string>{first, second}));
}

// A settlement whose statement failed (the session was killed under it) is
// applied by the caller's retry, not refused: the relay retries a mark on a
// database error, and a refused one left an exception leased and unsettled.
TEST_F(LogStoreTest, ASettlementWhoseStatementFailedIsAppliedByItsRetry) {
  Shape(/*slots=*/1);
  const std::string id = Enqueue(conn_.get(), "a");
  auto s = Open();
  auto page = s->Claim(Opts());
  ASSERT_TRUE(page.ok() && page->events.size() == 1u);
  std::vector<RescheduleItem> back(1);
  back[0].ticket = page->events[0].ticket;
  back[0].error = "broker said no";
  auto r = s->Reschedule(back);
  ASSERT_TRUE(r.ok() && r->refused.empty());
  auto kill = [&] {
    Exec(conn_.get(),
         "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
         "WHERE application_name = 'outbox-store' AND pid <> pg_backend_pid() "
         "AND query LIKE '%" + schema_ + ".%'");
  };
  // An exception's settlement, then a log page's end.
  for (const char* what : {"exception", "log"}) {
    SCOPED_TRACE(what);
    if (std::string(what) == "log") Enqueue(conn_.get(), "b");
    auto c = s->Claim(Opts());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_EQ(c->events.size(), 1u);
    const Ticket t[] = {c->events[0].ticket};
    kill();
    auto failed = s->MarkSent(t);
    EXPECT_FALSE(failed.ok());
    auto again = s->MarkSent(t);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(again->applied, 1u) << "the retry was refused";
    EXPECT_TRUE(again->refused.empty());
  }
  EXPECT_EQ(Statuses(), "SENT,SENT");
  EXPECT_EQ(Exec(conn_.get(), "SELECT event_id FROM " + schema_ +
                                  ".outbox WHERE aggregate_id = 'a'"),
            id);
  EXPECT_TRUE(Drain(*s).empty());
}

// A settlement statement whose first run committed but whose reply was lost
// is run again by the relay's retry: the second run changes nothing (a
// non-counting retry gives its attempt back once) and reports the events as
// settled (a SENT one is not counted as refused by a fence).
TEST_F(LogStoreTest, AnExceptionSettlementRunTwiceChangesNothingMoreAndIsNotRefused) {
  Shape(/*slots=*/1);
  Enqueue(conn_.get(), "a");
  Enqueue(conn_.get(), "b");
  auto s = Open();
  auto page = s->Claim(Opts());
  ASSERT_TRUE(page.ok() && page->events.size() == 2u);
  std::vector<RescheduleItem> back(2);
  for (std::size_t i = 0; i < 2; ++i) {
    back[i].ticket = page->events[i].ticket;
    back[i].error = "broker said no";
  }
  auto r = s->Reschedule(back);  // both become RETRY copies, attempts 1
  ASSERT_TRUE(r.ok() && r->refused.empty());
  auto again = s->Claim(Opts());  // handed out from their copies: attempts 2
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  ASSERT_EQ(again->events.size(), 2u);
  const auto& a = again->events[0].ticket;
  const auto& b = again->events[1].ticket;
  const std::string settle =
      "[{\"pos\": " + std::to_string(a.seq) + ", \"token\": " + std::to_string(a.token) +
      ", \"outcome\": \"retry\", \"counts\": false, \"delay_ms\": 0, \"error\": \"outage\"}, "
      "{\"pos\": " + std::to_string(b.seq) + ", \"token\": " + std::to_string(b.token) +
      ", \"outcome\": \"sent\", \"counts\": true, \"delay_ms\": 0, \"error\": \"\"}]";
  const std::string statement = pg::SettleExceptionsStatement(schema_);
  auto run = [&] {
    const char* params[] = {settle.c_str()};
    PGresult* res = PQexecParams(conn_.get(), statement.c_str(), 1, nullptr, params, nullptr,
                                 nullptr, 0);
    std::set<std::string> settled;
    EXPECT_EQ(PQresultStatus(res), PGRES_TUPLES_OK) << PQresultErrorMessage(res);
    for (int i = 0; i < PQntuples(res); ++i) settled.insert(PQgetvalue(res, i, 0));
    PQclear(res);
    return settled;
  };
  const std::set<std::string> both = {std::to_string(a.seq), std::to_string(b.seq)};
  EXPECT_EQ(run(), both);
  const std::string state = "SELECT string_agg(status || '@' || attempts, ',' ORDER BY pos) FROM " +
                            schema_ + ".exceptions";
  EXPECT_EQ(Exec(conn_.get(), state), "RETRY@1,SENT@2");
  EXPECT_EQ(run(), both) << "the second run refused what the first settled";
  EXPECT_EQ(Exec(conn_.get(), state), "RETRY@1,SENT@2")
      << "the second run gave the non-counting attempt back again";
}

// A lowered slot count (issue 42): refused while an event is unpublished
// (nothing changes); once drained, the slots beyond it are retired (never
// leased, their rows and positions kept), an open exception moves to its
// aggregate's new slot, new events go to the slots left, and rotation still
// empties the partitions the retired slots' events were in.
TEST_F(LogStoreTest, ALoweredSlotCountRetiresSlotsWhoseEventsRotationStillPasses) {
  const PostgresStoreOptions db = Options();
  const std::string poison = Enqueue(conn_.get(), "poison");
  auto s = Open();
  ASSERT_NO_FATAL_FAILURE(FailTheNext(*s, "poison"));
  EnqueueMany(300, 30);
  auto early = SetPostgresLogSlots(db, 2, std::chrono::milliseconds(200));
  ASSERT_FALSE(early.ok());
  EXPECT_NE(early.status().message().find("300 events of schema " + schema_ + " are not published"),
            std::string::npos)
      << early.status().ToString();
  EXPECT_EQ(Exec(conn_.get(), "SELECT slots FROM " + schema_ + ".log_settings"), "16")
      << "refused: nothing changed";
  ASSERT_EQ(Drain(*s).size(), 300u);
  s.reset();  // a clean stop: its slots given back

  auto was = SetPostgresLogSlots(db, 2, std::chrono::seconds(5));
  ASSERT_TRUE(was.ok()) << was.status().ToString();
  EXPECT_EQ(*was, 16);
  EXPECT_EQ(Exec(conn_.get(), "SELECT string_agg(slot::text, ',' ORDER BY slot) FROM " + schema_ +
                                  ".slots WHERE expires_at = 'infinity' AND owner IS NULL"),
            "2,3,4,5,6,7,8,9,10,11,12,13,14,15")
      << "the slots beyond the count are retired, their rows kept";
  EXPECT_EQ(Exec(conn_.get(), "SELECT slot = " + schema_ + ".slot_of('order', 'poison', 2) AND slot <> " +
                                  schema_ + ".slot_of('order', 'poison', 16) FROM " + schema_ +
                                  ".exceptions"),
            "t")
      << "the FAILED exception moved to its aggregate's new slot (another than its old one)";
  auto listed = ReadPostgresLogSlots(db);
  ASSERT_TRUE(listed.ok()) << listed.status().ToString();
  EXPECT_EQ(listed->count, 2);
  EXPECT_EQ(listed->slots.size(), 16u);
  EXPECT_TRUE(listed->slots[5].retired);

  s = Open();
  EnqueueMany(100, 30);
  EXPECT_EQ(Drain(*s).size(), 100u);
  EXPECT_EQ(Exec(conn_.get(), "SELECT string_agg(slot::text, ',' ORDER BY slot) FROM " + schema_ +
                                  ".slots WHERE owner IS NOT NULL"),
            "0,1")
      << "only the slots within the count are leased";
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM " + schema_ + ".log WHERE slot >= 2 AND pos > " +
                                  "(SELECT max(pos) - 100 FROM " + schema_ + ".log)"),
            "0")
      << "new events go to the slots left";
  // Retention 1 h: the partition moves on after 10 minutes and goes an hour
  // after it closed, the retired slots' events with it.
  AgeCurrent(11);
  EXPECT_EQ(Purge(*s, std::chrono::hours(1)), 0);
  EXPECT_EQ(Current(), "1");
  EXPECT_EQ(Purge(*s, std::chrono::seconds(0)), 400) << "the FAILED one stays listed";
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM " + schema_ + ".log"), "0");
  EXPECT_EQ(Exec(conn_.get(), "SELECT status FROM " + schema_ + ".outbox"), "FAILED");

  auto same = SetPostgresLogSlots(db, 2, std::chrono::seconds(5));
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(*same, 2) << "the same count: nothing to do";
  EXPECT_EQ(SetPostgresLogSlots(db, 0, std::chrono::seconds(1)).status().code(),
            Code::kInvalidArgument);
}

// One position per reader (the log set's version 3): a page that covers
// every slot writes one row, its reader's progress, and no slot's row; the
// positions view shows the new positions (the events read SENT), and a clean
// stop folds them into the slots' rows, which the next reader starts from.
TEST_F(LogStoreTest, APageEndWritesOneReaderRowWhateverTheSlotsItCovers) {
  EnqueueMany(200, 200);  // 200 aggregates: every one of the 16 slots has events
  auto s = Open();
  auto page = s->Claim(Opts());
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->events.size(), 200u);
  ASSERT_EQ(Exec(conn_.get(), "SELECT count(DISTINCT slot) FROM " + schema_ + ".log"), "16");
  const std::string slot_rows = "SELECT string_agg(ctid::text, ',' ORDER BY slot) FROM " + schema_ + ".slots";
  const std::string reader_row = "SELECT ctid::text FROM " + schema_ + ".readers";
  const std::string slots_before = Exec(conn_.get(), slot_rows);
  const std::string reader_before = Exec(conn_.get(), reader_row);
  std::vector<Ticket> tickets;
  for (const auto& e : page->events) tickets.push_back(e.ticket);
  auto sent = s->MarkSent(tickets);
  ASSERT_TRUE(sent.ok() && sent->applied == 200u) << sent.status().ToString();
  EXPECT_EQ(Exec(conn_.get(), slot_rows), slots_before) << "no slot row was written";
  EXPECT_NE(Exec(conn_.get(), reader_row), reader_before) << "the reader's row was";
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM " + schema_ + ".outbox WHERE status = 'SENT'"), "200");
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM " + schema_ + ".readers, jsonb_object_keys(progress)"), "16");
  s.reset();  // a clean stop: the positions folded into the slots' rows
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM " + schema_ + ".readers"), "0");
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM " + schema_ + ".outbox WHERE status = 'SENT'"), "200");
  auto next = Open();
  EXPECT_TRUE(Drain(*next).empty()) << "the next reader starts where the first stopped";
}

// Page ends within log_position_every of the last write keep their positions
// in the store (its claims read them from there): the reader's row is not
// rewritten, others see the events sent once the store writes them — before
// its own stats, at a claim that finds nothing, at the first claim after the
// interval, at a clean stop — and a holder killed before writing has exactly
// those events published again by its taker (at least once), never the ones
// written before.
TEST_F(LogStoreTest, PageEndsWithinTheWriteIntervalAreWrittenOnceAndAKilledHolderRepublishesThemOnly) {
  ClaimOptions o = Opts();
  o.lease = std::chrono::milliseconds(120'000);  // renewed every 12 s: no renewal writes here
  const std::string sent = "SELECT count(*) FROM " + schema_ + ".outbox WHERE status = 'SENT'";
  auto round = [&](Store& store) {
    EnqueueMany(10, 10);
    auto c = store.Claim(o);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ASSERT_EQ(c->events.size(), 10u);
    std::vector<Ticket> t;
    for (const auto& e : c->events) t.push_back(e.ticket);
    auto m = store.MarkSent(t);
    ASSERT_TRUE(m.ok() && m->applied == t.size() && m->refused.empty());
  };
  PostgresStoreOptions long_every = Options();
  long_every.log_position_every = std::chrono::milliseconds(20'000);
  auto s = Open(long_every);
  round(*s);  // a store's first page end writes
  ASSERT_EQ(Exec(conn_.get(), sent), "10");
  const std::string reader_row = "SELECT ctid::text FROM " + schema_ + ".readers";
  const std::string written = Exec(conn_.get(), reader_row);
  round(*s);
  round(*s);
  EXPECT_EQ(Exec(conn_.get(), reader_row), written) << "two page ends deferred: no write";
  EXPECT_EQ(Exec(conn_.get(), sent), "10") << "others see the deferred events unsent";
  auto stats = s->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->pending, 0) << "the store writes before it reads positions";
  EXPECT_EQ(Exec(conn_.get(), sent), "30");
  round(*s);
  EXPECT_EQ(Exec(conn_.get(), sent), "30");
  auto idle = s->Claim(o);
  ASSERT_TRUE(idle.ok() && idle->events.empty());
  EXPECT_EQ(Exec(conn_.get(), sent), "40") << "a claim that finds nothing writes";
  round(*s);
  EXPECT_EQ(Exec(conn_.get(), sent), "40");
  s.reset();
  EXPECT_EQ(Exec(conn_.get(), sent), "50") << "a clean stop writes, then gives the slots back";

  PostgresStoreOptions short_every = Options();
  short_every.log_position_every = std::chrono::milliseconds(300);
  auto p = Open(short_every);
  round(*p);
  round(*p);
  ASSERT_EQ(Exec(conn_.get(), sent), "60") << "the second page end deferred";
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  round(*p);  // its claim writes the deferred page first; its own end is deferred
  EXPECT_EQ(Exec(conn_.get(), sent), "70") << "the claim after the interval wrote";

  // p is killed: never destroyed, its lease runs out.
  const std::string last10 = "SELECT string_agg(event_id::text, ',' ORDER BY pos) FROM (SELECT * FROM " +
                             schema_ + ".log ORDER BY pos DESC LIMIT 10) l";
  const std::string deferred = Exec(conn_.get(), last10);
  Exec(conn_.get(), "UPDATE " + schema_ + ".slots SET expires_at = now() - interval '1 second'");
  Exec(conn_.get(), "UPDATE " + schema_ + ".readers SET expires_at = now() - interval '1 second'");
  auto taker = Open();
  std::vector<std::string> again = Drain(*taker, o);
  std::string joined;
  for (const auto& id : again) joined += (joined.empty() ? "" : ",") + id;
  EXPECT_EQ(joined, deferred) << "exactly the deferred page again, in order";
  p.reset();  // its write at the end is refused by the slots' new tokens
  EXPECT_EQ(Exec(conn_.get(), sent), "80");
  EXPECT_TRUE(Drain(*taker, o).empty());
}

// A slot counting restarts (its holder died) writes at every page end: the
// crash-loop check reads where the dead holder's pages ended, so a deferred
// end would let it take an event already published for the killer.
TEST_F(LogStoreTest, ASlotInACrashLoopWritesEveryPageEnd) {
  Shape(/*slots=*/1);
  EnqueueMany(16, 16);
  ClaimOptions dies = Opts(8);
  dies.lease = std::chrono::milliseconds(0);  // its holder "dies" at once
  dies.max_attempts = 1;
  auto dead = Open();
  auto c = dead->Claim(dies);
  ASSERT_TRUE(c.ok() && c->events.size() == 8u);
  PostgresStoreOptions long_every = Options();
  long_every.log_position_every = std::chrono::milliseconds(20'000);
  auto s = Open(long_every);
  ClaimOptions o = dies;
  o.lease = std::chrono::milliseconds(120'000);
  const std::string sent = "SELECT count(*) FROM " + schema_ + ".outbox WHERE status = 'SENT'";
  long marked = 0;
  for (int page = 0; page < 3; ++page) {
    auto p = s->Claim(o);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    ASSERT_EQ(p->events.size(), 4u) << "read in halves after the restart";
    std::vector<Ticket> t;
    for (const auto& e : p->events) t.push_back(e.ticket);
    ASSERT_TRUE(s->MarkSent(t).ok());
    marked += 4;
    EXPECT_EQ(Exec(conn_.get(), sent), std::to_string(marked)) << "page " << page << " written";
  }
}

TEST(ExceptionLook, LooksAtOnceWhenToldWhenARetryComesDueAndOtherwiseEverySecond) {
  using namespace std::chrono_literals;
  pg::log::ExceptionLook look;
  const auto t0 = std::chrono::steady_clock::time_point{} + 100s;
  EXPECT_TRUE(look.Due(t0)) << "a new store looks at its first claim";
  look.Looked(t0, /*found=*/true);
  EXPECT_TRUE(look.Due(t0 + 1ms)) << "it found some: more may be due";
  look.Looked(t0 + 1ms, false);
  EXPECT_FALSE(look.Due(t0 + 2ms));
  EXPECT_FALSE(look.Due(t0 + 1000ms));
  EXPECT_TRUE(look.Due(t0 + 1001ms)) << "every second, for what others did";
  look.Looked(t0 + 1001ms, false);
  look.RetryAt(t0 + 1300ms);
  look.RetryAt(t0 + 1200ms);
  EXPECT_FALSE(look.Due(t0 + 1199ms));
  EXPECT_TRUE(look.Due(t0 + 1200ms)) << "a retry it wrote, when due";
  look.Looked(t0 + 1200ms, false);
  EXPECT_FALSE(look.Due(t0 + 1299ms));
  EXPECT_TRUE(look.Due(t0 + 1300ms)) << "the later retry too";
  look.Looked(t0 + 1300ms, false);
  EXPECT_FALSE(look.Due(t0 + 1301ms));
  look.AtOnce();
  EXPECT_TRUE(look.Due(t0 + 1301ms)) << "a slot taken, a follower released, a replay";
}

// A claim looks for due exceptions only when one can be due (the rounds of a
// steady load with none are one statement shorter): an exception made due by
// another process is not seen at once, but at the next look, at most a second
// after the last; a retry the store wrote is handed out when due.
TEST_F(LogStoreTest, AClaimLooksForExceptionsOnlyWhenOneCanBeDue) {
  auto s = Open();
  Enqueue(conn_.get(), "poison");
  ASSERT_NO_FATAL_FAILURE(FailTheNext(*s, "poison"));  // a FAILED copy: the next claim looks
  const auto looked_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(Drain(*s).empty());  // it looks and finds nothing due
  auto ctl = Open();  // an operator's outboxctl
  ReplaySelection sel;
  sel.aggregate_id = "poison";
  auto replayed = ctl->ReplayFailed(sel);
  ASSERT_TRUE(replayed.ok() && replayed->replayed == 1) << replayed.status().ToString();
  auto at_once = s->Claim(Opts());
  ASSERT_TRUE(at_once.ok()) << at_once.status().ToString();
  if (std::chrono::steady_clock::now() - looked_at < std::chrono::milliseconds(900)) {
    EXPECT_TRUE(at_once->events.empty()) << "the claim looked again within the second";
  }  // else the machine stalled for a second: the look was due, nothing to check
  std::vector<std::string> got;
  for (const auto& e : at_once->events) got.push_back(e.event_id);
  if (!got.empty()) {
    ASSERT_TRUE(s->MarkSent(std::vector<Ticket>{at_once->events[0].ticket}).ok());
  }
  while (got.empty() && std::chrono::steady_clock::now() - looked_at < std::chrono::seconds(10)) {
    got = Drain(*s);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(got.size(), 1u) << "the replayed event, at the next look";
  EXPECT_LT(std::chrono::steady_clock::now() - looked_at, std::chrono::seconds(5))
      << "seen at a look, a second at most after the last (5 s: a slow machine's margin)";

  // A retry it wrote, due in 600 ms: handed out by the first claim after that.
  EnqueueMany(1, 1);
  auto c = s->Claim(Opts());
  ASSERT_TRUE(c.ok() && c->events.size() == 1u);
  RescheduleItem back{c->events[0].ticket, std::chrono::milliseconds(600), "later"};
  const auto rescheduled_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(s->Reschedule(std::span(&back, 1)).ok());
  const bool none = Drain(*s).empty();
  if (std::chrono::steady_clock::now() - rescheduled_at >= std::chrono::milliseconds(500)) {
    return;  // the machine stalled near the delay: nothing left to check
  }
  EXPECT_TRUE(none) << "not due yet";
  std::this_thread::sleep_for(std::chrono::milliseconds(650));
  auto retry = s->Claim(Opts());
  ASSERT_TRUE(retry.ok() && retry->events.size() == 1u) << "the retry, when due";
  ASSERT_TRUE(s->MarkSent(std::vector<Ticket>{retry->events[0].ticket}).ok());
}

// A REPEATABLE READ producer whose snapshot predates a slot-count change
// would read the old count (log migration 4): its enqueue() fails to
// serialize (40001) instead of writing into a slot the change retired or
// moved its aggregate from, and its retry writes with the new count.
TEST_F(LogStoreTest, ARepeatableReadProducerOlderThanASlotCountChangeFailsToSerialize) {
  const PostgresStoreOptions db = Options();
  PgConn rr = Connect(url_);
  Exec(rr.get(), "BEGIN ISOLATION LEVEL REPEATABLE READ");
  Exec(rr.get(), "SELECT 1");  // its snapshot
  auto was = SetPostgresLogSlots(db, 2, std::chrono::seconds(5));
  ASSERT_TRUE(was.ok()) << was.status().ToString();
  const std::string enqueue =
      "SELECT event_id FROM " + schema_ + ".enqueue('order', 'poison', 'E', 'x'::bytea)";
  PGresult* r = PQexec(rr.get(), enqueue.c_str());
  const char* state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
  EXPECT_EQ(std::string(state ? state : ""), "40001") << PQresultErrorMessage(r);
  PQclear(r);
  Exec(rr.get(), "ROLLBACK");
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM " + schema_ + ".log"), "0");
  Exec(rr.get(), "BEGIN ISOLATION LEVEL REPEATABLE READ");
  Exec(rr.get(), enqueue);
  Exec(rr.get(), "COMMIT");
  EXPECT_EQ(Exec(conn_.get(), "SELECT slot = " + schema_ + ".slot_of('order', 'poison', 2) AND slot <> " +
                                  schema_ + ".slot_of('order', 'poison', 16) FROM " + schema_ + ".log"),
            "t")
      << "the retry wrote with the new count";
}

// A holder that stopped without giving its slots back (killed): once its
// lease ran out a taker folds the holder's progress into the slots' rows, so
// it starts where the holder stopped — nothing published again, no restart
// counted (the holder had passed everything it read).
TEST_F(LogStoreTest, ATakerOfAnExpiredLeaseStartsFromTheHoldersProgress) {
  EnqueueMany(200, 200);
  auto holder = Open();
  ClaimOptions o = Opts();
  o.lease = std::chrono::milliseconds(60'000);
  ASSERT_EQ(Drain(*holder, o).size(), 200u);
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM " + schema_ + ".slots s WHERE s.lo::text <> "
                              "(SELECT p.lo::text FROM " + schema_ + ".positions p WHERE p.slot = s.slot)"),
            "16")
      << "the positions are in the holder's progress, not yet in the slots' rows";
  // The holder is killed: its store is never destroyed, its lease runs out.
  Exec(conn_.get(), "UPDATE " + schema_ + ".slots SET expires_at = now() - interval '1 second'");
  Exec(conn_.get(), "UPDATE " + schema_ + ".readers SET expires_at = now() - interval '1 second'");
  auto taker = Open();
  EXPECT_TRUE(Drain(*taker, o).empty()) << "the taker published again what the holder had";
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM " + schema_ + ".slots WHERE owner LIKE 'relay-test/%' "
                              "AND restarts = 0"),
            "16")
      << "every slot taken over, none counted as a crash";
  EnqueueMany(50, 50);
  EXPECT_EQ(Drain(*taker, o).size(), 50u);
  holder.reset();  // its slots went to the taker: its release changes nothing
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(*) FROM " + schema_ + ".slots WHERE owner LIKE 'relay-test/%'"),
            "16");
}

// A claim reads a range's keys and its first page in one statement; the keys
// it passes over (an event skipped before it was read) come back without an
// event. Such a key neither fills the page nor stops it: the bytes bound lets a
// page's first event through whatever its size, and the first here is the
// second key's. The range's later pages are read by key.
TEST_F(LogStoreTest, AFirstPageReadWithItsKeysHandsOutTheEventsAfterOnePassedOver) {
  Shape(1);
  const std::string skipped = Enqueue(conn_.get(), "a");
  const std::string second = Enqueue(conn_.get(), "b");
  const std::string third = Enqueue(conn_.get(), "c");
  auto s = Open();
  auto sk = s->Skip({skipped, "test", "before it was read", false});
  ASSERT_TRUE(sk.ok()) << sk.status().ToString();
  ASSERT_EQ(sk->skipped, 1);
  ClaimOptions o = Opts();
  o.batch_bytes = 1;  // one event a page
  auto c = s->Claim(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->events.size(), 1u) << "the passed-over key stopped the page";
  EXPECT_EQ(c->events[0].event_id, second);
  ASSERT_TRUE(s->MarkSent(std::vector<Ticket>{c->events[0].ticket}).ok());
  EXPECT_EQ(Drain(*s, o), std::vector<std::string>{third});  // by key, from the keys read
  EXPECT_EQ(Statuses(), "SKIPPED,SENT,SENT");
}

// The log writes nothing per claim, so a skip cannot see whether a relay's page
// holds an event: an event with no exception in a slot a live relay leases
// counts as PROCESSING (as a claimed row does) and is not skipped — also one
// behind a retry of its aggregate, which a relay with relay.ordered off hands
// out. Once a read holds it (a HELD copy), and in a slot nobody leases, it is
// skipped.
TEST_F(LogStoreTest, ASkipOfAnEventARelayMayBePublishingIsRefusedAsProcessing) {
  auto holder = Open();
  auto other = Open();
  ClaimOptions o = Opts(1);
  o.lease = std::chrono::milliseconds(60'000);
  const std::string a1 = Enqueue(conn_.get(), "a");
  auto c = holder->Claim(o);
  ASSERT_TRUE(c.ok() && c->events.size() == 1u);
  ASSERT_EQ(c->events[0].event_id, a1);  // in flight
  auto in_flight = other->Skip({a1, "test", "in flight", false});
  ASSERT_TRUE(in_flight.ok()) << in_flight.status().ToString();
  EXPECT_EQ(in_flight->was, "PROCESSING");
  EXPECT_EQ(in_flight->skipped, 0);
  ASSERT_TRUE(holder->MarkSent(std::vector<Ticket>{c->events[0].ticket}).ok());
  EXPECT_EQ(Exec(conn_.get(), "SELECT status FROM " + schema_ + ".outbox WHERE event_id = '" + a1 + "'"),
            "SENT")
      << "published and acked: the skip changed nothing";

  // b2 behind b1's retry: PROCESSING until a read holds it.
  const std::string b1 = Enqueue(conn_.get(), "b");
  const std::string b2 = Enqueue(conn_.get(), "b");
  std::string retried;
  ASSERT_NO_FATAL_FAILURE(
      RetryTheNext(*holder, std::chrono::milliseconds(60'000), &retried, o));
  ASSERT_EQ(retried, b1);
  auto unread = other->Skip({b2, "test", "not read yet", false});
  ASSERT_TRUE(unread.ok()) << unread.status().ToString();
  EXPECT_EQ(unread->was, "PROCESSING");
  EXPECT_EQ(unread->skipped, 0);
  auto hold = holder->Claim(o);  // reads b2 and holds it: a HELD copy
  ASSERT_TRUE(hold.ok() && hold->events.empty());
  auto held = other->Skip({b2, "test", "held", false});
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  EXPECT_EQ(held->was, "PENDING");
  EXPECT_EQ(held->skipped, 1);

  // No live lease: the holder stopped and gave its slots back.
  holder.reset();
  const std::string d1 = Enqueue(conn_.get(), "d");
  auto free = other->Skip({d1, "test", "no relay", false});
  ASSERT_TRUE(free.ok()) << free.status().ToString();
  EXPECT_EQ(free->was, "PENDING");
  EXPECT_EQ(free->skipped, 1);
  EXPECT_EQ(Statuses(), "SENT,PENDING,SKIPPED,SKIPPED");
}

// A reader is named by the relay id, the pid, a sequence and a random nonce
// drawn for each store: two relays given the same `relay.id` in containers
// where both are pid 1 (and so the same sequence too) must still be two
// readers — one name would make each take the other's slots for its own.
TEST_F(LogStoreTest, ReadersOfTheSameRelayIdCarryDifferentNonces) {
  auto a = Open();
  auto b = Open();
  ClaimOptions o = Opts();
  o.owner = "twin";
  ASSERT_TRUE(a->Claim(o).ok());
  ASSERT_TRUE(b->Claim(o).ok());
  const std::string nonce = "split_part(split_part(reader, '/', 2), '.', 3)";
  EXPECT_EQ(Exec(conn_.get(), "SELECT count(DISTINCT " + nonce + ") || '/' || count(*) FILTER (WHERE " +
                                  nonce + " ~ '^[0-9a-f]{8}$') FROM " + schema_ +
                                  ".readers WHERE reader LIKE 'twin/%'"),
            "2/2");
}

// The gauges count a retried event claimed again (its exception under a lease)
// as processing, as the view shows it, not as pending; a page of the log's own
// events stays pending (nothing is written per claim).
TEST_F(LogStoreTest, StatsCountAnExceptionInFlightAsProcessing) {
  Shape(/*slots=*/1);
  Enqueue(conn_.get(), "a");
  Enqueue(conn_.get(), "b");
  auto s = Open();
  std::string retried;
  ASSERT_NO_FATAL_FAILURE(RetryTheNext(*s, std::chrono::milliseconds(0), &retried));
  auto again = s->Claim(Opts(1));  // the retry, due at once, under a lease
  ASSERT_TRUE(again.ok() && again->events.size() == 1u);
  ASSERT_EQ(again->events[0].event_id, retried);
  auto other = Open();
  auto st = other->Stats();
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->processing, 1);
  EXPECT_EQ(st->pending, 1);  // b
  EXPECT_EQ(Statuses(), "PROCESSING,PENDING");
  ASSERT_TRUE(s->MarkSent(std::vector<Ticket>{again->events[0].ticket}).ok());
  st = other->Stats();
  ASSERT_TRUE(st.ok());
  EXPECT_EQ(st->processing, 0);
  EXPECT_EQ(st->pending, 1);
}

}  // namespace
}  // namespace outbox::testing
