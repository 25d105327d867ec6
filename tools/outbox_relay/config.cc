#include "config.h"

#include <CLI/CLI.hpp>

#include "outbox/mariadb.h"

#include <limits>

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <toml++/toml.h>

#include "outbox/parse.h"

namespace outbox::daemon {
namespace {

using Setter = std::function<Status(Config&, const std::string&)>;
using Getter = std::function<std::string(const Config&)>;

struct Key {
  std::string name;  // "section.key"
  std::string env;   // OUTBOX_SECTION_KEY
  Setter set;
  Getter get;
  bool quoted;  // render as a TOML string
};

Status BadValue(const std::string& key, const std::string& value, const std::string& want) {
  return Status::InvalidArgument("config key " + key + ": invalid value \"" + value + "\" (" +
                                 want + ")");
}

Result<long long> ParseInt(const std::string& key, const std::string& v, long long lo,
                           long long hi) {
  auto n = ParseInteger("config key " + key, v, lo, hi);
  if (!n.ok()) return BadValue(key, v, "an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
  return n;
}

Result<bool> ParseBool(const std::string& key, const std::string& v) {
  if (v == "true" || v == "1" || v == "yes") return true;
  if (v == "false" || v == "0" || v == "no") return false;
  return BadValue(key, v, "true or false");
}

Result<double> ParseDouble(const std::string& key, const std::string& v, double lo, double hi) {
  auto d = ParseNumber("config key " + key, v, lo, hi);
  if (!d.ok()) return BadValue(key, v, "a number in " + std::to_string(lo) + ".." + std::to_string(hi));
  return d;
}

Key Str(std::string name, std::string env, std::function<std::string&(Config&)> field) {
  return Key{name, env,
             [field](Config& c, const std::string& v) {
               field(c) = v;
               return Status::Ok();
             },
             [field](const Config& c) { return field(const_cast<Config&>(c)); }, true};
}

template <typename Rep>
Key Int(std::string name, std::string env, long long lo, long long hi,
        std::function<Rep&(Config&)> field) {
  return Key{name, env,
             [name, lo, hi, field](Config& c, const std::string& v) -> Status {
               auto n = ParseInt(name, v, lo, hi);
               if (!n.ok()) return n.status();
               field(c) = static_cast<Rep>(*n);
               return Status::Ok();
             },
             [field](const Config& c) {
               return std::to_string(static_cast<long long>(field(const_cast<Config&>(c))));
             },
             false};
}

template <typename Duration>
Key Dur(std::string name, std::string env, long long lo, long long hi,
        std::function<Duration&(Config&)> field) {
  return Key{name, env,
             [name, lo, hi, field](Config& c, const std::string& v) -> Status {
               auto n = ParseInt(name, v, lo, hi);
               if (!n.ok()) return n.status();
               field(c) = Duration(*n);
               return Status::Ok();
             },
             [field](const Config& c) {
               return std::to_string(field(const_cast<Config&>(c)).count());
             },
             false};
}

Key Bool(std::string name, std::string env, std::function<bool&(Config&)> field) {
  return Key{name, env,
             [name, field](Config& c, const std::string& v) -> Status {
               auto b = ParseBool(name, v);
               if (!b.ok()) return b.status();
               field(c) = *b;
               return Status::Ok();
             },
             [field](const Config& c) { return field(const_cast<Config&>(c)) ? "true" : "false"; },
             false};
}

const std::vector<Key>& Keys() {
  static const std::vector<Key> keys = [] {
    constexpr long long kMaxMs = 24LL * 3600 * 1000;
    std::vector<Key> k;
    k.push_back(Str("database.url", "OUTBOX_DATABASE_URL",
                    [](Config& c) -> std::string& { return c.database.conninfo; }));
    k.push_back(Str("database.schema", "OUTBOX_DATABASE_SCHEMA",
                    [](Config& c) -> std::string& { return c.database.schema; }));
    k.push_back(Key{"database.sent_mode", "OUTBOX_DATABASE_SENT_MODE",
                    [](Config& c, const std::string& v) -> Status {
                      if (v == "update") {
                        c.database.sent_mode = SentMode::kUpdate;
                      } else if (v == "delete") {
                        c.database.sent_mode = SentMode::kDelete;
                      } else {
                        return BadValue("database.sent_mode", v, "update or delete");
                      }
                      return Status::Ok();
                    },
                    [](const Config& c) {
                      return std::string(c.database.sent_mode == SentMode::kDelete ? "delete"
                                                                                   : "update");
                    },
                    true});
    k.push_back(Dur<std::chrono::milliseconds>(
        "database.statement_timeout_ms", "OUTBOX_DATABASE_STATEMENT_TIMEOUT_MS", 100, kMaxMs,
        [](Config& c) -> std::chrono::milliseconds& { return c.database.statement_timeout; }));
    k.push_back(Dur<std::chrono::seconds>(
        "database.connect_timeout_s", "OUTBOX_DATABASE_CONNECT_TIMEOUT_S", 1, 3600,
        [](Config& c) -> std::chrono::seconds& { return c.database.connect_timeout; }));
    k.push_back(Str("kafka.topic_template", "OUTBOX_KAFKA_TOPIC_TEMPLATE",
                    [](Config& c) -> std::string& { return c.kafka.topic_template; }));
    k.push_back(Str("relay.id", "OUTBOX_RELAY_ID",
                    [](Config& c) -> std::string& { return c.relay.relay_id; }));
    k.push_back(Int<int>("relay.workers", "OUTBOX_RELAY_WORKERS", 1, 64,
                         [](Config& c) -> int& { return c.relay.workers; }));
    k.push_back(Int<int>("relay.batch_size", "OUTBOX_RELAY_BATCH_SIZE", 1, 10000,
                         [](Config& c) -> int& { return c.relay.batch_size; }));
    k.push_back(Dur<std::chrono::milliseconds>(
        "relay.lease_ms", "OUTBOX_RELAY_LEASE_MS", 1000, kMaxMs,
        [](Config& c) -> std::chrono::milliseconds& { return c.relay.lease; }));
    k.push_back(Int<std::int64_t>("relay.batch_bytes", "OUTBOX_RELAY_BATCH_BYTES", 1,
                                  1LL << 34,
                                  [](Config& c) -> std::int64_t& { return c.relay.batch_bytes; }));
    k.push_back(Int<int>("relay.max_attempts", "OUTBOX_RELAY_MAX_ATTEMPTS", 1, 1000000,
                         [](Config& c) -> int& { return c.relay.max_attempts; }));
    k.push_back(Dur<std::chrono::milliseconds>(
        "relay.backoff_base_ms", "OUTBOX_RELAY_BACKOFF_BASE_MS", 1, kMaxMs,
        [](Config& c) -> std::chrono::milliseconds& { return c.relay.backoff_base; }));
    k.push_back(Dur<std::chrono::milliseconds>(
        "relay.backoff_max_ms", "OUTBOX_RELAY_BACKOFF_MAX_MS", 1, kMaxMs,
        [](Config& c) -> std::chrono::milliseconds& { return c.relay.backoff_max; }));
    k.push_back(Key{"relay.backoff_jitter", "OUTBOX_RELAY_BACKOFF_JITTER",
                    [](Config& c, const std::string& v) -> Status {
                      auto d = ParseDouble("relay.backoff_jitter", v, 0, 1);
                      if (!d.ok()) return d.status();
                      if (*d < 0 || *d > 1) return BadValue("relay.backoff_jitter", v, "0..1");
                      c.relay.backoff_jitter = *d;
                      return Status::Ok();
                    },
                    [](const Config& c) {
                      std::ostringstream s;
                      s << c.relay.backoff_jitter;
                      return s.str();
                    },
                    false});
    k.push_back(Bool("relay.ordered", "OUTBOX_RELAY_ORDERED",
                     [](Config& c) -> bool& { return c.relay.ordered; }));
    k.push_back(Bool("relay.listen", "OUTBOX_RELAY_LISTEN",
                     [](Config& c) -> bool& { return c.relay.listen; }));
    k.push_back(Key{"relay.on_failed", "OUTBOX_RELAY_ON_FAILED",
                    [](Config& c, const std::string& v) -> Status {
                      if (v == "hold") {
                        c.relay.on_failed = FailedPolicy::kHold;
                      } else if (v == "pass") {
                        c.relay.on_failed = FailedPolicy::kPass;
                      } else {
                        return BadValue("relay.on_failed", v, "hold or pass");
                      }
                      return Status::Ok();
                    },
                    [](const Config& c) {
                      return std::string(c.relay.on_failed == FailedPolicy::kPass ? "pass"
                                                                                  : "hold");
                    },
                    true});
    k.push_back(Dur<std::chrono::milliseconds>(
        "relay.poll_min_ms", "OUTBOX_RELAY_POLL_MIN_MS", 1, 60000,
        [](Config& c) -> std::chrono::milliseconds& { return c.relay.poll_min; }));
    k.push_back(Dur<std::chrono::milliseconds>(
        "relay.poll_max_ms", "OUTBOX_RELAY_POLL_MAX_MS", 1, 600000,
        [](Config& c) -> std::chrono::milliseconds& { return c.relay.poll_max; }));
    k.push_back(Dur<std::chrono::milliseconds>(
        "relay.db_retry_max_ms", "OUTBOX_RELAY_DB_RETRY_MAX_MS", 1, 600000,
        [](Config& c) -> std::chrono::milliseconds& { return c.relay.db_retry_max; }));
    k.push_back(Dur<std::chrono::milliseconds>(
        "relay.shutdown_timeout_ms", "OUTBOX_RELAY_SHUTDOWN_TIMEOUT_MS", 0, kMaxMs,
        [](Config& c) -> std::chrono::milliseconds& { return c.relay.shutdown_timeout; }));
    k.push_back(Dur<std::chrono::milliseconds>(
        "relay.stats_interval_ms", "OUTBOX_RELAY_STATS_INTERVAL_MS", 100, kMaxMs,
        [](Config& c) -> std::chrono::milliseconds& { return c.relay.stats_interval; }));
    k.push_back(Key{"relay.source", "OUTBOX_RELAY_SOURCE",
                    [](Config& c, const std::string& v) -> Status {
                      if (v == "poll") {
                        c.relay.source = RelaySource::kPoll;
                      } else if (v == "cdc") {
                        c.relay.source = RelaySource::kCdc;
                      } else {
                        return BadValue("relay.source", v, "poll or cdc");
                      }
                      return Status::Ok();
                    },
                    [](const Config& c) {
                      return std::string(c.relay.source == RelaySource::kCdc ? "cdc" : "poll");
                    },
                    true});
    k.push_back(Str("cdc.slot", "OUTBOX_CDC_SLOT",
                    [](Config& c) -> std::string& { return c.cdc_slot; }));
    k.push_back(Str("cdc.publication", "OUTBOX_CDC_PUBLICATION",
                    [](Config& c) -> std::string& { return c.cdc_publication; }));
    k.push_back(Int<int>("cdc.batch_size", "OUTBOX_CDC_BATCH_SIZE", 1, 100000,
                         [](Config& c) -> int& { return c.relay.cdc.batch_size; }));
    k.push_back(Int<int>("cdc.batches_in_flight", "OUTBOX_CDC_BATCHES_IN_FLIGHT", 1, 16,
                         [](Config& c) -> int& { return c.relay.cdc.batches_in_flight; }));
    k.push_back(Dur<std::chrono::milliseconds>(
        "cdc.status_interval_ms", "OUTBOX_CDC_STATUS_INTERVAL_MS", 10, 60000,
        [](Config& c) -> std::chrono::milliseconds& { return c.relay.cdc.status_interval; }));
    k.push_back(Dur<std::chrono::milliseconds>(
        "cdc.sweep_after_ms", "OUTBOX_CDC_SWEEP_AFTER_MS", 1, kMaxMs,
        [](Config& c) -> std::chrono::milliseconds& { return c.relay.cdc.sweep_after; }));
    k.push_back(Dur<std::chrono::milliseconds>(
        "cdc.stream_stale_after_ms", "OUTBOX_CDC_STREAM_STALE_AFTER_MS", 100, kMaxMs,
        [](Config& c) -> std::chrono::milliseconds& { return c.relay.cdc.stream_stale_after; }));
    k.push_back(Dur<std::chrono::milliseconds>(
        "cdc.standby_retry_ms", "OUTBOX_CDC_STANDBY_RETRY_MS", 1, 600000,
        [](Config& c) -> std::chrono::milliseconds& { return c.relay.cdc.standby_retry; }));
    k.push_back(Dur<std::chrono::milliseconds>(
        "cdc.heartbeat_interval_ms", "OUTBOX_CDC_HEARTBEAT_INTERVAL_MS", 1, kMaxMs,
        [](Config& c) -> std::chrono::milliseconds& { return c.relay.cdc.heartbeat_interval; }));
    k.push_back(Int<std::int64_t>("cdc.max_retained_wal_bytes", "OUTBOX_CDC_MAX_RETAINED_WAL_BYTES",
                                  0, std::numeric_limits<std::int64_t>::max(),
                                  [](Config& c) -> std::int64_t& {
                                    return c.relay.cdc.max_retained_wal_bytes;
                                  }));
    k.push_back(Dur<std::chrono::seconds>(
        "retention.sent_retention_s", "OUTBOX_RETENTION_SENT_RETENTION_S", 0, 3650LL * 86400,
        [](Config& c) -> std::chrono::seconds& { return c.relay.sent_retention; }));
    k.push_back(Dur<std::chrono::seconds>(
        "retention.purge_interval_s", "OUTBOX_RETENTION_PURGE_INTERVAL_S", 1, 86400,
        [](Config& c) -> std::chrono::seconds& { return c.relay.purge_interval; }));
    k.push_back(Int<int>("retention.purge_batch", "OUTBOX_RETENTION_PURGE_BATCH", 1, 100000,
                         [](Config& c) -> int& { return c.relay.purge_batch; }));
    k.push_back(Str("http.listen", "OUTBOX_HTTP_LISTEN",
                    [](Config& c) -> std::string& { return c.http_listen; }));
    k.push_back(Key{"log.format", "OUTBOX_LOG_FORMAT",
                    [](Config& c, const std::string& v) -> Status {
                      if (v != "text" && v != "json") return BadValue("log.format", v, "text or json");
                      c.log_json = v == "json";
                      return Status::Ok();
                    },
                    [](const Config& c) { return std::string(c.log_json ? "json" : "text"); },
                    true});
    k.push_back(Key{"log.level", "OUTBOX_LOG_LEVEL",
                    [](Config& c, const std::string& v) -> Status {
                      static const std::map<std::string, LogLevel> m = {
                          {"debug", LogLevel::kDebug}, {"info", LogLevel::kInfo},
                          {"warn", LogLevel::kWarn}, {"error", LogLevel::kError}};
                      auto it = m.find(v);
                      if (it == m.end()) return BadValue("log.level", v, "debug, info, warn or error");
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
    return k;
  }();
  return keys;
}

const std::string kKafkaPropsPrefix = "kafka.properties.";

Status Set(Config& c, const std::string& key, const std::string& value) {
  if (key.rfind(kKafkaPropsPrefix, 0) == 0 && key.size() > kKafkaPropsPrefix.size()) {
    c.kafka.properties[key.substr(kKafkaPropsPrefix.size())] = value;
    return Status::Ok();
  }
  for (const Key& k : Keys()) {
    if (k.name == key) return k.set(c, value);
  }
  return Status::InvalidArgument("unknown config key " + key +
                                 " (see docs/relay.md for the keys)");
}

std::string TomlScalar(const toml::node& n) {
  if (auto s = n.as_string()) return s->get();
  if (auto i = n.as_integer()) return std::to_string(i->get());
  if (auto b = n.as_boolean()) return b->get() ? "true" : "false";
  if (auto f = n.as_floating_point()) {
    std::ostringstream o;
    o << f->get();
    return o.str();
  }
  return "";
}

Status ApplyTable(Config& c, const toml::table& t, const std::string& prefix,
                  const std::string& file_name) {
  for (const auto& [k, node] : t) {
    const std::string key = prefix + std::string(k.str());
    if (const toml::table* sub = node.as_table()) {
      // kafka.properties keys may contain dots: "bootstrap.servers" = "..." (quoted),
      // or nested tables; flatten either way.
      OUTBOX_RETURN_IF_ERROR(ApplyTable(c, *sub, key + ".", file_name));
      continue;
    }
    if (node.is_array()) {
      return Status::InvalidArgument(file_name + ": config key " + key + ": arrays are not supported");
    }
    Status st = Set(c, key, TomlScalar(node));
    if (!st.ok()) return Status::InvalidArgument(file_name + ": " + st.message());
  }
  return Status::Ok();
}

// librdkafka properties that carry credentials: every password, secret, key or
// token, and the SASL configurations that embed them.
bool IsSecretProperty(const std::string& name) {
  for (const char* w : {"password", "secret", "key", "token", "credential", "sasl.oauthbearer.config",
                        "sasl.jaas.config"}) {
    if (name.find(w) != std::string::npos) return true;
  }
  return false;
}

std::string Quote(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
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

std::map<std::string, std::string> OutboxEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string s = *e;
    const auto eq = s.find('=');
    if (eq != std::string::npos && s.rfind("OUTBOX_", 0) == 0) env[s.substr(0, eq)] = s.substr(eq + 1);
  }
  return env;
}

Result<std::string> ReadConfigFile(const std::string& path) {
  if (path.empty()) return std::string();
  // A directory opens as a stream and reads as nothing: it would pass for an
  // empty file, and the daemon would start on defaults.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return Status::InvalidArgument("cannot read config file " + path + ": it is a directory");
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::InvalidArgument("cannot read config file " + path + ": " + std::strerror(errno));
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return Status::InvalidArgument("cannot read config file " + path + ": read error");
  return ss.str();
}

std::string DefaultRelayId() {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "relay");
  return std::string(host) + ":" + std::to_string(getpid());
}

namespace {

const std::string kKafkaEnvPrefix = "OUTBOX_KAFKA_PROPERTIES_";

// OUTBOX_KAFKA_PROPERTIES_SASL_PASSWORD -> sasl.password: lower case, "_" is
// ".", "__" is "_" and "___" is "-" (the convention of Confluent's images), so
// log_level is OUTBOX_KAFKA_PROPERTIES_LOG__LEVEL.
std::string KafkaPropertyFromEnv(const std::string& var) {
  const std::string rest = var.substr(kKafkaEnvPrefix.size());
  std::string out;
  for (std::size_t i = 0; i < rest.size();) {
    if (rest[i] == '_') {
      std::size_t n = 0;
      while (i + n < rest.size() && rest[i + n] == '_') ++n;
      out += n == 1 ? "." : n == 2 ? "_" : n == 3 ? "-" : std::string(n, '_');
      i += n;
    } else {
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(rest[i])));
      ++i;
    }
  }
  return out;
}

// The environment with every OUTBOX_X_FILE replaced by OUTBOX_X = the file's
// content (one trailing newline dropped): secrets need not be in the
// environment itself. Both set, or an unreadable file, is an error naming it.
Result<std::map<std::string, std::string>> ResolveFileVariables(
    const std::map<std::string, std::string>& env) {
  std::map<std::string, std::string> out = env;
  const std::string suffix = "_FILE";
  for (const auto& [var, path] : env) {
    if (var.size() <= suffix.size() || var.compare(var.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    const std::string target = var.substr(0, var.size() - suffix.size());
    if (env.count(target)) {
      return Status::InvalidArgument("environment " + var + " and " + target +
                                     " are both set; set one");
    }
    std::ifstream f(path, std::ios::binary);
    if (!f) return Status::InvalidArgument("environment " + var + ": cannot read " + path);
    std::stringstream ss;
    ss << f.rdbuf();
    std::string value = ss.str();
    if (!value.empty() && value.back() == '\n') value.pop_back();
    if (!value.empty() && value.back() == '\r') value.pop_back();
    out.erase(var);
    out[target] = value;
  }
  return out;
}

}  // namespace

Result<Config> LoadConfig(const std::string& file_text, const std::string& file_name,
                          const std::map<std::string, std::string>& raw_env,
                          const std::vector<std::pair<std::string, std::string>>& overrides,
                          ConfigNeeds required) {
  auto resolved = ResolveFileVariables(raw_env);
  if (!resolved.ok()) return resolved.status();
  const std::map<std::string, std::string>& env = *resolved;
  Config c;
  c.relay.relay_id = DefaultRelayId();
  if (!file_text.empty()) {
    toml::table parsed;
    try {  // toml++ reports syntax errors by exception; they stop here
      parsed = toml::parse(file_text, file_name);
    } catch (const toml::parse_error& err) {
      return Status::InvalidArgument(file_name + ":" + std::to_string(err.source().begin.line) +
                                     ":" + std::to_string(err.source().begin.column) + ": " +
                                     std::string(err.description()));
    }
    OUTBOX_RETURN_IF_ERROR(ApplyTable(c, parsed, "", file_name));
  }
  // The names scripts/testenv writes, accepted as shortcuts.
  const std::pair<const char*, const char*> aliases[] = {
      {"OUTBOX_PG_URL", "database.url"},
      {"OUTBOX_KAFKA_BOOTSTRAP", "kafka.properties.bootstrap.servers"}};
  for (const auto& [var, key] : aliases) {
    auto it = env.find(var);
    if (it != env.end()) {
      Status st = Set(c, key, it->second);
      if (!st.ok()) return Status::InvalidArgument("environment " + std::string(var) + ": " + st.message());
    }
  }
  for (const Key& k : Keys()) {
    auto it = env.find(k.env);
    if (it == env.end()) continue;
    Status st = k.set(c, it->second);
    if (!st.ok()) return Status::InvalidArgument("environment " + k.env + ": " + st.message());
  }
  for (const auto& [var, value] : env) {
    if (var.rfind(kKafkaEnvPrefix, 0) != 0 || var.size() == kKafkaEnvPrefix.size()) continue;
    c.kafka.properties[KafkaPropertyFromEnv(var)] = value;
  }
  for (const auto& [key, value] : overrides) OUTBOX_RETURN_IF_ERROR(Set(c, key, value));

  if (required.database && c.database.conninfo.empty()) {
    return Status::InvalidArgument(
        "config key database.url is required (or OUTBOX_DATABASE_URL / OUTBOX_PG_URL / --db)");
  }
  if (Status st = ValidateSchemaName(c.database.schema); !st.ok()) {
    return Status::InvalidArgument("config key database.schema: " + st.message());
  }
  if (IsMariaDbUrl(c.database.conninfo)) {
    if (Status st = ValidateMariaDbUrl(c.database.conninfo); !st.ok()) {
      return Status::InvalidArgument("config key database.url: " + st.message());
    }
    if (c.relay.source == RelaySource::kCdc) {
      return Status::InvalidArgument(
          "config key relay.source: cdc reads PostgreSQL's write-ahead log; with a mysql:// "
          "database.url use relay.source = poll");
    }
  }
  if (required.bootstrap && !c.kafka.properties.count("bootstrap.servers")) {
    return Status::InvalidArgument(
        "config key kafka.properties.bootstrap.servers is required (or OUTBOX_KAFKA_BOOTSTRAP / "
        "--bootstrap)");
  }
  if (c.relay.source == RelaySource::kCdc && !c.kafka.properties.count("linger.ms")) {
    // The stream publishes what a commit brought as soon as it is decoded;
    // waiting 5 ms for more (the polling default, which batches the claim's
    // rows) was most of a streamed event's commit-to-ack time
    // (docs/benchmarks.md, "CDC"). A value the operator set wins.
    c.kafka.properties["linger.ms"] = "0";
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

std::string PrintConfig(const Config& c) {
  std::string out;
  std::string section;
  for (const Key& k : Keys()) {
    auto dot = k.name.find('.');
    std::string sec = k.name.substr(0, dot);
    if (sec != section) {
      if (!section.empty()) out += "\n";
      out += "[" + sec + "]\n";
      section = sec;
    }
    std::string v = k.get(c);
    if (k.name == "database.url") v = IsMariaDbUrl(v) ? RedactMariaDbUrl(v) : RedactConninfo(v);
    out += k.name.substr(dot + 1) + " = " + (k.quoted ? Quote(v) : v) + "\n";
    if (k.name == "kafka.topic_template") {
      out += "\n[kafka.properties]\n";
      for (const auto& [name, value] : c.kafka.properties) {
        out += Quote(name) + " = " + Quote(IsSecretProperty(name) ? "***" : value) + "\n";
      }
      section = "kafka.properties";
    }
  }
  return out;
}

}  // namespace outbox::daemon
