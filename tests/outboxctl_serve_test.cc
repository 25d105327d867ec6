// `outboxctl serve` as a real process against the real PostgreSQL, over HTTP:
// the API answers what `outboxctl --json` says, actions change rows only with
// the token, bad input is refused naming the parameter.
#include <filesystem>
#include <fstream>

#include "kafka_helpers.h"
#include "outbox/postgres_inbox.h"
#include "serve_fixture.h"

namespace outbox::testing {
namespace {

TEST_F(ServeTest, StatusEqualsOutboxctlStatusAndTraceFindsADedupKey) {
  for (int i = 0; i < 5; ++i) EnqueueOne("a" + std::to_string(i), "");
  const std::string failed = EnqueueOne("held", "dedup-held-1");
  EnqueueOne("held", "");  // waits behind the FAILED one
  Fail(failed, "broker said no");
  ASSERT_TRUE(Start({})) << server_->Log();

  int code = 0;
  json api = GetJson("/api/status", &code);
  ASSERT_EQ(code, 200) << api.dump();
  CommandRun cli = RunCommand(base_ + " --json status");
  ASSERT_EQ(cli.code, 0) << cli.out;
  json want = json::parse(cli.out);
  for (const char* k : {"pending", "processing", "sent", "failed", "skipped", "held_aggregates"}) {
    EXPECT_EQ(api[k], want[k]) << k;
  }
  EXPECT_EQ(api["failed"], 1);
  EXPECT_EQ(api["held_aggregates"], 1);
  EXPECT_EQ(api["actions"], false) << "no token: read-only";

  json t = GetJson("/api/trace?key=dedup-held-1", &code);
  ASSERT_EQ(code, 200);
  ASSERT_EQ(t["outbox"].size(), 1u) << t.dump();
  EXPECT_EQ(t["outbox"][0]["event_id"], failed);
  EXPECT_EQ(t["outbox"][0]["last_error"], "broker said no");
  EXPECT_EQ(GetJson("/api/trace?key=no-such-key")["outbox"].size(), 0u);
  // An event id in capitals is the same id; a near-UUID is no id (not an error).
  std::string upper = failed;
  for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  EXPECT_EQ(GetJson("/api/trace?key=" + upper)["outbox"].size(), 1u);
  json near = GetJson("/api/trace?key=" + failed.substr(0, 35) + "g", &code);
  EXPECT_EQ(code, 200) << near.dump();
  EXPECT_EQ(near["outbox"].size(), 0u);

  json list = GetJson("/api/events?state=FAILED", &code);
  ASSERT_EQ(code, 200);
  ASSERT_EQ(list["rows"].size(), 1u);
  EXPECT_EQ(list["rows"][0]["aggregate_id"], "held");

  // Read-only: the actions answer 403 and change nothing.
  auto r = Post("/api/replay", {{"event_id", failed}}, Bearer(kToken));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403) << r->body;
  EXPECT_EQ(StatusOf(failed), "FAILED");
}

// The trace shows the payload as text — its first bytes, whole characters
// only, the length said — or says it is not text.
TEST_F(ServeTest, TraceShowsThePayloadCutAtACharacterOrSaysItIsBinary) {
  std::string euros;
  for (int i = 0; i < 1700; ++i) euros += "\xe2\x82\xac";  // U+20AC, 3 bytes: 5100 bytes
  EnqueueOne("long", "dedup-long", euros);
  EnqueueOne("bin", "dedup-bin", std::string("\xff\xfe", 2));
  ASSERT_TRUE(Start({})) << server_->Log();
  json t = GetJson("/api/trace?key=dedup-long");
  ASSERT_EQ(t["outbox"].size(), 1u) << t.dump();
  EXPECT_EQ(t["outbox"][0]["payload_bytes"], 5100);
  const std::string p = t["outbox"][0]["payload"];
  EXPECT_EQ(p.rfind("\xe2\x82\xac\xe2\x82\xac", 0), 0u);
  EXPECT_NE(p.find("bytes, truncated)"), std::string::npos) << "the page's 2,000-byte cut";
  EXPECT_EQ(p.find("\xef\xbf\xbd"), std::string::npos) << "no character cut in half (U+FFFD)";
  // outboxctl trace --json itself: 4095 bytes (1365 whole characters), the length said.
  CommandRun cli = RunCommand(base_ + " --json trace dedup-long");
  ASSERT_EQ(cli.code, 0) << cli.out;
  const std::string full = json::parse(cli.out)["outbox"][0]["payload"];
  EXPECT_NE(full.find("(the first 4095 of 5100 bytes)"), std::string::npos) << full.substr(full.size() - 60);
  EXPECT_EQ(GetJson("/api/trace?key=dedup-bin")["outbox"][0]["payload"], "(not UTF-8 text: 2 bytes)");
  EXPECT_TRUE(GetJson("/api/trace?key=dedup-bin")["outbox"][0]["headers"].is_object());
}

TEST_F(ServeTest, ActivityCountsTheLastHourAndNamesTheRelays) {
  for (int i = 0; i < 3; ++i) Send(EnqueueOne("s" + std::to_string(i), ""), "relay-7");
  Fail(EnqueueOne("f", ""), "fatal");
  EnqueueOne("p", "");
  ASSERT_TRUE(Start({})) << server_->Log();
  int code = 0;
  json a = GetJson("/api/activity", &code);
  ASSERT_EQ(code, 200) << a.dump();
  EXPECT_EQ(a["window_seconds"], 3600);
  long long sent = 0, failed = 0;
  for (const auto& m : a["minutes"]) {
    sent += m["sent"].get<long long>();
    failed += m["failed"].get<long long>();
  }
  EXPECT_EQ(sent, 3);
  EXPECT_EQ(failed, 1);
  ASSERT_EQ(a["relays"].size(), 1u) << a.dump();
  EXPECT_EQ(a["relays"][0]["relay"], "relay-7");
  EXPECT_EQ(a["relays"][0]["rows"], 3);
}

// With --inbox-db: the consumers' stamps and absorbed copies, and the trace
// reaching into the inbox; a change stream's slot and the WAL it keeps.
TEST_F(ServeTest, ConsumersAndTheChangeStreamsSlotAreShown) {
  const std::string id = EnqueueOne("u3/l3", "LessonCompleted:u3:l3");
  const std::string inbox_schema = schema_ + "_inbox";
  ApplyInInbox("quest-service", id);
  // A change stream's slot, as a cdc relay leaves it.
  const std::string slot = "outbox_" + schema_;
  Exec(conn_.get(), "SELECT pg_create_logical_replication_slot('" + slot + "', 'pgoutput')");
  {
    PostgresStoreOptions so;
    so.conninfo = url_;
    so.schema = schema_;
    auto store = OpenPostgresStore(so);
    ASSERT_TRUE(store.ok());
    ASSERT_TRUE((*store)->Ledger()->OpenStreamProgress(slot, "relay-cdc").ok());
  }
  ASSERT_TRUE(Start({}, {"--inbox-db", url_, "--inbox-schema", inbox_schema})) << server_->Log();

  int code = 0;
  json c = GetJson("/api/inbox", &code);
  ASSERT_EQ(code, 200) << c.dump();
  EXPECT_EQ(c["configured"], true);
  ASSERT_EQ(c["consumers"].size(), 1u) << c.dump();
  EXPECT_EQ(c["consumers"][0]["consumer"], "quest-service");
  EXPECT_EQ(c["consumers"][0]["stamps"], 1);
  EXPECT_EQ(c["consumers"][0]["duplicates"], 1);
  json t = GetJson("/api/trace?key=LessonCompleted:u3:l3");
  ASSERT_EQ(t["inbox"].size(), 1u) << t.dump();
  EXPECT_EQ(t["inbox"][0]["duplicates"], 1);

  json a = GetJson("/api/activity", &code);
  ASSERT_EQ(code, 200) << a.dump();
  bool reader = false;
  for (const auto& r : a["relays"]) reader |= r["relay"] == "relay-cdc" && r["role"] == "stream " + slot;
  EXPECT_TRUE(reader) << a.dump();
  ASSERT_EQ(a["slots"].size(), 1u) << a.dump();
  EXPECT_EQ(a["slots"][0]["slot"], slot);
  EXPECT_EQ(a["slots"][0]["active"], false);
  EXPECT_GE(a["slots"][0]["retained_wal_bytes"].get<long long>(), 0);
}

// Dead letters back to their topic, from the page's form: a count first, then
// one key's; only with the token, only with a broker.
TEST_F(ServeTest, DeadLetterReplayCountsThenSendsOneKeyBack) {
  MockKafka kafka(1, {"orders.dlt:1", "orders:1", "orders.retry.1:1"});
  std::vector<Message> dead;
  for (int i = 0; i < 3; ++i) {
    Message m;
    m.key = "k" + std::to_string(i);
    m.value = "{\"n\":" + std::to_string(i) + "}";
    m.headers = {{"outbox-original-topic", "orders"}, {"outbox-error-class", "poison"}};
    dead.push_back(m);
  }
  ASSERT_EQ(Produce(kafka.bootstrap(), "orders.dlt", dead), 3);
  // Without a broker configured the action says how to give one.
  ASSERT_TRUE(Start({{"OUTBOX_DASHBOARD_TOKEN", kToken}, {"OUTBOX_KAFKA_BOOTSTRAP", ""}}))
      << server_->Log();
  auto r = Post("/api/dlt/replay", {{"topic", "orders.dlt"}}, Bearer(kToken));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("--bootstrap"), std::string::npos) << r->body;

  ASSERT_TRUE(Start({{"OUTBOX_DASHBOARD_TOKEN", kToken}}, {"--bootstrap", kafka.bootstrap()}))
      << server_->Log();
  r = Post("/api/dlt/replay", {{"topic", "orders.dlt"}}, {});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = Post("/api/dlt/replay", {{"topic", "orders dlt"}}, Bearer(kToken));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("topic"), std::string::npos) << r->body;
  r = Post("/api/dlt/replay", {{"topic", "orders.dlt"}, {"dry_run", true}}, Bearer(kToken));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["scanned"], 3);
  r = Post("/api/dlt/replay", {{"topic", "orders.dlt"}, {"key", "k1"}}, Bearer(kToken));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["replayed"], 1);
  auto back = ReadTopic(kafka.bootstrap(), "orders", 1, 1, Scaled(std::chrono::seconds(20)));
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].key, "k1");
  EXPECT_EQ(back[0].value, "{\"n\":1}");
}

// What waits on the broker for a consumer group: its topic, retry and
// dead-letter topics, messages and the group's lag from its committed offset.
TEST_F(ServeTest, ConsumerBacklogShowsMessagesAndLagPerTopic) {
  MockKafka kafka(1, {"orders:1", "orders.retry.1:1", "orders.dlt:1"});
  std::vector<Message> msgs(5);
  for (std::size_t i = 0; i < msgs.size(); ++i) msgs[i].key = msgs[i].value = "m" + std::to_string(i);
  ASSERT_EQ(Produce(kafka.bootstrap(), "orders", msgs), 5);
  ASSERT_EQ(Produce(kafka.bootstrap(), "orders.dlt", {msgs[0]}), 1);
  // The group has committed offset 2 on orders: 3 messages behind.
  {
    char err[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", kafka.bootstrap().c_str(), err, sizeof err);
    rd_kafka_conf_set(conf, "group.id", "quest", err, sizeof err);
    rd_kafka_t* c = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    ASSERT_NE(c, nullptr) << err;
    rd_kafka_topic_partition_list_t* l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, "orders", 0)->offset = 2;
    EXPECT_EQ(rd_kafka_commit(c, l, 0), RD_KAFKA_RESP_ERR_NO_ERROR);
    rd_kafka_topic_partition_list_destroy(l);
    rd_kafka_destroy(c);
  }
  // --consumer needs the broker; a malformed one exits 2.
  CommandRun bad = RunCommand("OUTBOX_KAFKA_BOOTSTRAP= " + base_ + " serve --consumer quest=orders 2>&1");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("--consumer"), std::string::npos) << bad.out;
  bad = RunCommand(base_ + " serve --bootstrap " + kafka.bootstrap() + " --consumer quest 2>&1");
  EXPECT_EQ(bad.code, 2) << bad.out;

  ASSERT_TRUE(Start({}, {"--bootstrap", kafka.bootstrap(), "--consumer", "quest=orders"})) << server_->Log();
  int code = 0;
  json r = GetJson("/api/inbox", &code);
  ASSERT_EQ(code, 200) << r.dump();
  EXPECT_EQ(r["configured"], false) << "no --inbox-db";
  ASSERT_EQ(r["backlog"].size(), 3u) << r.dump();
  const json& main = r["backlog"][0];
  EXPECT_EQ(main["topic"], "orders");
  EXPECT_EQ(main["role"], "main");
  EXPECT_EQ(main["messages"], 5);
  EXPECT_EQ(main["lag"], 3);
  EXPECT_EQ(main["committed"], true);
  EXPECT_EQ(r["backlog"][1]["topic"], "orders.retry.1");
  EXPECT_EQ(r["backlog"][1]["messages"], 0);
  EXPECT_EQ(r["backlog"][2]["topic"], "orders.dlt");
  EXPECT_EQ(r["backlog"][2]["role"], "dead-letter");
  EXPECT_EQ(r["backlog"][2]["messages"], 1);
  EXPECT_EQ(r["backlog"][2]["lag"], 1) << "no commit on the dead-letter topic: all of it";
  EXPECT_EQ(r["backlog"][2]["committed"], false);
}

TEST_F(ServeTest, ReplayAndSkipChangeTheRowOnlyWithTheToken) {
  const std::string a = EnqueueOne("a", "");
  const std::string b = EnqueueOne("b", "");
  Fail(a, "poison");
  ASSERT_TRUE(Start({{"OUTBOX_DASHBOARD_TOKEN", kToken}})) << server_->Log();
  EXPECT_EQ(GetJson("/api/status")["actions"], true);

  const json body = {{"event_id", a}};
  struct Case {
    const char* what;
    httplib::Headers headers;
    const char* type;
    int status;
  };
  for (const Case& c : std::vector<Case>{
           {"no token", {}, "application/json", 401},
           {"wrong token", Bearer("t0ken-for-the-dashboard-tesT"), "application/json", 401},
           {"a shorter prefix", Bearer("t0ken"), "application/json", 401},
           {"a foreign origin", {{"Authorization", std::string("Bearer ") + kToken}, {"Origin", "http://evil.example"}},
            "application/json", 403},
           {"a form's content type", Bearer(kToken), "application/x-www-form-urlencoded", 415},
       }) {
    auto r = Post("/api/replay", body, c.headers, c.type);
    ASSERT_TRUE(r) << c.what;
    EXPECT_EQ(r->status, c.status) << c.what << ": " << r->body;
    EXPECT_EQ(StatusOf(a), "FAILED") << c.what << " changed the row";
  }
  // A foreign Host (DNS rebinding) is refused before anything else.
  {
    auto cl = Client();
    auto r = cl.Get("/api/status", httplib::Headers{{"Host", "evil.example:80"}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 403);
  }

  auto r = Post("/api/replay", body, Bearer(kToken));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["replayed"], 1);
  EXPECT_EQ(StatusOf(a), "PENDING");

  // Skip needs a reason; then the row is SKIPPED with who and why.
  r = Post("/api/skip", {{"event_id", b}}, Bearer(kToken));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("reason"), std::string::npos) << r->body;
  EXPECT_EQ(StatusOf(b), "PENDING");
  r = Post("/api/skip", {{"event_id", b}, {"reason", "customer deleted"}}, Bearer(kToken));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Exec(conn_.get(), "SELECT status || '|' || skip_reason || '|' || (skipped_by LIKE "
                              "'outboxctl serve%') FROM " + schema_ + ".outbox WHERE event_id = '" + b + "'"),
            "SKIPPED|customer deleted|true");
  // A SENT-or-SKIPPED event cannot be skipped again; an unknown id is 404.
  r = Post("/api/skip", {{"event_id", b}, {"reason", "again"}}, Bearer(kToken));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 409) << r->body;
  r = Post("/api/skip", {{"event_id", "00000000-0000-0000-0000-000000000000"}, {"reason", "x"}},
           Bearer(kToken));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404) << r->body;
}

TEST_F(ServeTest, BadParametersAreRefusedNamingThemAndLongTextIsCut) {
  const std::string a = EnqueueOne("a", "");
  Fail(a, std::string(5000, 'e'));
  ASSERT_TRUE(Start({})) << server_->Log();
  for (const auto& [path, name] : std::vector<std::pair<std::string, std::string>>{
           {"/api/events?limit=abc", "limit"},
           {"/api/events?limit=0", "limit"},
           {"/api/events?limit=1001", "limit"},
           {"/api/events?state=LOST", "state"},
           {"/api/events?older_than=ten", "older_than"},
           {"/api/trace?key=", "key"}}) {
    int code = 0;
    json r = GetJson(path, &code);
    EXPECT_EQ(code, 400) << path;
    EXPECT_NE(r.value("error", "").find(name), std::string::npos) << path << ": " << r.dump();
  }
  json list = GetJson("/api/events?state=FAILED");
  ASSERT_EQ(list["rows"].size(), 1u);
  const std::string err = list["rows"][0]["last_error"];
  EXPECT_LT(err.size(), 2100u);
  EXPECT_NE(err.find("5000 bytes, truncated"), std::string::npos);
  // The page and its script come from the binary, under a policy that allows
  // no inline script.
  auto c = Client();
  auto page = c.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->body.find("<script src=\"/app.js\""), std::string::npos);
  EXPECT_NE(page->get_header_value("Content-Security-Policy").find("script-src 'self'"), std::string::npos);
  auto js = c.Get("/app.js");
  ASSERT_TRUE(js);
  EXPECT_EQ(js->status, 200);
  for (const char* sink : {".innerHTML", ".outerHTML", "insertAdjacentHTML", "document.write"}) {
    EXPECT_EQ(js->body.find(sink), std::string::npos) << sink << ": data goes on the page as text";
  }
}

TEST_F(ServeTest, BadFlagsAndTokensExitTwoBeforeServing) {
  const std::string dir = (std::filesystem::temp_directory_path() / ("serve-tok-" + schema_)).string();
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/short") << "abc\n";
  std::ofstream(dir + "/empty") << "";
  for (const auto& [args, name] : std::vector<std::pair<std::string, std::string>>{
           {"serve --listen nonsense", "--listen"},
           {"serve --listen 127.0.0.1:99999", "--listen"},
           {"serve --token-file " + dir + "/short", "too short"},
           {"serve --token-file " + dir + "/empty", "--token-file"},
           {"serve --token-file " + dir + "/missing", "--token-file"},
           {"serve --allowed-host a.example:80", "--allowed-host"},
           {"serve --allowed-host ''", "--allowed-host"},
           {"serve --allowed-host a.example/x", "--allowed-host"},
           {"serve --public-url dash.example.com", "--public-url"},
           {"serve --public-url ftp://dash.example.com", "--public-url"},
           {"serve --public-url https://", "--public-url"},
           {"serve --public-url https://dash.example.com:0", "--public-url"},
           {"serve --public-url https://dash.example.com:https", "--public-url"},
           {"serve --public-url https://user:s3cret@dash.example.com", "--public-url"}}) {
    CommandRun r = RunCommand(base_ + " " + args + " 2>&1");
    EXPECT_EQ(r.code, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find(name), std::string::npos) << args << ": " << r.out;
  }
  for (const char* url : {"https://user:s3cret@dash.example.com", "ftp://user:s3cret@dash.example.com",
                          "https:/user:s3cret@dash.example.com"}) {
    CommandRun p = RunCommand(base_ + " serve --public-url " + url + " 2>&1");
    EXPECT_EQ(p.code, 2) << url << ": " << p.out;
    EXPECT_EQ(p.out.find("s3cret"), std::string::npos) << "a password in --public-url is printed: " << p.out;
  }
  CommandRun r = RunCommand("OUTBOX_DASHBOARD_TOKEN=short " + base_ + " serve 2>&1");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("OUTBOX_DASHBOARD_TOKEN"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("short\n"), std::string::npos) << "the token itself is never printed";
  std::filesystem::remove_all(dir);
}


// DNS rebinding: a page on an attacker's domain that resolves to 127.0.0.1
// sends its own name as Host. On loopback only localhost, 127.0.0.0/8 literals,
// [::1] and the names allowed by flag are answered.
TEST_F(ServeTest, OnLoopbackOnlyLoopbackNamesAndAllowedHostsAreAnswered) {
  ASSERT_TRUE(Start({}, {"--allowed-host", "Dash.Internal"})) << server_->Log();
  auto cl = Client();
  for (const char* host : {"localhost", "localhost:8089", "LocalHost", "127.0.0.1", "127.0.0.1:8089",
                           "127.1.2.3", "127.255.255.254:1", "[::1]", "[::1]:8089", "dash.internal",
                           "DASH.internal:443"}) {
    auto r = cl.Get("/api/status", httplib::Headers{{"Host", host}});
    ASSERT_TRUE(r) << host;
    EXPECT_EQ(r->status, 200) << host << ": " << r->body;
  }
  for (const char* host : {"127.0.0.1.evil.example", "127.0.0.1.nip.io", "127.0.0.1.nip.io:8089",
                           "127.attacker.example", "evil.example", "localhost.evil.example",
                           "128.0.0.1", "127.1", "0127.0.0.1", "[::2]", "[::1].evil.example",
                           "dash.internal.evil.example", "internal"}) {
    auto r = cl.Get("/api/events?state=FAILED", httplib::Headers{{"Host", host}});
    ASSERT_TRUE(r) << host;
    EXPECT_EQ(r->status, 403) << host << ": " << r->body;
    EXPECT_NE(r->body.find("--allowed-host"), std::string::npos) << host << ": " << r->body;
  }
}

// Behind an HTTPS reverse proxy the page's Origin is https://<public name>:
// refused unless --public-url names it; then accepted whether the proxy passes
// the public Host on (it is answered) or its own (127.0.0.1:PORT, nginx's
// default), and no other scheme, port or name is.
TEST_F(ServeTest, BehindAnHttpsProxyActionsNeedThePublicUrl) {
  const std::string a = EnqueueOne("a", ""), b = EnqueueOne("b", "");
  Fail(a, "poison");
  Fail(b, "poison");
  const auto from = [](const std::string& host, const char* origin) {
    return httplib::Headers{{"Authorization", std::string("Bearer ") + kToken}, {"Host", host},
                            {"Origin", origin}};
  };
  ASSERT_TRUE(Start({{"OUTBOX_DASHBOARD_TOKEN", kToken}}, {"--allowed-host", "dash.example.com"}))
      << server_->Log();
  auto r = Post("/api/replay", {{"event_id", a}}, from("dash.example.com", "https://dash.example.com"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403) << r->body;
  EXPECT_NE(r->body.find("--public-url"), std::string::npos) << r->body;
  EXPECT_EQ(StatusOf(a), "FAILED");

  ASSERT_TRUE(Start({{"OUTBOX_DASHBOARD_TOKEN", kToken}}, {"--public-url", "https://Dash.Example.com:443/outbox/"}))
      << server_->Log();
  const std::string local = "127.0.0.1:" + std::to_string(port_);
  for (const char* origin : {"https://evil.example", "http://dash.example.com", "https://dash.example.com:8443",
                             "https://dash.example.com.evil.example", "null"}) {
    r = Post("/api/replay", {{"event_id", a}}, from(local, origin));
    ASSERT_TRUE(r) << origin;
    EXPECT_EQ(r->status, 403) << origin << ": " << r->body;
    EXPECT_EQ(StatusOf(a), "FAILED") << origin << " changed the row";
  }
  r = Post("/api/replay", {{"event_id", a}}, from(local, "https://dash.example.com"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(StatusOf(a), "PENDING");
  r = Post("/api/replay", {{"event_id", b}}, from("dash.example.com", "https://dash.example.com"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(StatusOf(b), "PENDING");
}

}  // namespace
}  // namespace outbox::testing
