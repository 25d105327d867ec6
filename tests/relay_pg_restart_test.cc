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
  constexpr int kProducers = 2, kAggs = 40, kPer = 40;  // 3,200 events
  EnqueueMany(kProducers, kAggs, kPer);
  Subprocess& relay = StartRelay({"relay.batch_size=100", "relay.db_retry_max_ms=500"});
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") > 200; }, 60s)) << relay.Log();

  const std::string as_pg = geteuid() == 0 ? "runuser -u postgres -- " : "";
  const std::string cmd = as_pg + bin + "/pg_ctl -D " + data + " -m fast -w -t 60 restart >/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  admin_ = Connect(url_);  // our own session died with the server

  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == kProducers * kAggs * kPer; }, 120s))
      << relay.Log();
  auto msgs = ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, kProducers * kAggs * kPer, Scaled(30s));
  CheckDelivered(msgs, kProducers, kAggs, kPer);  // duplicates allowed: marks lost in the restart
  const std::string log = relay.Log();
  EXPECT_NE(log.find("database unavailable"), std::string::npos) << log;
  EXPECT_NE(log.find("database reachable again"), std::string::npos) << log;
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0) << relay.Log();
}

}  // namespace
}  // namespace outbox::testing
