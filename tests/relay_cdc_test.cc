// outbox-relay with relay.source = cdc as a real process: the change stream
// over PostgreSQL logical replication (real server, real slot), the sweeper,
// and the crash matrix rows of the stream (real kills).
#include <random>

#include "core/fault.h"
#include "relay_fixture.h"

namespace outbox::testing {
namespace {

class RelayCdcTest : public RelayE2ETest {
 protected:
  void LongProducerTransactionIsStreamedNotSwept(int depth);
  std::string Slot() const { return DefaultStreamName(schema_); }
  std::string SlotLsn() {
    return Exec(admin_.get(), "SELECT coalesce(confirmed_flush_lsn::text, '') FROM "
                              "pg_replication_slots WHERE slot_name = '" + Slot() + "'");
  }
  // Per key, the first copies of the payloads "key#n[#...]" arrive in order
  // n = 0, 1, ... (later copies are duplicates the inbox absorbs); returns the
  // count of first copies per key.
  static std::map<std::string, int> FirstCopiesInOrder(const std::vector<Message>& msgs) {
    std::map<std::string, int> next;
    std::set<std::string> ids;
    for (const auto& m : msgs) {
      const auto h1 = m.value.find('#');
      if (h1 == std::string::npos || m.value.compare(0, h1, m.key) != 0) {
        ADD_FAILURE() << "unexpected message " << m.key << " " << m.value.substr(0, 40);
        continue;
      }
      const int n = std::atoi(m.value.c_str() + h1 + 1);
      int& want = next[m.key];
      if (n < want) continue;
      EXPECT_EQ(n, want) << "aggregate " << m.key << ": event " << n << " before " << want;
      want = n + 1;
      ids.insert(m.headers.count("outbox-event-id") ? m.headers.at("outbox-event-id") : "");
    }
    std::size_t firsts = 0;
    for (const auto& [k, n] : next) firsts += static_cast<std::size_t>(n);
    EXPECT_EQ(ids.size(), firsts) << "one event id per event";
    return next;
  }

  // Rows the stream published carry no claim: lease_token stays NULL.
  std::int64_t CountClaimed() {
    return std::stoll(Exec(admin_.get(), "SELECT count(*) FROM " + schema_ +
                                             ".outbox WHERE lease_token IS NOT NULL"));
  }
};

TEST_F(RelayCdcTest, StreamsEverythingInOrderWithTheSameIdsKeysAndHeadersAndClaimsNothing) {
  // Rows wait parked while an earlier row of their aggregate is in flight (up
  // to cdc.batches_in_flight publishes at once); on a loaded machine that can
  // pass the other tests' 500 ms sweep_after, and the sweeper would rightly
  // take them. The default is 5 s; 3 s keeps this test about the stream.
  Subprocess& relay = StartRelay(CdcSets({"cdc.sweep_after_ms=3000"}));
  const int port = HttpPort(relay);
  ASSERT_TRUE(WaitForLog(relay, "streaming")) << relay.Log();
  const std::string lsn_before = SlotLsn();
  constexpr int kProducers = 4, kAggs = 25, kPer = 20;  // 2,000 events, 50 per transaction
  EnqueueMany(kProducers, kAggs, kPer);
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == kProducers * kAggs * kPer; }, 60s))
      << relay.Log();
  auto msgs = ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, kProducers * kAggs * kPer,
                        Scaled(30s));
  EXPECT_EQ(CheckDelivered(msgs, kProducers, kAggs, kPer), 0u) << "no fault, so no duplicates";
  EXPECT_EQ(CountClaimed(), 0) << "the stream publishes without claiming";
  const std::string m = Get(port, "/metrics");
  EXPECT_EQ(Metric(m, "outbox_cdc_events_decoded_total"), kProducers * kAggs * kPer);
  EXPECT_EQ(Metric(m, "outbox_relay_events_published_total"), kProducers * kAggs * kPer);
  EXPECT_EQ(Metric(m, "outbox_relay_claims_total"), 0) << "nothing was left to the sweeper";
  EXPECT_EQ(Metric(m, "outbox_cdc_streaming"), 1);
  EXPECT_GT(Metric(m, "outbox_relay_commit_to_ack_seconds_count"), 0);
  // The slot moves once the outcomes are recorded.
  EXPECT_TRUE(WaitFor([&] { return SlotLsn() != lsn_before; }, 10s));
  EXPECT_TRUE(WaitFor([&] {
    return Exec(admin_.get(), "SELECT count(*) FROM " + schema_ + ".stream_progress WHERE slot = '" +
                                  Slot() + "' AND reader = 'relay-0'") == "1";
  }, 10s));
  int status = 0;
  const std::string ready = WaitReady(port, &status);
  EXPECT_EQ(status, 200) << ready;
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0) << relay.Log();
}

// A row's created_at is its transaction's start. A producer transaction open
// far longer than cdc.sweep_after_ms commits rows older than the stream's
// settled point; the stream has not read them yet, so the sweeper must not
// take them (before migration 6 it did: one extra copy each, seen in a TSan CI
// run). The stream is slowed after each publish, which leaves a sweeper a
// whole second to take rows the stream has published but not marked.
// `depth`: cdc.batches_in_flight. With 4, the long transaction's first rows
// can be in flight when the rest are checked: those are parked behind them,
// and neither the slot nor the sweepers' horizon may pass them meanwhile.
void RelayCdcTest::LongProducerTransactionIsStreamedNotSwept(int depth) {
  OUTBOX_REQUIRE_FAULT_POINTS();
  Subprocess& relay =
      StartRelay(CdcSets({"cdc.stream_stale_after_ms=30000",
                          "cdc.batches_in_flight=" + std::to_string(depth)}),
                 {{"OUTBOX_FAULTS", std::string(fault::kStreamAfterPublish) + "=delay:1000"}});
  ASSERT_TRUE(WaitForLog(relay, "streaming")) << relay.Log();
  PgConn long_tx = Connect(url_);
  EnqueueOptions eo;
  eo.schema = schema_;
  std::vector<Event> events;
  constexpr int kLong = 20;
  for (int n = 0; n < kLong; ++n) events.push_back(OrderEvent("long", "long#" + std::to_string(n)));
  Exec(long_tx.get(), "BEGIN");
  ASSERT_TRUE(EnqueueBatch(long_tx.get(), events, eo).ok());
  // Other transactions commit meanwhile, moving the settled point well past
  // the long transaction's start (4x the 500 ms margin).
  int ticks = 0;
  const auto tick_for = [&](std::chrono::milliseconds d) {
    const auto end = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < end) {
      ASSERT_TRUE(EnqueueOne("tick-" + std::to_string(ticks), "tick-" + std::to_string(ticks) + "#0"));
      ++ticks;
      std::this_thread::sleep_for(100ms);
    }
  };
  tick_for(2000ms);
  ASSERT_TRUE(WaitFor([&] {
    return Exec(admin_.get(), "SELECT count(*) FROM " + schema_ +
                                  ".stream_progress WHERE covered_until > (SELECT min(created_at) "
                                  "FROM " + schema_ + ".outbox) + interval '1 second'") == "1";
  }, 20s)) << "the stream settled well past the long transaction's start\n" << relay.Log();
  Exec(long_tx.get(), "COMMIT");
  tick_for(1500ms);
  const int total = kLong + ticks;
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == total; }, 60s)) << relay.Log();
  auto msgs = ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, static_cast<std::size_t>(total),
                        Scaled(30s), 2s);
  std::map<std::string, int> copies;
  for (const auto& m : msgs) ++copies[m.value];
  for (int n = 0; n < kLong; ++n) {
    EXPECT_EQ(copies["long#" + std::to_string(n)], 1) << "long#" << n;
  }
  // (A tick the slowed stream parked past sweep_after is the sweeper's by
  // design; the long transaction's rows never are.)
  EXPECT_EQ(Exec(admin_.get(), "SELECT count(*) FROM " + schema_ +
                                   ".outbox WHERE aggregate_id = 'long' AND lease_token IS NOT NULL"),
            "0")
      << "the sweeper took rows the stream had not passed";
}

TEST_F(RelayCdcTest, ALongProducerTransactionIsStreamedNotSwept) {
  LongProducerTransactionIsStreamedNotSwept(1);
}

TEST_F(RelayCdcTest, ALongProducerTransactionIsStreamedNotSweptWithFourBatchesInFlight) {
  LongProducerTransactionIsStreamedNotSwept(4);
}

TEST_F(RelayCdcTest, RowsCommittedBeforeTheSlotExistedAreSweptInOrder) {
  constexpr int kProducers = 2, kAggs = 10, kPer = 25;  // 500 events before any slot
  EnqueueMany(kProducers, kAggs, kPer);
  Subprocess& relay = StartRelay(CdcSets());
  ASSERT_TRUE(WaitForLog(relay, "created the replication slot")) << relay.Log();
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == kProducers * kAggs * kPer; }, 60s))
      << relay.Log();
  auto msgs = ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, kProducers * kAggs * kPer,
                        Scaled(30s));
  CheckDelivered(msgs, kProducers, kAggs, kPer);
  EXPECT_EQ(CountClaimed(), kProducers * kAggs * kPer) << "the sweeper claimed them";
}

TEST_F(RelayCdcTest, StandbyTakesTheSlotOverWithinSecondsOfASigkill) {
  Subprocess& a = StartRelay(CdcSets({"relay.id=relay-A"}));
  ASSERT_TRUE(WaitForLog(a, "streaming")) << a.Log();
  Subprocess& b = StartRelay(CdcSets({"relay.id=relay-B"}));
  ASSERT_TRUE(WaitForLog(b, "standing by")) << b.Log();
  EnqueueMany(2, 10, 10);  // 200 events, streamed by A
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 200; }, 30s)) << a.Log();
  a.Signal(SIGKILL);
  a.Wait(Scaled(10s));
  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitFor([&] {
    return b.Log().find("info streaming") != std::string::npos;
  }, 20s)) << b.Log();
  const auto took = std::chrono::steady_clock::now() - killed_at;
  EXPECT_LT(took, Scaled(10s)) << "takeover must take seconds, not minutes";
  std::cerr << "takeover after SIGKILL: "
            << std::chrono::duration_cast<std::chrono::milliseconds>(took).count() << " ms\n";
  // Events after the takeover flow through B's stream; per-aggregate order
  // holds across the two readers.
  for (int n = 10; n < 20; ++n) {
    for (int agg = 0; agg < 10; ++agg) {
      const std::string id = "agg-0-" + std::to_string(agg);
      ASSERT_TRUE(EnqueueOne(id, id + "#" + std::to_string(n)));
    }
  }
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 300; }, 30s)) << b.Log();
  auto next = FirstCopiesInOrder(ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, 300, Scaled(30s)));
  ASSERT_EQ(next.size(), 20u);
  for (const auto& [key, n] : next) EXPECT_EQ(n, key.rfind("agg-0-", 0) == 0 ? 20 : 10) << key;
  b.Signal(SIGTERM);
  EXPECT_EQ(b.Wait(Scaled(30s)), 0) << b.Log();
}

TEST_F(RelayCdcTest, FatalErrorFailsTheRowInTheTableAndHoldsItsAggregateForTheSweeper) {
  Subprocess& relay = StartRelay(CdcSets({"kafka.properties.message.max.bytes=10000"}));
  const int port = HttpPort(relay);
  ASSERT_TRUE(WaitForLog(relay, "streaming")) << relay.Log();
  ASSERT_TRUE(EnqueueOne("big", "big#0" + std::string(20000, 'x')));
  ASSERT_TRUE(WaitFor([&] { return CountStatus("FAILED") == 1; }, 30s)) << relay.Log();
  // Enqueued once big#0 is FAILED in the table, so the stream's check (not the
  // batch's own plan, when both come in one batch) is what holds big#1.
  ASSERT_TRUE(EnqueueOne("big", "big#1"));
  ASSERT_TRUE(EnqueueOne("small", "small#0"));
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 1; }, 30s)) << relay.Log();
  // big#1 stays PENDING behind the FAILED big#0, however long we wait: neither
  // the stream nor the sweeper may publish it.
  std::this_thread::sleep_for(Scaled(2s));
  EXPECT_EQ(Exec(admin_.get(), "SELECT string_agg(status, E'\\n' ORDER BY seq) FROM " + schema_ +
                                   ".outbox WHERE aggregate_id = 'big'"),
            "FAILED\nPENDING");
  EXPECT_GE(Metric(Get(port, "/metrics"), "outbox_cdc_events_left_to_sweeper_total"), 1);
  // An operator replays it (here by SQL; outboxctl replay does the same):
  // the sweeper publishes both, in order.
  Exec(admin_.get(), "UPDATE " + schema_ + ".outbox SET status = 'PENDING', attempts = 0, "
                     "available_at = now() WHERE status = 'FAILED'");
  Exec(admin_.get(), "UPDATE " + schema_ + ".outbox SET payload = 'big#0' WHERE aggregate_id = "
                     "'big' AND payload LIKE 'big#0%'");
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 3; }, 30s)) << relay.Log();
  auto msgs = ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, 3, Scaled(30s));
  std::vector<std::string> big;
  for (auto& m : msgs) {
    if (m.key == "big") big.push_back(m.value);
  }
  EXPECT_EQ(big, (std::vector<std::string>{"big#0", "big#1"}));
}

// A slot whose position precedes its publication (the publication dropped and
// created again, as DROP SCHEMA ... CASCADE and a fresh migration do): every
// read of the stream fails. The stream must not keep announcing itself after
// each failed opening, or the sweepers would wait for it forever; it stands
// aside and every event is delivered, in order, by polling.
TEST_F(RelayCdcTest, AStreamThatFailsOnEveryOpeningStandsAsideAndTheSweepersDeliver) {
  {
    Subprocess& first = StartRelay(CdcSets());
    ASSERT_TRUE(WaitForLog(first, "streaming")) << first.Log();
    EnqueueMany(1, 5, 2);
    ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 10; }, 30s)) << first.Log();
    first.Signal(SIGTERM);
    ASSERT_EQ(first.Wait(Scaled(30s)), 0) << first.Log();
  }
  // Rows committed while there is no publication: decoding them from the
  // slot's position fails ("publication ... does not exist"), for good.
  Exec(admin_.get(), "DROP PUBLICATION " + Slot());
  EnqueueMany(1, 5, 4, 2);
  Exec(admin_.get(), "CREATE PUBLICATION " + Slot() + " FOR TABLE " + schema_ +
                         ".outbox WITH (publish = 'insert')");
  EnqueueMany(1, 5, 6, 4);
  // Reopening backs off to at most 1 s, well inside the 3 s of staleness
  // (production: 5 s and 10 s): only standing aside lets the progress go stale.
  Subprocess& relay = StartRelay(CdcSets({"relay.db_retry_max_ms=1000"}));
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 30; }, Scaled(60s)))
      << "sent " << CountStatus("SENT") << "\n" << relay.Log();
  EXPECT_NE(relay.Log().find("not announcing it"), std::string::npos) << relay.Log();
  auto next = FirstCopiesInOrder(ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, 30, Scaled(30s)));
  ASSERT_EQ(next.size(), 5u);
  for (const auto& [key, n] : next) EXPECT_EQ(n, 6) << key;
}

TEST_F(RelayCdcTest, SlotDroppedUnderTheRelayIsCreatedAgainAndTheGapSwept) {
  Subprocess& relay = StartRelay(CdcSets());
  const int port = HttpPort(relay);
  ASSERT_TRUE(WaitForLog(relay, "streaming")) << relay.Log();
  EnqueueMany(2, 10, 5);
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 100; }, 30s)) << relay.Log();
  // An operator (or max_slot_wal_keep_size) takes the slot away: end its
  // reader, drop it, and commit more while there is none.
  Exec(admin_.get(), "DO $$ BEGIN FOR i IN 1..200 LOOP "
                     "PERFORM pg_terminate_backend(active_pid) FROM pg_replication_slots "
                     "WHERE slot_name = '" + Slot() + "' AND active_pid IS NOT NULL; "
                     "PERFORM pg_sleep(0.02); "
                     "BEGIN PERFORM pg_drop_replication_slot('" + Slot() + "'); RETURN; "
                     "EXCEPTION WHEN object_in_use THEN NULL; END; "
                     "END LOOP; RAISE EXCEPTION 'slot stayed in use'; END $$");
  for (int n = 5; n < 10; ++n) {
    for (int agg = 0; agg < 10; ++agg) {
      const std::string id = "agg-0-" + std::to_string(agg);
      ASSERT_TRUE(EnqueueOne(id, id + "#" + std::to_string(n)));
    }
  }
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 150; }, 60s)) << relay.Log();
  EXPECT_GE(Metric(Get(port, "/metrics"), "outbox_cdc_slot_created_total"), 2) << relay.Log();
  auto next = FirstCopiesInOrder(ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, 150, Scaled(30s)));
  ASSERT_EQ(next.size(), 20u);
  for (const auto& [key, n] : next) EXPECT_EQ(n, key.rfind("agg-0-", 0) == 0 ? 10 : 5) << key;
}

TEST_F(RelayCdcTest, BrokerDownLongerThanTheStreamsBuffersLosesAndFailsNothing) {
  ASSERT_EQ(kafka_->Control("broker-down -1"), "ok");
  Subprocess& relay = StartRelay(CdcSets({"kafka.properties.message.timeout.ms=1000",
                                          "relay.lease_ms=10000", "relay.max_attempts=3"}));
  const int port = HttpPort(relay);
  ASSERT_TRUE(WaitForLog(relay, "streaming")) << relay.Log();
  EnqueueMany(2, 10, 10);
  // Several publish timeouts pass (more than max_attempts of them): an outage
  // counts no attempt, so nothing may end FAILED.
  ASSERT_TRUE(WaitFor([&] {
    return Metric(Get(port, "/metrics"), "outbox_relay_broker_outage_batches_total") >= 4;
  }, 60s)) << relay.Log();
  int status = 0;
  EXPECT_TRUE(WaitFor([&] { Get(port, "/readyz", &status); return status == 503; }, 15s));
  EXPECT_EQ(CountStatus("FAILED"), 0);
  EXPECT_EQ(CountStatus("SENT"), 0);
  ASSERT_EQ(kafka_->Control("broker-up -1"), "ok");
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 200; }, 90s)) << relay.Log();
  auto msgs = ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, 200, Scaled(30s));
  CheckDelivered(msgs, 2, 10, 10);
  EXPECT_EQ(CountStatus("FAILED"), 0);
}

TEST_F(RelayCdcTest, SwitchingPollToCdcAndBackWhileProducingLosesNothingAndKeepsOrder) {
  std::atomic<bool> stop{false};
  std::atomic<int> made{0};
  std::thread producer([&] {
    PgConn c = Connect(url_);
    EnqueueOptions eo;
    eo.schema = schema_;
    for (int n = 0; !stop; ++n) {
      std::vector<Event> batch;
      for (int agg = 0; agg < 10; ++agg) {
        const std::string id = "agg-0-" + std::to_string(agg);
        batch.push_back(OrderEvent(id, id + "#" + std::to_string(n)));
      }
      Exec(c.get(), "BEGIN");
      const bool ok = EnqueueBatch(c.get(), batch, eo).ok();
      Exec(c.get(), ok ? "COMMIT" : "ROLLBACK");
      if (ok) made += 10;
      std::this_thread::sleep_for(5ms);
    }
  });
  Subprocess& poll = StartRelay({"relay.id=poll-1"});
  std::this_thread::sleep_for(Scaled(1s));
  Subprocess& cdc = StartRelay(CdcSets({"relay.id=cdc-1"}));  // both kinds run together
  ASSERT_TRUE(WaitForLog(cdc, "streaming")) << cdc.Log();
  std::this_thread::sleep_for(Scaled(1s));
  poll.Signal(SIGTERM);  // switch to cdc
  EXPECT_EQ(poll.Wait(Scaled(30s)), 0) << poll.Log();
  std::this_thread::sleep_for(Scaled(1s));
  Subprocess& poll2 = StartRelay({"relay.id=poll-2"});  // and back
  std::this_thread::sleep_for(Scaled(1s));
  cdc.Signal(SIGTERM);
  EXPECT_EQ(cdc.Wait(Scaled(30s)), 0) << cdc.Log();
  std::this_thread::sleep_for(Scaled(1s));
  stop = true;
  producer.join();
  const int total = made.load();
  ASSERT_EQ(total % 10, 0);
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == total; }, 60s)) << poll2.Log();
  auto next = FirstCopiesInOrder(ReadTopic(kafka_->bootstrap(), kTopic, kPartitions,
                                           static_cast<std::size_t>(total), Scaled(30s)));
  ASSERT_EQ(next.size(), 10u);
  for (const auto& [key, n] : next) EXPECT_EQ(n, total / 10) << key;
  EXPECT_GT(std::stoll(Exec(admin_.get(), "SELECT count(*) FROM " + schema_ +
                                              ".outbox WHERE lease_token IS NULL")),
            0)
      << "the stream published part of it";
  poll2.Signal(SIGTERM);
  EXPECT_EQ(poll2.Wait(Scaled(30s)), 0);
}

TEST_F(RelayCdcTest, AnIdleOutboxOnABusyDatabaseStillAdvancesTheSlot) {
  Subprocess& relay = StartRelay(CdcSets());
  const int port = HttpPort(relay);
  ASSERT_TRUE(WaitForLog(relay, "streaming")) << relay.Log();
  // Other tables write ~8 MB of WAL; the outbox gets nothing.
  Exec(admin_.get(), "CREATE TABLE " + schema_ + ".busy (x text)");
  for (int i = 0; i < 8; ++i) {
    Exec(admin_.get(), "INSERT INTO " + schema_ + ".busy SELECT repeat('y', 1000) FROM "
                       "generate_series(1, 1000)");
  }
  const std::string written = Exec(admin_.get(), "SELECT pg_current_wal_lsn()::text");
  EXPECT_TRUE(WaitFor([&] {
    return Exec(admin_.get(), "SELECT confirmed_flush_lsn >= '" + written + "'::pg_lsn FROM "
                              "pg_replication_slots WHERE slot_name = '" + Slot() + "'") == "t";
  }, 20s)) << "the slot must follow the server's position while the outbox is idle";
  // A slot's restart_lsn moves at a running-transactions record, which the
  // server writes every 15 s (or at a checkpoint): write one now, so that the
  // wait below is for the relay's confirmations, not for the server's timer
  // (it failed under load waiting 20 s).
  Exec(admin_.get(), "CHECKPOINT");
  EXPECT_TRUE(WaitFor([&] {
    const double retained = Metric(Get(port, "/metrics"), "outbox_cdc_slot_retained_wal_bytes");
    return retained >= 0 && retained < 4 * 1024 * 1024;
  }, 40s)) << "the retained WAL gauge follows";
}

TEST_F(RelayCdcTest, PastTheWalCapStreamingStopsTheSlotIsDroppedAndPollingDrains) {
  ASSERT_EQ(kafka_->Control("broker-down -1"), "ok");
  Subprocess& relay = StartRelay(CdcSets({"kafka.properties.message.timeout.ms=1000",
                                          "relay.lease_ms=10000",
                                          "cdc.max_retained_wal_bytes=2000000"}));
  const int port = HttpPort(relay);
  ASSERT_TRUE(WaitForLog(relay, "streaming")) << relay.Log();
  // The broker is down, so the stream confirms nothing while the events (and
  // their WAL, ~3 MB: random payloads, which PostgreSQL cannot compress) pile
  // up past the 2 MB cap.
  std::mt19937 rng(42);
  for (int n = 0; n < 30; ++n) {
    for (int agg = 0; agg < 10; ++agg) {
      const std::string id = "agg-0-" + std::to_string(agg);
      std::string noise(10000, '\0');
      for (char& c : noise) c = static_cast<char>('a' + rng() % 26);
      ASSERT_TRUE(EnqueueOne(id, id + "#" + std::to_string(n) + "#" + noise));
    }
  }
  ASSERT_TRUE(WaitFor([&] {
    return Metric(Get(port, "/metrics"), "outbox_cdc_wal_cap_stops_total") >= 1;
  }, 60s)) << relay.Log() << "\nretained: "
           << Metric(Get(port, "/metrics"), "outbox_cdc_slot_retained_wal_bytes") << "\nslot: "
           << Exec(admin_.get(), "SELECT restart_lsn || ' ' || confirmed_flush_lsn || ' ' || "
                                 "pg_current_wal_lsn() || ' ' || active FROM pg_replication_slots "
                                 "WHERE slot_name = '" + Slot() + "'");
  EXPECT_EQ(Exec(admin_.get(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '" +
                                   Slot() + "' AND pg_wal_lsn_diff(pg_current_wal_lsn(), "
                                   "restart_lsn) > 2000000"),
            "0") << "the slot that pinned the WAL is gone";
  ASSERT_EQ(kafka_->Control("broker-up -1"), "ok");
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 300; }, 90s)) << relay.Log();
  EXPECT_EQ(CountStatus("FAILED"), 0);
  // Then streaming starts again on a new slot.
  EXPECT_TRUE(WaitFor([&] {
    return Metric(Get(port, "/metrics"), "outbox_cdc_streaming") == 1;
  }, 30s)) << relay.Log();
  auto next = FirstCopiesInOrder(ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, 300, Scaled(30s)));
  ASSERT_EQ(next.size(), 10u);
  for (const auto& [key, n] : next) EXPECT_EQ(n, 30) << key;
}

// The slot over the cap is held by a reader that is not this relay (a
// pg_recvlogical, another tool, or this relay's own walsender still exiting
// after an outage closed the stream: the clean-clone gate at 9eab828 saw the
// cap never fire that way). "In use" must not end the episode: the relay
// drops the slot as soon as the reader lets go.
TEST_F(RelayCdcTest, ASlotOverTheCapHeldByAnotherReaderIsDroppedOnceItLetsGo) {
  {
    Subprocess& first = StartRelay(CdcSets());
    ASSERT_TRUE(WaitForLog(first, "streaming")) << first.Log();  // the slot exists
    first.Signal(SIGTERM);
    ASSERT_EQ(first.Wait(Scaled(30s)), 0) << first.Log();
  }
  // A reader that holds the slot and never confirms.
  // wal_sender_timeout off: it never answers the walsender's keepalives.
  const char* keys[] = {"dbname", "replication", "options", nullptr};
  const char* values[] = {url_.c_str(), "database", "-c wal_sender_timeout=0", nullptr};
  PgConn reader(PQconnectdbParams(keys, values, 1));
  ASSERT_EQ(PQstatus(reader.get()), CONNECTION_OK) << PQerrorMessage(reader.get());
  {
    PGresult* r = PQexec(reader.get(), ("START_REPLICATION SLOT " + Slot() +
                                        " LOGICAL 0/0 (proto_version '1', publication_names '" +
                                        Slot() + "')").c_str());
    ASSERT_EQ(PQresultStatus(r), PGRES_COPY_BOTH) << PQerrorMessage(reader.get());
    PQclear(r);
  }
  Subprocess& relay = StartRelay(CdcSets({"cdc.max_retained_wal_bytes=2000000"}));
  const int port = HttpPort(relay);
  ASSERT_TRUE(WaitForLog(relay, "standing by")) << relay.Log();
  // ~3 MB of WAL past the slot's position (random text: not compressible).
  Exec(admin_.get(), "CREATE TABLE " + schema_ + ".busy (x text)");
  Exec(admin_.get(), "INSERT INTO " + schema_ + ".busy SELECT string_agg(chr(97 + (random() * "
                     "25)::int), '') FROM generate_series(1, 300) g, generate_series(1, 10000) c "
                     "GROUP BY g");
  ASSERT_TRUE(WaitForLog(relay, "is in use by another reader", 30s))
      << relay.Log() << "\nretained: "
      << Metric(Get(port, "/metrics"), "outbox_cdc_slot_retained_wal_bytes");
  EXPECT_EQ(Metric(Get(port, "/metrics"), "outbox_cdc_wal_cap_stops_total"), 0)
      << "the slot is held: nothing dropped yet";
  reader.reset();  // the reader lets go
  ASSERT_TRUE(WaitFor([&] {
    return Metric(Get(port, "/metrics"), "outbox_cdc_wal_cap_stops_total") >= 1;
  }, 30s)) << relay.Log();
  EXPECT_EQ(Exec(admin_.get(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '" +
                                   Slot() + "' AND pg_wal_lsn_diff(pg_current_wal_lsn(), "
                                   "restart_lsn) > 2000000"),
            "0") << "the slot that pinned the WAL is gone";
  // The outbox is empty, so the cap lifts and a new slot streams.
  ASSERT_TRUE(WaitFor([&] {
    return Metric(Get(port, "/metrics"), "outbox_cdc_streaming") == 1;
  }, 30s)) << relay.Log();
  ASSERT_TRUE(EnqueueOne("agg-after", "agg-after#0"));
  EXPECT_TRUE(WaitFor([&] { return CountStatus("SENT") == 1; }, 30s)) << relay.Log();
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0) << relay.Log();
}

}  // namespace
}  // namespace outbox::testing
