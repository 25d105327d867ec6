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

TEST_F(RelayE2ETest, PostgresRestartMidStreamResumesFromTheSlot) {
  std::string data, bin;
  OUTBOX_REQUIRE_ENV(data, "OUTBOX_PG_DATA");
  OUTBOX_REQUIRE_ENV(bin, "OUTBOX_PG_BIN");
  Subprocess& relay = StartRelay(CdcSets({"relay.batch_size=50", "relay.db_retry_max_ms=500"}));
  ASSERT_TRUE(WaitForLog(relay, "streaming")) << relay.Log();
  std::atomic<bool> stop{false};
  std::atomic<int> made{0};  // commits confirmed; one whose reply was lost may exist too
  std::thread producer([&] {  // keeps committing through the restart
    for (int n = 0; !stop; ++n) {
      PgConn c(PQconnectdb(url_.c_str()));
      if (PQstatus(c.get()) != CONNECTION_OK) {
        std::this_thread::sleep_for(100ms);
        continue;
      }
      EnqueueOptions eo;
      eo.schema = schema_;
      std::vector<Event> batch;
      for (int agg = 0; agg < 10; ++agg) {
        const std::string id = "agg-0-" + std::to_string(agg);
        batch.push_back(OrderEvent(id, id + "#" + std::to_string(n)));
      }
      PGresult* begin = PQexec(c.get(), "BEGIN");
      const bool begun = PQresultStatus(begin) == PGRES_COMMAND_OK;
      PQclear(begin);
      if (!begun) continue;
      auto r = EnqueueBatch(c.get(), batch, eo);
      PGresult* done = PQexec(c.get(), r.ok() ? "COMMIT" : "ROLLBACK");
      if (r.ok() && PQresultStatus(done) == PGRES_COMMAND_OK) made += 10;
      PQclear(done);
      std::this_thread::sleep_for(10ms);
    }
  });
  ASSERT_TRUE(WaitFor([&] { return made > 200; }, 30s));
  const std::string cmd = PostgresRestartCommand(bin, data);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  admin_ = Connect(url_);
  const int at_restart = made;
  ASSERT_TRUE(WaitFor([&] { return made > at_restart + 200; }, 60s));
  // The stream came back by itself (not only the sweepers).
  ASSERT_TRUE(WaitFor([&] {
    const std::string log = relay.Log();
    return log.find("info streaming", log.find("change stream closed")) != std::string::npos;
  }, 60s)) << relay.Log();
  stop = true;
  producer.join();
  const int total = std::stoi(Exec(admin_.get(), "SELECT count(*) FROM " + schema_ + ".outbox"));
  EXPECT_GE(total, made.load());
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == total; }, 120s)) << relay.Log();
  EXPECT_TRUE(relay.running());
  auto msgs = ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, static_cast<std::size_t>(total),
                        Scaled(30s));
  // Per aggregate the first copies come in commit order (numbers ascend; a
  // transaction whose commit failed left a gap); copies are marks lost in the
  // restart.
  std::map<std::string, int> last;
  std::set<std::string> ids;
  for (const auto& m : msgs) {
    const int n = std::atoi(m.value.c_str() + m.value.find('#') + 1);
    auto it = last.find(m.key);
    if (it != last.end() && n <= it->second) continue;
    ids.insert(m.headers.at("outbox-event-id"));
    last[m.key] = n;
  }
  EXPECT_EQ(ids.size(), static_cast<std::size_t>(total)) << "every event, first copies in order";
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0) << relay.Log();
}

}  // namespace
}  // namespace outbox::testing
