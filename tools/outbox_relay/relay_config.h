// outbox-relay configuration: TOML file < OUTBOX_* environment < flags.
// Every key, its environment variable, default and meaning: docs/relay.md.
#ifndef OUTBOX_TOOLS_OUTBOX_RELAY_RELAY_CONFIG_H_
#define OUTBOX_TOOLS_OUTBOX_RELAY_RELAY_CONFIG_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "outbox/http_transport.h"
#include "outbox/kafka.h"
#include "outbox/log.h"
#include "outbox/open.h"
#include "outbox/rabbitmq.h"
#include "outbox/relay.h"

namespace outbox::daemon {

// Where the relay delivers: Kafka (the default), HTTP (docs/relay.md, "HTTP
// delivery") or RabbitMQ ("RabbitMQ delivery").
enum class TransportKind { kKafka, kHttp, kRabbitMq };
// relay.transport's value: "kafka", "http", "rabbitmq" (also the metrics' label).
const char* TransportName(TransportKind k);

struct Config {
  StoreOptions database;
  TransportKind transport = TransportKind::kKafka;
  // relay.envelope: cloudevents adds the CloudEvents attributes (cloudevents.h).
  bool cloudevents = false;
  std::string cloudevents_source;  // "" = /outbox/<database.schema>
  KafkaTransportOptions kafka;
  HttpTransportOptions http_delivery;
  RabbitMqTransportOptions rabbitmq;
  RelayOptions relay;
  std::string cdc_slot;         // "" = outbox_<schema> (relay.cdc.slot is resolved from it)
  std::string cdc_publication;  // "" = outbox_<schema>
  std::string http_listen = "127.0.0.1:9464";  // loopback by default: metrics are not public
  bool log_json = false;
  LogLevel log_level = LogLevel::kInfo;
};

// Sources in increasing precedence. `file_text` is the TOML document ("" = none),
// `file_name` only names it in errors; `env` is the process environment;
// `overrides` are --set KEY=VALUE pairs (and flag shortcuts) in order.
// `required`: what must be set in the end (outboxctl reads the same file and
// needs the broker only for `dlt replay`).
struct ConfigNeeds {
  bool database = true;
  bool bootstrap = true;
};
Result<Config> LoadConfig(const std::string& file_text, const std::string& file_name,
                          const std::map<std::string, std::string>& env,
                          const std::vector<std::pair<std::string, std::string>>& overrides,
                          ConfigNeeds required = {});

// Keys set for a transport this configuration does not use (kafka.properties.*
// and kafka.topic_template unless relay.transport = kafka; http_delivery.url
// unless http; rabbitmq.url unless rabbitmq): accepted, and ignored, so the relay names them in one warning at
// start (docs/relay.md, "HTTP delivery"). Sorted; empty when none.
std::vector<std::string> IgnoredTransportKeys(const Config& c);

// The OUTBOX_* variables of this process's environment.
std::map<std::string, std::string> OutboxEnvironment();

// Reads a config file; "" for an empty path. InvalidArgument naming it when unreadable.
Result<std::string> ReadConfigFile(const std::string& path);

// The effective configuration as TOML, with secrets (passwords in the database
// URL, kafka properties whose name mentions password/secret/key, every
// http_delivery.headers value) redacted.
std::string PrintConfig(const Config& c);

// The command line (without argv[0]).
struct CommandLine {
  std::string config_path;
  std::vector<std::pair<std::string, std::string>> overrides;  // --set and shortcuts, in order
  bool print_config = false;
  bool migrate = false;
  bool help = false;       // -h/--help: print help_text on stdout and exit 0
  std::string help_text;
  bool version = false;  // --version: print "outbox-relay X.Y.Z" and exit 0
};
// Parsed with CLI11: `--x=y` works, errors name the flag. InvalidArgument for a
// usage error (the caller exits 2).
Result<CommandLine> ParseCommandLine(const std::vector<std::string>& args);

// Default relay id: "<hostname>:<pid>".
std::string DefaultRelayId();

}  // namespace outbox::daemon

#endif  // OUTBOX_TOOLS_OUTBOX_RELAY_RELAY_CONFIG_H_
