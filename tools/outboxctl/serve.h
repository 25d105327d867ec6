// `outboxctl serve`: the operators' dashboard — one page (built into the
// binary) and a small JSON API beside it, answered from ops.h (the documents
// `outboxctl --json` prints). Read-only unless a token is configured; the
// actions (replay, skip) then need `Authorization: Bearer <token>`.
//
// Thread-safety: Serve() owns everything it starts; requests are answered on
// cpp-httplib's worker threads, the database session behind one mutex.
#ifndef OUTBOX_TOOLS_OUTBOXCTL_SERVE_H_
#define OUTBOX_TOOLS_OUTBOXCTL_SERVE_H_

#include <map>
#include <string>
#include <vector>

#include "outbox/status.h"

namespace outbox::ctl {

struct ServeOptions {
  std::string db, schema;              // the outbox (as for every command)
  std::string inbox_db, inbox_schema;  // optional: trace shows the consumer's stamps
  std::string host = "127.0.0.1";
  int port = 8089;                     // 0: any free port (printed)
  std::string token;                   // "" = read-only (actions answer 403)
  // On a loopback listener, Host names answered besides localhost, 127.0.0.0/8
  // and [::1] (lower case, no port). Ignored on other listeners.
  std::vector<std::string> allowed_hosts;
  // The origin the page has behind a proxy ("https://dash.example.com", lower
  // case, no path): actions from it are accepted besides http://<Host>.
  std::string public_origin;
  // librdkafka properties for dead-letter replay (bootstrap.servers, TLS, SASL);
  // without bootstrap.servers that action answers 400.
  std::map<std::string, std::string> kafka;
  // Consumer groups whose backlog on the broker the page shows: group → its
  // main topics (their retry and dead-letter topics are found by name).
  std::map<std::string, std::vector<std::string>> consumers;
};

// --allowed-host NAME (and --public-url's host): a host name (letters, digits,
// '.', '-') or a bracketed IPv6 literal, no port, no path; lower-cased. The
// error names `what`.
Result<std::string> HostNameOnly(const std::string& what, const std::string& v);
// --public-url http[s]://HOST[:PORT][/PATH] → the origin a browser sends from
// it (scheme://host[:port], the scheme's own port left out); appends its host
// to `hosts`. A URL with '@' is never echoed.
Result<std::string> PublicOrigin(const std::string& url, std::vector<std::string>* hosts);

// Serves until SIGINT/SIGTERM; the process's exit code (0 after a signal, 1
// when the address cannot be bound).
int Serve(const ServeOptions& options);

}  // namespace outbox::ctl

#endif  // OUTBOX_TOOLS_OUTBOXCTL_SERVE_H_
