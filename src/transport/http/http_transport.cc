// HTTP delivery (include/outbox/http_transport.h) on cpp-httplib's client.
//
// One Publish call: the events are grouped by aggregate (in call order); up to
// `concurrency` threads take whole aggregates and send their events one after
// another, each on a keep-alive connection from a pool. The calling thread
// watches the deadline and stops the connections still in use when it passes,
// so a call never outlives MaxPublishTime() even against a server that trickles
// (a connection still being opened, TCP or TLS, ends on its own timeouts first:
// hence twice the timeout).
#include "outbox/http_transport.h"

#include <httplib.h>
#include <strings.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <system_error>
#include <thread>
#include <utility>

#include "outbox/thread_annotations.h"

namespace outbox {
namespace {

using std::chrono::milliseconds;
using Steady = std::chrono::steady_clock;

constexpr std::size_t kErrorBodyBytes = 200;
// Of an answer's body, at most this much is read: the receiver decides what it
// answers, not how much memory the relay spends on it. A longer body ends the
// connection (it is not reused).
constexpr std::size_t kMaxBodyBytes = 4096;
constexpr milliseconds kMaxRetryAfter{10 * 60 * 1000};
// A destination (the path after the template is filled in; every destination
// shares the template's origin) that fails while another answers is backed off
// alone: from kDestinationBackoffBase doubling to kDestinationBackoffMax (or a
// longer Retry-After), then one request probes it; its events meanwhile come
// back unsent, due when the probe is. "Another answers": a 2xx from another
// destination within kOthersAnswering. When none does, the receiver as a whole
// is down: the batch is an outage, and the relay's shared backoff takes over.
constexpr milliseconds kDestinationBackoffBase{500};
constexpr milliseconds kDestinationBackoffMax{30'000};
constexpr milliseconds kOthersAnswering{10'000};

struct ParsedUrl {
  std::string origin;  // scheme://host[:port]
  std::string path;    // from the first '/', placeholders still in
};

// The URL as an error may show it: a password in user-info becomes ***.
std::string RedactUrl(const std::string& url) {
  const auto scheme = url.find("://");
  const std::size_t from = scheme == std::string::npos ? 0 : scheme + 3;
  const auto at = url.find('@', from);
  if (at == std::string::npos || url.find('/', from) < at) return url;
  const auto colon = url.find(':', from);
  if (colon == std::string::npos || colon > at) return url;
  return url.substr(0, colon + 1) + "***" + url.substr(at);
}

bool ParseUrl(const std::string& url, ParsedUrl* out, std::string* why) {
  static const std::regex re(R"(^(https?)://([^/?#@\s]+)(/[^#\s]*)?$)", std::regex::icase);
  std::smatch m;
  if (!std::regex_match(url, m, re)) {
    *why = "\"" + RedactUrl(url) +
           "\" must be http:// or https://HOST[:PORT]/PATH (no user-info, no fragment)";
    return false;
  }
  const std::string host = m[2];
  if (host.find('{') != std::string::npos || host.find('}') != std::string::npos) {
    *why = "placeholders may only stand in the path, not in \"" + host + "\"";
    return false;
  }
  const auto colon = host.rfind(':');
  if (colon != std::string::npos && host.find(']') == std::string::npos) {
    const std::string port = host.substr(colon + 1);
    if (port.empty() || port.size() > 5 ||
        !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        std::stoi(port) < 1 || std::stoi(port) > 65535) {
      *why = "the port in \"" + host + "\" must be 1..65535";
      return false;
    }
  }
  out->origin = std::string(m[1]) + "://" + host;
  out->path = m[3].matched ? std::string(m[3]) : "/";
  return true;
}

std::string PercentEncode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += ch;
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string Fill(std::string text, const Event& e) {
  for (const auto& [name, value] :
       {std::pair<std::string, const std::string*>{"{aggregate_type}", &e.aggregate_type},
        {"{event_type}", &e.event_type}}) {
    for (std::size_t p; (p = text.find(name)) != std::string::npos;) {
      text.replace(p, name.size(), PercentEncode(*value));
    }
  }
  return text;
}

bool IsToken(const std::string& name) {
  static const std::string extra = "!#$%&'*+-.^_`|~";
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || extra.find(c) != std::string::npos;
  });
}

bool IsFieldValue(const std::string& v) {
  return v.find_first_of(std::string("\r\n\0", 3)) == std::string::npos;
}

// Names the transport sets itself: the ids, and the request's framing and
// connection (an event header named so would change what the request means).
bool IsTransportHeader(const std::string& name) {
  static const char* const kOurs[] = {"idempotency-key", "content-length", "transfer-encoding",
                                      "connection", "host", "keep-alive", "te", "trailer",
                                      "upgrade", "expect", "proxy-connection"};
  for (const char* ours : kOurs) {
    if (strcasecmp(name.c_str(), ours) == 0) return true;
  }
  return strncasecmp(name.c_str(), "outbox-", 7) == 0;
}

// Retry-After: delay-seconds or an HTTP-date; zero when absent or unreadable.
milliseconds ParseRetryAfter(const std::string& v) {
  if (v.empty()) return milliseconds(0);
  if (std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    if (v.size() > 7) return kMaxRetryAfter;
    return std::min(kMaxRetryAfter, milliseconds(std::stoll(v) * 1000));
  }
  std::tm tm{};
  if (strptime(v.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm) == nullptr) return milliseconds(0);
  const auto at = std::chrono::system_clock::from_time_t(timegm(&tm));
  const auto d = std::chrono::duration_cast<milliseconds>(at - std::chrono::system_clock::now());
  return std::clamp(d, milliseconds(0), kMaxRetryAfter);
}

// What went wrong, as a user would write it, for a request that got no
// complete answer (httplib's bare names never reach a log or a header alone).
std::string DescribeFailure(httplib::Error error, milliseconds elapsed, milliseconds limit) {
  const std::string within = " within " + std::to_string(limit.count()) + " ms";
  switch (error) {
    case httplib::Error::Connection:
      return "could not connect (refused, unreachable, or no answer to the connection" + within + ")";
    case httplib::Error::ConnectionTimeout:
      return "could not connect" + within;
    case httplib::Error::Read:
      return elapsed + milliseconds(50) >= limit ? "no response" + within
                                                 : "connection closed before a complete response";
    case httplib::Error::Write:
      return "connection closed while the request was being sent";
    case httplib::Error::SSLConnection:
      return "TLS handshake failed";
    case httplib::Error::SSLLoadingCerts:
      return "cannot load the CA certificates (http_delivery.tls_ca_file)";
    case httplib::Error::SSLServerVerification:
      return "the server's TLS certificate did not verify (http_delivery.tls_ca_file, "
             "http_delivery.tls_verify)";
    case httplib::Error::Canceled:
      return "the request was cancelled";
    default:
      return "request failed (" + httplib::to_string(error) + ")";
  }
}

PublishResult Unavailable(std::string why, milliseconds retry_after = milliseconds(0)) {
  PublishResult r;
  r.outcome = PublishOutcome::kRetryable;
  r.broker_unavailable = true;
  r.outage_for_event = true;
  r.error = std::move(why);
  r.retry_after = retry_after;
  return r;
}

PublishResult Fatal(std::string why) {
  PublishResult r;
  r.outcome = PublishOutcome::kFatal;
  r.error = std::move(why);
  return r;
}

class HttpTransport final : public Transport {
 public:
  HttpTransport(HttpTransportOptions options, ParsedUrl url)
      : options_(std::move(options)), url_(std::move(url)) {}

  std::vector<PublishResult> Publish(std::span<const ClaimedEvent> events) override {
    const auto deadline = Steady::now() + options_.timeout;
    std::vector<PublishResult> results(events.size());
    // Aggregates in the order their first event comes.
    std::vector<std::vector<std::size_t>> groups;
    std::map<std::pair<std::string, std::string>, std::size_t> group_of;
    for (std::size_t i = 0; i < events.size(); ++i) {
      const Event& e = events[i].event;
      auto [it, fresh] = group_of.try_emplace({e.aggregate_type, e.aggregate_id}, groups.size());
      if (fresh) groups.emplace_back();
      groups[it->second].push_back(i);
    }
    Call call;
    call.deadline = deadline;
    std::atomic<std::size_t> next{0};
    auto work = [&] {
      Finish finish{call};
      for (std::size_t g; (g = next.fetch_add(1)) < groups.size();) {
        bool broken = false;
        for (std::size_t i : groups[g]) {
          if (broken) {
            results[i].outcome = PublishOutcome::kNotSent;
            results[i].error = "an earlier event of its aggregate was not delivered";
            continue;
          }
          results[i] = Send(call, events[i]);
          broken = results[i].outcome != PublishOutcome::kAcked;
        }
      }
    };
    const std::size_t threads =
        std::min<std::size_t>(static_cast<std::size_t>(options_.concurrency), groups.size());
    std::vector<std::thread> pool;
    try {
      while (pool.size() < threads) pool.emplace_back(work);
    } catch (const std::system_error&) {
      // No thread to spare: the ones started take every aggregate in turn.
    }
    if (pool.empty()) {
      work();  // this thread alone; each request still ends by its own timeouts
    } else {
      Watch(call, pool.size());
    }
    for (std::thread& t : pool) t.join();
    return results;
  }

  milliseconds MaxPublishTime() const override {
    return options_.timeout * 2 + milliseconds(1000);
  }

  std::string DescribeMaxPublishTime() const override {
    return "2 x http_delivery.timeout_ms + 1000 ms (a connection being opened at the deadline "
           "ends on its own timeouts)";
  }

  bool Healthy() const override { return !unreachable_.load(); }

  std::string UnhealthyReason() const override {
    return "HTTP receiver unreachable (" + url_.origin + ")";
  }

  std::string PeerName() const override { return "receiver"; }

 private:
  // One Publish call's shared state: the deadline and the connections in use.
  struct Call {
    Steady::time_point deadline;
    Mutex mu;
    std::condition_variable cv;
    std::set<httplib::Client*> in_use OUTBOX_GUARDED_BY(mu);
    std::size_t finished OUTBOX_GUARDED_BY(mu) = 0;
    bool expired OUTBOX_GUARDED_BY(mu) = false;
  };

  // The watchdog: at the deadline, stops the requests still going, and again
  // every 10 ms until every worker is done (a stop() that lands before a
  // request has opened its socket closes nothing). Under call.mu: a worker
  // erases its client from in_use under it before it returns or frees it.
  static void Watch(Call& call, std::size_t workers) {
    MutexLock lock(call.mu);
    for (auto until = call.deadline;; until = Steady::now() + milliseconds(10)) {
      while (call.finished != workers &&
             call.cv.wait_until(lock.native(), until) != std::cv_status::timeout) {
      }
      if (call.finished == workers) return;
      call.expired = true;
      for (httplib::Client* c : call.in_use) c->stop();
    }
  }

  // A worker thread's end: counted by the watchdog. Called once per thread.
  struct Finish {
    Call& call;
    ~Finish() {
      MutexLock lock(call.mu);
      ++call.finished;
      call.cv.notify_all();
    }
  };

  std::unique_ptr<httplib::Client> Checkout() {
    {
      MutexLock lock(pool_mu_);
      if (!idle_.empty()) {
        auto c = std::move(idle_.back());
        idle_.pop_back();
        return c;
      }
    }
    auto c = std::make_unique<httplib::Client>(url_.origin);
    c->set_keep_alive(true);
    c->set_url_encode(false);  // the path is encoded already
    c->set_tcp_nodelay(true);
    if (url_.origin.rfind("https", 0) == 0) {
      c->enable_server_certificate_verification(options_.tls_verify);
      if (!options_.tls_ca_file.empty()) c->set_ca_cert_path(options_.tls_ca_file);
    }
    return c;
  }

  void Return(std::unique_ptr<httplib::Client> c) {
    MutexLock lock(pool_mu_);
    // Several workers share the transport, each with up to `concurrency`
    // requests: keep enough connections for a few of them.
    if (idle_.size() < static_cast<std::size_t>(std::max(64, 4 * options_.concurrency))) {
      idle_.push_back(std::move(c));
    }
  }

  PublishResult Send(Call& call, const ClaimedEvent& ce) {
    const std::string path = Fill(url_.path, ce.event);
    const std::string where = "POST " + url_.origin + path.substr(0, path.find('?'));
    if (auto wait = DestinationTurn(path, where)) return *wait;
    PublishResult r = Deliver(call, ce, path, where);
    EndDestinationTurn(path, r);
    return r;
  }

  // One destination's outage, while others answer (kDestinationBackoffBase).
  struct Destination {
    int failures = 0;
    Steady::time_point until;  // no request before this but the probe
    bool probing = false;      // a request is testing it now
    std::string last_error;
  };

  // Whether `path` is another destination than one that answered lately.
  bool OthersAnsweringLocked(const std::string& path, Steady::time_point now)
      OUTBOX_REQUIRES(dest_mu_) {
    bool others = false;
    for (auto it = answered_.begin(); it != answered_.end();) {
      if (now - it->second > kOthersAnswering) {
        it = answered_.erase(it);
        continue;
      }
      others = others || it->first != path;
      ++it;
    }
    return others;
  }

  // Before a request to `path`: a result when it must wait (its destination
  // is backing off while others answer); else it may go (the probe, if it was
  // backing off).
  std::optional<PublishResult> DestinationTurn(const std::string& path, const std::string& where) {
    MutexLock lock(dest_mu_);
    auto it = destinations_.find(path);
    const auto now = Steady::now();
    if (it == destinations_.end() || !OthersAnsweringLocked(path, now)) return std::nullopt;
    Destination& d = it->second;
    if (now >= d.until && !d.probing) {
      d.probing = true;
      return std::nullopt;
    }
    const auto left = std::chrono::duration_cast<milliseconds>(d.until - now);
    PublishResult r = Unavailable("not sent: " + where + " is backing off after " +
                                      std::to_string(d.failures) + " failure(s) while other "
                                      "destinations answer (" + d.last_error + ")",
                                  std::max(left, kDestinationBackoffBase));
    r.broker_unavailable = false;
    return r;
  }

  // After a request to `path`: a 2xx clears its destination's outage, a
  // failure of the receiver (no answer, 408, 429, 5xx) extends it. While
  // another destination answers, the failure is this destination's alone: not
  // an outage of the batch, nor of the transport (/readyz).
  void EndDestinationTurn(const std::string& path, PublishResult& r) {
    MutexLock lock(dest_mu_);
    const auto now = Steady::now();
    if (r.outcome == PublishOutcome::kAcked) {
      answered_[path] = now;
      destinations_.erase(path);
      return;
    }
    const bool its_own = r.outcome == PublishOutcome::kRetryable && r.outage_for_event &&
                         r.error.rfind("not sent", 0) != 0;
    if (!its_own) {  // answered for good (4xx), or never sent (the call's deadline)
      if (r.outcome == PublishOutcome::kFatal) {
        destinations_.erase(path);
      } else if (auto it = destinations_.find(path); it != destinations_.end()) {
        it->second.probing = false;
      }
      return;
    }
    Destination& d = destinations_[path];
    d.probing = false;
    d.failures = std::min(d.failures + 1, 16);
    const milliseconds backoff = std::min<milliseconds>(
        kDestinationBackoffMax, kDestinationBackoffBase * (1 << std::min(d.failures - 1, 10)));
    d.until = now + std::max(backoff, r.retry_after);
    d.last_error = r.error.substr(0, 200);
    if (OthersAnsweringLocked(path, now)) {
      r.broker_unavailable = false;
      r.retry_after = std::max(r.retry_after, std::chrono::duration_cast<milliseconds>(d.until - now));
      unreachable_ = false;
    }
  }

  PublishResult Deliver(Call& call, const ClaimedEvent& ce, const std::string& path,
                        const std::string& where) {
    const Event& e = ce.event;
    httplib::Headers headers;  // compares names ignoring case
    std::string content_type = "application/octet-stream";
    auto add = [&](const std::string& name, const std::string& value) {
      if (strcasecmp(name.c_str(), "Content-Type") == 0) {
        content_type = value;  // a Post argument, not a header
        return;
      }
      headers.erase(name);  // a later one of the same name replaces it
      headers.emplace(name, value);
    };
    add("Idempotency-Key", ce.event_id);
    add("Outbox-Event-Id", ce.event_id);
    add("Outbox-Attempt", std::to_string(ce.attempts));
    std::vector<std::pair<std::string, const std::string*>> text = {
        {"Outbox-Aggregate-Type", &e.aggregate_type},
        {"Outbox-Aggregate-Id", &e.aggregate_id},
        {"Outbox-Event-Type", &e.event_type}};
    if (e.dedup_key) text.emplace_back("Outbox-Dedup-Key", &*e.dedup_key);
    const std::size_t ours = text.size();
    for (const Header& h : e.headers) text.emplace_back(h.name, &h.value);
    for (std::size_t i = 0; i < text.size(); ++i) {
      const auto& [name, value] = text[i];
      // The event's own headers never replace ours (names differ from Kafka's
      // only in case, and HTTP ignores case).
      if (i >= ours && IsTransportHeader(name)) continue;
      // Enqueue validates names and values; a row written by hand may not be.
      if (!IsToken(name)) {
        return Fatal("header name \"" + name + "\" is not fit for HTTP (" + where + ")");
      }
      if (!IsFieldValue(*value)) {
        return Fatal(name + " has a line break or NUL, which an HTTP header cannot carry (" +
                     where + ")");
      }
      add(name, *value);
    }
    for (const auto& [name, value] : options_.headers) add(name, value);

    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(call.deadline -
                                                                            Steady::now());
    if (left.count() <= 0) {
      return Unavailable("not sent: http_delivery.timeout_ms (" +
                         std::to_string(options_.timeout.count()) +
                         " ms) ran out before its turn (" + where + ")");
    }
    std::unique_ptr<httplib::Client> client = Checkout();
    client->set_connection_timeout(left / 2);
    client->set_read_timeout(left);
    client->set_write_timeout(left);
    {
      MutexLock lock(call.mu);
      if (call.expired) return Unavailable("not sent: the call's deadline passed (" + where + ")");
      call.in_use.insert(client.get());
    }
    Answer answer;
    const auto sent_at = Steady::now();
    httplib::Result res = client->send(Request(path, std::move(headers), content_type, e.payload, answer));
    bool stopped;
    {
      MutexLock lock(call.mu);
      call.in_use.erase(client.get());
      stopped = call.expired;
    }
    if (res && answer.status == 0) {  // a head the response handler did not see (no body)
      answer.status = res->status;
      answer.retry_after = res->get_header_value("Retry-After");
    }
    if (answer.status == 0 || (!res && !answer.cut)) {
      unreachable_ = true;
      // A stopped client's socket is closed: not worth keeping.
      if (!stopped) Return(std::move(client));
      const auto elapsed = std::chrono::duration_cast<milliseconds>(Steady::now() - sent_at);
      return Unavailable(where + ": " + (stopped ? "no response within http_delivery.timeout_ms (" +
                                                       std::to_string(options_.timeout.count()) + " ms)"
                                                 : DescribeFailure(res.error(), elapsed,
                                                                   std::chrono::duration_cast<milliseconds>(left))));
    }
    unreachable_ = answer.status >= 500;
    if (!answer.cut) Return(std::move(client));  // a cut body leaves the connection mid-answer
    const int status = answer.status;
    if (status >= 200 && status < 300) return PublishResult{PublishOutcome::kAcked, "", false, {}};
    std::string body = answer.body.substr(0, kErrorBodyBytes);
    for (char& c : body) {
      if (c == '\r' || c == '\n' || c == '\0') c = ' ';
    }
    const std::string why = "HTTP " + std::to_string(status) + " from " + where +
                            (body.empty() ? std::string() : ": " + body);
    if (status == 408 || status == 429 || status >= 500) {
      return Unavailable(why, ParseRetryAfter(answer.retry_after));
    }
    return Fatal(why);
  }

  // What Send keeps of an answer: the status and Retry-After from its head,
  // and at most kMaxBodyBytes of its body (`cut` when there was more).
  struct Answer {
    int status = 0;
    std::string retry_after;
    std::string body;
    bool cut = false;
  };

  // The POST, with the answer's head and (bounded) body going to `answer`.
  static httplib::Request Request(const std::string& path, httplib::Headers headers,
                                  const std::string& content_type, const std::string& payload,
                                  Answer& answer) {
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.headers = std::move(headers);
    req.headers.emplace("Content-Type", content_type);
    req.body = payload;
    req.response_handler = [&answer](const httplib::Response& r) {
      answer.status = r.status;
      answer.retry_after = r.get_header_value("Retry-After");
      return true;
    };
    req.content_receiver = [&answer](const char* data, std::size_t n, std::uint64_t, std::uint64_t) {
      const std::size_t room = kMaxBodyBytes - answer.body.size();
      answer.body.append(data, std::min(n, room));
      if (n <= room) return true;
      answer.cut = true;
      return false;  // the rest is not read: the connection ends here
    };
    return req;
  }

  const HttpTransportOptions options_;
  const ParsedUrl url_;
  Mutex pool_mu_;
  std::vector<std::unique_ptr<httplib::Client>> idle_ OUTBOX_GUARDED_BY(pool_mu_);
  Mutex dest_mu_;
  std::map<std::string, Destination> destinations_ OUTBOX_GUARDED_BY(dest_mu_);  // by path
  std::map<std::string, Steady::time_point> answered_ OUTBOX_GUARDED_BY(dest_mu_);  // last 2xx by path
  std::atomic<bool> unreachable_{false};
};

}  // namespace

Status ValidateHttpUrlTemplate(const std::string& tmpl) {
  ParsedUrl url;
  std::string why;
  if (!ParseUrl(tmpl, &url, &why)) return Status::InvalidArgument(why);
  std::string rest = url.path;
  for (const char* name : {"{aggregate_type}", "{event_type}"}) {
    for (std::size_t p; (p = rest.find(name)) != std::string::npos;) rest.erase(p, std::strlen(name));
  }
  if (rest.find_first_of("{}") != std::string::npos) {
    return Status::InvalidArgument("\"" + tmpl +
                                   "\" has an unknown placeholder; known: {aggregate_type}, {event_type}");
  }
  return Status::Ok();
}

std::string RenderHttpUrl(const std::string& tmpl, const Event& event) {
  ParsedUrl url;
  std::string why;
  if (!ParseUrl(tmpl, &url, &why)) return tmpl;
  return url.origin + Fill(url.path, event);
}

Result<std::unique_ptr<Transport>> OpenHttpTransport(const HttpTransportOptions& options) {
  if (Status st = ValidateHttpUrlTemplate(options.url_template); !st.ok()) {
    return Status::InvalidArgument("http_delivery.url: " + st.message());
  }
  if (options.timeout.count() <= 0) {
    return Status::InvalidArgument("http_delivery.timeout_ms must be above 0");
  }
  if (options.concurrency < 1 || options.concurrency > 256) {
    return Status::InvalidArgument("http_delivery.concurrency must be 1..256");
  }
  for (const auto& [name, value] : options.headers) {
    if (!IsToken(name)) {
      return Status::InvalidArgument("http_delivery.headers." + name + ": not a valid header name");
    }
    if (!IsFieldValue(value)) {
      return Status::InvalidArgument("http_delivery.headers." + name +
                                     ": the value has a line break or NUL");
    }
    if (IsTransportHeader(name)) {
      return Status::InvalidArgument("http_delivery.headers." + name +
                                     ": the transport sets this header itself");
    }
  }
  if (!options.tls_ca_file.empty()) {
    // Checked here, not at the first delivery: a file OpenSSL cannot load made
    // every event an outage for ever (SSLLoadingCerts).
    const std::string& path = options.tls_ca_file;
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) {
      return Status::InvalidArgument("http_delivery.tls_ca_file: \"" + path +
                                     "\" is a directory, not a PEM file of CA certificates");
    }
    std::FILE* f = std::fopen(path.c_str(), "rb");
    if (f == nullptr) {
      return Status::InvalidArgument("http_delivery.tls_ca_file: cannot read \"" + path + "\"");
    }
    std::string text;
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0 && text.size() < (1u << 24);) {
      text.append(buf, n);
    }
    std::fclose(f);
    if (text.find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
      return Status::InvalidArgument("http_delivery.tls_ca_file: \"" + path +
                                     "\" holds no PEM certificate (-----BEGIN CERTIFICATE-----)");
    }
  }
  ParsedUrl url;
  std::string why;
  ParseUrl(options.url_template, &url, &why);
  return std::unique_ptr<Transport>(new HttpTransport(options, std::move(url)));
}

}  // namespace outbox
