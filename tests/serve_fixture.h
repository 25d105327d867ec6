// The fixture of the `outboxctl serve` tests: a migrated schema, events in it,
// the server as a real process on a free port, and an HTTP client.
#ifndef OUTBOX_TESTS_SERVE_FIXTURE_H_
#define OUTBOX_TESTS_SERVE_FIXTURE_H_

#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "outbox/postgres.h"
#include "outbox/postgres_inbox.h"
#include "subprocess.h"
#include "test_env.h"

namespace outbox::testing {

using nlohmann::json;
inline constexpr const char* kToken = "t0ken-for-the-dashboard-test";

class ServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    OUTBOX_REQUIRE_ENV(url_, "OUTBOX_PG_URL");
    schema_ = "t_" + RandomSuffix();
    conn_ = Connect(url_);
    base_ = std::string(OUTBOX_OUTBOXCTL_BIN) + " --db '" + url_ + "' --schema " + schema_;
    CommandRun m = RunCommand(base_ + " migrate");
    ASSERT_EQ(m.code, 0) << m.out;
  }
  void TearDown() override {
    server_.reset();
    if (conn_) {
      Exec(conn_.get(), "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots "
                        "WHERE slot_name = 'outbox_" + schema_ + "'");
      Exec(conn_.get(), "DROP SCHEMA IF EXISTS " + schema_ + "_inbox CASCADE");
      Exec(conn_.get(), "DROP SCHEMA IF EXISTS " + schema_ + " CASCADE");
    }
  }

  std::string EnqueueOne(const std::string& agg, const std::string& dedup,
                         const std::string& payload = "{}") {
    Event e;
    e.aggregate_type = "lesson";
    e.aggregate_id = agg;
    e.event_type = "LessonCompleted";
    e.payload = payload;
    static int n = 0;
    e.dedup_key = dedup.empty() ? "k-" + schema_ + "-" + std::to_string(++n) : dedup;
    EnqueueOptions eo;
    eo.schema = schema_;
    Exec(conn_.get(), "BEGIN");
    auto r = Enqueue(conn_.get(), e, eo);
    Exec(conn_.get(), "COMMIT");
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? r->event_id : "";
  }
  std::string StatusOf(const std::string& id) {
    return Exec(conn_.get(), "SELECT status FROM " + schema_ + ".outbox WHERE event_id = '" + id + "'");
  }
  void Fail(const std::string& id, const std::string& error) {
    Exec(conn_.get(), "UPDATE " + schema_ + ".outbox SET status = 'FAILED', attempts = 3, failed_at = now(), "
                          "last_error = " + Quote(error) + " WHERE event_id = '" + id + "'");
  }
  // The consumer's inbox (schema <schema>_inbox) having applied `event_id`
  // once and absorbed one more copy of it.
  void ApplyInInbox(const std::string& consumer, const std::string& event_id) {
    PostgresInboxOptions io;
    io.conninfo = url_;
    io.schema = schema_ + "_inbox";
    io.consumer = consumer;
    auto inbox = OpenPostgresInbox(io, [](const InboundMessage&, pg_conn*) { return HandlerResult::Ok(); });
    ASSERT_TRUE(inbox.ok()) << inbox.status().ToString();
    ASSERT_TRUE((*inbox)->Migrate().ok());
    InboundMessage m;
    m.topic = "orders";
    m.headers["outbox-event-id"] = event_id;
    for (int copy = 0; copy < 2; ++copy) {  // the second copy is absorbed
      ASSERT_TRUE((*inbox)->Apply(std::span(&m, 1), std::span(&event_id, 1)).ok());
    }
  }

  // As a relay would leave it: SENT, claimed by `relay`.
  void Send(const std::string& id, const std::string& relay) {
    Exec(conn_.get(), "UPDATE " + schema_ + ".outbox SET status = 'SENT', sent_at = now(), claimed_at = now(), "
                          "attempts = 1, lease_owner = " + Quote(relay) + " WHERE event_id = '" + id + "'");
  }
  std::string Quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("''") : std::string(1, c);
    return q + "'";
  }

  // Starts the server on a free port; true once it printed its address.
  bool Start(std::map<std::string, std::string> env, std::vector<std::string> more = {}) {
    std::vector<std::string> argv = {OUTBOX_OUTBOXCTL_BIN, "--db", url_, "--schema", schema_,
                                     "serve", "--listen", "127.0.0.1:0"};
    argv.insert(argv.end(), more.begin(), more.end());
    server_.reset();  // the last one gone before its log is reused
    server_ = std::make_unique<Subprocess>(
        argv, env, (std::filesystem::temp_directory_path() / ("serve-" + schema_)).string());
    return WaitFor([&] {
      const std::string log = server_->Log();
      const auto at = log.find("http://127.0.0.1:");
      if (at == std::string::npos) return false;
      port_ = std::stoi(log.substr(at + 17));
      return true;
    }, std::chrono::seconds(10));
  }
  httplib::Client Client() {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(10, 0);
    return c;
  }
  json GetJson(const std::string& path, int* status = nullptr) {
    auto c = Client();
    auto r = c.Get(path.c_str());
    if (!r) return json();
    if (status) *status = r->status;
    return json::parse(r->body, nullptr, false);
  }
  httplib::Result Post(const std::string& path, const json& body, const httplib::Headers& headers,
                       const char* type = "application/json") {
    auto c = Client();
    return c.Post(path.c_str(), headers, body.dump(), type);
  }
  static httplib::Headers Bearer(const std::string& token) {
    return {{"Authorization", "Bearer " + token}};
  }

  std::string url_, schema_, base_;
  PgConn conn_;
  std::unique_ptr<Subprocess> server_;
  int port_ = 0;
};

}  // namespace outbox::testing

#endif  // OUTBOX_TESTS_SERVE_FIXTURE_H_
