// PostgreSQL restarted under a running relay. Runs alone (RUN_SERIAL): it
// restarts the server every other test uses.
#include <cstdlib>

#include "relay_fixture.h"

namespace outbox::testing {
namespace {

TEST_F(RelayE2ETest, PostgresRestartUnderTheRelayRecoversWithoutHelp) {
  std::string data, bin;
  OUTBOX_REQUIRE_ENV(data, "OUTBOX_PG_DATA");
  OUTBOX_REQUIRE_ENV(bin, "OUTBOX_PG_BIN");
  constexpr int kProducers = 2, kAggs = 100, kPer = 40;  // 8,000 events
  EnqueueMany(kProducers, kAggs, kPer);
  Subprocess& relay = StartRelay({"relay.batch_size=50", "relay.db_retry_max_ms=500"});
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") > 200; }, 60s)) << relay.Log();

  const std::string cmd = PostgresRestartCommand(bin, data);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  admin_ = Connect(url_);  // our own session died with the server

  // Work enqueued after the restart flows too: the relay reconnected by itself.
  ASSERT_TRUE(EnqueueOne("after-restart", "after-restart#0"));

  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == kProducers * kAggs * kPer + 1; }, 120s))
      << relay.Log();
  EXPECT_TRUE(relay.running()) << relay.Log();
  auto msgs = ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, kProducers * kAggs * kPer + 1,
                        Scaled(30s));
  std::vector<Message> before;
  bool late_seen = false;
  for (auto& m : msgs) {
    if (m.key == "after-restart") {
      late_seen = true;
    } else {
      before.push_back(m);
    }
  }
  EXPECT_TRUE(late_seen);
  CheckDelivered(before, kProducers, kAggs, kPer);  // duplicates allowed: marks lost in the restart
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0) << relay.Log();
}

}  // namespace
}  // namespace outbox::testing
