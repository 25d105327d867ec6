// The upgrade matrix: for every released version k of a store's migrations,
// a schema built from files 1..k, filled with rows in every state version k
// has (PENDING, PROCESSING with an expired lease, FAILED with held followers,
// SENT, SKIPPED from the version that added it), then migrated to head. The
// catalog must equal a fresh install's, and a real outbox-relay must deliver
// every unsent row in order per aggregate, publish no SENT row again, and
// leave the FAILED row's followers held. PostgreSQL and MariaDB.
//
// What each half proves: the catalog half, that a migration run over a table
// with rows in flight builds what a fresh install builds (a migration whose
// DDL depends on the rows — a NOT NULL column without a default, a unique
// index the rows break — fails here); with today's files both paths run the
// same files in the same order, so it cannot catch a change of a released file
// (the manifest does). The delivery half, that the head's claim and relay take
// over rows written by version k's.
#include <gtest/gtest.h>
#include <mysql.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "kafka_helpers.h"
#include "mariadb_test_util.h"
#include "store/mariadb/migrate.h"
#include "store/postgres/migrate.h"
#include "outbox/postgres.h"
#include "subprocess.h"
#include "test_env.h"

namespace outbox::testing {
namespace {

using namespace std::chrono_literals;

constexpr const char* kTopic = "outbox.event.order";
constexpr int kPartitions = 4;
// The first version with the SKIPPED state (PostgreSQL's 0004; MariaDB's 0001).
constexpr int kPostgresSkippedSince = 4;

// Per aggregate, the rows a version-k schema gets and what must happen to them.
struct Row {
  std::string aggregate, payload, status;  // status as written before the upgrade
};

std::vector<Row> RowsFor(bool has_skipped) {
  std::vector<Row> rows = {
      {"pending", "pending#0", "PENDING"},  {"pending", "pending#1", "PENDING"},
      {"pending", "pending#2", "PENDING"},  {"leased", "leased#0", "PROCESSING"},
      {"leased", "leased#1", "PENDING"},    {"failed", "failed#0", "FAILED"},
      {"failed", "failed#1", "PENDING"},    {"failed", "failed#2", "PENDING"},
      {"sent", "sent#0", "SENT"},           {"sent", "sent#1", "SENT"},
      {"sent", "sent#2", "PENDING"},
      // an unsent event never attempted, behind which a later one was (a replay
      // or a non-counting retry can leave this): the earlier still goes first
      {"mixed", "mixed#0", "PENDING"},      {"mixed", "mixed#1", "PROCESSING"},
  };
  if (has_skipped) {
    rows.push_back({"skipped", "skipped#0", "SKIPPED"});
    rows.push_back({"skipped", "skipped#1", "PENDING"});
  }
  return rows;
}

// The payloads the relay must publish after the upgrade, per aggregate in order.
std::map<std::string, std::vector<std::string>> Expected(const std::vector<Row>& rows) {
  std::map<std::string, std::vector<std::string>> out;
  for (const Row& r : rows) {
    const bool sent_before = r.status == "SENT";
    const bool terminal = r.status == "FAILED" || r.status == "SKIPPED";
    const bool held = r.aggregate == "failed";  // behind its FAILED head
    if (!sent_before && !terminal && !held) out[r.aggregate].push_back(r.payload);
  }
  return out;
}

// Every message on the topic, per aggregate (the key) in offset order, as the
// relay published them: one partition per key, so offset order is send order.
std::map<std::string, std::vector<std::string>> Published(const std::vector<Message>& msgs) {
  std::vector<const Message*> sorted;
  for (const Message& m : msgs) sorted.push_back(&m);
  std::sort(sorted.begin(), sorted.end(), [](const Message* a, const Message* b) {
    return a->partition != b->partition ? a->partition < b->partition : a->offset < b->offset;
  });
  std::map<std::string, std::vector<std::string>> out;
  for (const Message* m : sorted) out[m->key].push_back(m->value);
  return out;
}

std::size_t CountOf(const std::map<std::string, std::vector<std::string>>& m) {
  std::size_t n = 0;
  for (const auto& [k, v] : m) n += v.size();
  return n;
}

std::string RelayLog(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("outbox-relay-upgrade-" + name + ".log"))
      .string();
}

std::vector<std::string> RelayArgv(const std::string& db_url, const std::string& bootstrap,
                                   std::vector<std::string> sets) {
  std::vector<std::string> argv = {OUTBOX_RELAY_BIN, "--db", db_url, "--bootstrap", bootstrap};
  sets.insert(sets.begin(), {"http.listen=127.0.0.1:0", "relay.backoff_base_ms=50",
                             "relay.backoff_max_ms=500", "relay.poll_max_ms=50",
                             "relay.lease_ms=15000", "kafka.properties.message.timeout.ms=3000"});
  for (const auto& s : sets) {
    argv.push_back("--set");
    argv.push_back(s);
  }
  return argv;
}

// ---------------------------------------------------------------- PostgreSQL

int PostgresHead() { return static_cast<int>(pg::OutboxMigrationFiles().size()); }

class PostgresUpgradeTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    OUTBOX_REQUIRE_ENV(url_, "OUTBOX_PG_URL");
    OUTBOX_REQUIRE_ENV(bin_, "OUTBOX_PG_BIN");
    const std::string suffix = RandomSuffix();
    old_ = "upg" + std::to_string(GetParam()) + "_" + suffix;
    fresh_ = "upgfresh_" + suffix;
    admin_ = Connect(url_);
    auto s = pg::Session::Connect({.conninfo = url_});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    session_ = std::move(s).value();
  }
  void TearDown() override {
    relay_.reset();
    if (!admin_) return;
    for (const std::string& schema : {old_, fresh_}) {
      Exec(admin_.get(), "DROP PUBLICATION IF EXISTS " + DefaultStreamName(schema));
      DropSchemaRetrying(admin_.get(), schema);
    }
  }

  std::vector<int> Migrate(const std::string& schema, int up_to) {
    std::vector<int> applied;
    Status st = pg::RunMigrations(*session_, schema, pg::kOutboxSet, &applied, up_to);
    EXPECT_TRUE(st.ok()) << schema << " up to " << up_to << ": " << st.ToString();
    return applied;
  }

  // The rows, written as a relay of version k would have left them; each
  // row's event id by payload.
  std::map<std::string, std::string> Fill(const std::vector<Row>& rows) {
    const std::string s = old_;
    std::map<std::string, std::string> ids;
    for (const Row& r : rows) {
      const std::string id = Exec(admin_.get(), "SELECT event_id FROM " + s + ".enqueue('order', '" +
                                                    r.aggregate + "', 'OrderChanged', '" + r.payload +
                                                    "'::bytea, '{}'::jsonb, NULL)");
      const std::string seq =
          Exec(admin_.get(), "SELECT seq FROM " + s + ".outbox WHERE event_id = '" + id + "'");
      EXPECT_FALSE(seq.empty()) << r.payload;
      ids[r.payload] = id;
      std::string set;
      if (r.status == "PROCESSING") {
        set = "status = 'PROCESSING', attempts = 1, lease_owner = 'relay-of-version-k', "
              "lease_token = 1, claimed_at = now() - interval '2 minutes', "
              "available_at = now() - interval '1 minute'";
      } else if (r.status == "FAILED") {
        set = "status = 'FAILED', attempts = 3, failed_at = now(), last_error = 'refused'";
      } else if (r.status == "SENT") {
        set = "status = 'SENT', attempts = 1, sent_at = now()";
      } else if (r.status == "SKIPPED") {
        set = "status = 'SKIPPED', skipped_at = now(), skipped_by = 'operator', "
              "skip_reason = 'upgrade test'";
      }
      if (!set.empty()) Exec(admin_.get(), "UPDATE " + s + ".outbox SET " + set + " WHERE seq = " + seq);
    }
    return ids;
  }

  // `pg_dump -s` of the schema, its name replaced by SCHEMA and pg_dump's
  // per-run lines dropped.
  std::string Catalog(const std::string& schema) {
    auto run = RunCommand(bin_ + "/pg_dump -s -n " + schema + " '" + url_ + "'");
    EXPECT_EQ(run.code, 0) << run.out;
    std::istringstream in(run.out);
    std::string line, out;
    while (std::getline(in, line)) {
      if (line.starts_with("\\restrict") || line.starts_with("\\unrestrict")) continue;
      out += std::regex_replace(line, std::regex(schema), "SCHEMA") + "\n";
    }
    return out;
  }

  std::string url_, bin_, old_, fresh_;
  PgConn admin_;
  std::unique_ptr<pg::Session> session_;
  std::unique_ptr<Subprocess> relay_;
};

TEST_P(PostgresUpgradeTest, FromThisVersionToHeadMatchesAFreshInstallAndDelivers) {
  const int k = GetParam();
  EXPECT_EQ(Migrate(old_, k).size(), static_cast<std::size_t>(k));
  const std::vector<Row> rows = RowsFor(k >= kPostgresSkippedSince);
  Fill(rows);
  std::vector<int> rest;
  for (int v = k + 1; v <= PostgresHead(); ++v) rest.push_back(v);
  EXPECT_EQ(Migrate(old_, 0), rest);
  EXPECT_EQ(Migrate(fresh_, 0).size(), static_cast<std::size_t>(PostgresHead()));

  const std::string upgraded = Catalog(old_);
  EXPECT_NE(upgraded.find("claim_ordered"), std::string::npos) << upgraded;
  EXPECT_EQ(upgraded, Catalog(fresh_)) << "version " << k << " migrated to head differs from a "
                                       << "fresh install";

  MockKafka kafka(1, {std::string(kTopic) + ":" + std::to_string(kPartitions)});
  relay_ = std::make_unique<Subprocess>(
      RelayArgv(url_, kafka.bootstrap(), {"database.schema=" + old_}), std::map<std::string, std::string>{},
      RelayLog(old_));
  const auto expected = Expected(rows);
  const std::string unsent = "SELECT count(*) FROM " + old_ +
                             ".outbox WHERE status IN ('PENDING', 'PROCESSING') AND "
                             "aggregate_id <> 'failed'";
  ASSERT_TRUE(WaitFor([&] { return Exec(admin_.get(), unsent) == "0"; }, Scaled(30s)))
      << relay_->Log();
  const auto published = Published(
      ReadTopic(kafka.bootstrap(), kTopic, kPartitions, CountOf(expected), Scaled(20s)));
  EXPECT_EQ(published, expected) << "every unsent row once, in order; no SENT row again";
  EXPECT_EQ(Exec(admin_.get(), "SELECT string_agg(status, ',' ORDER BY seq) FROM " + old_ +
                                   ".outbox WHERE aggregate_id = 'failed'"),
            "FAILED,PENDING,PENDING")
      << "the FAILED row still holds its followers";
}

INSTANTIATE_TEST_SUITE_P(EveryVersion, PostgresUpgradeTest, ::testing::Range(1, PostgresHead() + 1),
                         [](const auto& p) { return "from_v" + std::to_string(p.param); });

// The conversion from rows to the log (issue 42, step 7): a schema of every
// released version, with rows in every state, converted by `outboxctl migrate
// --layout log` (which first takes it to the row store's head). The result
// must match a fresh log install (`migrate --check`), a real relay must
// deliver every unsent row once and in order per aggregate (and an event
// enqueued after the conversion behind them), no SENT row again, the FAILED
// row must still hold its followers, every id (SENT ones too) must be found by
// trace, and a dedup key written before must still refuse its duplicate.
class PostgresConvertTest : public PostgresUpgradeTest {
 protected:
  CommandRun Ctl(const std::string& args) {
    return RunCommand(std::string(OUTBOX_OUTBOXCTL_BIN) + " --db '" + url_ + "' --schema " + old_ +
                      " " + args);
  }
};

TEST_P(PostgresConvertTest, FromThisVersionToTheLogKeepsEveryRowItsIdAndItsOrder) {
  const int k = GetParam();
  EXPECT_EQ(Migrate(old_, k).size(), static_cast<std::size_t>(k));
  std::vector<Row> rows = RowsFor(k >= kPostgresSkippedSince);
  auto ids = Fill(rows);
  const std::string keyed = Exec(admin_.get(), "SELECT event_id FROM " + old_ +
                                                   ".enqueue('order', 'keyed', 'OrderChanged', "
                                                   "'keyed#0'::bytea, '{}'::jsonb, 'key-0')");
  rows.push_back({"keyed", "keyed#0", "PENDING"});

  const CommandRun converted = Ctl("migrate --layout log");
  ASSERT_EQ(converted.code, 0) << converted.out;
  EXPECT_NE(converted.out.find("converted from rows to the log"), std::string::npos)
      << converted.out;
  EXPECT_EQ(Exec(admin_.get(), "SELECT to_regclass('" + old_ + ".schema_migrations') IS NULL AND "
                                   "to_regclass('" + old_ + ".log_migrations') IS NOT NULL"),
            "t");
  const CommandRun check = Ctl("migrate --check");
  EXPECT_EQ(check.code, 0) << "the converted schema differs from a fresh log install:\n"
                           << check.out;
  EXPECT_EQ(Exec(admin_.get(), "SELECT string_agg(status || '@' || attempts, ',' ORDER BY seq) "
                               "FROM " + old_ + ".outbox WHERE aggregate_id IN ('sent', 'leased')"),
            "PENDING@1,PENDING@0,SENT@1,SENT@1,PENDING@0")
      << "each row keeps its state and attempts (the leased one is due again)";
  for (const Row& r : rows) {
    if (r.status != "SENT" && r.status != "FAILED") continue;
    const CommandRun trace = Ctl("trace " + ids[r.payload]);
    EXPECT_EQ(trace.code, 0) << trace.out;
    EXPECT_NE(trace.out.find(r.status), std::string::npos) << r.payload << ":\n" << trace.out;
  }
  EXPECT_EQ(Exec(admin_.get(), "SELECT event_id::text || enqueued::text FROM " + old_ +
                                   ".enqueue('order', 'keyed', 'OrderChanged', 'again'::bytea, "
                                   "'{}'::jsonb, 'key-0')"),
            keyed + "false")
      << "a dedup key written before the conversion still refuses its duplicate";
  Exec(admin_.get(), "SELECT " + old_ + ".enqueue('order', 'pending', 'OrderChanged', "
                                        "'pending#after'::bytea)");
  rows.push_back({"pending", "pending#after", "PENDING"});

  MockKafka kafka(1, {std::string(kTopic) + ":" + std::to_string(kPartitions)});
  relay_ = std::make_unique<Subprocess>(
      RelayArgv(url_, kafka.bootstrap(), {"database.schema=" + old_}),
      std::map<std::string, std::string>{}, RelayLog(old_));
  const auto expected = Expected(rows);
  const auto published = Published(
      ReadTopic(kafka.bootstrap(), kTopic, kPartitions, CountOf(expected), Scaled(30s)));
  EXPECT_EQ(published, expected) << "every unsent row once, in order; no SENT row again\n"
                                 << relay_->Log();
  EXPECT_EQ(Exec(admin_.get(), "SELECT string_agg(status, ',' ORDER BY seq) FROM " + old_ +
                                   ".outbox WHERE aggregate_id = 'failed'"),
            "FAILED,PENDING,PENDING")
      << "the FAILED row still holds its followers";
  EXPECT_EQ(Exec(admin_.get(), "SELECT count(*) FROM " + old_ + ".log WHERE xmax <> '0'"), "0")
      << "no log row written twice (nor locked)";
}

INSTANTIATE_TEST_SUITE_P(EveryVersion, PostgresConvertTest, ::testing::Range(1, PostgresHead() + 1),
                         [](const auto& p) { return "from_v" + std::to_string(p.param); });

// A schema a change stream reads (a progress row, or a logical slot by the
// relay's default name) is refused, and nothing changes: the log has no CDC yet.
class PostgresConvertRefusalTest : public PostgresConvertTest {};

TEST_P(PostgresConvertRefusalTest, AStreamedSchemaIsRefusedAndKeptAsRows) {
  Migrate(old_, 0);
  Exec(admin_.get(), "SELECT " + old_ + ".enqueue('order', 'a', 'E', 'a#0'::bytea)");
  Exec(admin_.get(), "INSERT INTO " + old_ + ".stream_progress (slot, reader, confirmed_lsn, "
                     "covered_until) VALUES ('outbox_" + old_ + "', 'relay', '0/0', now())");
  const CommandRun refused = Ctl("migrate --layout log");
  EXPECT_NE(refused.code, 0) << refused.out;
  EXPECT_NE(refused.out.find("read by a change stream (replication slot outbox_" + old_),
            std::string::npos)
      << refused.out;
  EXPECT_EQ(Exec(admin_.get(), "SELECT to_regclass('" + old_ + ".log_migrations') IS NULL AND "
                               "(SELECT count(*) FROM " + old_ + ".outbox WHERE status = "
                               "'PENDING') = 1"),
            "t")
      << "the refusal changed nothing";
  const CommandRun check = Ctl("migrate --check");
  EXPECT_EQ(check.code, 0) << check.out;

  // A replication slot by the relay's default name, with no progress row yet.
  Exec(admin_.get(), "DELETE FROM " + old_ + ".stream_progress");
  const std::string slot = "outbox_" + old_;
  Exec(admin_.get(), "SELECT pg_create_logical_replication_slot('" + slot + "', 'pgoutput')");
  const CommandRun slotted = Ctl("migrate --layout log");
  Exec(admin_.get(), "SELECT pg_drop_replication_slot('" + slot + "')");
  EXPECT_NE(slotted.code, 0) << slotted.out;
  EXPECT_NE(slotted.out.find("read by a change stream (replication slot " + slot), std::string::npos)
      << slotted.out;
  EXPECT_EQ(Exec(admin_.get(), "SELECT to_regclass('" + old_ + ".log_migrations') IS NULL"), "t");
}

// A relay left running on the rows while the schema is converted claims
// nothing more and says to restart it; restarted, it reads the log, and every
// event goes out once, in order: the one it had sent before, never again.
TEST_P(PostgresConvertRefusalTest, ARelayLeftRunningSaysRestartAndRestartedReadsTheLog) {
  Migrate(old_, 0);
  MockKafka kafka(1, {std::string(kTopic) + ":" + std::to_string(kPartitions)});
  const std::vector<std::string> argv =
      RelayArgv(url_, kafka.bootstrap(), {"database.schema=" + old_});
  relay_ = std::make_unique<Subprocess>(argv, std::map<std::string, std::string>{}, RelayLog(old_));
  const std::string enqueue = "SELECT " + old_ + ".enqueue('order', 'a', 'OrderChanged', ";
  Exec(admin_.get(), enqueue + "'a#0'::bytea)");
  ASSERT_TRUE(WaitFor([&] {
    return Exec(admin_.get(), "SELECT count(*) FROM " + old_ + ".outbox WHERE status = 'SENT'") == "1";
  }, Scaled(20s))) << relay_->Log();

  const CommandRun converted = Ctl("migrate --layout log");
  ASSERT_EQ(converted.code, 0) << converted.out;
  Exec(admin_.get(), enqueue + "'a#1'::bytea)");
  ASSERT_TRUE(WaitFor([&] {
    return relay_->Log().find("was converted to the log while this process had it open as rows: "
                              "restart it") != std::string::npos;
  }, Scaled(20s))) << relay_->Log();
  EXPECT_EQ(Exec(admin_.get(), "SELECT string_agg(status, ',' ORDER BY seq) FROM " + old_ + ".outbox"),
            "SENT,PENDING");
  EXPECT_EQ(ReadTopic(kafka.bootstrap(), kTopic, kPartitions, 1, Scaled(5s)).size(), 1u)
      << "the old relay published nothing after the conversion";

  relay_.reset();
  relay_ = std::make_unique<Subprocess>(argv, std::map<std::string, std::string>{}, RelayLog(old_));
  const auto published = Published(ReadTopic(kafka.bootstrap(), kTopic, kPartitions, 2, Scaled(20s)));
  EXPECT_EQ(published, (std::map<std::string, std::vector<std::string>>{{"a", {"a#0", "a#1"}}}))
      << relay_->Log();
}

// outboxctl killed inside the conversion's transaction, at its last step:
// the log set is installed and every row copied into it, and the statement
// that reads the old table's sequence waits on a lock another session holds
// (ALTER SEQUENCE, uncommitted). The process is killed there (SIGKILL), then
// the lock is let go: the server runs what it had been sent, finds no client
// to commit, and rolls everything back. The schema is the row store it was,
// every row in its state; the next run converts it whole.
TEST_P(PostgresConvertRefusalTest,
       AConversionKilledAfterItMovedTheRowsLeavesTheRowStoreAsItWas) {
  Migrate(old_, 0);
  const std::vector<Row> rows = RowsFor(true);
  Fill(rows);
  const std::string state =
      "SELECT string_agg(event_id || ':' || status || ':' || attempts, ',' "
      "ORDER BY seq) FROM " +
      old_ + ".outbox";
  const std::string before = Exec(admin_.get(), state);
  const std::string ids =
      "SELECT string_agg(event_id::text, ',' ORDER BY seq) FROM " + old_ + ".outbox";
  const std::string ids_before = Exec(admin_.get(), ids);
  const std::string seq =
      Exec(admin_.get(), "SELECT pg_get_serial_sequence('" + old_ + ".outbox', 'seq')");
  ASSERT_FALSE(seq.empty());
  PgConn blocker = Connect(url_);
  Exec(blocker.get(), "BEGIN");
  Exec(blocker.get(),
       "ALTER SEQUENCE " + seq + " INCREMENT BY 1");  // no change; its lock stays

  Subprocess ctl({OUTBOX_OUTBOXCTL_BIN, "--db", url_, "--schema", old_, "migrate",
                  "--layout", "log"},
                 {}, RelayLog(old_ + "-ctl"));
  // Waiting on the sequence: the rows are in the log, uncommitted.
  const std::string waiting =
      "SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a USING (pid) "
      "WHERE a.application_name = 'outboxctl' AND NOT l.granted "
      "AND l.relation = '" +
      seq + "'::regclass";
  std::string backend;  // its session's pid
  ASSERT_TRUE(WaitFor([&] { return !(backend = Exec(admin_.get(), waiting)).empty(); },
                      Scaled(30s)))
      << ctl.Log();
  ctl.Signal(SIGKILL);
  ASSERT_TRUE(ctl.Wait(Scaled(10s)).has_value());
  Exec(blocker.get(), "ROLLBACK");
  ASSERT_TRUE(WaitFor(
      [&] {
        return Exec(admin_.get(), "SELECT count(*) FROM pg_stat_activity WHERE pid = " +
                                      backend) == "0";
      },
      Scaled(30s)))
      << "the killed conversion's session never ended";

  EXPECT_EQ(Exec(admin_.get(), "SELECT to_regclass('" + old_ +
                                   ".schema_migrations') IS NOT NULL AND "
                                   "to_regclass('" +
                                   old_ +
                                   ".log_migrations') IS NULL AND "
                                   "to_regclass('" +
                                   old_ + ".outbox_converting') IS NULL"),
            "t")
      << "the row store, as it was";
  EXPECT_EQ(Exec(admin_.get(), state), before) << "every row in its state";
  const CommandRun check = Ctl("migrate --check");
  EXPECT_EQ(check.code, 0) << check.out;

  const CommandRun converted = Ctl("migrate --layout log");
  ASSERT_EQ(converted.code, 0) << converted.out;
  EXPECT_NE(converted.out.find("converted from rows to the log"), std::string::npos)
      << converted.out;
  EXPECT_EQ(Exec(admin_.get(), ids), ids_before)
      << "the log's view lists every event, in order";
}

INSTANTIATE_TEST_SUITE_P(Head, PostgresConvertRefusalTest, ::testing::Values(PostgresHead()));

// ------------------------------------------------------------------- MariaDB

int MariaDbHead() { return static_cast<int>(maria::OutboxMigrationFiles().size()); }

// Every row of `sql`'s result, its columns joined by tabs.
std::vector<std::vector<std::string>> Rows(MYSQL* c, const std::string& sql) {
  std::vector<std::vector<std::string>> out;
  if (mysql_real_query(c, sql.data(), sql.size()) != 0) {
    ADD_FAILURE() << sql << ": " << mysql_error(c);
    return out;
  }
  MYSQL_RES* r = mysql_store_result(c);
  if (!r) return out;
  const unsigned n = mysql_num_fields(r);
  while (MYSQL_ROW row = mysql_fetch_row(r)) {
    std::vector<std::string> cols;
    for (unsigned i = 0; i < n; ++i) cols.push_back(row[i] ? row[i] : "NULL");
    out.push_back(std::move(cols));
  }
  mysql_free_result(r);
  return out;
}

class MariaDbUpgradeTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    OUTBOX_REQUIRE_ENV(base_, "OUTBOX_MYSQL_URL");
    const std::string suffix = RandomSuffix();
    old_ = "upg" + std::to_string(GetParam()) + "_" + suffix;
    fresh_ = "upgfresh_" + suffix;
    admin_ = OpenMariaDb(base_, "");
    ASSERT_NE(admin_, nullptr);
    for (const std::string& db : {old_, fresh_}) MyQuery(admin_, "CREATE DATABASE " + db);
  }
  void TearDown() override {
    relay_.reset();
    if (!admin_) return;
    for (const std::string& db : {old_, fresh_}) MyQuery(admin_, "DROP DATABASE IF EXISTS " + db);
    mysql_close(admin_);
  }

  std::vector<int> Migrate(const std::string& db, int up_to) {
    MYSQL* c = OpenMariaDb(base_, db);
    std::vector<int> applied;
    Status st = maria::RunMigrations(c, maria::kOutboxSet, &applied, up_to);
    EXPECT_TRUE(st.ok()) << db << " up to " << up_to << ": " << st.ToString();
    mysql_close(c);
    return applied;
  }

  void Fill(const std::vector<Row>& rows) {
    for (const Row& r : rows) {
      std::string extra;
      if (r.status == "PROCESSING") {
        extra = ", attempts = 1, lease_owner = 'relay-of-version-k', lease_token = 1, claimed_at = "
                "UTC_TIMESTAMP(6) - INTERVAL 2 MINUTE";  // available_at: the lease's end, passed
      } else if (r.status == "FAILED") {
        extra = ", attempts = 3, failed_at = UTC_TIMESTAMP(6), last_error = 'refused'";
      } else if (r.status == "SENT") {
        extra = ", attempts = 1, sent_at = UTC_TIMESTAMP(6)";
      } else if (r.status == "SKIPPED") {
        extra = ", skipped_at = UTC_TIMESTAMP(6), skipped_by = 'operator', skip_reason = 'upgrade'";
      }
      MyQuery(admin_, "INSERT INTO " + old_ + ".outbox SET event_id = UUID(), aggregate_type = "
                      "'order', aggregate_id = '" + r.aggregate + "', event_type = 'OrderChanged', "
                      "payload = '" + r.payload + "', headers = '{}', status = '" + r.status +
                      "', available_at = UTC_TIMESTAMP(6) - INTERVAL 1 MINUTE, created_at = UTC_TIMESTAMP(6)" +
                      extra);
    }
  }

  // Every table's, sequence's and routine's definition; AUTO_INCREMENT
  // counters (data, not schema) dropped.
  std::string Catalog(const std::string& db) {
    std::string out;
    for (const auto& t : Rows(admin_, "SELECT table_name, table_type FROM information_schema.tables "
                                      "WHERE table_schema = '" + db + "' ORDER BY table_name")) {
      const bool sequence = t[1] == "SEQUENCE";
      for (const auto& row : Rows(admin_, std::string(sequence ? "SHOW CREATE SEQUENCE " :
                                                                 "SHOW CREATE TABLE ") +
                                              db + "." + t[0])) {
        out += std::regex_replace(row[1], std::regex(" AUTO_INCREMENT=[0-9]+"), "") + "\n";
      }
    }
    for (const auto& r : Rows(admin_, "SELECT routine_name FROM information_schema.routines WHERE "
                                      "routine_schema = '" + db + "' ORDER BY routine_name")) {
      for (const auto& row : Rows(admin_, "SHOW CREATE PROCEDURE " + db + "." + r[0])) {
        out += row[2] + "\n";
      }
    }
    return std::regex_replace(out, std::regex(db), "DB");
  }

  std::string base_, old_, fresh_;
  MYSQL* admin_ = nullptr;
  std::unique_ptr<Subprocess> relay_;
};

TEST_P(MariaDbUpgradeTest, FromThisVersionToHeadMatchesAFreshInstallAndDelivers) {
  const int k = GetParam();
  EXPECT_EQ(Migrate(old_, k).size(), static_cast<std::size_t>(k));
  const std::vector<Row> rows = RowsFor(/*has_skipped=*/true);
  Fill(rows);
  std::vector<int> rest;
  for (int v = k + 1; v <= MariaDbHead(); ++v) rest.push_back(v);
  EXPECT_EQ(Migrate(old_, 0), rest);
  EXPECT_EQ(Migrate(fresh_, 0).size(), static_cast<std::size_t>(MariaDbHead()));

  const std::string upgraded = Catalog(old_);
  EXPECT_NE(upgraded.find("outbox_enqueue"), std::string::npos) << upgraded;
  EXPECT_EQ(upgraded, Catalog(fresh_)) << "version " << k << " migrated to head differs from a "
                                       << "fresh install";

  MockKafka kafka(1, {std::string(kTopic) + ":" + std::to_string(kPartitions)});
  relay_ = std::make_unique<Subprocess>(RelayArgv(MariaDbUrlFor(base_, old_), kafka.bootstrap(), {}),
                                        std::map<std::string, std::string>{}, RelayLog(old_));
  const auto expected = Expected(rows);
  const std::string unsent = "SELECT count(*) FROM " + old_ +
                             ".outbox WHERE status IN ('PENDING', 'PROCESSING') AND "
                             "aggregate_id <> 'failed'";
  ASSERT_TRUE(WaitFor([&] { return MyQuery(admin_, unsent) == "0"; }, Scaled(30s)))
      << relay_->Log();
  const auto published = Published(
      ReadTopic(kafka.bootstrap(), kTopic, kPartitions, CountOf(expected), Scaled(20s)));
  EXPECT_EQ(published, expected) << "every unsent row once, in order; no SENT row again";
  EXPECT_EQ(MyQuery(admin_, "SELECT group_concat(status ORDER BY seq) FROM " + old_ +
                                ".outbox WHERE aggregate_id = 'failed'"),
            "FAILED,PENDING,PENDING")
      << "the FAILED row still holds its followers";
}

INSTANTIATE_TEST_SUITE_P(EveryVersion, MariaDbUpgradeTest, ::testing::Range(1, MariaDbHead() + 1),
                         [](const auto& p) { return "from_v" + std::to_string(p.param); });

}  // namespace
}  // namespace outbox::testing
