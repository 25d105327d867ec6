// RelayE2ETest: the fixture for tests that run outbox-relay as a real process
// against the real PostgreSQL (a fresh schema per test) and a private
// outbox-mock-kafka.
#ifndef OUTBOX_TESTS_RELAY_FIXTURE_H_
#define OUTBOX_TESTS_RELAY_FIXTURE_H_

#include <gtest/gtest.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include "kafka_helpers.h"
#include "outbox/postgres.h"
#include "prometheus_text.h"
#include "subprocess.h"
#include "test_env.h"

namespace outbox::testing {

using namespace std::chrono_literals;

inline const char* kTopic = "outbox.event.order";
constexpr int kPartitions = 8;

// One OrderChanged event of aggregate `aggregate_id` (topic kTopic).
inline Event OrderEvent(const std::string& aggregate_id, std::string payload) {
  Event e;
  e.aggregate_type = "order";
  e.aggregate_id = aggregate_id;
  e.event_type = "OrderChanged";
  e.payload = std::move(payload);
  return e;
}

class RelayE2ETest : public ::testing::Test {
 protected:
  void SetUp() override {
    OUTBOX_REQUIRE_ENV(url_, "OUTBOX_PG_URL");
    schema_ = "t_" + RandomSuffix();
    PostgresStoreOptions o;
    o.conninfo = url_;
    o.schema = schema_;
    auto store = OpenPostgresStore(o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE((*store)->Migrate().ok());
    admin_ = Connect(url_);
    kafka_ = std::make_unique<MockKafka>(3, std::vector<std::string>{
                                                std::string(kTopic) + ":" + std::to_string(kPartitions)});
    ASSERT_FALSE(kafka_->bootstrap().empty());
  }
  void TearDown() override {
    relays_.clear();
    if (admin_) {
      // A cdc test leaves a slot (it would pin WAL for good) and every
      // migrated schema a publication (a database object, not the schema's).
      const std::string name = DefaultStreamName(schema_);
      Exec(admin_.get(), "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots "
                         "WHERE slot_name = '" + name + "' AND active_pid IS NOT NULL");
      for (int i = 0; i < 50; ++i) {
        if (Exec(admin_.get(), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '" +
                                   name + "' AND active") == "0") {
          break;
        }
        std::this_thread::sleep_for(100ms);
      }
      Exec(admin_.get(), "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                         "WHERE slot_name = '" + name + "'");
      Exec(admin_.get(), "DROP PUBLICATION IF EXISTS " + name);
      DropSchemaRetrying(admin_.get(), schema_);
    }
  }

  // The test's schema as the log (issue 42) instead of the row store SetUp made:
  // what `outboxctl migrate --layout log` installs.
  void UseLogLayout() {
    DropSchemaRetrying(admin_.get(), schema_);
    Exec(admin_.get(), "DROP PUBLICATION IF EXISTS " + DefaultStreamName(schema_));
    PostgresStoreOptions o;
    o.conninfo = url_;
    o.schema = schema_;
    o.layout = StoreLayout::kLog;
    auto store = OpenPostgresStore(o);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE((*store)->Migrate().ok());
  }

  // The settings of a relay in cdc mode, with test-sized intervals.
  static std::vector<std::string> CdcSets(std::vector<std::string> more = {}) {
    // Staleness scales with the sanitizers' slowdown: a stream that misses its
    // reports for that long is taken for dead and swept after.
    std::vector<std::string> s = {"relay.source=cdc", "cdc.sweep_after_ms=500",
                                  "cdc.status_interval_ms=100",
                                  "cdc.stream_stale_after_ms=" + std::to_string(Scaled(3000ms).count()),
                                  "cdc.standby_retry_ms=200", "cdc.heartbeat_interval_ms=500"};
    s.insert(s.end(), more.begin(), more.end());
    return s;
  }

  // Waits until the relay's log contains `text`.
  bool WaitForLog(Subprocess& relay, const std::string& text,
                  std::chrono::milliseconds timeout = 20s) {
    return WaitFor([&] { return relay.Log().find(text) != std::string::npos; }, timeout);
  }

  Subprocess& StartRelay(std::vector<std::string> sets = {},
                         std::map<std::string, std::string> env = {}) {
    std::vector<std::string> argv = {OUTBOX_RELAY_BIN, "--db", url_, "--bootstrap",
                                     kafka_->bootstrap()};
    std::vector<std::string> defaults = {
        "database.schema=" + schema_, "http.listen=127.0.0.1:0", "relay.backoff_base_ms=50",
        "relay.backoff_max_ms=500", "relay.poll_max_ms=50", "relay.stats_interval_ms=200",
        "relay.lease_ms=15000", "kafka.properties.message.timeout.ms=3000",
        "relay.id=relay-" + std::to_string(relays_.size())};
    for (const auto& s : defaults) sets.insert(sets.begin(), s);  // later --set wins
    for (const auto& s : sets) {
      argv.push_back("--set");
      argv.push_back(s);
    }
    std::string log = (std::filesystem::temp_directory_path() /
                       ("outbox-relay-" + schema_ + "-" + std::to_string(relays_.size()) + ".log"))
                          .string();
    relays_.push_back(std::make_unique<Subprocess>(argv, env, log));
    return *relays_.back();
  }

  // The port the relay's HTTP server bound (from its log).
  int HttpPort(Subprocess& relay) { return LoggedHttpPort([&] { return relay.Log(); }); }

  static std::string Get(int port, const std::string& path, int* status = nullptr) {
    httplib::Client cli("127.0.0.1", port);
    cli.set_read_timeout(5, 0);
    auto res = cli.Get(path.c_str());
    if (status) *status = res ? res->status : 0;
    return res ? res->body : "";
  }

  // /readyz's answer once it is 200, or its last answer after 10 s (scaled).
  // A relay that has just delivered may not have had its first gauges round
  // yet: it answers "not ready: starting" for those moments.
  static std::string WaitReady(int port, int* status) {
    std::string body;
    WaitFor([&] { body = Get(port, "/readyz", status); return *status == 200; },
            Scaled(std::chrono::seconds(10)));
    return body;
  }

  // The value of a sample in Prometheus text (its name, and labels it must
  // have), or -1 (prometheus_text.h).
  static double Metric(const std::string& body, const std::string& name) {
    return PrometheusSample(body, name);
  }

  // One OrderChanged event of aggregate `aggregate_id`, in its own transaction on
  // the admin session (which keeps its settings, e.g. outbox.notify). False if
  // the enqueue failed (the transaction is then rolled back).
  bool EnqueueOne(const std::string& aggregate_id, std::string payload) {
    Event e = OrderEvent(aggregate_id, std::move(payload));
    EnqueueOptions eo;
    eo.schema = schema_;
    Exec(admin_.get(), "BEGIN");
    const bool ok = Enqueue(admin_.get(), e, eo).ok();
    Exec(admin_.get(), ok ? "COMMIT" : "ROLLBACK");
    return ok;
  }

  // `producers` threads, each on its own connection, enqueue events
  // `from`..`per_aggregate`-1 ("agg#n") for each of its `aggregates_each`
  // aggregates, 50 per transaction.
  void EnqueueMany(int producers, int aggregates_each, int per_aggregate, int from = 0) {
    std::vector<std::thread> ts;
    std::atomic<int> failures{0};
    for (int p = 0; p < producers; ++p) {
      ts.emplace_back([&, p] {
        PgConn c = Connect(url_);
        EnqueueOptions eo;
        eo.schema = schema_;
        std::vector<Event> batch;
        auto flush = [&] {
          if (batch.empty()) return;
          Exec(c.get(), "BEGIN");
          auto r = EnqueueBatch(c.get(), batch, eo);
          if (!r.ok()) ++failures;
          Exec(c.get(), r.ok() ? "COMMIT" : "ROLLBACK");
          batch.clear();
        };
        for (int n = from; n < per_aggregate; ++n) {
          for (int a = 0; a < aggregates_each; ++a) {
            const std::string agg = "agg-" + std::to_string(p) + "-" + std::to_string(a);
            Event e;
            e.aggregate_type = "order";
            e.aggregate_id = agg;
            e.event_type = "OrderChanged";
            e.payload = agg + "#" + std::to_string(n);
            e.headers = {{"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}};
            e.dedup_key = agg + "#" + std::to_string(n);
            batch.push_back(std::move(e));
            if (batch.size() == 50) flush();
          }
        }
        flush();
      });
    }
    for (auto& t : ts) t.join();
    ASSERT_EQ(failures.load(), 0);
  }

  std::int64_t CountStatus(const std::string& status) {
    return std::stoll(Exec(admin_.get(), "SELECT count(*) FROM " + schema_ +
                                             ".outbox WHERE status = '" + status + "'"));
  }

  // Every expected payload is on the topic, keys and headers right, and per
  // aggregate the first copies arrive in enqueue order (later copies are
  // duplicates, which the inbox absorbs). Returns the number of duplicates.
  std::size_t CheckDelivered(const std::vector<Message>& msgs, int producers, int aggregates_each,
                             int per_aggregate) {
    std::map<std::string, int> next;  // aggregate -> next expected n
    std::size_t dups = 0;
    std::set<std::string> event_ids;
    std::vector<const Message*> sorted;
    for (const auto& m : msgs) sorted.push_back(&m);
    std::sort(sorted.begin(), sorted.end(), [](const Message* a, const Message* b) {
      return std::tie(a->partition, a->offset) < std::tie(b->partition, b->offset);
    });
    for (const Message* m : sorted) {
      auto hash = m->value.find('#');
      EXPECT_NE(hash, std::string::npos) << m->value;
      if (hash == std::string::npos) continue;
      const std::string agg = m->value.substr(0, hash);
      const int n = std::stoi(m->value.substr(hash + 1));
      EXPECT_EQ(m->key, agg);
      EXPECT_EQ(m->headers.at("outbox-aggregate-id"), agg);
      EXPECT_EQ(m->headers.at("outbox-event-type"), "OrderChanged");
      EXPECT_EQ(m->headers.at("outbox-dedup-key"), m->value);
      EXPECT_EQ(m->headers.at("traceparent"),
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
      EXPECT_EQ(m->headers.at("outbox-event-id").size(), 36u);
      int& want = next[agg];
      if (n < want) {
        ++dups;
        continue;
      }
      EXPECT_EQ(n, want) << "aggregate " << agg << ": event " << n << " arrived before " << want;
      want = n + 1;
      event_ids.insert(m->headers.at("outbox-event-id"));
    }
    for (int p = 0; p < producers; ++p) {
      for (int a = 0; a < aggregates_each; ++a) {
        const std::string agg = "agg-" + std::to_string(p) + "-" + std::to_string(a);
        EXPECT_EQ(next[agg], per_aggregate) << agg << " is missing events";
      }
    }
    EXPECT_EQ(event_ids.size(), static_cast<std::size_t>(producers * aggregates_each * per_aggregate));
    return dups;
  }

  std::string url_, schema_;
  PgConn admin_;
  std::unique_ptr<MockKafka> kafka_;
  std::vector<std::unique_ptr<Subprocess>> relays_;
};

}  // namespace outbox::testing

#endif  // OUTBOX_TESTS_RELAY_FIXTURE_H_
