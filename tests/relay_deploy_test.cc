// The relay and outboxctl in the environments production puts them in: behind
// PgBouncer in transaction pooling mode, over TLS with sslmode=verify-full, with
// the operator's own application_name, with statement timeouts that hold
// without a session setting. Needs scripts/testenv's OUTBOX_PGBOUNCER_URL and
// OUTBOX_PG_TLS_URL (real pgbouncer, a real TLS-only PostgreSQL cluster).
#include <atomic>
#include <filesystem>
#include <thread>

#include "ops_assets.h"
#include "relay_fixture.h"

namespace outbox::testing {
namespace {

CommandRun Ctl(const std::string& args) {
  return RunCommand(std::string(OUTBOX_OUTBOXCTL_BIN) + " " + args);
}

class RelayDeployTest : public RelayE2ETest {
 protected:
  void SetUp() override {
    RelayE2ETest::SetUp();
    if (HasFatalFailure()) return;
    OUTBOX_REQUIRE_ENV(bouncer_url_, "OUTBOX_PGBOUNCER_URL");
    OUTBOX_REQUIRE_ENV(tls_url_, "OUTBOX_PG_TLS_URL");
  }

  // A store of this test's schema with a short statement timeout.
  std::unique_ptr<Store> OpenStore(const std::string& url, std::chrono::milliseconds timeout) {
    PostgresStoreOptions o;
    o.conninfo = url;
    o.schema = schema_;
    o.statement_timeout = timeout;
    auto store = OpenPostgresStore(o);
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? std::move(store).value() : nullptr;
  }

  std::string bouncer_url_, tls_url_;
};

// PgBouncer refuses a startup packet with `options` (where the statement
// timeout used to go) and cannot deliver LISTEN's notifications in transaction
// pooling. Through it, with relay.listen left on, the relay still drains every
// event in order (its workers poll), and outboxctl reads and writes.
TEST_F(RelayDeployTest, ThroughPgBouncerInTransactionPoolingEverythingIsDeliveredInOrder) {
  constexpr int kProducers = 2, kAggs = 5, kPer = 40;  // 40 per key: more than a batch of 16
  EnqueueMany(kProducers, kAggs, kPer);
  Subprocess& relay = StartRelay({"database.url=" + bouncer_url_, "relay.batch_size=16"});
  const int port = HttpPort(relay);
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == kProducers * kAggs * kPer; }, 60s))
      << relay.Log();
  auto msgs = ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, kProducers * kAggs * kPer, Scaled(30s));
  EXPECT_EQ(CheckDelivered(msgs, kProducers, kAggs, kPer), 0u);
  int status = 0;
  const std::string ready = WaitReady(port, &status);
  EXPECT_EQ(status, 200) << ready;
  EXPECT_EQ(relay.Log().find("unsupported startup parameter"), std::string::npos) << relay.Log();

  const std::string db = " --db '" + bouncer_url_ + "' --schema " + schema_;
  CommandRun st = Ctl("status --json" + db);
  EXPECT_EQ(st.code, 0) << st.out;
  EXPECT_NE(st.out.find("\"sent\":" + std::to_string(kProducers * kAggs * kPer)), std::string::npos)
      << st.out;
  CommandRun mig = Ctl("migrate" + db);
  EXPECT_EQ(mig.code, 0) << mig.out;
  CommandRun purge = Ctl("purge --retention-s 0" + db);
  EXPECT_EQ(purge.code, 0) << purge.out;
  EXPECT_EQ(CountStatus("SENT"), 0);
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0) << relay.Log();
}

// The log layout (issue 42), installed by `outboxctl migrate --layout log` in a
// schema of its own: the relays find it without being told, two of them share
// the slots, every event goes out once and in order per aggregate, no event row
// is written twice, and operators read the view. A schema holding one layout
// is refused the other, naming both, and left as it was.
TEST_F(RelayDeployTest, OnALogSchemaTwoRelaysDeliverEachEventOnceInOrderAndWriteNoEventTwice) {
  DropSchemaRetrying(admin_.get(), schema_);  // the fixture made a row store: outboxctl makes the log
  Exec(admin_.get(), "DROP PUBLICATION IF EXISTS " + DefaultStreamName(schema_));
  const std::string db = " --db '" + url_ + "' --schema " + schema_;
  CommandRun bad = Ctl("migrate --layout lines" + db);
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("--layout"), std::string::npos) << bad.out;
  CommandRun mig = Ctl("migrate --layout log" + db);
  ASSERT_EQ(mig.code, 0) << mig.out;
  CommandRun again = Ctl("migrate" + db);  // the schema says which
  EXPECT_EQ(again.code, 0) << again.out;
  EXPECT_NE(again.out.find("up to date"), std::string::npos) << again.out;
  CommandRun rows = Ctl("migrate --layout rows" + db);
  EXPECT_NE(rows.code, 0) << rows.out;
  EXPECT_NE(rows.out.find("holds the outbox as a log"), std::string::npos) << rows.out;
  EXPECT_EQ(Exec(admin_.get(), "SELECT to_regclass('" + schema_ + ".schema_migrations') IS NULL"), "t");
  CommandRun check = Ctl("migrate --check" + db);
  EXPECT_EQ(check.code, 0) << check.out;

  constexpr int kProducers = 4, kAggs = 25, kPer = 20;  // 2,000 events
  EnqueueMany(kProducers, kAggs, kPer);
  Subprocess& a = StartRelay();
  Subprocess& b = StartRelay();
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == kProducers * kAggs * kPer; }, 60s))
      << a.Log() << b.Log();
  auto msgs = ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, kProducers * kAggs * kPer, Scaled(30s));
  EXPECT_EQ(CheckDelivered(msgs, kProducers, kAggs, kPer), 0u) << "no fault, so no duplicates";
  EXPECT_EQ(Exec(admin_.get(), "SELECT count(*) FROM " + schema_ + ".log WHERE xmax <> '0'"), "0");
  EXPECT_EQ(Exec(admin_.get(), "SELECT count(*) FROM " + schema_ + ".exceptions"), "0");
  EXPECT_TRUE(WaitFor([&] {
    return Exec(admin_.get(), "SELECT count(DISTINCT split_part(owner, '/', 1)) FROM " + schema_ +
                                  ".slots WHERE owner IS NOT NULL") == "2";
  }, 10s)) << "both relays hold slots (each looks at its share every second)";
  CommandRun st = Ctl("status --json" + db);
  EXPECT_EQ(st.code, 0) << st.out;
  EXPECT_NE(st.out.find("\"pending\":0"), std::string::npos) << st.out;
  const std::string id = Exec(admin_.get(), "SELECT event_id FROM " + schema_ + ".outbox ORDER BY seq LIMIT 1");
  CommandRun trace = Ctl("trace " + id + db);
  EXPECT_EQ(trace.code, 0) << trace.out;
  EXPECT_NE(trace.out.find("SENT"), std::string::npos) << trace.out;
  a.Signal(SIGTERM);
  b.Signal(SIGTERM);
  EXPECT_EQ(a.Wait(Scaled(30s)), 0) << a.Log();
  EXPECT_EQ(b.Wait(Scaled(30s)), 0) << b.Log();
  EXPECT_EQ(Exec(admin_.get(), "SELECT count(*) FROM " + schema_ + ".slots WHERE owner IS NOT NULL"), "0")
      << "a clean stop gives the slots back";
}

// The slot count changed between runs and under load (issue 42): two relays
// drain while producers write, and `outboxctl slots --set` lowers the count
// to 4, then raises it to 32. Each change waits for the relays to publish what
// remains (producers wait meanwhile), so an aggregate whose slot changes never
// has an older event left in its old slot: every event goes out, in order per
// aggregate; a retired slot is never leased; no event row is written twice.
TEST_F(RelayDeployTest, OnALogSchemaTheSlotCountChangedUnderLoadKeepsEveryEventAndItsOrder) {
  UseLogLayout();
  if (HasFatalFailure()) return;
  const std::string db = " --db '" + url_ + "' --schema " + schema_;
  const std::string drain =
      " --drain-timeout-s " +
      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(Scaled(30s)).count());
  constexpr int kProducers = 4, kAggs = 25, kPer = 60;  // 6,000 events
  Subprocess& a = StartRelay({"relay.lease_ms=9000"});
  Subprocess& b = StartRelay({"relay.lease_ms=9000"});
  std::atomic<int> rounds{0};
  std::thread producers([&] {
    for (int n = 0; n < kPer; ++n) {
      EnqueueMany(kProducers, kAggs, n + 1, n);
      rounds = n + 1;
      std::this_thread::sleep_for(30ms);
    }
  });
  ASSERT_TRUE(WaitFor([&] { return rounds >= 10; }, Scaled(30s)));
  const CommandRun down = Ctl("slots --set 4" + drain + db);
  EXPECT_EQ(down.code, 0) << down.out << a.Log() << b.Log();
  EXPECT_NE(down.out.find("16 slots -> 4"), std::string::npos) << down.out;
  const int mid = rounds;
  EXPECT_TRUE(WaitFor([&] {
    return Exec(admin_.get(), "SELECT count(*) FROM " + schema_ + ".slots WHERE owner IS NOT NULL") != "0";
  }, Scaled(20s))) << "the relays lease the 4 slots again";
  EXPECT_EQ(Exec(admin_.get(), "SELECT count(*) FROM " + schema_ + ".slots WHERE slot >= 4 AND owner IS NOT NULL"),
            "0")
      << "a retired slot is never leased";
  ASSERT_TRUE(WaitFor([&] { return rounds >= mid + 10; }, Scaled(30s)));
  const CommandRun up = Ctl("slots --set 32" + drain + db);
  EXPECT_EQ(up.code, 0) << up.out << a.Log() << b.Log();
  producers.join();
  EXPECT_LT(mid, kPer) << "the first change came after the producers: not under load";
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == kProducers * kAggs * kPer; }, Scaled(60s)))
      << a.Log() << b.Log();
  auto msgs = ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, kProducers * kAggs * kPer, Scaled(30s));
  CheckDelivered(msgs, kProducers, kAggs, kPer);  // order and completeness checked
  EXPECT_EQ(Exec(admin_.get(), "SELECT count(*) || '/' || count(DISTINCT slot) FROM " + schema_ + ".slots"),
            "32/32");
  EXPECT_EQ(Exec(admin_.get(), "SELECT slots FROM " + schema_ + ".log_settings"), "32");
  EXPECT_EQ(Exec(admin_.get(), "SELECT count(DISTINCT slot) > 4 FROM " + schema_ + ".log"), "t")
      << "events written after the raise spread over more than the 4 slots";
  EXPECT_EQ(Exec(admin_.get(), "SELECT count(*) FROM " + schema_ + ".log WHERE xmax <> '0'"), "0");
  a.Signal(SIGTERM);
  b.Signal(SIGTERM);
  EXPECT_EQ(a.Wait(Scaled(30s)), 0) << a.Log();
  EXPECT_EQ(b.Wait(Scaled(30s)), 0) << b.Log();
}

// The crash matrix's "relay dies between publish and mark" on the log: a relay
// SIGKILLed mid-drain leaves its pages unwritten; after its lease another relay
// takes its slots over and publishes them again. Nothing is lost, the first
// copies keep each aggregate's order, and only failing events are copied.
TEST_F(RelayDeployTest, OnALogSchemaARelayKilledMidDrainLosesNothingAndOrderHolds) {
  UseLogLayout();
  if (HasFatalFailure()) return;
  constexpr int kProducers = 4, kAggs = 25, kPer = 40;  // 4,000 events
  EnqueueMany(kProducers, kAggs, kPer);
  // One worker, small pages: slow enough to be killed in the middle.
  Subprocess& a = StartRelay({"relay.lease_ms=9000", "relay.batch_size=10", "relay.workers=1"});
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") >= 300; }, 60s)) << a.Log();
  a.Signal(SIGKILL);
  a.Wait(Scaled(10s));
  const auto sent_at_kill = CountStatus("SENT");
  EXPECT_LT(sent_at_kill, kProducers * kAggs * kPer) << "killed after the drain: nothing was tested";
  Subprocess& b = StartRelay({"relay.lease_ms=9000", "relay.batch_size=10"});
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == kProducers * kAggs * kPer; }, 90s)) << b.Log();
  auto msgs = ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, kProducers * kAggs * kPer, Scaled(30s));
  CheckDelivered(msgs, kProducers, kAggs, kPer);  // duplicates allowed; order and completeness checked
  EXPECT_EQ(Exec(admin_.get(), "SELECT count(*) FROM " + schema_ + ".log WHERE xmax <> '0'"), "0");
  EXPECT_EQ(Exec(admin_.get(), "SELECT count(*) FROM " + schema_ + ".exceptions"), "0");
  b.Signal(SIGTERM);
  EXPECT_EQ(b.Wait(Scaled(30s)), 0) << b.Log();
}

// A statement that runs past database.statement_timeout_ms is cancelled from
// the client (a cancel request, which PgBouncer forwards), the connection stays
// usable, and no server connection is left with a statement_timeout setting
// that PgBouncer would hand to the application's next transaction.
TEST_F(RelayDeployTest, AStatementPastTheTimeoutIsCancelledThroughPgBouncerAndNothingLeaks) {
  for (const std::string& url : {bouncer_url_, url_}) {
    SCOPED_TRACE(url);
    auto store = OpenStore(url, 400ms);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(store->Stats().ok());
    PgConn locker = Connect(url_);
    Exec(locker.get(), "BEGIN");
    Exec(locker.get(), "LOCK TABLE " + schema_ + ".outbox IN ACCESS EXCLUSIVE MODE");
    const auto start = std::chrono::steady_clock::now();
    auto blocked = store->Stats();
    const auto took = std::chrono::steady_clock::now() - start;
    ASSERT_FALSE(blocked.ok());
    EXPECT_EQ(blocked.status().code(), Code::kDeadlineExceeded) << blocked.status().ToString();
    EXPECT_NE(blocked.status().message().find("57014"), std::string::npos)
        << blocked.status().ToString();
    EXPECT_LT(took, Scaled(10s));
    Exec(locker.get(), "COMMIT");
    auto after = store->Stats();
    EXPECT_TRUE(after.ok()) << after.status().ToString();
  }
  // Every server connection PgBouncer holds runs with the server's default.
  PgConn app = Connect(bouncer_url_);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(Exec(app.get(), "SHOW statement_timeout"), "0");
}

// The operator's application_name (in the URL) is what pg_stat_activity shows;
// without one, the store names itself.
TEST_F(RelayDeployTest, TheApplicationNameOfTheUrlIsKept) {
  const std::string name = "billing-relay-" + RandomSuffix();
  const std::string sep = url_.find('?') == std::string::npos ? "?" : "&";
  auto named = OpenStore(url_ + sep + "application_name=" + name, 30s);
  ASSERT_NE(named, nullptr);
  ASSERT_TRUE(named->Stats().ok());
  EXPECT_EQ(Exec(admin_.get(), "SELECT count(*) FROM pg_stat_activity WHERE application_name = '" +
                                   name + "'"),
            "1");
  auto unnamed = OpenStore(url_, 30s);
  ASSERT_NE(unnamed, nullptr);
  ASSERT_TRUE(unnamed->Stats().ok());
  EXPECT_NE(Exec(admin_.get(), "SELECT count(*) FROM pg_stat_activity WHERE application_name = "
                               "'outbox-store'"),
            "0");
}

// TLS to PostgreSQL with sslmode=verify-full against a cluster that refuses
// plain connections: the relay connects, verifies the server, and delivers; a
// relay that does not trust the server's CA is not ready and moves nothing.
TEST_F(RelayDeployTest, OverTlsWithVerifyFullTheRelayDeliversAndAnUntrustedServerIsRefused) {
  PgConn tls = Connect(tls_url_);
  ASSERT_EQ(Exec(tls.get(), "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()"), "t");
  {
    std::string plain = tls_url_;
    plain.replace(plain.find("verify-full"), std::string("verify-full").size(), "disable");
    PgConn refused(PQconnectdb(plain.c_str()));
    EXPECT_NE(PQstatus(refused.get()), CONNECTION_OK) << "the TLS cluster must refuse plain text";
  }
  CommandRun mig = Ctl("migrate --db '" + tls_url_ + "' --schema " + schema_);
  ASSERT_EQ(mig.code, 0) << mig.out;
  struct DropAfter {
    PGconn* c;
    std::string schema;
    ~DropAfter() { DropSchemaRetrying(c, schema); }
  } drop{tls.get(), schema_};

  EnqueueOptions eo;
  eo.schema = schema_;
  Exec(tls.get(), "BEGIN");
  for (int n = 0; n < 30; ++n) {
    Event e = OrderEvent("tls-1", "tls-1#" + std::to_string(n));
    ASSERT_TRUE(Enqueue(tls.get(), e, eo).ok());
  }
  Exec(tls.get(), "COMMIT");

  // Not trusted: a certificate that is not a CA stands in for the wrong root.
  std::string untrusted = tls_url_;
  const std::string ca = EnvOr("OUTBOX_PG_TLS_CA");
  ASSERT_FALSE(ca.empty());
  untrusted.replace(untrusted.find(ca), ca.size(),
                    (std::filesystem::path(ca).parent_path() / "server.crt").string());
  Subprocess& refused = StartRelay({"database.url=" + untrusted});
  const int refused_port = HttpPort(refused);
  EXPECT_TRUE(WaitForLog(refused, "certificate verify failed")) << refused.Log();
  int status = 0;
  const std::string body = Get(refused_port, "/readyz", &status);
  EXPECT_EQ(status, 503) << body;
  EXPECT_EQ(Exec(tls.get(), "SELECT count(*) FROM " + schema_ + ".outbox WHERE status = 'PENDING'"),
            "30");
  refused.Signal(SIGTERM);
  refused.Wait(Scaled(30s));

  Subprocess& relay = StartRelay({"database.url=" + tls_url_});
  ASSERT_TRUE(WaitFor(
      [&] {
        return Exec(tls.get(), "SELECT count(*) FROM " + schema_ + ".outbox WHERE status = 'SENT'") ==
               "30";
      },
      60s))
      << relay.Log();
  auto msgs = ReadTopic(kafka_->bootstrap(), kTopic, kPartitions, 30, Scaled(30s));
  ASSERT_EQ(msgs.size(), 30u);
  for (std::size_t i = 0; i < msgs.size(); ++i) {
    EXPECT_EQ(msgs[i].value, "tls-1#" + std::to_string(i)) << "one key, one partition, in order";
  }
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0) << relay.Log();
}

// Every metric the shipped alert rules and Grafana dashboard use (the
// outbox_inbox_* ones aside: InboxE2ETest checks those against a consumer) is
// exported under that name by a running relay.
TEST_F(RelayDeployTest, TheShippedAlertsAndDashboardUseOnlyMetricsTheRelayExports) {
  const std::set<std::string> used = MetricNamesInShippedAssets();
  ASSERT_GT(used.size(), 20u);
  ASSERT_TRUE(used.count("outbox_oldest_unsent_age_seconds"));
  ASSERT_TRUE(EnqueueOne("ops-1", "ops-1#0"));
  Subprocess& relay = StartRelay();
  const int port = HttpPort(relay);
  ASSERT_TRUE(WaitFor([&] { return CountStatus("SENT") == 1; }, 30s)) << relay.Log();
  std::set<std::string> missing;
  EXPECT_TRUE(WaitFor(
      [&] {
        missing = MissingFromExport(Get(port, "/metrics"), "outbox_inbox_", /*exclude=*/true);
        return missing.empty();
      },
      10s));
  for (const auto& n : missing) ADD_FAILURE() << "used by the shipped assets, not exported: " << n;
  relay.Signal(SIGTERM);
  EXPECT_EQ(relay.Wait(Scaled(30s)), 0) << relay.Log();
}

}  // namespace
}  // namespace outbox::testing
