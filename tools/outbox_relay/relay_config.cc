// outbox-relay's keys (docs/relay.md), read by outbox::config.
#include "relay_config.h"

#include <algorithm>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cstdio>
#include <limits>
#include <sstream>

#include "config.h"
#include "rabbitmq_keys.h"
#include "outbox/mariadb.h"
#include "outbox/parse.h"
#include "outbox/postgres.h"

namespace outbox::daemon {
namespace {

constexpr long long kMaxMs = 24LL * 3600 * 1000;

// The engine's keys: relay.* but relay.transport, and kafka.topic_template.
void AddRelayKeys(config::Schema<Config>& s) {
  s.keys.push_back(config::String<Config>("kafka.topic_template", "OUTBOX_KAFKA_TOPIC_TEMPLATE",
                  [](Config& c) -> std::string& { return c.kafka.topic_template; }));
  s.keys.push_back(config::String<Config>("relay.id", "OUTBOX_RELAY_ID",
                  [](Config& c) -> std::string& { return c.relay.relay_id; }));
  s.keys.push_back(config::Integer<Config, int>("relay.workers", "OUTBOX_RELAY_WORKERS", 1, 64,
                       [](Config& c) -> int& { return c.relay.workers; }));
  s.keys.push_back(config::Integer<Config, int>("relay.batch_size", "OUTBOX_RELAY_BATCH_SIZE", 1, 10000,
                       [](Config& c) -> int& { return c.relay.batch_size; }));
  s.keys.push_back(config::Span<Config, std::chrono::milliseconds>(
      "relay.lease_ms", "OUTBOX_RELAY_LEASE_MS", 1000, kMaxMs,
      [](Config& c) -> std::chrono::milliseconds& { return c.relay.lease; }));
  s.keys.push_back(config::Integer<Config, std::int64_t>("relay.batch_bytes", "OUTBOX_RELAY_BATCH_BYTES", 1,
                                1LL << 34,
                                [](Config& c) -> std::int64_t& { return c.relay.batch_bytes; }));
  s.keys.push_back(config::Integer<Config, int>("relay.max_attempts", "OUTBOX_RELAY_MAX_ATTEMPTS", 1, 1000000,
                       [](Config& c) -> int& { return c.relay.max_attempts; }));
  s.keys.push_back(config::Span<Config, std::chrono::milliseconds>(
      "relay.backoff_base_ms", "OUTBOX_RELAY_BACKOFF_BASE_MS", 1, kMaxMs,
      [](Config& c) -> std::chrono::milliseconds& { return c.relay.backoff_base; }));
  s.keys.push_back(config::Span<Config, std::chrono::milliseconds>(
      "relay.backoff_max_ms", "OUTBOX_RELAY_BACKOFF_MAX_MS", 1, kMaxMs,
      [](Config& c) -> std::chrono::milliseconds& { return c.relay.backoff_max; }));
  s.keys.push_back(config::Key<Config>{"relay.backoff_jitter", "OUTBOX_RELAY_BACKOFF_JITTER",
                  [](Config& c, const std::string& v) -> Status {
                    auto d = config::ParseNumberValue("relay.backoff_jitter", v, 0, 1);
                    if (!d.ok()) return d.status();
                    if (*d < 0 || *d > 1) return config::BadValue("relay.backoff_jitter", v, "0..1");
                    c.relay.backoff_jitter = *d;
                    return Status::Ok();
                  },
                  [](const Config& c) {
                    std::ostringstream text;
                    text << c.relay.backoff_jitter;
                    return text.str();
                  },
                  false});
  s.keys.push_back(config::Boolean<Config>("relay.ordered", "OUTBOX_RELAY_ORDERED",
                   [](Config& c) -> bool& { return c.relay.ordered; }));
  s.keys.push_back(config::Boolean<Config>("relay.listen", "OUTBOX_RELAY_LISTEN",
                   [](Config& c) -> bool& { return c.relay.listen; }));
  s.keys.push_back(config::Key<Config>{"relay.on_failed", "OUTBOX_RELAY_ON_FAILED",
                  [](Config& c, const std::string& v) -> Status {
                    if (v == "hold") {
                      c.relay.on_failed = FailedPolicy::kHold;
                    } else if (v == "pass") {
                      c.relay.on_failed = FailedPolicy::kPass;
                    } else {
                      return config::BadValue("relay.on_failed", v, "hold or pass");
                    }
                    return Status::Ok();
                  },
                  [](const Config& c) {
                    return std::string(c.relay.on_failed == FailedPolicy::kPass ? "pass"
                                                                                : "hold");
                  },
                  true});
  s.keys.push_back(config::Span<Config, std::chrono::milliseconds>(
      "relay.poll_min_ms", "OUTBOX_RELAY_POLL_MIN_MS", 1, 60000,
      [](Config& c) -> std::chrono::milliseconds& { return c.relay.poll_min; }));
  s.keys.push_back(config::Span<Config, std::chrono::milliseconds>(
      "relay.poll_hot_ms", "OUTBOX_RELAY_POLL_HOT_MS", 0, 600000,
      [](Config& c) -> std::chrono::milliseconds& { return c.relay.poll_hot; }));
  s.keys.push_back(config::Span<Config, std::chrono::milliseconds>(
      "relay.poll_max_ms", "OUTBOX_RELAY_POLL_MAX_MS", 1, 600000,
      [](Config& c) -> std::chrono::milliseconds& { return c.relay.poll_max; }));
  s.keys.push_back(config::Span<Config, std::chrono::milliseconds>(
      "relay.db_retry_max_ms", "OUTBOX_RELAY_DB_RETRY_MAX_MS", 1, 600000,
      [](Config& c) -> std::chrono::milliseconds& { return c.relay.db_retry_max; }));
  s.keys.push_back(config::Span<Config, std::chrono::milliseconds>(
      "relay.shutdown_timeout_ms", "OUTBOX_RELAY_SHUTDOWN_TIMEOUT_MS", 0, kMaxMs,
      [](Config& c) -> std::chrono::milliseconds& { return c.relay.shutdown_timeout; }));
  s.keys.push_back(config::Span<Config, std::chrono::milliseconds>(
      "relay.stats_interval_ms", "OUTBOX_RELAY_STATS_INTERVAL_MS", 100, kMaxMs,
      [](Config& c) -> std::chrono::milliseconds& { return c.relay.stats_interval; }));
  s.keys.push_back(config::Key<Config>{"relay.source", "OUTBOX_RELAY_SOURCE",
                  [](Config& c, const std::string& v) -> Status {
                    if (v == "poll") {
                      c.relay.source = RelaySource::kPoll;
                    } else if (v == "cdc") {
                      c.relay.source = RelaySource::kCdc;
                    } else {
                      return config::BadValue("relay.source", v, "poll or cdc");
                    }
                    return Status::Ok();
                  },
                  [](const Config& c) {
                    return std::string(c.relay.source == RelaySource::kCdc ? "cdc" : "poll");
                  },
                  true});
}

// How events are delivered: relay.transport and http_delivery.*.
void AddDeliveryKeys(config::Schema<Config>& s) {
  s.keys.push_back(config::Choice<Config, TransportKind>(
      "relay.transport", "OUTBOX_RELAY_TRANSPORT",
      {{"kafka", TransportKind::kKafka},
       {"http", TransportKind::kHttp},
       {"rabbitmq", TransportKind::kRabbitMq}},
      [](Config& c) -> TransportKind& { return c.transport; }));
  s.keys.push_back(config::Choice<Config, bool>("relay.envelope", "OUTBOX_RELAY_ENVELOPE",
                                                {{"outbox", false}, {"cloudevents", true}},
                                                [](Config& c) -> bool& { return c.cloudevents; }));
  s.keys.push_back(config::String<Config>("relay.cloudevents_source", "OUTBOX_RELAY_CLOUDEVENTS_SOURCE",
                                          [](Config& c) -> std::string& { return c.cloudevents_source; }));
  // Printed without its query string, which may carry a token.
  config::Key<Config> url = config::String<Config>(
      "http_delivery.url", "OUTBOX_HTTP_DELIVERY_URL",
      [](Config& c) -> std::string& { return c.http_delivery.url_template; });
  url.get = [](const Config& c) {
    const std::string& u = c.http_delivery.url_template;
    const auto q = u.find('?');
    return q == std::string::npos ? u : u.substr(0, q) + "?***";
  };
  s.keys.push_back(url);
  s.keys.push_back(config::Span<Config, std::chrono::milliseconds>(
      "http_delivery.timeout_ms", "OUTBOX_HTTP_DELIVERY_TIMEOUT_MS", 1, kMaxMs,
      [](Config& c) -> std::chrono::milliseconds& { return c.http_delivery.timeout; }));
  s.keys.push_back(config::Integer<Config, int>("http_delivery.concurrency",
                       "OUTBOX_HTTP_DELIVERY_CONCURRENCY", 1, 256,
                       [](Config& c) -> int& { return c.http_delivery.concurrency; }));
  s.keys.push_back(config::Boolean<Config>("http_delivery.tls_verify", "OUTBOX_HTTP_DELIVERY_TLS_VERIFY",
                   [](Config& c) -> bool& { return c.http_delivery.tls_verify; }));
  s.keys.push_back(config::String<Config>("http_delivery.tls_ca_file", "OUTBOX_HTTP_DELIVERY_TLS_CA_FILE",
                  [](Config& c) -> std::string& { return c.http_delivery.tls_ca_file; }));
  s.maps.push_back({"http_delivery.headers.", "OUTBOX_HTTP_DELIVERY_HEADERS_",
                    [](Config& c) -> std::map<std::string, std::string>& {
                      return c.http_delivery.headers;
                    },
                    [](const std::string&) { return true; }, "http_delivery.tls_ca_file",
                    [](const std::string& name) {  // HTTP header names ignore case
                      std::string lower = name;
                      for (char& ch : lower) {
                        ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
                      }
                      return lower;
                    }});
}

// relay.source = cdc: cdc.*.
void AddCdcKeys(config::Schema<Config>& s) {
  s.keys.push_back(config::String<Config>("cdc.slot", "OUTBOX_CDC_SLOT",
                  [](Config& c) -> std::string& { return c.cdc_slot; }));
  s.keys.push_back(config::String<Config>("cdc.publication", "OUTBOX_CDC_PUBLICATION",
                  [](Config& c) -> std::string& { return c.cdc_publication; }));
  s.keys.push_back(config::Integer<Config, int>("cdc.batch_size", "OUTBOX_CDC_BATCH_SIZE", 1, 100000,
                       [](Config& c) -> int& { return c.relay.cdc.batch_size; }));
  s.keys.push_back(config::Integer<Config, int>("cdc.batches_in_flight", "OUTBOX_CDC_BATCHES_IN_FLIGHT", 1, 16,
                       [](Config& c) -> int& { return c.relay.cdc.batches_in_flight; }));
  s.keys.push_back(config::Span<Config, std::chrono::milliseconds>(
      "cdc.status_interval_ms", "OUTBOX_CDC_STATUS_INTERVAL_MS", 10, 60000,
      [](Config& c) -> std::chrono::milliseconds& { return c.relay.cdc.status_interval; }));
  s.keys.push_back(config::Span<Config, std::chrono::milliseconds>(
      "cdc.sweep_after_ms", "OUTBOX_CDC_SWEEP_AFTER_MS", 1, kMaxMs,
      [](Config& c) -> std::chrono::milliseconds& { return c.relay.cdc.sweep_after; }));
  s.keys.push_back(config::Span<Config, std::chrono::milliseconds>(
      "cdc.stream_stale_after_ms", "OUTBOX_CDC_STREAM_STALE_AFTER_MS", 100, kMaxMs,
      [](Config& c) -> std::chrono::milliseconds& { return c.relay.cdc.stream_stale_after; }));
  s.keys.push_back(config::Span<Config, std::chrono::milliseconds>(
      "cdc.standby_retry_ms", "OUTBOX_CDC_STANDBY_RETRY_MS", 1, 600000,
      [](Config& c) -> std::chrono::milliseconds& { return c.relay.cdc.standby_retry; }));
  s.keys.push_back(config::Span<Config, std::chrono::milliseconds>(
      "cdc.heartbeat_interval_ms", "OUTBOX_CDC_HEARTBEAT_INTERVAL_MS", 1, kMaxMs,
      [](Config& c) -> std::chrono::milliseconds& { return c.relay.cdc.heartbeat_interval; }));
  s.keys.push_back(config::Integer<Config, std::int64_t>("cdc.max_retained_wal_bytes", "OUTBOX_CDC_MAX_RETAINED_WAL_BYTES",
                                0, std::numeric_limits<std::int64_t>::max(),
                                [](Config& c) -> std::int64_t& {
                                  return c.relay.cdc.max_retained_wal_bytes;
                                }));
}

// The daemon's own: retention.*, http.listen, log.*.
void AddDaemonKeys(config::Schema<Config>& s) {
  s.keys.push_back(config::Span<Config, std::chrono::seconds>(
      "retention.sent_retention_s", "OUTBOX_RETENTION_SENT_RETENTION_S", 0, 3650LL * 86400,
      [](Config& c) -> std::chrono::seconds& { return c.relay.sent_retention; }));
  s.keys.push_back(config::Span<Config, std::chrono::seconds>(
      "retention.purge_interval_s", "OUTBOX_RETENTION_PURGE_INTERVAL_S", 1, 86400,
      [](Config& c) -> std::chrono::seconds& { return c.relay.purge_interval; }));
  s.keys.push_back(config::Integer<Config, int>("retention.purge_batch", "OUTBOX_RETENTION_PURGE_BATCH", 1, 100000,
                       [](Config& c) -> int& { return c.relay.purge_batch; }));
  s.keys.push_back(config::String<Config>("http.listen", "OUTBOX_HTTP_LISTEN",
                  [](Config& c) -> std::string& { return c.http_listen; }));
  s.keys.push_back(config::Key<Config>{"log.format", "OUTBOX_LOG_FORMAT",
                  [](Config& c, const std::string& v) -> Status {
                    if (v != "text" && v != "json") return config::BadValue("log.format", v, "text or json");
                    c.log_json = v == "json";
                    return Status::Ok();
                  },
                  [](const Config& c) { return std::string(c.log_json ? "json" : "text"); },
                  true});
  s.keys.push_back(config::Key<Config>{"log.level", "OUTBOX_LOG_LEVEL",
                  [](Config& c, const std::string& v) -> Status {
                    static const std::map<std::string, LogLevel> m = {
                        {"debug", LogLevel::kDebug}, {"info", LogLevel::kInfo},
                        {"warn", LogLevel::kWarn}, {"error", LogLevel::kError}};
                    auto it = m.find(v);
                    if (it == m.end()) return config::BadValue("log.level", v, "debug, info, warn or error");
                    c.log_level = it->second;
                    return Status::Ok();
                  },
                  [](const Config& c) {
                    switch (c.log_level) {
                      case LogLevel::kDebug: return std::string("debug");
                      case LogLevel::kWarn: return std::string("warn");
                      case LogLevel::kError: return std::string("error");
                      default: return std::string("info");
                    }
                  },
                  true});
}

const config::Schema<Config>& RelaySchema() {
  static const config::Schema<Config> schema = [] {
    config::Schema<Config> s;
    s.docs = "docs/relay.md";
    config::AddDatabaseKeys<Config>(s, [](Config& c) -> StoreOptions& { return c.database; });
    AddRelayKeys(s);
    AddDeliveryKeys(s);
    config::AddRabbitMqKeys<Config>(s, [](Config& c) -> RabbitMqTransportOptions& { return c.rabbitmq; },
                                    /*exchange_template=*/true);
    AddCdcKeys(s);
    AddDaemonKeys(s);
    config::AddKafkaProperties<Config>(
        s, [](Config& c) -> std::map<std::string, std::string>& { return c.kafka.properties; },
        "kafka.topic_template");
    return s;
  }();
  return schema;
}


}  // namespace

Result<CommandLine> ParseCommandLine(const std::vector<std::string>& args) {
  CommandLine cl;
  CLI::App app{"outbox-relay: moves committed outbox rows to Kafka, in order per aggregate.\n"
               "Values come from --config FILE < OUTBOX_* variables (and their _FILE forms) < flags.\n"
               "Keys, variables, defaults, metrics and exit codes: docs/relay.md.",
               "outbox-relay"};
  std::vector<std::string> sets;
  std::string db, bootstrap;
  bool log_json = false;
  app.add_option("--config", cl.config_path, "the TOML configuration file")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  CLI::Option* set = app.add_option("--set", sets, "one configuration key, e.g. relay.workers=8 (repeatable)")
                         ->allow_extra_args(false)
                         ->type_name("KEY=VALUE")
                         ->check(CLI::Validator(
                             [](std::string& v) -> std::string {
                               const auto eq = v.find('=');
                               return eq == std::string::npos || eq == 0 ? "needs KEY=VALUE, got " + v
                                                                         : std::string();
                             },
                             ""));
  CLI::Option* db_opt = app.add_option("--db", db, "database.url: a PostgreSQL URL or mysql://user@host/db")
                            ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  CLI::Option* bootstrap_opt =
      app.add_option("--bootstrap", bootstrap, "kafka.properties.bootstrap.servers")
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  CLI::Option* json_opt = app.add_flag("--log-json", log_json, "log.format = json");
  app.add_flag("--print-config", cl.print_config, "print the effective configuration (secrets redacted) and exit");
  app.add_flag("--migrate", cl.migrate, "create/upgrade the outbox schema before starting");
  app.add_flag("--version", cl.version, "print \"outbox-relay X.Y.Z\" and exit");
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them last first
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    cl.help = true;
    cl.help_text = app.help();
    return cl;
  } catch (const CLI::ParseError& e) {
    return Status::InvalidArgument(e.what());
  }
  // The shortcuts and --set apply in the order given: a later one wins.
  std::map<const CLI::Option*, std::size_t> seen;
  for (const CLI::Option* opt : app.parse_order()) {
    const std::size_t n = seen[opt]++;
    if (opt == set) {
      const std::string& v = opt->results().at(n);
      const auto eq = v.find('=');
      cl.overrides.emplace_back(v.substr(0, eq), v.substr(eq + 1));
    } else if (opt == db_opt) {
      cl.overrides.emplace_back("database.url", opt->results().at(n));
    } else if (opt == bootstrap_opt) {
      cl.overrides.emplace_back("kafka.properties.bootstrap.servers", opt->results().at(n));
    } else if (opt == json_opt) {
      cl.overrides.emplace_back("log.format", "json");
    }
  }
  return cl;
}

namespace {

// relay.transport = rabbitmq: the URL set, and the options the transport
// takes (the same check it makes when it opens).
Status CheckRabbitMq(const RabbitMqTransportOptions& o) {
  if (o.url.empty()) {
    return Status::InvalidArgument(
        "config key rabbitmq.url is required with relay.transport = rabbitmq (or "
        "OUTBOX_RABBITMQ_URL)");
  }
  if (Status st = ValidateRabbitMqOptions(o); !st.ok()) {
    return Status::InvalidArgument("config key " + st.message());
  }
  return Status::Ok();
}

}  // namespace

std::map<std::string, std::string> OutboxEnvironment() { return config::OutboxEnvironment(); }

Result<std::string> ReadConfigFile(const std::string& path) { return config::ReadFile(path); }

std::string DefaultRelayId() {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "relay");
  return std::string(host) + ":" + std::to_string(getpid());
}

const char* TransportName(TransportKind k) {
  switch (k) {
    case TransportKind::kHttp: return "http";
    case TransportKind::kRabbitMq: return "rabbitmq";
    case TransportKind::kKafka: break;
  }
  return "kafka";
}

std::vector<std::string> IgnoredTransportKeys(const Config& c) {
  std::vector<std::string> out;
  if (c.transport != TransportKind::kKafka) {
    for (const auto& [name, value] : c.kafka.properties) out.push_back("kafka.properties." + name);
    if (c.kafka.topic_template != KafkaTransportOptions{}.topic_template) {
      out.push_back("kafka.topic_template");
    }
  }
  if (c.transport != TransportKind::kHttp && !c.http_delivery.url_template.empty()) {
    out.push_back("http_delivery.url");
  }
  if (c.transport != TransportKind::kRabbitMq && !c.rabbitmq.url.empty()) {
    out.push_back("rabbitmq.url");
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<Config> LoadConfig(const std::string& file_text, const std::string& file_name,
                          const std::map<std::string, std::string>& env,
                          const std::vector<std::pair<std::string, std::string>>& overrides,
                          ConfigNeeds required) {
  Config c;
  c.relay.relay_id = DefaultRelayId();
  // 0 (below the key's range): relay.poll_max_ms not set, resolved below.
  c.relay.poll_max = std::chrono::milliseconds(0);
  OUTBOX_RETURN_IF_ERROR(
      config::Load(RelaySchema(), {file_text, file_name, env, overrides}, c));
  if (c.relay.poll_max.count() == 0) {
    // Unset: the default (20 ms since 0.3's change from 250), never below a
    // relay.poll_min_ms set above it (such a config was valid with 250).
    c.relay.poll_max = std::max(RelayOptions{}.poll_max, c.relay.poll_min);
  }
  if (required.database && c.database.url.empty()) {
    return Status::InvalidArgument(
        "config key database.url is required (or OUTBOX_DATABASE_URL / OUTBOX_PG_URL / --db)");
  }
  if (Status st = ValidateSchemaName(c.database.schema); !st.ok()) {
    return Status::InvalidArgument("config key database.schema: " + st.message());
  }
  if (IsMariaDbUrl(c.database.url)) {
    if (Status st = ValidateMariaDbUrl(c.database.url); !st.ok()) {
      return Status::InvalidArgument("config key database.url: " + st.message());
    }
    if (c.relay.source == RelaySource::kCdc) {
      return Status::InvalidArgument(
          "config key relay.source: cdc reads PostgreSQL's write-ahead log; with a mysql:// "
          "database.url use relay.source = poll");
    }
  }
  if (c.transport == TransportKind::kHttp) {
    if (c.http_delivery.url_template.empty()) {
      return Status::InvalidArgument(
          "config key http_delivery.url is required with relay.transport = http (or "
          "OUTBOX_HTTP_DELIVERY_URL)");
    }
    if (Status st = ValidateHttpUrlTemplate(c.http_delivery.url_template); !st.ok()) {
      return Status::InvalidArgument("config key http_delivery.url: " + st.message());
    }
  } else if (c.transport == TransportKind::kRabbitMq) {
    OUTBOX_RETURN_IF_ERROR(CheckRabbitMq(c.rabbitmq));
  } else if (required.bootstrap && !c.kafka.properties.count("bootstrap.servers")) {
    return Status::InvalidArgument(
        "config key kafka.properties.bootstrap.servers is required (or OUTBOX_KAFKA_BOOTSTRAP / "
        "--bootstrap)");
  }
  c.relay.cdc.slot = c.cdc_slot.empty() ? DefaultStreamName(c.database.schema) : c.cdc_slot;
  for (const auto& [key, name] : {std::pair<std::string, std::string>{"cdc.slot", c.relay.cdc.slot},
                                  {"cdc.publication", c.cdc_publication}}) {
    if (!name.empty() && !IsStreamName(name)) {
      return Status::InvalidArgument("config key " + key + ": \"" + name +
                                     "\" must match [a-z_][a-z0-9_]{0,62}");
    }
  }
  Status tt = ValidateTopicTemplate(c.kafka.topic_template);
  if (!tt.ok()) return Status::InvalidArgument("config key kafka." + tt.message());
  OUTBOX_RETURN_IF_ERROR(ValidateRelayOptions(c.relay));
  const auto colon = c.http_listen.rfind(':');
  if (colon == std::string::npos || colon == 0 ||
      !ParseInteger("http.listen", c.http_listen.substr(colon + 1), 0, 65535).ok()) {
    return Status::InvalidArgument("config key http.listen: \"" + c.http_listen +
                                   "\" must be HOST:PORT with PORT in 0..65535 (0 = any free port)");
  }
  return c;
}

std::string PrintConfig(const Config& c) { return config::Print(RelaySchema(), c); }

}  // namespace outbox::daemon
