// outboxctl's shared parts: the parsed command line (Options), exit codes,
// error and table printing, the database checks, and how a command group
// registers its subcommands. Each group lives in its own file and adds its
// subcommands to the CLI11 app; main.cc parses, loads the configuration and
// runs the one that was given.
//
// Thread-safety: single-threaded (a command-line tool), except that `serve`
// runs its own server threads (serve.h).
#ifndef OUTBOX_TOOLS_OUTBOXCTL_CTL_H_
#define OUTBOX_TOOLS_OUTBOXCTL_CTL_H_

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "ops.h"
#include "outbox/inbox.h"
#include "outbox/rabbitmq.h"
#include "outbox/status.h"
#include "outbox/store.h"

namespace outbox::ctl {

using tools::kExitUsage;
inline constexpr int kExitOk = 0, kExitFailed = 1, kExitNotFound = 3;
// migrate --check: the schema differs from what its migrations install (4), or
// it is behind or ahead of this binary's migrations (5).
inline constexpr int kExitDrift = 4, kExitVersions = 5;
inline constexpr long long kMaxDurationS = 100LL * 365 * 86400;

// What the command line gave, typed. Global options first, then each command's.
struct Options {
  std::string config, db, schema, bootstrap, amqp;
  bool json = false;
  bool check = false;  // migrate --check
  std::string layout;  // migrate --layout: "" (what the schema holds, else rows), rows, log
  // slots
  long long slots = 0;  // --set: the new count (0: only show)
  std::string drain_timeout = "10";
  // list
  std::string state, aggregate, type, older_than;
  long long limit = 100;
  // replay, skip
  std::string event_id, reason, by;
  bool failed = false, dry_run = false;
  // purge, inbox purge
  std::string retention = "604800";
  long long batch = 1000;
  // trace
  std::string key, inbox_db, inbox_schema = "inbox";
  // dlt replay
  std::string topic, queue, dlt_key;
  long long since_ms = -1, until_ms = -1;
  // inbox purge
  std::string consumer, broker_retention;
  std::vector<std::string> purge_topics;
  std::string dlt_suffix = ".dlt";
  bool force = false;
  // serve
  std::string listen = "127.0.0.1:8089", token_file;
  std::vector<std::string> consumers;  // GROUP=TOPIC[,TOPIC...]
  std::vector<std::string> allowed_hosts;
  std::string public_url;
  // From the relay's configuration (--config, OUTBOX_*): the database, and the
  // librdkafka properties `dlt replay` connects with (TLS, SASL), and the
  // RabbitMQ connection of `dlt replay --queue`.
  std::map<std::string, std::string> kafka;
  RabbitMqTransportOptions rabbitmq;
};

// Bad usage: the message on stderr, exit 2 (nothing touched).
int Usage(const std::string& error);
// The operation failed: the message on stderr (and as JSON with --json), exit 1.
int Fail(const std::string& msg, bool json_out);
int Fail(const outbox::Status& st, bool json_out);
// A JSON value as a table cell.
std::string Text(const nlohmann::json& v);
// Rows as an aligned table with upper-case headings (cells cut at 60 characters).
void PrintRows(const nlohmann::json& rows, const std::vector<std::string>& cols);
Result<std::unique_ptr<Store>> OpenOutboxStore(const Options& o);
Result<std::unique_ptr<InboxView>> OpenOperatorInbox(const Options& o, const std::string& consumer);
// The database URL is needed and well-formed; exit code, or nullopt.
std::optional<int> CheckDb(const Options& o, const std::string& command);
std::optional<int> CheckInboxDb(const Options& o);
// --schema and --inbox-schema: a PostgreSQL schema name (ValidateSchemaName).
CLI::Validator SchemaName();

// A subcommand a group registered, and what runs it once parsed. The run
// reads the Options that parsing and the configuration filled in.
struct Command {
  CLI::App* app = nullptr;
  std::function<int(const Options&)> run;
  bool needs_outbox_db = true;  // main checks --db and --schema first (CheckDb)
};
using Commands = std::vector<Command>;

// Each command group's file registers its subcommands on `app`, binding their
// flags to `o` (which must outlive parsing and the run).
void AddSchemaCommands(CLI::App& app, Options& o, Commands& out);  // migrate, status, purge
void AddEventCommands(CLI::App& app, Options& o, Commands& out);   // list, replay, skip, trace
void AddDltCommands(CLI::App& app, Options& o, Commands& out);     // dlt replay
void AddInboxCommands(CLI::App& app, Options& o, Commands& out);   // inbox migrate|status|purge
void AddServeCommand(CLI::App& app, Options& o, Commands& out);    // serve

}  // namespace outbox::ctl

#endif  // OUTBOX_TOOLS_OUTBOXCTL_CTL_H_
