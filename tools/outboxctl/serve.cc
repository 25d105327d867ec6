#include "serve.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>

#include "ops.h"
#include "outbox/kafka.h"
#include "outbox/parse.h"

namespace outbox::ctl {

extern const char kIndexHtml[];
extern const char kAppJs[];
extern const char kAppCss[];

namespace {

using nlohmann::json;

// Strings longer than this (a last_error with a stack trace, a key someone
// pasted a document into) reach the page cut, with their length said.
constexpr std::size_t kMaxText = 2000;
constexpr long long kMaxListRows = 1000;
constexpr long long kMaxAgeS = 100LL * 365 * 86400;

void Truncate(json& v) {
  if (v.is_string()) {
    const auto& s = v.get_ref<const std::string&>();
    if (s.size() > kMaxText) {
      std::size_t cut = kMaxText;  // not inside a UTF-8 character
      while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;
      v = s.substr(0, cut) + "… (" + std::to_string(s.size()) + " bytes, truncated)";
    }
  } else if (v.is_structured()) {
    for (auto& x : v) Truncate(x);
  }
}

void Reply(httplib::Response& res, int status, json body) {
  Truncate(body);
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void Error(httplib::Response& res, int status, const std::string& message) {
  Reply(res, status, json{{"ok", false}, {"error", message}});
}

// Compares without leaking where the first difference is.
bool SameSecret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

// Kafka's rule for topic names.
bool ValidTopicName(const std::string& t) {
  if (t.empty() || t.size() > 249 || t == "." || t == "..") return false;
  for (char c : t) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

// The listening address is on the loopback interface.
bool IsLoopbackListener(const std::string& host) {
  in_addr a4{};
  if (inet_pton(AF_INET, host.c_str(), &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  in6_addr a6{};
  if (inet_pton(AF_INET6, host.c_str(), &a6) == 1) {  // ::1 in any spelling, ::ffff:127.x.y.z
    const unsigned char* b = a6.s6_addr;
    const bool zeros10 = std::all_of(b, b + 10, [](unsigned char c) { return c == 0; });
    if (zeros10 && b[10] == 0 && b[11] == 0 && b[12] == 0 && b[13] == 0 && b[14] == 0 && b[15] == 1) {
      return true;
    }
    return zeros10 && b[10] == 0xff && b[11] == 0xff && b[12] == 127;
  }
  return host == "localhost";
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The Host header's name without its port, lower-cased.
std::string HostName(const std::string& host_header) {
  if (!host_header.empty() && host_header.front() == '[') {
    const auto end = host_header.find(']');  // then nothing or a port
    const bool literal = end != std::string::npos &&
                         (end + 1 == host_header.size() || host_header[end + 1] == ':');
    return Lower(literal ? host_header.substr(0, end + 1) : host_header);
  }
  return Lower(host_header.substr(0, host_header.find(':')));
}

// A name a page on another site cannot point at this listener: localhost, an
// IPv4 literal in 127.0.0.0/8 (four decimal parts, as inet_pton reads them), or
// [::1]. A name that merely starts with "127." is a DNS name like any other.
bool IsLoopbackName(const std::string& name) {
  if (name == "localhost" || name == "[::1]") return true;
  in_addr a4{};
  return inet_pton(AF_INET, name.c_str(), &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127;
}

// The database session: one, behind a mutex, reopened after any error (the
// next request reconnects; an operator's page polls every few seconds).
class Db {
 public:
  explicit Db(const ServeOptions& o) : o_(o) {}

  template <typename F>
  Result<json> With(F&& f) {
    std::lock_guard<std::mutex> l(mu_);
    if (!store_) {
      auto s = OpenOutboxStore(o_.db, o_.schema);
      if (!s.ok()) return s.status();
      store_ = std::move(s).value();
    }
    Result<json> r = f(*store_);
    if (!r.ok()) store_.reset();
    return r;
  }

 private:
  const ServeOptions& o_;
  std::mutex mu_;
  std::unique_ptr<Store> store_;  // GUARDED_BY(mu_)
};

void Answer(httplib::Response& res, const Result<json>& r) {
  if (r.ok()) {
    Reply(res, 200, *r);
  } else {
    Error(res, r.status().code() == Code::kInvalidArgument ? 400 : 503, r.status().ToString());
  }
}

}  // namespace

// A host name (letters, digits, '.', '-') or a bracketed IPv6 literal, with no
// port and no path; lower-cased.
Result<std::string> HostNameOnly(const std::string& what, const std::string& v) {
  const auto bad = [&] {
    return Status::InvalidArgument(what + ": expected a host name without port or path "
                                           "(dash.example.com, [::1]), got \"" + v + "\"");
  };
  if (v.empty() || v.size() > 253) return bad();
  if (v.front() == '[') {
    if (v.size() < 3 || v.back() != ']') return bad();
    for (std::size_t i = 1; i + 1 < v.size(); ++i) {
      if (!std::isxdigit(static_cast<unsigned char>(v[i])) && v[i] != ':' && v[i] != '.') return bad();
    }
    return Lower(v);
  }
  for (char c : v) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') return bad();
  }
  if (v.front() == '.' || v.front() == '-') return bad();
  return Lower(v);
}

// --public-url http[s]://HOST[:PORT][/PATH] → the origin a browser sends from
// it (scheme://host[:port], the scheme's own port left out); its host is
// answered too.
Result<std::string> PublicOrigin(const std::string& url, std::vector<std::string>* hosts) {
  // Never echoed when it may hold a user name or password.
  const std::string shown = url.find('@') == std::string::npos ? "\"" + url + "\"" : "a URL with '@' (not shown)";
  const auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("--public-url: " + why + ", got " + shown);
  };
  const std::string lower = Lower(url);
  std::string scheme;
  if (lower.rfind("https://", 0) == 0) {
    scheme = "https";
  } else if (lower.rfind("http://", 0) == 0) {
    scheme = "http";
  } else {
    return bad("expected an http:// or https:// URL (https://dash.example.com)");
  }
  std::string authority = lower.substr(scheme.size() + 3);
  authority = authority.substr(0, authority.find_first_of("/?#"));
  if (authority.find('@') != std::string::npos) {  // not echoed: it may hold a password
    return Status::InvalidArgument("--public-url: no user name or password in the URL");
  }
  std::string host = authority, port;
  const auto close = authority.rfind(']');
  const auto colon = authority.rfind(':');
  if (colon != std::string::npos && (close == std::string::npos || colon > close)) {
    host = authority.substr(0, colon);
    auto p = ParseInteger("--public-url port", authority.substr(colon + 1), 1, 65535);
    if (!p.ok()) return bad("the port must be a number from 1 to 65535");
    port = std::to_string(*p);
  }
  auto name = HostNameOnly("--public-url", host);
  if (!name.ok()) return name.status();
  hosts->push_back(*name);
  const bool default_port = port.empty() || (scheme == "https" && port == "443") ||
                            (scheme == "http" && port == "80");
  return scheme + "://" + *name + (default_port ? "" : ":" + port);
}

namespace {

// Every answer's security headers, and (bound to loopback) the Host check.
void GuardRequests(httplib::Server& srv, const ServeOptions& o, bool loopback) {
  // Every answer: no framing, no sniffing, scripts and styles only from here
  // (the page has no inline script: a payload that smuggles one in is inert).
  srv.set_post_routing_handler([](const httplib::Request&, httplib::Response& res) {
    res.set_header("Content-Security-Policy",
                   "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                   "img-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_header("X-Frame-Options", "DENY");
    res.set_header("Referrer-Policy", "no-referrer");
  });
  // Bound to loopback, only loopback names and the names the operator allowed
  // are answered: a web page elsewhere cannot reach the API by pointing its own
  // host name at 127.0.0.1 (DNS rebinding).
  srv.set_pre_routing_handler([loopback, &o](const httplib::Request& req, httplib::Response& res) {
    if (!loopback) return httplib::Server::HandlerResponse::Unhandled;
    const std::string name = HostName(req.get_header_value("Host"));
    if (IsLoopbackName(name) || std::find(o.allowed_hosts.begin(), o.allowed_hosts.end(), name) !=
                                    o.allowed_hosts.end()) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    Error(res, 403, "Host header refused: this dashboard answers to localhost, 127.0.0.0/8 and [::1], "
                    "and to the names given with --allowed-host (or --public-url)");
    return httplib::Server::HandlerResponse::Handled;
  });
}

// The page's files and the read-only API: status, activity, events, trace,
// the consumers' inboxes and backlogs.
void AddReadRoutes(httplib::Server& srv, Db& db, const ServeOptions& o) {
  auto asset = [&srv](const char* path, const char* body, const char* type) {
    srv.Get(path, [body, type](const httplib::Request&, httplib::Response& res) {
      res.set_content(body, type);
    });
  };
  asset("/", kIndexHtml, "text/html; charset=utf-8");
  asset("/app.js", kAppJs, "text/javascript; charset=utf-8");
  asset("/app.css", kAppCss, "text/css; charset=utf-8");

  srv.Get("/api/status", [&](const httplib::Request&, httplib::Response& res) {
    auto r = db.With([&](Store& s) { return StatusReport(s, o.schema); });
    if (r.ok()) {
      (*r)["actions"] = !o.token.empty();
      (*r)["inbox"] = !o.inbox_db.empty();
    }
    Answer(res, r);
  });

  srv.Get("/api/activity", [&](const httplib::Request&, httplib::Response& res) {
    Answer(res, db.With([&](Store& s) { return ActivityJson(s, s.Ledger(), std::chrono::hours(1)); }));
  });

  srv.Get("/api/events", [&](const httplib::Request& req, httplib::Response& res) {
    ListFilter f;
    f.state = req.get_param_value("state");
    if (!f.state.empty() && f.state != "PENDING" && f.state != "PROCESSING" && f.state != "SENT" &&
        f.state != "FAILED" && f.state != "SKIPPED") {
      return Error(res, 400, "state: one of PENDING, PROCESSING, SENT, FAILED, SKIPPED");
    }
    f.aggregate_id = req.get_param_value("aggregate");
    f.event_type = req.get_param_value("type");
    if (const std::string v = req.get_param_value("older_than"); !v.empty()) {
      auto secs = ParseSeconds("older_than", v, kMaxAgeS);
      if (!secs.ok()) return Error(res, 400, secs.status().message());
      f.older_than = *secs;
    }
    f.limit = 100;
    if (const std::string v = req.get_param_value("limit"); !v.empty()) {
      auto n = ParseInteger("limit", v, 1, kMaxListRows);
      if (!n.ok()) return Error(res, 400, n.status().message());
      f.limit = static_cast<int>(*n);
    }
    Answer(res, db.With([&](Store& s) { return ListReport(s, f); }));
  });

  srv.Get("/api/trace", [&](const httplib::Request& req, httplib::Response& res) {
    const std::string key = req.get_param_value("key");
    if (key.empty() || key.size() > 1000) {
      return Error(res, 400, "key: an event id or a dedup key (1 to 1000 characters)");
    }
    std::unique_ptr<InboxView> inbox;
    if (!o.inbox_db.empty()) {
      auto opened = OpenOperatorInbox(o.inbox_db, o.inbox_schema, "outboxctl");
      if (!opened.ok()) return Error(res, 503, "the inbox database: " + opened.status().ToString());
      inbox = std::move(opened).value();
    }
    Answer(res, db.With([&](Store& s) { return TraceReport(s, inbox.get(), key); }));
  });

  // The consumer side (with --inbox-db): its stamps, absorbed copies, parked.
  // And (with --consumer) what waits for each group on the broker.
  srv.Get("/api/inbox", [&](const httplib::Request&, httplib::Response& res) {
    json out = {{"ok", true}, {"configured", !o.inbox_db.empty()}, {"consumers", json::array()}};
    if (!o.inbox_db.empty()) {
      auto opened = OpenOperatorInbox(o.inbox_db, o.inbox_schema, "outboxctl");
      if (!opened.ok()) return Error(res, 503, "the inbox database: " + opened.status().ToString());
      auto r = InboxStatusJson(**opened);
      if (!r.ok()) return Answer(res, r);
      out["consumers"] = (*r)["consumers"];
    }
    json backlog = json::array();
    for (const auto& [group, topics] : o.consumers) {
      auto b = ConsumerBacklog(o.kafka, group, topics);
      if (!b.ok()) {
        out["backlog_error"] = b.status().ToString();
        break;
      }
      for (const TopicBacklog& t : *b) {
        backlog.push_back({{"group", group}, {"topic", t.topic}, {"role", t.role},
                           {"messages", t.messages}, {"lag", t.lag}, {"committed", t.committed}});
      }
    }
    out["backlog"] = std::move(backlog);
    Reply(res, 200, std::move(out));
  });
}

// The actions (replay, skip, dead-letter replay), each behind authorize.
void AddActionRoutes(httplib::Server& srv, Db& db, const ServeOptions& o) {
  // The actions: the token, as a header a cross-site form or image cannot
  // send (CSRF), a JSON body, and no foreign Origin. Recorded where
  // `outboxctl` records them (skip: skipped_by and skip_reason on the row).
  // Held by value in the handlers: they outlive this function.
  auto authorize = [&o](const httplib::Request& req, httplib::Response& res, json* body) -> bool {
    if (o.token.empty()) {
      Error(res, 403, "actions are off: start `outboxctl serve` with OUTBOX_DASHBOARD_TOKEN or "
                      "--token-file to enable replay and skip");
      return false;
    }
    // The page's own origin: as served here, or as the operator's HTTPS proxy
    // serves it (--public-url).
    const std::string origin = Lower(req.get_header_value("Origin"));
    if (!origin.empty() && origin != "http://" + Lower(req.get_header_value("Host")) &&
        (o.public_origin.empty() || origin != o.public_origin)) {
      Error(res, 403, "cross-origin request refused (Origin " + origin +
                          (o.public_origin.empty() ? "; behind a proxy, start with --public-url)" : ")"));
      return false;
    }
    if (!SameSecret(req.get_header_value("Authorization"), "Bearer " + o.token)) {
      res.set_header("WWW-Authenticate", "Bearer");
      Error(res, 401, "Authorization: a valid Bearer token is required for actions");
      return false;
    }
    if (req.get_header_value("Content-Type").rfind("application/json", 0) != 0) {
      Error(res, 415, "Content-Type: application/json is required");
      return false;
    }
    *body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (!body->is_object()) {
      Error(res, 400, "body: a JSON object is required");
      return false;
    }
    return true;
  };
  auto event_id_of = [](const json& body, httplib::Response& res) -> std::string {
    const auto it = body.find("event_id");
    if (it == body.end() || !it->is_string() || it->get<std::string>().empty()) {
      Error(res, 400, "event_id: the event's id (a string) is required");
      return {};
    }
    return it->get<std::string>();
  };

  srv.Post("/api/replay", [&db, authorize, event_id_of](const httplib::Request& req, httplib::Response& res) {
    json body;
    if (!authorize(req, res, &body)) return;
    ReplaySelection sel;
    sel.event_id = event_id_of(body, res);
    if (sel.event_id.empty()) return;
    Answer(res, db.With([&](Store& s) { return ReplayReport(s, sel); }));
  });

  srv.Post("/api/skip", [&db, authorize, event_id_of](const httplib::Request& req, httplib::Response& res) {
    json body;
    if (!authorize(req, res, &body)) return;
    SkipRequest sr;
    sr.event_id = event_id_of(body, res);
    if (sr.event_id.empty()) return;
    const auto reason = body.find("reason");
    if (reason == body.end() || !reason->is_string() || reason->get<std::string>().empty() ||
        reason->get<std::string>().size() > 1000) {
      return Error(res, 400, "reason: why the event is set aside (1 to 1000 characters) is required");
    }
    sr.reason = reason->get<std::string>();
    sr.by = "outboxctl serve (token holder at " + req.remote_addr + ")";
    auto r = db.With([&](Store& s) { return SkipReport(s, sr); });
    if (r.ok() && (*r)["was"].get<std::string>().empty()) {
      return Error(res, 404, "no event with id " + sr.event_id);
    }
    if (r.ok() && (*r)["skipped"].get<long long>() == 0) {
      return Error(res, 409, "event " + sr.event_id + " is " + (*r)["was"].get<std::string>() +
                                 "; only FAILED or PENDING events can be skipped (nothing changed)");
    }
    Answer(res, r);
  });

  // Dead letters back to their topics (outboxctl dlt replay): the copies go
  // where they came from; consumers' inboxes absorb what they applied before.
  srv.Post("/api/dlt/replay", [&o, authorize](const httplib::Request& req, httplib::Response& res) {
    json body;
    if (!authorize(req, res, &body)) return;
    if (const auto b = o.kafka.find("bootstrap.servers"); b == o.kafka.end() || b->second.empty()) {
      return Error(res, 400, "no broker: start `outboxctl serve` with --bootstrap, "
                             "OUTBOX_KAFKA_BOOTSTRAP or --config to replay dead letters");
    }
    const auto topic = body.find("topic");
    if (topic == body.end() || !topic->is_string() || !ValidTopicName(topic->get<std::string>())) {
      return Error(res, 400, "topic: a dead-letter topic's name (letters, digits, '.', '_', '-'; "
                             "at most 249) is required");
    }
    ReplayFilter f;
    if (const auto key = body.find("key"); key != body.end()) {
      if (!key->is_string()) return Error(res, 400, "key: a string, or leave it out for every key");
      f.key = key->get<std::string>();
    }
    const auto dry = body.find("dry_run");
    if (dry != body.end() && !dry->is_boolean()) return Error(res, 400, "dry_run: true or false");
    const bool dry_run = dry != body.end() && dry->get<bool>();
    auto r = ReplayDeadLetters(o.kafka, topic->get<std::string>(), f, dry_run);
    if (!r.ok()) return Error(res, 503, r.status().ToString());
    Reply(res, 200, json{{"ok", true}, {"topic", topic->get<std::string>()}, {"key", f.key},
                         {"scanned", r->scanned}, {"replayed", r->replayed},
                         {"not_replayable", r->not_replayable}, {"dry_run", dry_run}});
  });
}

// Binds, serves until SIGINT or SIGTERM; the exit code.
int Listen(httplib::Server& srv, const ServeOptions& o) {
  int port = o.port;
  if (port == 0) {
    port = srv.bind_to_any_port(o.host);
  } else if (!srv.bind_to_port(o.host, port)) {
    port = -1;
  }
  if (port < 0) {
    std::fprintf(stderr, "outboxctl serve: cannot listen on %s:%d\n", o.host.c_str(), o.port);
    return 1;
  }

  // SIGINT / SIGTERM end the server (handled on a thread of their own).
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread signals([&] {
    int sig = 0;
    sigwait(&set, &sig);
    srv.stop();
  });

  const std::string host = o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host;
  std::printf("outboxctl serve: http://%s:%d/ (schema %s; %s)\n", host.c_str(), port,
              o.schema.c_str(),
              o.token.empty() ? "read-only: no token" : "replay and skip need the token");
  std::fflush(stdout);
  const bool ok = srv.listen_after_bind();
  if (signals.joinable()) {
    pthread_kill(signals.native_handle(), SIGTERM);  // wake it when listen ended on its own
    signals.join();
  }
  return ok ? 0 : 1;
}

}  // namespace

int Serve(const ServeOptions& o) {
  Db db(o);
  httplib::Server srv;
  const bool loopback = IsLoopbackListener(o.host);
  if (!loopback && !o.allowed_hosts.empty()) {
    std::fprintf(stderr, "outboxctl serve: note: --allowed-host (and --public-url's host) has no effect "
                         "on a listener that is not loopback (%s): every Host is answered there\n", o.host.c_str());
  }
  GuardRequests(srv, o, loopback);
  AddReadRoutes(srv, db, o);
  AddActionRoutes(srv, db, o);
  return Listen(srv, o);
}

}  // namespace outbox::ctl
