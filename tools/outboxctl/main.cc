// outboxctl: operator commands against an outbox database (and a consumer's inbox).
//
//   outboxctl [--config FILE] [--db URL] [--schema S] [--json] COMMAND [OPTIONS]
//     migrate | status | list | replay | skip | purge | trace KEY
//     dlt replay | inbox status | inbox purge | serve (the dashboard, serve.cc)
//   outboxctl --help, outboxctl COMMAND --help   (on stdout)
//
// Parsed with CLI11: every value is typed and range-checked before anything
// touches a database or a broker (exit 2 naming the flag); `--x=y` works; the
// global options may also come after the command.
//
// Every command also takes --config FILE: the relay's configuration file, read
// the relay's way (file < OUTBOX_* variables and their _FILE forms < flags), so
// --db, --schema and the broker's properties (TLS, SASL for dlt replay) come
// from where the relay takes them; --db falls back to $OUTBOX_DATABASE_URL or
// $OUTBOX_PG_URL, --bootstrap to $OUTBOX_KAFKA_BOOTSTRAP, --amqp to
// $OUTBOX_RABBITMQ_URL. Exit codes: 0 success
// (trace: found), 1 the operation failed (database or broker unreachable, SQL
// error), 2 bad usage, 3 trace or skip: no such event, 4 migrate --check: an
// object differs from what the migrations install, 5 migrate --check:
// migrations pending or newer than this binary.
//
// --json prints one JSON object per run; counts, sequence numbers, attempts,
// ages, partitions and offsets are JSON numbers.
//
// Every database access goes through the store's operations (Store,
// InboxView): this tool has no SQL of its own. Each command group has its own
// file that registers its subcommands (ctl.h); this one parses, loads the
// relay's configuration and runs the command that was given.
#include <string>
#include <utility>
#include <vector>

#include "config.h"  // outbox::config
#include "rabbitmq_keys.h"
#include "ctl.h"
#include "outbox/mariadb.h"
#include "outbox/postgres.h"
#include "outbox/version.h"

namespace {

// What outboxctl reads of the relay's configuration file (docs/relay.md):
// [database], [kafka.properties] and [rabbitmq]. The relay's own sections are the relay's
// to check (outbox-relay --print-config); here they are accepted and ignored.
struct CtlConfig {
  outbox::StoreOptions database;
  std::map<std::string, std::string> kafka;
  outbox::RabbitMqTransportOptions rabbitmq;
};

const outbox::config::Schema<CtlConfig>& CtlSchema() {
  static const outbox::config::Schema<CtlConfig> schema = [] {
    outbox::config::Schema<CtlConfig> s;
    s.docs = "docs/relay.md";
    outbox::config::AddDatabaseKeys<CtlConfig>(
        s, [](CtlConfig& c) -> outbox::StoreOptions& { return c.database; });
    outbox::config::AddKafkaProperties<CtlConfig>(
        s, [](CtlConfig& c) -> std::map<std::string, std::string>& { return c.kafka; });
    outbox::config::AddRabbitMqKeys<CtlConfig>(
        s, [](CtlConfig& c) -> outbox::RabbitMqTransportOptions& { return c.rabbitmq; }, true);
    s.ignored_prefixes = {"relay.", "cdc.", "retention.", "http.", "http_delivery.", "log.",
                          "kafka.topic_template"};
    return s;
  }();
  return schema;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace outbox::ctl;
  Options o;
  CLI::App app{"outboxctl: operator commands against an outbox database and a consumer's inbox.\n"
               "Exit codes: 0 done, 1 the operation failed, 2 bad usage (nothing touched), 3 no such "
               "event (trace, skip), 4 schema drift (migrate --check), 5 migrations pending or "
               "newer than this binary (migrate --check).",
               "outboxctl"};
  app.set_version_flag("--version", std::string("outboxctl ") + OUTBOX_VERSION_STRING);
  app.require_subcommand(1);
  app.fallthrough();  // global options may come after the command
  app.add_option("--config", o.config,
                 "the relay's configuration file: database.url, database.schema and "
                 "kafka.properties come from it (file < OUTBOX_* variables < flags)");
  auto* db_flag = app.add_option("--db", o.db,
                                 "the outbox database: a PostgreSQL URL or mysql://user@host/db "
                                 "(default: $OUTBOX_DATABASE_URL, $OUTBOX_PG_URL, or --config)");
  auto* schema_flag =
      app.add_option("--schema", o.schema, "PostgreSQL schema of the outbox (default outbox)")->check(SchemaName());
  auto* bootstrap_flag = app.add_option("--bootstrap", o.bootstrap,
                                        "Kafka bootstrap servers for dlt replay (default: "
                                        "$OUTBOX_KAFKA_BOOTSTRAP, or --config)");
  auto* amqp_flag = app.add_option("--amqp", o.amqp,
                                   "RabbitMQ URL for dlt replay --queue (default: $OUTBOX_RABBITMQ_URL, "
                                   "or --config's rabbitmq.url)");
  app.add_flag("--json", o.json, "print one JSON object (numbers as numbers)");

  Commands commands;
  AddSchemaCommands(app, o, commands);
  AddEventCommands(app, o, commands);
  AddDltCommands(app, o, commands);
  AddInboxCommands(app, o, commands);
  AddServeCommand(app, o, commands);

  if (auto done = outbox::tools::ParseOrExit(app, argc, argv, "outboxctl")) return *done;

  // The relay's configuration, read the relay's way (docs/relay.md): --config
  // FILE < OUTBOX_* variables (and their _FILE forms) < these flags.
  {
    std::vector<std::pair<std::string, std::string>> overrides;
    if (db_flag->count()) overrides.emplace_back("database.url", o.db);
    if (schema_flag->count()) overrides.emplace_back("database.schema", o.schema);
    if (bootstrap_flag->count()) overrides.emplace_back("kafka.properties.bootstrap.servers", o.bootstrap);
    if (amqp_flag->count()) overrides.emplace_back("rabbitmq.url", o.amqp);
    auto text = outbox::config::ReadFile(o.config);
    if (!text.ok()) return Usage("--config: " + text.status().message());
    CtlConfig cfg;
    outbox::Status loaded = outbox::config::Load(
        CtlSchema(), {*text, o.config.empty() ? "<none>" : o.config,
                      outbox::config::OutboxEnvironment(), overrides},
        cfg);
    if (!loaded.ok()) return Usage("configuration: " + loaded.message());
    if (outbox::Status st = outbox::ValidateSchemaName(cfg.database.schema); !st.ok()) {
      return Usage("configuration: config key database.schema: " + st.message());
    }
    if (outbox::IsMariaDbUrl(cfg.database.url)) {
      if (outbox::Status st = outbox::ValidateMariaDbUrl(cfg.database.url); !st.ok()) {
        return Usage("configuration: config key database.url: " + st.message());
      }
    }
    o.db = cfg.database.url;
    o.schema = cfg.database.schema;
    o.kafka = cfg.kafka;
    o.rabbitmq = cfg.rabbitmq;
  }

  const std::string command = app.get_subcommands().front()->get_name();
  for (const Command& c : commands) {
    if (!c.app->parsed()) continue;
    if (c.needs_outbox_db) {
      if (auto bad = CheckDb(o, command)) return *bad;
    }
    return c.run(o);
  }
  return Usage("unknown command " + command);
}
