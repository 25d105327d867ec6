// outbox-consumer configuration: TOML file < OUTBOX_* environment < --set.
// Every key, its environment variable, default and meaning: docs/consumer.md.
#ifndef OUTBOX_TOOLS_OUTBOX_CONSUMER_CONSUMER_CONFIG_H_
#define OUTBOX_TOOLS_OUTBOX_CONSUMER_CONSUMER_CONFIG_H_

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "outbox/log.h"
#include "outbox/rabbitmq.h"
#include "outbox/status.h"

namespace outbox::consumer_daemon {

// What a [[handler]] does with each new message.
enum class HandlerKind {
  kSql,   // one statement in the inbox's transaction: exactly once
  kHttp,  // a POST; the stamp commits after its 2xx: at least once, with Idempotency-Key
};

// How a handler's messages are told apart (the stamp's key).
struct DedupRule {
  enum class Kind { kEventId, kHeader, kPayload } kind = Kind::kEventId;
  std::string arg;  // the header's name, or the JSON pointer into the payload
};

// One [[handler]] table.
struct HandlerConfig {
  std::string topic;
  std::string group;  // the Kafka consumer group (RabbitMQ: the queues' prefix), and the inbox's consumer name
  // "kafka" or "rabbitmq"; LoadConfig resolves "" to the one configured.
  std::string broker;
  std::string sql;    // $1 payload bytea, $2 headers jsonb, $3 event id text, $4 key text
  std::string http;   // the URL POSTed to
  HandlerKind kind() const { return sql.empty() ? HandlerKind::kHttp : HandlerKind::kSql; }
  bool ordered = false;
  std::vector<std::chrono::milliseconds> retries = {std::chrono::seconds(1),
                                                    std::chrono::seconds(10),
                                                    std::chrono::seconds(60)};
  DedupRule dedup;
  std::chrono::milliseconds timeout{10'000};  // http: one request's limit
  bool timeout_set = false;  // timeout_ms was given (refused on an sql handler)
};

struct Config {
  std::string database_url;  // postgresql://... or mysql://...
  std::string inbox_schema = "inbox";  // PostgreSQL: the stamps' schema
  std::chrono::milliseconds statement_timeout{30'000};
  std::chrono::seconds connect_timeout{5};
  std::map<std::string, std::string> kafka;  // librdkafka consumer properties
  // rabbitmq.*: the connection and the exchanges (declared by default here);
  // exchange_template is the relay's and unused.
  RabbitMqTransportOptions rabbitmq = [] {
    RabbitMqTransportOptions o;
    o.declare = true;
    return o;
  }();
  int rabbitmq_prefetch = 2000;
  int batch_size = 500;
  std::chrono::milliseconds batch_wait{20};
  std::chrono::seconds stamp_retention{0};  // 0: keep the stamps
  std::vector<HandlerConfig> handlers;
  std::string http_listen = "127.0.0.1:9465";
  bool log_json = false;
  LogLevel log_level = LogLevel::kInfo;
};

// Sources in increasing precedence; `file_name` names the file in errors.
// Every handler is checked: a topic, a group (unique), exactly one of sql and
// http, a dedup rule and retries that parse; errors name the key.
Result<Config> LoadConfig(const std::string& file_text, const std::string& file_name,
                          const std::map<std::string, std::string>& env,
                          const std::vector<std::pair<std::string, std::string>>& overrides);

// The effective configuration as TOML; the database URL's password and
// credential-bearing kafka properties redacted.
std::string PrintConfig(const Config& c);
// "key=VARIABLE,…": the keys whose values come from the environment (start-up
// log; never the values).
std::string KeysFromEnvironment(const std::map<std::string, std::string>& env,
                                const std::vector<std::pair<std::string, std::string>>& overrides);

// "1s,10s,60s" (units ms, s, m; "" = none) -> delays. Errors name `key`.
Result<std::vector<std::chrono::milliseconds>> ParseRetries(const std::string& key,
                                                            const std::string& text);
std::string FormatRetries(const std::vector<std::chrono::milliseconds>& retries);

// "event-id", "header:NAME" or "payload:/json/pointer". Errors name `key`.
Result<DedupRule> ParseDedup(const std::string& key, const std::string& text);
std::string FormatDedup(const DedupRule& rule);

}  // namespace outbox::consumer_daemon

#endif  // OUTBOX_TOOLS_OUTBOX_CONSUMER_CONSUMER_CONFIG_H_
