// outbox-relay with relay.source = cdc as a real process: the change stream
// over PostgreSQL logical replication (real server, real slot), the sweeper,
// and the crash matrix rows of the stream (real kills).
#include "relay_fixture.h"

namespace outbox::testing {
namespace {

class RelayCdcTest : public RelayE2ETest {
 protected:
  std::string Slot() const { return DefaultStreamName(schema_); }
  std::string SlotLsn() {
    return Exec(admin_.get(), "SELECT coalesce(confirmed_flush_lsn::text, '') FROM "
                              "pg_replication_slots WHERE slot_name = '" + Slot() + "'");
  }
  // Rows the stream published carry no claim: lease_token stays NULL.
  std::int64_t CountClaimed() {
    return std::stoll(Exec(admin_.get(), "SELECT count(*) FROM " + schema_ +
                                             ".outbox WHERE lease_token IS NOT NULL"));
  }
};

TEST_F(RelayCdcTest, StreamsEverythingInOrderWithTheSameIdsKeysAndHeadersAndClaimsNothing) {
  Subprocess& relay = StartRelay(CdcSets());
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
  Get(port, "/readyz", &status);
  EXPECT_EQ(status, 200);
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0) << relay.Log();
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

}  // namespace
}  // namespace outbox::testing
