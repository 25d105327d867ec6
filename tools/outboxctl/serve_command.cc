// outboxctl serve: the dashboard's flags, checked, and its token (serve.cc
// runs the server).
#include <cstdlib>

#include "config.h"  // outbox::config::ReadFile
#include "ctl.h"
#include "outbox/mariadb.h"
#include "outbox/parse.h"
#include "serve.h"

namespace outbox::ctl {
namespace {

using nlohmann::json;

// The token for the dashboard's actions: --token-file, else the environment;
// never a flag's value (it would show in `ps`). Bad values exit 2.
std::optional<int> LoadToken(const Options& o, std::string* token) {
  if (!o.token_file.empty()) {
    auto text = outbox::config::ReadFile(o.token_file);
    if (!text.ok()) return Usage("--token-file: " + text.status().message());
    *token = *text;
  } else if (const char* env = std::getenv("OUTBOX_DASHBOARD_TOKEN")) {
    *token = env;
  }
  while (!token->empty() && (token->back() == '\n' || token->back() == '\r' || token->back() == ' ')) {
    token->pop_back();
  }
  const char* from = o.token_file.empty() ? "OUTBOX_DASHBOARD_TOKEN" : "--token-file";
  if (!token->empty() && token->size() < 16) {
    return Usage(std::string(from) + ": the token is too short (at least 16 characters)");
  }
  for (char c : *token) {
    if (c < 0x21 || c > 0x7e) {
      return Usage(std::string(from) + ": the token must be printable ASCII without spaces");
    }
  }
  if (!o.token_file.empty() && token->empty()) return Usage("--token-file: the file is empty");
  return std::nullopt;
}

int ServeCommand(const Options& o) {
  outbox::ctl::ServeOptions so;
  so.db = o.db;
  so.schema = o.schema;
  so.inbox_db = o.inbox_db;
  so.inbox_schema = o.inbox_schema;
  so.kafka = o.kafka;
  const auto colon = o.listen.rfind(':');
  if (colon == std::string::npos || colon == 0) return Usage("--listen: expected host:port, got " + o.listen);
  so.host = o.listen.substr(0, colon);
  if (so.host.size() > 2 && so.host.front() == '[' && so.host.back() == ']') {
    so.host = so.host.substr(1, so.host.size() - 2);
  }
  auto port = outbox::ParseInteger("--listen port", o.listen.substr(colon + 1), 0, 65535);
  if (!port.ok()) return Usage(port.status().message());
  so.port = static_cast<int>(*port);
  for (const std::string& c : o.consumers) {
    const auto eq = c.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == c.size()) {
      return Usage("--consumer: expected GROUP=TOPIC[,TOPIC...], got " + c);
    }
    std::vector<std::string>& topics = so.consumers[c.substr(0, eq)];
    std::string rest = c.substr(eq + 1);
    for (std::size_t at = 0; at <= rest.size();) {
      const auto comma = std::min(rest.find(',', at), rest.size());
      if (comma == at) return Usage("--consumer: an empty topic name in " + c);
      topics.push_back(rest.substr(at, comma - at));
      at = comma + 1;
    }
  }
  if (!so.consumers.empty()) {
    const auto b = so.kafka.find("bootstrap.servers");
    if (b == so.kafka.end() || b->second.empty()) {
      return Usage("--consumer: needs the broker: pass --bootstrap, set OUTBOX_KAFKA_BOOTSTRAP, or --config");
    }
  }
  for (const std::string& h : o.allowed_hosts) {
    auto name = outbox::ctl::HostNameOnly("--allowed-host", h);
    if (!name.ok()) return Usage(name.status().message());
    so.allowed_hosts.push_back(*name);
  }
  if (!o.public_url.empty()) {
    auto origin = outbox::ctl::PublicOrigin(o.public_url, &so.allowed_hosts);
    if (!origin.ok()) return Usage(origin.status().message());
    so.public_origin = *origin;
  }
  if (auto bad = CheckInboxDb(o)) return *bad;
  if (auto bad = LoadToken(o, &so.token)) return *bad;
  return outbox::ctl::Serve(so);
}

}  // namespace

void AddServeCommand(CLI::App& app, Options& o, Commands& out) {
  auto* serve = app.add_subcommand(
      "serve",
      "the dashboard: one page and a JSON API (read-only; replay and skip with a token from "
      "OUTBOX_DASHBOARD_TOKEN or --token-file)");
  serve->add_option("--listen", o.listen, "host:port (default 127.0.0.1:8089; port 0 = any free port)");
  serve->add_option("--token-file", o.token_file,
                    "a file holding the actions' token (at least 16 characters); else "
                    "$OUTBOX_DASHBOARD_TOKEN; without either the page is read-only");
  serve->add_option("--inbox-db", o.inbox_db, "the consumer's database: traces show its stamps");
  serve->add_option("--consumer", o.consumers,
                    "GROUP=TOPIC[,TOPIC...] (repeatable): show what waits for that consumer group "
                    "on the broker — its topics, their retry and dead-letter topics: messages and "
                    "the group's lag");
  // (--bootstrap, OUTBOX_KAFKA_BOOTSTRAP or --config: the broker for the
  // consumers' backlog and dead-letter replay)
  serve->add_option("--inbox-schema", o.inbox_schema, "the inbox's PostgreSQL schema (default inbox)")
      ->check(SchemaName());
  serve->add_option("--allowed-host", o.allowed_hosts,
                    "NAME (repeatable): on a loopback --listen, answer this Host name too (besides "
                    "localhost, 127.0.0.0/8 and [::1]), e.g. the name a reverse proxy forwards");
  serve->add_option("--public-url", o.public_url,
                    "the page's address behind an HTTPS reverse proxy (https://dash.example.com): "
                    "actions from that origin are accepted, and its host name is answered");
  out.push_back({serve, ServeCommand});
}
}  // namespace outbox::ctl
