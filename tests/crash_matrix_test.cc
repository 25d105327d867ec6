// The crash matrix (../shared/DESIGN.md), relay rows, on real processes: an
// outbox-relay armed to crash, fail or stall at a named fault point, a second
// relay (or the restarted one) taking over, and a real inbox consumer applying
// effects. Each test then checks the books: every event has exactly one effect,
// duplicates only where the row says they may happen, nothing left PROCESSING.
// (The consumer rows of the matrix are in inbox_e2e_test.cc.)
#include "relay_fixture.h"

namespace outbox::testing {
namespace {

class CrashMatrixTest : public RelayE2ETest {
 protected:
  void StreamDiesAfterPublishBeforeConfirm(int depth);
  void MarkFailedFailsEndsFailedAfterThreeClaims();
  void SetUp() override {
    RelayE2ETest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    consumer_schema_ = "c_" + RandomSuffix();
    Exec(admin_.get(), "CREATE SCHEMA " + consumer_schema_);
    Exec(admin_.get(), "CREATE TABLE " + consumer_schema_ +
                           ".effects (k text, payload text, applied_at timestamptz DEFAULT clock_timestamp())");
    Exec(admin_.get(), "CREATE TABLE " + consumer_schema_ + ".attempts (k text PRIMARY KEY, n int)");
    Exec(admin_.get(), "CREATE TABLE " + consumer_schema_ + ".blocklist (k text PRIMARY KEY)");
  }
  void TearDown() override {
    consumer_.reset();
    if (admin_) Exec(admin_.get(), "DROP SCHEMA IF EXISTS " + consumer_schema_ + " CASCADE");
    RelayE2ETest::TearDown();
  }

  // Short timeouts so lease expiry happens within the test: message.timeout.ms
  // 1000 -> the lease must exceed 6000.
  std::vector<std::string> Fast(std::vector<std::string> more = {}) {
    std::vector<std::string> s = {"kafka.properties.message.timeout.ms=1000", "relay.lease_ms=6500",
                                  "relay.batch_size=50"};
    s.insert(s.end(), more.begin(), more.end());
    return s;
  }

  void StartConsumer() {
    std::vector<std::string> argv = {OUTBOX_INBOX_CONSUMER_BIN, "--db", url_, "--bootstrap",
                                     kafka_->bootstrap(), "--schema", consumer_schema_, "--topic",
                                     kTopic, "--group", "g-" + consumer_schema_};
    consumer_ = std::make_unique<Subprocess>(
        argv, std::map<std::string, std::string>{},
        (std::filesystem::temp_directory_path() / ("crash-consumer-" + consumer_schema_)).string());
  }

  // The payloads are "agg#n" (see EnqueueMany): the consumer's effect rows.
  long Effects() { return std::stol(Exec(admin_.get(), "SELECT count(*) FROM " + consumer_schema_ + ".effects")); }
  long DoubleEffects() {
    return std::stol(Exec(admin_.get(), "SELECT count(*) FROM (SELECT payload FROM " + consumer_schema_ +
                                            ".effects GROUP BY payload HAVING count(*) > 1) d"));
  }
  // The re-published copies reach the broker before their rows are SENT, but the
  // consumer may not have read them yet: wait until it has absorbed one.
  void WaitForAbsorbedDuplicate() {
    WaitFor([&] {
      const std::string log = consumer_->Log();
      auto pos = log.rfind("total_duplicates=");
      return pos != std::string::npos && std::atol(log.c_str() + pos + 17) > 0;
    }, 30s);
  }
  long Duplicates() {
    consumer_->Signal(SIGTERM);
    EXPECT_EQ(consumer_->Wait(Scaled(30s)), 0) << consumer_->Log();
    std::string log = consumer_->Log();
    auto pos = log.find("duplicates=", log.find("counters "));
    return pos == std::string::npos ? -1 : std::stol(log.substr(pos + 11));
  }

  // Every event: SENT in the outbox, exactly one effect at the consumer.
  void ExpectBooksBalance(long events) {
    ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == events; }, 60s));
    ASSERT_TRUE(WaitFor([&] { return Effects() == events; }, 60s)) << consumer_->Log();
    EXPECT_EQ(DoubleEffects(), 0) << "an effect applied twice";
    EXPECT_EQ(CountStatus("PROCESSING"), 0);
    EXPECT_EQ(CountStatus("FAILED"), 0);
  }

  std::string consumer_schema_;
  std::unique_ptr<Subprocess> consumer_;
};


TEST_F(CrashMatrixTest, RelayDiesAfterClaimBeforePublish_LeaseExpiresAndAnotherRelayPublishes) {
  EnqueueMany(2, 10, 10);  // 200 events
  StartConsumer();
  Subprocess& a = StartRelay(Fast(), {{"OUTBOX_FAULTS", "Relay::AfterClaim=crash@1"}});
  EXPECT_EQ(a.Wait(Scaled(30s)), 70) << a.Log();
  EXPECT_GT(CountStatus("PROCESSING"), 0) << "the dead relay's claim is still leased";
  Subprocess& b = StartRelay(Fast());
  ExpectBooksBalance(200);
  EXPECT_EQ(Duplicates(), 0) << "nothing was published before the crash";
  b.Signal(SIGTERM);
  EXPECT_EQ(b.Wait(Scaled(30s)), 0);
}

TEST_F(CrashMatrixTest, RelayDiesAfterPublishBeforeMarkSent_RepublishedAndAbsorbed) {
  EnqueueMany(2, 10, 10);
  StartConsumer();
  Subprocess& a = StartRelay(Fast(), {{"OUTBOX_FAULTS", "Relay::AfterPublishBeforeMarkSent=crash@1"}});
  EXPECT_EQ(a.Wait(Scaled(30s)), 70) << a.Log();
  Subprocess& b = StartRelay(Fast());
  ExpectBooksBalance(200);
  WaitForAbsorbedDuplicate();
  EXPECT_GT(Duplicates(), 0) << "the crashed relay's batch was published twice";
  b.Signal(SIGTERM);
  EXPECT_EQ(b.Wait(Scaled(30s)), 0);
}

// A fault point with `/TAG` fires only on a batch tagged TAG: for this point,
// one that published an event of that type (the demo forces its duplicated
// PaymentAuthorized so). 200 OrderChanged events go through; the one
// OrderShipped that follows crashes the relay, and only it is left leased.
TEST_F(CrashMatrixTest, AFaultTaggedWithAnEventTypeFiresOnlyOnABatchThatPublishedOne) {
  EnqueueMany(2, 10, 10);
  Subprocess& a = StartRelay(
      Fast(), {{"OUTBOX_FAULTS", "Relay::AfterPublishBeforeMarkSent=crash@1/OrderShipped"}});
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 200; }, 60s)) << a.Log();
  EXPECT_FALSE(a.Wait(0s).has_value()) << "crashed on a batch without an OrderShipped";
  Event shipped = OrderEvent("agg-0-0", "shipped");
  shipped.event_type = "OrderShipped";
  EnqueueOptions eo;
  eo.schema = schema_;
  Exec(admin_.get(), "BEGIN");
  ASSERT_TRUE(Enqueue(admin_.get(), shipped, eo).ok());
  Exec(admin_.get(), "COMMIT");
  EXPECT_EQ(a.Wait(Scaled(30s)), 70) << a.Log();
  EXPECT_EQ(CountStatus("SENT"), 200);
  EXPECT_EQ(CountStatus("PROCESSING"), 1) << "the OrderShipped row, acked but not marked";
}

TEST_F(CrashMatrixTest, MarkSentFails_NeverFailedRepublishedAfterLeaseAndAbsorbed) {
  EnqueueMany(2, 10, 10);
  StartConsumer();
  Subprocess& a = StartRelay(Fast(), {{"OUTBOX_FAULTS", "Relay::MarkSent=error@1"}});
  ExpectBooksBalance(200);
  WaitForAbsorbedDuplicate();
  EXPECT_GT(Duplicates(), 0) << "the unmarked batch was published again after its lease";
  EXPECT_NE(a.Log().find("could not record transition"), std::string::npos) << a.Log();
  a.Signal(SIGTERM);
  EXPECT_EQ(a.Wait(Scaled(30s)), 0);
}

TEST_F(CrashMatrixTest, LeaseExpiresWhileTheFirstRelayStalls_ItsLateMarkIsFenced) {
  EnqueueMany(1, 5, 4);  // 20 events: one batch
  StartConsumer();
  // A stalls after publishing for longer than its lease; B takes the rows over.
  Subprocess& a = StartRelay(Fast({"relay.workers=1", "relay.id=relay-A"}),
                             {{"OUTBOX_FAULTS", "Relay::AfterPublishBeforeMarkSent=delay:9000@1"}});
  const int port_a = HttpPort(a);
  ASSERT_TRUE(WaitFor([&] { return CountStatus("PROCESSING") == 20; }, 30s));
  Subprocess& b = StartRelay(Fast({"relay.id=relay-B"}));
  ExpectBooksBalance(20);
  EXPECT_EQ(Exec(admin_.get(), "SELECT count(*) FROM " + schema_ + ".outbox WHERE lease_owner = 'relay-B'"),
            "20") << "B's marks stand";
  // A wakes up: its marks are refused and counted, the state stays B's.
  EXPECT_TRUE(WaitFor([&] {
    return Metric(Get(port_a, "/metrics"), "outbox_relay_transitions_fenced_total") == 20;
  }, 30s)) << a.Log();
  EXPECT_EQ(Exec(admin_.get(), "SELECT count(*) FROM " + schema_ + ".outbox WHERE lease_owner = 'relay-B'"),
            "20");
  WaitForAbsorbedDuplicate();
  EXPECT_GT(Duplicates(), 0);
  for (Subprocess* r : {&a, &b}) {
    r->Signal(SIGTERM);
    EXPECT_EQ(r->Wait(Scaled(30s)), 0) << r->Log();
  }
}

// One unpublishable event (too large) whose FAILED mark fails every time, and
// 10 deliverable ones, on either layout: it ends FAILED after 3 attempts with
// the reason, the others are applied once, the relay stops cleanly.
void CrashMatrixTest::MarkFailedFailsEndsFailedAfterThreeClaims() {
  ASSERT_TRUE(EnqueueOne("big", std::string(20000, 'x')));
  EnqueueMany(1, 5, 2);  // 10 deliverable events
  StartConsumer();
  Subprocess& a = StartRelay(Fast({"kafka.properties.message.max.bytes=10000", "relay.max_attempts=3"}),
                             {{"OUTBOX_FAULTS", "Relay::MarkFailed=error"}});
  ASSERT_TRUE(WaitFor([&] { return CountStatus("FAILED") == 1; }, 90s)) << a.Log();
  const std::string row = Exec(admin_.get(), "SELECT attempts || ' ' || last_error FROM " + schema_ +
                                                 ".outbox WHERE aggregate_id = 'big'");
  EXPECT_EQ(row.rfind("3 ", 0), 0u) << row;
  EXPECT_NE(row.find("max_attempts"), std::string::npos) << row;
  ASSERT_TRUE(WaitFor([&] { return Effects() == 10; }, 60s));
  EXPECT_EQ(DoubleEffects(), 0);
  EXPECT_EQ(CountStatus("PROCESSING"), 0);
  (void)Duplicates();
  a.Signal(SIGTERM);
  EXPECT_EQ(a.Wait(Scaled(30s)), 0);
}

TEST_F(CrashMatrixTest, MarkFailedFails_RowEndsFailedAfterMaxAttemptsNotInALoop) {
  // One event can never be published (too large); marking it FAILED fails every
  // time, so it stays PROCESSING until its lease lapses and is claimed again —
  // attempts were counted at each claim, so the third claim ends it FAILED.
  MarkFailedFailsEndsFailedAfterThreeClaims();
}

TEST_F(CrashMatrixTest, AcksLostToBrokerDelay_RepublishedAndAbsorbed) {
  EnqueueMany(2, 10, 10);
  StartConsumer();
  // Every broker answers later than message.timeout.ms: the messages land but
  // the relay sees timeouts and reschedules them.
  ASSERT_EQ(kafka_->Control("rtt -1 1500"), "ok");
  Subprocess& a = StartRelay(Fast({"relay.backoff_base_ms=200"}));
  const int port = HttpPort(a);
  ASSERT_TRUE(WaitFor([&] {
    return Metric(Get(port, "/metrics"), "outbox_relay_rows_rescheduled_total") > 0;
  }, 30s)) << a.Log();
  ASSERT_EQ(kafka_->Control("rtt -1 0"), "ok");
  ExpectBooksBalance(200);
  (void)Duplicates();  // may be > 0: the mock does not de-duplicate re-sends
  a.Signal(SIGTERM);
  EXPECT_EQ(a.Wait(Scaled(30s)), 0);
}

// --- The same rows on the log layout (issue 42): the slot's lease and position
// stand for the row's lease and status; a position moves only after the acks
// and only under the slot's token. ---

class CrashMatrixLogTest : public CrashMatrixTest {
 protected:
  void SetUp() override {
    CrashMatrixTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    UseLogLayout();
  }
  // Slots holding events whose lease is still held (by a live or a dead relay).
  long LeasedSlots() {
    return std::stol(Exec(admin_.get(), "SELECT count(*) FROM " + schema_ + ".slots WHERE owner "
                                        "IS NOT NULL AND expires_at > now() AND slot IN "
                                        "(SELECT DISTINCT slot FROM " + schema_ + ".log)"));
  }
  // The relays owning the slots that hold events, comma-separated (a slot's
  // owner is the relay id and its store's own suffix: "relay-A/...").
  std::string OwnersOfSlotsWithEvents() {
    return Exec(admin_.get(), "SELECT string_agg(DISTINCT coalesce(split_part(owner, '/', 1), "
                              "'-'), ',') FROM " +
                                  schema_ + ".slots WHERE slot IN (SELECT DISTINCT slot FROM " +
                                  schema_ + ".log)");
  }
  // No event row was ever updated or deleted. Call it once every relay has
  // exited: a backend sends its table counters at most once a second and at
  // its exit, so they are read after a wait.
  void ExpectLogWrittenOnce(long events) {
    std::this_thread::sleep_for(1500ms);
    EXPECT_EQ(Exec(admin_.get(), "SELECT count(*) FROM " + schema_ + ".log"), std::to_string(events));
    EXPECT_EQ(Exec(admin_.get(), "SELECT coalesce(sum(n_tup_upd + n_tup_del), 0) FROM "
                                 "pg_stat_user_tables WHERE schemaname = '" + schema_ +
                                     "' AND relname ~ '^log_[0-9]+$'"),
              "0");
  }
};

TEST_F(CrashMatrixLogTest, RelayDiesAfterClaimBeforePublish_LeaseExpiresAndAnotherRelayPublishes) {
  EnqueueMany(2, 10, 10);  // 200 events
  StartConsumer();
  Subprocess& a = StartRelay(Fast(), {{"OUTBOX_FAULTS", "Relay::AfterClaim=crash@1"}});
  EXPECT_EQ(a.Wait(Scaled(30s)), 70) << a.Log();
  EXPECT_GT(LeasedSlots(), 0) << "the dead relay's slots are still leased";
  EXPECT_EQ(CountStatus("SENT"), 0) << "no position moved";
  Subprocess& b = StartRelay(Fast());
  ExpectBooksBalance(200);
  EXPECT_EQ(Duplicates(), 0) << "nothing was published before the crash";
  b.Signal(SIGTERM);
  EXPECT_EQ(b.Wait(Scaled(30s)), 0);
  ExpectLogWrittenOnce(200);
}

TEST_F(CrashMatrixLogTest, RelayDiesAfterPublishBeforeTheSlotMoves_RepublishedAndAbsorbed) {
  EnqueueMany(2, 10, 10);
  StartConsumer();
  Subprocess& a = StartRelay(Fast(), {{"OUTBOX_FAULTS", "Relay::AfterPublishBeforeMarkSent=crash@1"}});
  EXPECT_EQ(a.Wait(Scaled(30s)), 70) << a.Log();
  EXPECT_EQ(CountStatus("SENT"), 0) << "acked, but no position moved";
  Subprocess& b = StartRelay(Fast());
  ExpectBooksBalance(200);
  WaitForAbsorbedDuplicate();
  EXPECT_GT(Duplicates(), 0) << "the crashed relay's page was published twice";
  b.Signal(SIGTERM);
  EXPECT_EQ(b.Wait(Scaled(30s)), 0);
  ExpectLogWrittenOnce(200);
}

// Page ends within database.log_position_every_ms keep their positions in the
// relay: one killed before writing them has exactly those pages (and the one it
// was publishing) published again by the next relay, never the written ones.
// The dead relay's lease is ended by hand to keep the test short.
TEST_F(CrashMatrixLogTest, RelayDiesWithPositionsNotYetWritten_ExactlyThosePagesRepublishedAndAbsorbed) {
  EnqueueMany(2, 10, 10);  // 200 events
  StartConsumer();
  // Lease 60 s: renewed (and the deferred positions written) every 6 s; page
  // ends defer for 20 s after a renewal.
  Subprocess& a = StartRelay({"kafka.properties.message.timeout.ms=5000", "relay.lease_ms=60000",
                              "relay.workers=1", "relay.batch_size=10",
                              "database.log_position_every_ms=20000"},
                             {{"OUTBOX_FAULTS", "Relay::AfterPublishBeforeMarkSent=crash@15"}});
  EXPECT_EQ(a.Wait(Scaled(30s)), 70) << a.Log();
  // 15 pages published, 14 marked: the first written at once, the next ones
  // deferred unless a renewal came between (a run over 6 s), the last never.
  const long written = CountStatus("SENT");
  RecordProperty("written", static_cast<int>(written));
  EXPECT_GE(written, 10) << a.Log();
  EXPECT_LE(written, 130) << "the page before the crash was marked within 20 s of a write: deferred";
  Exec(admin_.get(), "UPDATE " + schema_ + ".slots SET expires_at = now() - interval '1 second'");
  Exec(admin_.get(), "UPDATE " + schema_ + ".readers SET expires_at = now() - interval '1 second'");
  Subprocess& b = StartRelay(Fast());
  ExpectBooksBalance(200);
  ASSERT_TRUE(WaitFor([&] {
    const std::string log = consumer_->Log();
    const auto pos = log.rfind("total_duplicates=");
    return pos != std::string::npos && std::atol(log.c_str() + pos + 17) >= 150 - written;
  }, 30s)) << consumer_->Log();
  EXPECT_EQ(Duplicates(), 150 - written) << "exactly what was published and not written, again";
  b.Signal(SIGTERM);
  EXPECT_EQ(b.Wait(Scaled(30s)), 0);
  ExpectLogWrittenOnce(200);
}

TEST_F(CrashMatrixLogTest, ThePositionsWriteFails_RepublishedAfterTheLeaseAndAbsorbed) {
  EnqueueMany(2, 10, 10);
  StartConsumer();
  Subprocess& a = StartRelay(Fast(), {{"OUTBOX_FAULTS", "Relay::MarkSent=error@1"}});
  ExpectBooksBalance(200);
  WaitForAbsorbedDuplicate();
  EXPECT_GT(Duplicates(), 0) << "the page whose end failed was published again";
  EXPECT_NE(a.Log().find("could not record transition"), std::string::npos) << a.Log();
  a.Signal(SIGTERM);
  EXPECT_EQ(a.Wait(Scaled(30s)), 0);
  ExpectLogWrittenOnce(200);
}

TEST_F(CrashMatrixLogTest, LeaseExpiresWhileTheFirstRelayStalls_ItsLatePositionIsFenced) {
  EnqueueMany(1, 5, 4);  // 20 events: one page
  StartConsumer();
  Subprocess& a = StartRelay(Fast({"relay.workers=1", "relay.id=relay-A"}),
                             {{"OUTBOX_FAULTS", "Relay::AfterPublishBeforeMarkSent=delay:9000@1"}});
  const int port_a = HttpPort(a);
  // A has published the page (the consumer applied it) and stalls holding it.
  ASSERT_TRUE(WaitFor([&] { return Effects() == 20; }, 30s)) << a.Log();
  ASSERT_EQ(OwnersOfSlotsWithEvents(), "relay-A");
  Subprocess& b = StartRelay(Fast({"relay.id=relay-B"}));
  ExpectBooksBalance(20);
  EXPECT_EQ(OwnersOfSlotsWithEvents(), "relay-B") << "B took the slots over";
  // A wakes up: its page's end is refused and counted; the positions stay B's.
  EXPECT_TRUE(WaitFor([&] {
    return Metric(Get(port_a, "/metrics"), "outbox_relay_transitions_fenced_total") == 20;
  }, 30s)) << a.Log();
  EXPECT_EQ(OwnersOfSlotsWithEvents(), "relay-B");
  EXPECT_EQ(CountStatus("SENT"), 20);
  WaitForAbsorbedDuplicate();
  EXPECT_GT(Duplicates(), 0);
  for (Subprocess* r : {&a, &b}) {
    r->Signal(SIGTERM);
    EXPECT_EQ(r->Wait(Scaled(30s)), 0) << r->Log();
  }
  ExpectLogWrittenOnce(20);
}

TEST_F(CrashMatrixLogTest, MarkFailedFails_EventEndsFailedAfterMaxAttemptsNotInALoop) {
  MarkFailedFailsEndsFailedAfterThreeClaims();
  if (HasFatalFailure()) return;
  ExpectLogWrittenOnce(11);
}

TEST_F(CrashMatrixLogTest, AcksLostToBrokerDelay_NothingFailedAllDeliveredAndAbsorbed) {
  EnqueueMany(2, 10, 10);
  StartConsumer();
  ASSERT_EQ(kafka_->Control("rtt -1 1500"), "ok");
  Subprocess& a = StartRelay(Fast({"relay.backoff_base_ms=200"}));
  const int port = HttpPort(a);
  ASSERT_TRUE(WaitFor([&] {
    return Metric(Get(port, "/metrics"), "outbox_relay_rows_rescheduled_total") > 0;
  }, 30s)) << a.Log();
  EXPECT_EQ(CountStatus("FAILED"), 0) << "an outage fails nothing";
  ASSERT_EQ(kafka_->Control("rtt -1 0"), "ok");
  ExpectBooksBalance(200);
  (void)Duplicates();  // may be > 0: the mock does not de-duplicate re-sends
  a.Signal(SIGTERM);
  EXPECT_EQ(a.Wait(Scaled(30s)), 0);
  ExpectLogWrittenOnce(200);
}

// --- The change stream's rows (relay.source = cdc). ---

// `depth`: cdc.batches_in_flight (the relay dies with up to that many
// batches published and not settled).
void CrashMatrixTest::StreamDiesAfterPublishBeforeConfirm(int depth) {
  const std::string in_flight = "cdc.batches_in_flight=" + std::to_string(depth);
  StartConsumer();
  Subprocess& a = StartRelay(Fast(CdcSets({"relay.id=relay-A", in_flight})),
                             {{"OUTBOX_FAULTS", "Stream::AfterPublish=crash@2"}});
  ASSERT_TRUE(WaitForLog(a, "streaming")) << a.Log();
  // 200 events, 50 per transaction, in two halves: the second half comes
  // after the first batch was published and marked (or the relay already
  // died, with several batches in flight), so the stream publishes at least
  // two batches (all four transactions in one batch never reached the second
  // pass under ASan).
  EnqueueMany(2, 10, 5);
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") > 0 || a.Wait(0ms).has_value(); }, Scaled(30s)))
      << a.Log();
  EnqueueMany(2, 10, 10, /*from=*/5);
  EXPECT_EQ(a.Wait(Scaled(30s)), 70) << a.Log();
  EXPECT_GT(CountStatus("PENDING"), 0) << "published, neither marked nor confirmed";
  Subprocess& b = StartRelay(Fast(CdcSets({"relay.id=relay-B", in_flight})));
  ExpectBooksBalance(200);
  WaitForAbsorbedDuplicate();
  EXPECT_GT(Duplicates(), 0) << "the unconfirmed batch came again from the slot";
  EXPECT_NE(b.Log().find("streaming"), std::string::npos) << b.Log();
  b.Signal(SIGTERM);
  EXPECT_EQ(b.Wait(Scaled(30s)), 0);
}

TEST_F(CrashMatrixTest, StreamDiesAfterPublishBeforeConfirm_NextReaderResumesAtTheSlotAbsorbed) {
  StreamDiesAfterPublishBeforeConfirm(1);
}

TEST_F(CrashMatrixTest, StreamDiesWithFourBatchesInFlight_NextReaderResumesAtTheSlotAbsorbed) {
  StreamDiesAfterPublishBeforeConfirm(4);
}

TEST_F(CrashMatrixTest, StreamDiesInsideALargeTransaction_SlotStaysBeforeItAndNothingIsLost) {
  StartConsumer();
  Subprocess& a = StartRelay(Fast(CdcSets({"relay.id=relay-A", "cdc.batch_size=50"})),
                             {{"OUTBOX_FAULTS", "Stream::AfterPublish=crash@5"}});
  ASSERT_TRUE(WaitForLog(a, "streaming")) << a.Log();
  // One transaction of 1,000 events: it arrives in batches of 50; the fifth
  // batch's crash is inside it.
  {
    PgConn c = Connect(url_);
    EnqueueOptions eo;
    eo.schema = schema_;
    std::vector<Event> events;
    for (int n = 0; n < 50; ++n) {
      for (int a_ = 0; a_ < 20; ++a_) {
        const std::string agg = "agg-0-" + std::to_string(a_);
        Event e = OrderEvent(agg, agg + "#" + std::to_string(n));
        events.push_back(std::move(e));
      }
    }
    Exec(c.get(), "BEGIN");
    ASSERT_TRUE(EnqueueBatch(c.get(), events, eo).ok());
    Exec(c.get(), "COMMIT");
  }
  // The commit record ends at about the current position: the slot may move
  // into the transaction (the server then decodes it again whole) but never
  // past its commit while the transaction is not settled.
  const std::string after_commit = Exec(admin_.get(), "SELECT pg_current_wal_lsn()::text");
  EXPECT_EQ(a.Wait(Scaled(30s)), 70) << a.Log();
  EXPECT_EQ(Exec(admin_.get(), "SELECT confirmed_flush_lsn < '" + after_commit + "'::pg_lsn "
                               "FROM pg_replication_slots WHERE slot_name = 'outbox_" + schema_ + "'"),
            "t") << "the slot must not move past an unsettled commit";
  EXPECT_GT(CountStatus("SENT"), 0) << "the first batches were marked";
  Subprocess& b = StartRelay(Fast(CdcSets({"relay.id=relay-B"})));
  ExpectBooksBalance(1000);
  (void)Duplicates();
  b.Signal(SIGTERM);
  EXPECT_EQ(b.Wait(Scaled(30s)), 0);
}

TEST_F(CrashMatrixTest, StreamMarkSentFails_NotConfirmedReadAgainAndAbsorbed) {
  StartConsumer();
  Subprocess& a = StartRelay(Fast(CdcSets()), {{"OUTBOX_FAULTS", "Stream::MarkSent=error@1"}});
  ASSERT_TRUE(WaitForLog(a, "streaming")) << a.Log();
  EnqueueMany(2, 10, 10);
  ExpectBooksBalance(200);
  WaitForAbsorbedDuplicate();
  EXPECT_GT(Duplicates(), 0) << "the batch whose mark failed was read and published again";
  EXPECT_NE(a.Log().find("change stream closed"), std::string::npos) << a.Log();
  a.Signal(SIGTERM);
  EXPECT_EQ(a.Wait(Scaled(30s)), 0);
}

}  // namespace
}  // namespace outbox::testing
