// The dashboard (`outboxctl serve`) in a real browser: Debian's headless
// Chromium driven by chromedriver (W3C WebDriver), against the real PostgreSQL.
#include <cstdlib>
#include <filesystem>

#include "kafka_helpers.h"
#include "outbox/postgres_inbox.h"
#include "serve_fixture.h"
#include "webdriver.h"

namespace outbox::testing {
namespace {

// --- In a real browser: Debian's headless Chromium driven by chromedriver. ---

#define OUTBOX_REQUIRE_BROWSER()                                                          \
  do {                                                                                    \
    if (!WebDriver::Installed()) {                                                        \
      if (std::getenv("CI")) FAIL() << "chromium and chromium-driver are not installed";  \
      GTEST_SKIP() << "chromium-driver not installed (scripts/deps installs it)";          \
    }                                                                                     \
  } while (0)

// Where the tests leave their screenshots (the README's come from here).
std::string ScreenshotPath(const std::string& name) {
  const char* dir = std::getenv("OUTBOX_SCREENSHOT_DIR");
  const std::filesystem::path d = dir ? dir : std::filesystem::temp_directory_path().string();
  std::filesystem::create_directories(d);
  return (d / name).string();
}

TEST_F(ServeTest, BrowserShowsTheNumbersATraceAndMarkupAsText) {
  OUTBOX_REQUIRE_BROWSER();
  for (int i = 0; i < 5; ++i) {
    const std::string id = EnqueueOne("course-" + std::to_string(i), "");
    if (i < 3) Send(id, "relay-a");
  }
  const std::string evil = EnqueueOne("<img src=x onerror=\"window.__pwned=1\">", "dedup-evil",
                                      "<script>window.__pwned=3</script>{\"order\":1}");
  EnqueueOne("<img src=x onerror=\"window.__pwned=1\">", "");  // held behind it
  Fail(evil, "<script>window.__pwned=2</script> broker said: record too large");
  ASSERT_TRUE(Start({{"OUTBOX_DASHBOARD_TOKEN", kToken}})) << server_->Log();
  WebDriver wd("chromedriver-" + schema_);
  ASSERT_TRUE(wd.ok()) << wd.last_error() << "\n" << wd.Log();
  wd.Navigate("http://127.0.0.1:" + std::to_string(port_) + "/");

  CommandRun cli = RunCommand(base_ + " --json status");
  ASSERT_EQ(cli.code, 0) << cli.out;
  const json want = json::parse(cli.out);
  for (const auto& [id, key] : std::vector<std::pair<std::string, std::string>>{
           {"n-pending", "pending"}, {"n-processing", "processing"}, {"n-sent", "sent"},
           {"n-failed", "failed"}, {"n-skipped", "skipped"}, {"n-held", "held_aggregates"}}) {
    const std::string expect = want[key].dump();
    EXPECT_EQ(wd.WaitForText("#" + id, [&](const std::string& t) { return t == expect; }), expect)
        << id << " vs outboxctl status --json " << key;
  }
  // The FAILED row shows its markup as text, and none of it ran.
  const std::string row = wd.WaitForText("#events tbody tr", [](const std::string& t) {
    return t.find("FAILED") != std::string::npos;
  });
  EXPECT_NE(row.find("<script>window.__pwned=2</script>"), std::string::npos) << row;
  EXPECT_NE(row.find("<img src=x onerror="), std::string::npos) << row;
  EXPECT_EQ(wd.Execute("return typeof window.__pwned;"), "undefined") << "the payload executed";
  EXPECT_EQ(wd.Execute("return document.querySelectorAll('#events img, #events script').length;"), 0);
  // The last hour: 3 sent (as bars), 1 failed, the relay that sent them.
  EXPECT_EQ(wd.WaitForText("#hour-total", [](const std::string& t) { return !t.empty(); }),
            "3 sent, 1 failed");
  EXPECT_GE(wd.Execute("return document.querySelectorAll('#chart rect.sent').length;").get<int>(), 1)
      << "a bar per minute with sends (two if they straddle a minute)";
  EXPECT_NE(wd.WaitForText("#relays tbody", [](const std::string& t) {
              return t.find("relay-a") != std::string::npos;
            }).find("claims"), std::string::npos);
  EXPECT_TRUE(wd.Screenshot(ScreenshotPath("dashboard-overview.png")));

  // The support ticket's question: a dedup key in the search box.
  wd.Type(wd.Find("#search-key"), "dedup-evil");
  wd.Click(wd.Find("#search button"));
  const std::string trace = wd.WaitForText("#trace", [&](const std::string& t) {
    return t.find(evil) != std::string::npos;
  });
  EXPECT_NE(trace.find("record too large"), std::string::npos) << trace;
  EXPECT_NE(trace.find("<script>window.__pwned=3</script>{\"order\":1}"), std::string::npos)
      << "the payload, as text: " << trace;
  EXPECT_NE(trace.find("FAILED"), std::string::npos) << trace;
  EXPECT_EQ(wd.Execute("return typeof window.__pwned;"), "undefined");
  EXPECT_TRUE(wd.Screenshot(ScreenshotPath("dashboard-trace.png")));
}

TEST_F(ServeTest, BrowserReplayAndSkipNeedTheTokenAndAConfirmation) {
  OUTBOX_REQUIRE_BROWSER();
  const std::string a = EnqueueOne("order-1", "");
  const std::string b = EnqueueOne("order-2", "");
  Fail(a, "poison: schema mismatch");
  ASSERT_TRUE(Start({{"OUTBOX_DASHBOARD_TOKEN", kToken}})) << server_->Log();
  WebDriver wd("chromedriver-" + schema_);
  ASSERT_TRUE(wd.ok()) << wd.last_error() << "\n" << wd.Log();
  wd.Navigate("http://127.0.0.1:" + std::to_string(port_) + "/");
  const auto wait_button = [&](const std::string& css) {
    std::string el;
    WaitFor([&] { return !(el = wd.Find(css)).empty(); }, std::chrono::seconds(30));
    return el;
  };
  const auto confirm = [&](const std::string& expect) {
    std::string text;
    WaitFor([&] { return !(text = wd.AlertText()).empty(); }, std::chrono::seconds(30));
    EXPECT_NE(text.find(expect), std::string::npos) << text;
  };

  // A wrong token: the confirmation, then the server refuses; nothing changes.
  wd.Type(wait_button("#token"), "not-the-token-at-all");
  std::string replay = wait_button("#events tbody tr button.replay");
  ASSERT_FALSE(replay.empty()) << wd.last_error();
  wd.Click(replay);
  confirm("Replay event " + a);
  wd.AcceptAlert();
  EXPECT_NE(wd.WaitForText("#action-result", [](const std::string& t) { return !t.empty(); })
                .find("refused"), std::string::npos);
  EXPECT_EQ(StatusOf(a), "FAILED");

  // The token: replayed.
  const std::string token = wait_button("#token");
  wd.Clear(token);
  wd.Type(token, kToken);
  wd.Click(wait_button("#events tbody tr button.replay"));
  confirm("Replay event " + a);
  wd.AcceptAlert();
  ASSERT_TRUE(WaitFor([&] { return StatusOf(a) == "PENDING"; }, std::chrono::seconds(30)))
      << wd.Text(wd.Find("#action-result"));

  // Skip a PENDING event: the prompt asks why; the reason lands on the row.
  wd.Click(wait_button("#f-state"));
  wd.Execute("document.getElementById('f-state').value = 'PENDING';");
  wd.Click(wait_button("#filters button"));
  std::string skip;
  WaitFor([&] {
    skip = wd.Find("#events tbody tr[data-event-id='" + b + "'] button.skip");
    return !skip.empty();
  }, std::chrono::seconds(30));
  ASSERT_FALSE(skip.empty()) << wd.last_error();
  wd.Click(skip);
  confirm("Skip event " + b);
  wd.AnswerPrompt("customer cancelled the order");
  ASSERT_TRUE(WaitFor([&] { return StatusOf(b) == "SKIPPED"; }, std::chrono::seconds(30)))
      << wd.Text(wd.Find("#action-result"));
  EXPECT_EQ(Exec(conn_.get(), "SELECT skip_reason FROM " + schema_ + ".outbox WHERE event_id = '" + b + "'"),
            "customer cancelled the order");
  EXPECT_TRUE(wd.Screenshot(ScreenshotPath("dashboard-actions.png")));
}


TEST_F(ServeTest, BrowserShowsTheConsumersAndReplaysDeadLetters) {
  OUTBOX_REQUIRE_BROWSER();
  // The consumer's inbox: one effect, one absorbed copy.
  const std::string id = EnqueueOne("order-9", "OrderPlaced:9");
  ApplyInInbox("quest-service", id);
  // Its broker: two dead letters waiting.
  MockKafka kafka(1, {"orders:1", "orders.dlt:1"});
  std::vector<Message> dead(2);
  for (std::size_t i = 0; i < dead.size(); ++i) {
    dead[i].key = dead[i].value = "dead-" + std::to_string(i);
    dead[i].headers = {{"outbox-original-topic", "orders"}};
  }
  ASSERT_EQ(Produce(kafka.bootstrap(), "orders.dlt", dead), 2);
  ASSERT_TRUE(Start({{"OUTBOX_DASHBOARD_TOKEN", kToken}},
                    {"--inbox-db", url_, "--inbox-schema", schema_ + "_inbox", "--bootstrap",
                     kafka.bootstrap(), "--consumer", "quest-service=orders"}))
      << server_->Log();
  WebDriver wd("chromedriver-" + schema_);
  ASSERT_TRUE(wd.ok()) << wd.last_error() << "\n" << wd.Log();
  wd.Navigate("http://127.0.0.1:" + std::to_string(port_) + "/");

  const std::string consumers = wd.WaitForText("#consumers tbody", [](const std::string& t) {
    return t.find("quest-service") != std::string::npos;
  });
  EXPECT_NE(consumers.find("quest-service 1 1"), std::string::npos) << "1 effect, 1 duplicate: " << consumers;
  const std::string backlog = wd.WaitForText("#backlog tbody", [](const std::string& t) {
    return t.find("orders.dlt") != std::string::npos;
  });
  EXPECT_NE(backlog.find("orders.dlt dead-letter 2"), std::string::npos) << backlog;
  EXPECT_TRUE(wd.Screenshot(ScreenshotPath("dashboard-consumers.png")));

  // The dead letters go back, after the confirmation, with the token.
  wd.Type(wd.Find("#token"), kToken);
  wd.Type(wd.Find("#dlt-topic"), "orders.dlt");
  wd.Click(wd.Find("#dlt-replay"));
  std::string text;
  WaitFor([&] { return !(text = wd.AlertText()).empty(); }, std::chrono::seconds(30));
  EXPECT_NE(text.find("orders.dlt"), std::string::npos) << text;
  wd.AcceptAlert();
  EXPECT_NE(wd.WaitForText("#action-result", [](const std::string& t) {
              return t.find("replayed") != std::string::npos;
            }).find("\"replayed\":2"), std::string::npos);
  EXPECT_EQ(ReadTopic(kafka.bootstrap(), "orders", 1, 2, Scaled(std::chrono::seconds(20))).size(), 2u);
}

}  // namespace
}  // namespace outbox::testing
