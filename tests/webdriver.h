// A minimal W3C WebDriver client for browser tests: Debian's chromedriver
// (package chromium-driver) driving its headless Chromium, spoken to over
// HTTP with cpp-httplib. Only what the dashboard's tests need.
//
// Thread-safety: one test thread. Owns the chromedriver process; the session
// ends (browser closed) when the object goes.
#ifndef OUTBOX_TESTS_WEBDRIVER_H_
#define OUTBOX_TESTS_WEBDRIVER_H_

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "subprocess.h"
#include "test_env.h"

namespace outbox::testing {

class WebDriver {
 public:
  using json = nlohmann::json;
  static constexpr const char* kChromeDriver = "/usr/bin/chromedriver";
  static bool Installed() { return std::filesystem::exists(kChromeDriver) && std::filesystem::exists("/usr/bin/chromium"); }

  // Starts chromedriver and a headless browser session; ok() says whether it did.
  // chromedriver's own --port=0 draws a port at random and exits when it is
  // taken ("IPv4 port not available", seen in CI): the kernel picks a free one
  // here, and a port taken again in the meantime is tried once more.
  explicit WebDriver(const std::string& log_name) {
    bool up = false;
    for (int attempt = 0; attempt < 3 && !up; ++attempt) {
      const int port = FreeTcpPort();
      const auto log_path = std::filesystem::temp_directory_path() / log_name;
      driver_.reset();
      std::filesystem::remove(log_path);
      driver_ = std::make_unique<Subprocess>(
          std::vector<std::string>{kChromeDriver, "--port=" + std::to_string(port)},
          std::map<std::string, std::string>{}, log_path.string());
      bool refused = false;
      WaitFor([&] {
        const std::string log = driver_->Log();
        if (log.find("started successfully on port ") != std::string::npos) {
          port_ = port;
          up = true;
        }
        refused = log.find("port not available") != std::string::npos;
        return up || refused;
      }, std::chrono::seconds(60));
      if (!up && !refused) return;
    }
    if (!up) return;
    json caps = {{"capabilities",
                  {{"alwaysMatch",
                    {{"browserName", "chrome"},
                     {"goog:chromeOptions",
                      {{"binary", "/usr/bin/chromium"},
                       {"args", {"--headless=new", "--no-sandbox", "--disable-gpu",
                                 "--disable-dev-shm-usage", "--window-size=1280,1000"}}}}}}}}};
    json r = Call("POST", "/session", caps);
    if (r.contains("sessionId")) session_ = r["sessionId"].get<std::string>();
  }
  ~WebDriver() {
    if (!session_.empty()) (void)Call("DELETE", "/session/" + session_, json());  // closes the browser
    if (driver_) {
      driver_->Signal(SIGTERM);
      (void)driver_->Wait(std::chrono::seconds(5));
      ::kill(-driver_->pid(), SIGKILL);  // whatever of the browser is left in its group
    }
  }
  // A TCP port on 127.0.0.1 that was free a moment ago (0 when none).
  static int FreeTcpPort() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return 0;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port = ntohs(a.sin_port);
    }
    ::close(fd);
    return port;
  }
  WebDriver(const WebDriver&) = delete;
  WebDriver& operator=(const WebDriver&) = delete;

  bool ok() const { return !session_.empty(); }
  std::string Log() const { return driver_ ? driver_->Log() : std::string(); }
  const std::string& last_error() const { return last_error_; }

  void Navigate(const std::string& url) { Session("POST", "/url", {{"url", url}}); }
  // The element's id, or "" when no element matches.
  std::string Find(const std::string& css) {
    json r = Session("POST", "/element", {{"using", "css selector"}, {"value", css}});
    if (!r.is_object() || r.empty()) return {};
    return r.begin().value().get<std::string>();
  }
  // Waits until an element matches and its text satisfies `pred`; its text.
  template <typename Pred>
  std::string WaitForText(const std::string& css, Pred pred,
                          std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    std::string text;
    WaitFor([&] {
      const std::string el = Find(css);
      if (el.empty()) return false;
      text = Text(el);
      return pred(text);
    }, timeout);
    return text;
  }
  std::string Text(const std::string& element) {
    json r = Session("GET", "/element/" + element + "/text", json());
    return r.is_string() ? r.get<std::string>() : std::string();
  }
  void Click(const std::string& element) { Session("POST", "/element/" + element + "/click", json::object()); }
  void Type(const std::string& element, const std::string& text) {
    Session("POST", "/element/" + element + "/value", {{"text", text}});
  }
  void Clear(const std::string& element) { Session("POST", "/element/" + element + "/clear", json::object()); }
  json Execute(const std::string& script) {
    return Session("POST", "/execute/sync", {{"script", script}, {"args", json::array()}});
  }
  // The text of the open alert/confirm/prompt ("" when none).
  std::string AlertText() {
    json r = Session("GET", "/alert/text", json());
    return r.is_string() ? r.get<std::string>() : std::string();
  }
  void AcceptAlert() { Session("POST", "/alert/accept", json::object()); }
  void AnswerPrompt(const std::string& text) {
    Session("POST", "/alert/text", {{"text", text}});
    AcceptAlert();
  }
  // A PNG of the viewport, written to `path`; false on failure.
  bool Screenshot(const std::string& path) {
    json r = Session("GET", "/screenshot", json());
    if (!r.is_string()) return false;
    const std::string png = Base64Decode(r.get<std::string>());
    std::ofstream out(path, std::ios::binary);
    out.write(png.data(), static_cast<std::streamsize>(png.size()));
    return static_cast<bool>(out);
  }

 private:
  json Session(const char* method, const std::string& path, const json& body) {
    return Call(method, "/session/" + session_ + path, body);
  }
  // The response's "value"; null after an error (kept in last_error()).
  json Call(const char* method, const std::string& path, const json& body) {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    const std::string m = method;
    httplib::Result r = m == "GET"      ? c.Get(path.c_str())
                        : m == "DELETE" ? c.Delete(path.c_str())
                                        : c.Post(path.c_str(), body.is_null() ? "{}" : body.dump(),
                                                 "application/json");
    if (!r) {
      last_error_ = "no answer from chromedriver for " + path;
      return json();
    }
    json v = json::parse(r->body, nullptr, false);
    if (r->status != 200) {
      last_error_ = path + ": HTTP " + std::to_string(r->status) + " " + r->body.substr(0, 300);
      return json();
    }
    return v.is_object() && v.contains("value") ? v["value"] : json();
  }
  static std::string Base64Decode(const std::string& in) {
    std::string out;
    int val = 0, bits = -8;
    for (char c : in) {
      const auto ch = static_cast<unsigned char>(c);
      int d;
      if (ch >= 'A' && ch <= 'Z') d = ch - 'A';
      else if (ch >= 'a' && ch <= 'z') d = ch - 'a' + 26;
      else if (ch >= '0' && ch <= '9') d = ch - '0' + 52;
      else if (ch == '+') d = 62;
      else if (ch == '/') d = 63;
      else continue;  // padding, line breaks
      val = ((val << 6) | d) & 0xffffff;
      bits += 6;
      if (bits >= 0) {
        out.push_back(static_cast<char>((val >> bits) & 0xff));
        bits -= 8;
      }
    }
    return out;
  }

  std::unique_ptr<Subprocess> driver_;
  int port_ = 0;
  std::string session_, last_error_;
};

}  // namespace outbox::testing

#endif  // OUTBOX_TESTS_WEBDRIVER_H_
