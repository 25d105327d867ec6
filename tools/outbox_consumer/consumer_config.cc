// outbox-consumer's keys on outbox::config (consumer_config.h).
#include "consumer_config.h"

#include <nlohmann/json.hpp>

#include <set>

#include "config.h"
#include "rabbitmq_keys.h"
#include "outbox/http_transport.h"
#include "outbox/open.h"
#include "outbox/parse.h"
#include "outbox/postgres.h"

namespace outbox::consumer_daemon {
namespace {

constexpr long long kMaxMs = 24LL * 3600 * 1000;
constexpr char kDocs[] = "docs/consumer.md";

std::vector<config::Key<HandlerConfig>> HandlerKeys() {
  using H = HandlerConfig;
  std::vector<config::Key<H>> k;
  k.push_back(config::String<H>("topic", "", [](H& h) -> std::string& { return h.topic; }));
  k.push_back(config::String<H>("group", "", [](H& h) -> std::string& { return h.group; }));
  k.push_back(config::String<H>("sql", "", [](H& h) -> std::string& { return h.sql; }));
  k.push_back(config::String<H>("http", "", [](H& h) -> std::string& { return h.http; }));
  k.push_back(config::Boolean<H>("ordered", "", [](H& h) -> bool& { return h.ordered; }));
  k.push_back({"broker", "",
               [](H& h, const std::string& v) -> Status {
                 if (v != "kafka" && v != "rabbitmq") return config::BadValue("broker", v, "kafka or rabbitmq");
                 h.broker = v;
                 return Status::Ok();
               },
               [](const H& h) { return h.broker; }, true});
  k.push_back({"retries", "",
               [](H& h, const std::string& v) -> Status {
                 auto r = ParseRetries("retries", v);
                 if (!r.ok()) return r.status();
                 h.retries = *r;
                 return Status::Ok();
               },
               [](const H& h) { return FormatRetries(h.retries); }, true});
  k.push_back({"dedup", "",
               [](H& h, const std::string& v) -> Status {
                 auto r = ParseDedup("dedup", v);
                 if (!r.ok()) return r.status();
                 h.dedup = *r;
                 return Status::Ok();
               },
               [](const H& h) { return FormatDedup(h.dedup); }, true});
  config::Key<H> timeout = config::Span<H, std::chrono::milliseconds>(
      "timeout_ms", "", 1, kMaxMs, [](H& h) -> std::chrono::milliseconds& { return h.timeout; });
  timeout.set = [set = timeout.set](H& h, const std::string& v) {
    h.timeout_set = true;
    return set(h, v);
  };
  k.push_back(timeout);
  return k;
}

const config::Schema<Config>& TheSchema() {
  static const config::Schema<Config> schema = [] {
    config::Schema<Config> s;
    s.docs = kDocs;
    config::Key<Config> url = config::String<Config>(
        "database.url", "OUTBOX_DATABASE_URL", [](Config& c) -> std::string& { return c.database_url; });
    url.get = [](const Config& c) { return RedactDatabaseUrl(c.database_url); };
    s.keys.push_back(url);
    s.env_aliases.emplace_back("OUTBOX_PG_URL", "database.url");  // scripts/testenv's name
    s.keys.push_back(config::String<Config>("database.inbox_schema", "OUTBOX_DATABASE_INBOX_SCHEMA",
                                            [](Config& c) -> std::string& { return c.inbox_schema; }));
    s.keys.push_back(config::Span<Config, std::chrono::milliseconds>(
        "database.statement_timeout_ms", "OUTBOX_DATABASE_STATEMENT_TIMEOUT_MS", 100, kMaxMs,
        [](Config& c) -> std::chrono::milliseconds& { return c.statement_timeout; }));
    s.keys.push_back(config::Span<Config, std::chrono::seconds>(
        "database.connect_timeout_s", "OUTBOX_DATABASE_CONNECT_TIMEOUT_S", 1, 3600,
        [](Config& c) -> std::chrono::seconds& { return c.connect_timeout; }));
    // [kafka] bootstrap: the short name of kafka.properties."bootstrap.servers".
    s.keys.push_back({"kafka.bootstrap", "OUTBOX_KAFKA_BOOTSTRAP",
                      [](Config& c, const std::string& v) {
                        c.kafka["bootstrap.servers"] = v;
                        return Status::Ok();
                      },
                      [](const Config& c) {
                        auto it = c.kafka.find("bootstrap.servers");
                        return it == c.kafka.end() ? std::string() : it->second;
                      },
                      true});
    config::AddRabbitMqKeys<Config>(s, [](Config& c) -> RabbitMqTransportOptions& { return c.rabbitmq; },
                                    /*exchange_template=*/false);
    s.keys.push_back(config::Integer<Config, int>("rabbitmq.prefetch", "OUTBOX_RABBITMQ_PREFETCH", 1, 65535,
                                                  [](Config& c) -> int& { return c.rabbitmq_prefetch; }));
    s.keys.push_back(config::Integer<Config, int>("consumer.batch_size", "OUTBOX_CONSUMER_BATCH_SIZE", 1,
                                                  10000, [](Config& c) -> int& { return c.batch_size; }));
    s.keys.push_back(config::Span<Config, std::chrono::milliseconds>(
        "consumer.batch_wait_ms", "OUTBOX_CONSUMER_BATCH_WAIT_MS", 0, 10000,
        [](Config& c) -> std::chrono::milliseconds& { return c.batch_wait; }));
    s.keys.push_back(config::Span<Config, std::chrono::seconds>(
        "consumer.stamp_retention_s", "OUTBOX_CONSUMER_STAMP_RETENTION_S", 0, 3650LL * 86400,
        [](Config& c) -> std::chrono::seconds& { return c.stamp_retention; }));
    s.keys.push_back(config::String<Config>("http.listen", "OUTBOX_HTTP_LISTEN",
                                            [](Config& c) -> std::string& { return c.http_listen; }));
    s.keys.push_back(config::Choice<Config, bool>("log.format", "OUTBOX_LOG_FORMAT",
                                                  {{"text", false}, {"json", true}},
                                                  [](Config& c) -> bool& { return c.log_json; }));
    s.keys.push_back(config::Choice<Config, LogLevel>(
        "log.level", "OUTBOX_LOG_LEVEL",
        {{"debug", LogLevel::kDebug}, {"info", LogLevel::kInfo}, {"warn", LogLevel::kWarn},
         {"error", LogLevel::kError}},
        [](Config& c) -> LogLevel& { return c.log_level; }));
    config::AddKafkaProperties<Config>(
        s, [](Config& c) -> std::map<std::string, std::string>& { return c.kafka; },
        "kafka.bootstrap");
    s.arrays.push_back(config::Tables<Config, HandlerConfig>(
        "handler", [](Config& c) -> std::vector<HandlerConfig>& { return c.handlers; },
        HandlerKeys(), kDocs));
    return s;
  }();
  return schema;
}

Status CheckHandler(const HandlerConfig& h, std::size_t i, std::set<std::string>& groups) {
  const std::string at = "handler." + std::to_string(i) + ".";
  if (h.topic.empty()) return Status::InvalidArgument("config key " + at + "topic is required");
  if (h.group.empty()) return Status::InvalidArgument("config key " + at + "group is required");
  if (!groups.insert(h.group).second) {
    return Status::InvalidArgument("config key " + at + "group: \"" + h.group +
                                   "\" is another handler's group too; each handler needs its own");
  }
  if (h.sql.empty() == h.http.empty()) {
    return Status::InvalidArgument("config key " + at +
                                   "sql / http: set exactly one (the handler's effect)");
  }
  if (!h.sql.empty() && h.timeout_set) {
    return Status::InvalidArgument("config key " + at + "timeout_ms: applies to http handlers only; "
                                   "an sql handler's statements are bounded by "
                                   "database.statement_timeout_ms");
  }
  if (!h.http.empty()) {
    if (Status st = ValidateHttpUrlTemplate(h.http); !st.ok()) {
      return Status::InvalidArgument("config key " + at + "http: " + st.message());
    }
    if (h.http.find('{') != std::string::npos) {
      return Status::InvalidArgument("config key " + at + "http: placeholders are the relay's; "
                                     "a handler POSTs to one URL");
    }
  }
  // $1..$4 only: a higher one is an error at every message, so refuse it now.
  for (std::size_t p = h.sql.find('$'); p != std::string::npos; p = h.sql.find('$', p + 1)) {
    std::size_t e = p + 1;
    while (e < h.sql.size() && std::isdigit(static_cast<unsigned char>(h.sql[e]))) ++e;
    if (e == p + 1) continue;  // $$ quoting, $tag$
    const std::string n = h.sql.substr(p + 1, e - p - 1);
    if (n.size() > 1 || n[0] < '1' || n[0] > '4') {
      return Status::InvalidArgument("config key " + at + "sql: $" + n +
                                     " is not a parameter ($1 payload, $2 headers, $3 event id, "
                                     "$4 key)");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<std::chrono::milliseconds>> ParseRetries(const std::string& key,
                                                            const std::string& text) {
  std::vector<std::chrono::milliseconds> out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(start, comma - start);
    while (!item.empty() && item.front() == ' ') item.erase(0, 1);
    while (!item.empty() && item.back() == ' ') item.pop_back();
    long long unit = 0;
    std::string digits;
    for (const auto& [suffix, ms] : {std::pair<std::string, long long>{"ms", 1}, {"s", 1000}, {"m", 60000}}) {
      if (item.size() > suffix.size() && item.compare(item.size() - suffix.size(), suffix.size(), suffix) == 0) {
        unit = ms;
        digits = item.substr(0, item.size() - suffix.size());
        break;
      }
    }
    auto n = unit ? ParseInteger(key, digits, 0, kMaxMs / unit) : Result<long long>(Status::InvalidArgument(""));
    if (!n.ok()) {
      return config::BadValue(key, text, "delays such as \"1s,10s,60s\" (units ms, s, m)");
    }
    out.emplace_back(*n * unit);
    start = comma + 1;
  }
  if (out.size() > 20) return config::BadValue(key, text, "at most 20 retries");
  return out;
}

std::string FormatRetries(const std::vector<std::chrono::milliseconds>& retries) {
  std::string out;
  for (const auto& d : retries) {
    out += out.empty() ? "" : ",";
    out += d.count() % 1000 == 0 ? std::to_string(d.count() / 1000) + "s" : std::to_string(d.count()) + "ms";
  }
  return out;
}

Result<DedupRule> ParseDedup(const std::string& key, const std::string& text) {
  const std::string want = "event-id, header:NAME or payload:/json/pointer";
  if (text == "event-id") return DedupRule{};
  if (text.rfind("header:", 0) == 0 && text.size() > 7) {
    return DedupRule{DedupRule::Kind::kHeader, text.substr(7)};
  }
  if (text.rfind("payload:", 0) == 0) {
    const std::string pointer = text.substr(8);
    try {
      nlohmann::json::json_pointer p(pointer);
      if (pointer.empty()) return config::BadValue(key, text, want + " (the pointer is empty)");
    } catch (const nlohmann::json::exception&) {
      return config::BadValue(key, text, want + " (not a JSON pointer)");
    }
    return DedupRule{DedupRule::Kind::kPayload, pointer};
  }
  return config::BadValue(key, text, want);
}

std::string FormatDedup(const DedupRule& rule) {
  switch (rule.kind) {
    case DedupRule::Kind::kHeader: return "header:" + rule.arg;
    case DedupRule::Kind::kPayload: return "payload:" + rule.arg;
    default: return "event-id";
  }
}

Result<Config> LoadConfig(const std::string& file_text, const std::string& file_name,
                          const std::map<std::string, std::string>& env,
                          const std::vector<std::pair<std::string, std::string>>& overrides) {
  Config c;
  config::Sources src{file_text, file_name, env, overrides};
  OUTBOX_RETURN_IF_ERROR(config::Load(TheSchema(), src, c));
  if (c.database_url.empty()) {
    return Status::InvalidArgument("config key database.url is required (or OUTBOX_DATABASE_URL)");
  }
  const bool mysql = c.database_url.rfind("mysql://", 0) == 0;
  if (!mysql && c.database_url.rfind("postgres", 0) != 0 && c.database_url.find('=') == std::string::npos) {
    return Status::InvalidArgument("config key database.url: not a PostgreSQL or mysql:// URL");
  }
  if (Status st = ValidateSchemaName(c.inbox_schema); !st.ok()) {
    return Status::InvalidArgument("config key database.inbox_schema: " + st.message());
  }
  const bool kafka = c.kafka.count("bootstrap.servers") > 0;
  const bool rabbitmq = !c.rabbitmq.url.empty();
  if (!kafka && !rabbitmq) {
    return Status::InvalidArgument("config key kafka.bootstrap (or OUTBOX_KAFKA_BOOTSTRAP) or "
                                   "rabbitmq.url (or OUTBOX_RABBITMQ_URL) is required");
  }
  if (rabbitmq) {
    if (Status st = ValidateRabbitMqOptions(c.rabbitmq); !st.ok()) {
      return Status::InvalidArgument("config key " + st.message());
    }
    if (c.rabbitmq.exchange_type == "direct") {
      return Status::InvalidArgument("config key rabbitmq.exchange_type: direct cannot route every "
                                     "aggregate's key to a handler's queue; use topic (the default), "
                                     "fanout or headers");
    }
  }
  if (c.kafka.count("group.id")) {
    return Status::InvalidArgument("config key kafka.properties.group.id: set each handler's group instead");
  }
  if (c.handlers.empty()) {
    return Status::InvalidArgument("no [[handler]] configured (see " + std::string(kDocs) + ")");
  }
  std::set<std::string> groups;
  for (std::size_t i = 0; i < c.handlers.size(); ++i) {
    HandlerConfig& h = c.handlers[i];
    OUTBOX_RETURN_IF_ERROR(CheckHandler(h, i, groups));
    const std::string at = "config key handler." + std::to_string(i) + ".broker";
    if (h.broker.empty()) {
      if (kafka && rabbitmq) {
        return Status::InvalidArgument(at + " is required when both kafka.bootstrap and rabbitmq.url "
                                       "are set (\"kafka\" or \"rabbitmq\")");
      }
      h.broker = kafka ? "kafka" : "rabbitmq";
    } else if (h.broker == "kafka" && !kafka) {
      return Status::InvalidArgument(at + " = \"kafka\" needs kafka.bootstrap (or OUTBOX_KAFKA_BOOTSTRAP)");
    } else if (h.broker == "rabbitmq" && !rabbitmq) {
      return Status::InvalidArgument(at + " = \"rabbitmq\" needs rabbitmq.url (or OUTBOX_RABBITMQ_URL)");
    }
    if (h.broker == "rabbitmq" && RabbitMqQueueName(h.group, h.topic).size() + 20 > 255) {
      return Status::InvalidArgument("config key handler." + std::to_string(i) +
                                     ".group / topic: the queue \"" + RabbitMqQueueName(h.group, h.topic) +
                                     "\" and its retry queues must stay within 255 bytes");
    }
  }
  const auto colon = c.http_listen.rfind(':');
  if (colon == std::string::npos ||
      !ParseInteger("http.listen", c.http_listen.substr(colon + 1), 0, 65535).ok()) {
    return config::BadValue("http.listen", c.http_listen, "HOST:PORT");
  }
  return c;
}

std::string PrintConfig(const Config& c) { return config::Print(TheSchema(), c); }

std::string KeysFromEnvironment(const std::map<std::string, std::string>& env,
                                const std::vector<std::pair<std::string, std::string>>& overrides) {
  config::Sources src;
  src.env = env;
  src.overrides = overrides;
  return config::FromEnvironment(TheSchema(), src);
}

}  // namespace outbox::consumer_daemon
