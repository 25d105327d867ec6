// outbox-relay: moves committed outbox rows from PostgreSQL to Kafka.
//
//   outbox-relay [--config FILE] [--set KEY=VALUE]... [--db URL] [--bootstrap SERVERS]
//                [--log-json] [--print-config] [--migrate] [--version]
//
// Exit codes (docs/relay.md): 0 stopped cleanly after SIGTERM/SIGINT;
// 1 runtime failure (HTTP port unavailable, migration failed, both layouts in
// one schema, shutdown deadline passed with batches in flight — safe, their
// leases expire); 2 bad configuration or usage;
// 3 the schema was migrated by a newer release (nothing written);
// 130 second signal: immediate exit (safe for the same reason).
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "relay_config.h"
#include "signals.h"
#include "systemd_notify.h"
#include "outbox/version.h"
#include "outbox/http.h"
#include "outbox/cloudevents.h"
#include "outbox/kafka.h"
#include "outbox/open.h"
#include "outbox/postgres.h"
#include "outbox/relay.h"


namespace {

constexpr int kExitOk = 0, kExitRuntime = 1, kExitConfig = 2, kExitSchemaNewer = 3,
              kExitForced = 130;

int Usage(const std::string& msg) {
  std::cerr << "outbox-relay: " << msg << "\n"
            << "run `outbox-relay --help` for usage; keys, environment variables and defaults: "
               "docs/relay.md\n";
  return kExitConfig;
}


// One line naming the keys set for the transport this relay does not use.
void WarnIgnoredKeys(const outbox::daemon::Config& cfg, outbox::Logger& logger) {
  const auto ignored = outbox::daemon::IgnoredTransportKeys(cfg);
  if (ignored.empty()) return;
  std::string keys;
  for (const auto& k : ignored) keys += (keys.empty() ? "" : ",") + k;
  logger.Warn("keys of the other transport are set and ignored",
              {{"transport", outbox::daemon::TransportName(cfg.transport)},
               {"keys", keys}});
}

// The transport relay.transport names (a bad setting: InvalidArgument naming it).
outbox::Result<std::unique_ptr<outbox::Transport>> OpenBareTransport(const outbox::daemon::Config& cfg,
                                                                     outbox::Logger& logger) {
  switch (cfg.transport) {
    case outbox::daemon::TransportKind::kHttp:
      return outbox::OpenHttpTransport(cfg.http_delivery);
    case outbox::daemon::TransportKind::kRabbitMq:
      return outbox::OpenRabbitMqTransport(cfg.rabbitmq);
    case outbox::daemon::TransportKind::kKafka:
      break;
  }
  outbox::KafkaTransportOptions kafka_options = cfg.kafka;
  kafka_options.logger = &logger;  // librdkafka's lines and errors, in our format
  return outbox::OpenKafkaTransport(kafka_options);
}

// The transport, in the envelope relay.envelope names.
outbox::Result<std::unique_ptr<outbox::Transport>> OpenTransport(const outbox::daemon::Config& cfg,
                                                                 outbox::Logger& logger) {
  auto t = OpenBareTransport(cfg, logger);
  if (!t.ok() || !cfg.cloudevents) return t;
  const char* prefix = cfg.transport == outbox::daemon::TransportKind::kHttp ? outbox::kCloudEventsHttpPrefix
                       : cfg.transport == outbox::daemon::TransportKind::kRabbitMq
                           ? outbox::kCloudEventsAmqpPrefix
                           : outbox::kCloudEventsKafkaPrefix;
  const std::string source =
      cfg.cloudevents_source.empty() ? "/outbox/" + cfg.database.schema : cfg.cloudevents_source;
  return outbox::WithCloudEvents(std::move(t).value(), prefix, source);
}

// Runs `step` until it succeeds or fails for good, waiting with a growing
// backoff (200 ms to 5 s) while the database is unavailable, so a relay started
// before its database waits instead of failing (/healthz answers, /readyz says
// 503); nullopt once a signal ended the wait.
std::optional<outbox::Status> UntilAnswered(const std::function<outbox::Status()>& step,
                                            const std::atomic<bool>& stop,
                                            outbox::Logger& logger, const std::string& what) {
  std::chrono::milliseconds backoff{200};
  for (;;) {
    outbox::Status st = step();
    if (st.ok() || !st.retryable()) return st;
    logger.Warn(what + ": database unavailable; retrying", {{"error", st.ToString()}});
    const auto until = std::chrono::steady_clock::now() + backoff;
    while (!stop && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (stop) return std::nullopt;
    backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
  }
}

// Refuses a schema a newer release migrated (a version in its versions tables
// this binary does not know): it may hold what this binary would break
// (another layout, columns it does not fill). Waits for the database with
// backoff. nullopt to go on; otherwise the exit code, nothing written.
std::optional<int> RefuseANewerSchema(const outbox::StoreOptions& db,
                                      const std::atomic<bool>& stop, outbox::Logger& logger) {
  std::vector<int> newer;
  auto st = UntilAnswered(
      [&] {
        auto check = outbox::CheckSchema(db, /*versions_only=*/true);
        if (check.ok()) newer = check->unknown;
        return check.status();
      },
      stop, logger, "schema check");
  if (!st) {
    logger.Info("stopped before the schema could be checked");
    return kExitOk;
  }
  if (!st->ok()) {
    // Never migrated (--migrate comes next, or the relay reports it), or a
    // privilege missing (the relay retries until it is granted): left to the
    // relay. Anything else (both layouts in one schema): no binary may run.
    if (st->code() == outbox::Code::kFailedPrecondition &&
        st->message().find("has no outbox migrations") == std::string::npos) {
      logger.Error("schema check failed (nothing was written)", {{"error", st->ToString()}});
      return kExitRuntime;
    }
    logger.Warn("schema check: not checked", {{"error", st->ToString()}});
    return std::nullopt;
  }
  if (newer.empty()) return std::nullopt;
  std::string versions;
  for (int v : newer) {  // not `"," + to_string(v)`: gcc 12 -O2 warns (-Wrestrict)
    if (!versions.empty()) versions += ',';
    versions += std::to_string(v);
  }
  logger.Error("the schema was migrated by a newer release than this outbox-relay; upgrade "
               "outbox-relay (nothing was written)",
               {{"schema", db.schema},
                {"versions", versions},
                {"exit_code", std::to_string(kExitSchemaNewer)}});
  return kExitSchemaNewer;
}

// Refuses a newer schema first, then runs --migrate if asked. nullopt to go
// on; otherwise the exit code.
std::optional<int> PrepareSchema(bool migrate, const outbox::StoreFactory& factory,
                                 const outbox::StoreOptions& db, const std::atomic<bool>& stop,
                                 outbox::Logger& logger) {
  if (auto code = RefuseANewerSchema(db, stop, logger)) return code;
  if (!migrate) return std::nullopt;
  auto st = UntilAnswered(
      [&] {
        auto store = factory();
        return store.ok() ? (*store)->Migrate().status() : store.status();
      },
      stop, logger, "migration");
  if (!st) {
    logger.Info("stopped before the migration could run");
    return kExitOk;
  }
  if (!st->ok()) {  // a refused privilege too: run --migrate as the schema's owner
    logger.Error("migration failed", {{"error", st->ToString()}});
    return kExitRuntime;
  }
  logger.Info("schema up to date", {{"schema", db.schema}});
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  const sigset_t sigs = outbox::tools::BlockStopSignals();  // tools/common/signals.h
  auto cl = outbox::daemon::ParseCommandLine(std::vector<std::string>(argv + 1, argv + argc));
  if (!cl.ok()) return Usage(cl.status().message());
  if (cl->help) {
    std::cout << cl->help_text;
    return kExitOk;
  }
  if (cl->version) {
    std::cout << "outbox-relay " << OUTBOX_VERSION_STRING << "\n";
    return kExitOk;
  }
  const std::string& config_path = cl->config_path;
  const auto& overrides = cl->overrides;
  const bool print_config = cl->print_config, migrate = cl->migrate;

  auto text = outbox::daemon::ReadConfigFile(config_path);
  if (!text.ok()) return Usage(text.status().message());
  auto cfg = outbox::daemon::LoadConfig(*text, config_path.empty() ? "<none>" : config_path,
                                        outbox::daemon::OutboxEnvironment(), overrides);
  if (!cfg.ok()) {
    std::cerr << "outbox-relay: configuration error: " << cfg.status().message() << "\n";
    return kExitConfig;
  }
  if (print_config) {
    std::cout << outbox::daemon::PrintConfig(*cfg);
    return kExitOk;
  }

  outbox::StreamLogger logger(cfg->log_json, cfg->log_level);
  WarnIgnoredKeys(*cfg, logger);

  outbox::Result<std::unique_ptr<outbox::Transport>> transport = OpenTransport(*cfg, logger);
  if (!transport.ok()) {
    std::cerr << "outbox-relay: configuration error: " << transport.status().message() << "\n";
    return kExitConfig;
  }
  const outbox::StoreOptions& db = cfg->database;
  // The store follows the URL's scheme.
  outbox::StoreFactory factory = [db]() { return outbox::OpenStore(db); };

  outbox::MetricsRegistry registry;
  outbox::RelayMetrics metrics(registry, cfg->database.schema,
                               outbox::daemon::TransportName(cfg->transport));
  outbox::ChangeSource source;
  outbox::RelayOptions relay_options = cfg->relay;
  if (relay_options.source == outbox::RelaySource::kCdc) {
    outbox::PostgresChangeStreamOptions so;
    so.conninfo = db.url;
    so.schema = db.schema;
    so.slot = relay_options.cdc.slot;
    so.publication = cfg->cdc_publication;
    so.connect_timeout = db.connect_timeout;
    source = outbox::PostgresChangeSource(so);
  }
  auto relay = outbox::Relay::Create(relay_options, outbox::PartsOf(factory), source, **transport, metrics,
                                     logger);
  if (!relay.ok()) {
    std::cerr << "outbox-relay: configuration error: " << relay.status().message() << "\n";
    return kExitConfig;
  }

  const std::string& listen = cfg->http_listen;
  const auto colon = listen.rfind(':');
  outbox::MetricsServer::Options http_options;
  http_options.host = listen.substr(0, colon);
  http_options.port = std::atoi(listen.substr(colon + 1).c_str());  // 0: a free port (tests)
  http_options.ready = [&] { return (*relay)->Ready(); };
  http_options.not_ready_reason = [&] { return (*relay)->NotReadyReason(); };
  auto http = outbox::MetricsServer::Start(http_options, registry);
  if (!http.ok()) {
    logger.Error("cannot listen for HTTP", {{"http.listen", listen}});
    return kExitRuntime;
  }
  logger.Info("http listening",
              {{"address", http_options.host + ":" + std::to_string((*http)->port())}});

  // Under systemd (Type=notify): readiness, status and the watchdog.
  outbox::daemon::SystemdNotifier systemd(**relay, logger);

  // From here on the first signal stops whatever runs (the migration wait or
  // the relay), the second exits at once.
  std::atomic<bool> stop_requested{false};
  // `sigs` by value: the thread is detached and still waits in sigwait while
  // main returns and exit handlers reuse its stack (TSan saw OpenSSL's).
  std::thread signal_thread([&, sigs] {
    int sig = 0;
    sigwait(&sigs, &sig);
    logger.Info("signal received; stopping gracefully (send again to exit at once)",
                {{"signal", std::to_string(sig)}});
    systemd.Stopping();
    stop_requested = true;
    (*relay)->RequestStop();
    sigwait(&sigs, &sig);
    logger.Warn("second signal: exiting now; in-flight rows are left to lease expiry");
    std::_Exit(kExitForced);
  });
  signal_thread.detach();

  if (auto code = PrepareSchema(migrate, factory, db, stop_requested, logger)) {
    http->reset();
    return *code;
  }

  systemd.Ready();
  outbox::Status st = (*relay)->Run();
  http->reset();
  if (!st.ok()) {
    logger.Error("relay did not stop cleanly", {{"error", st.ToString()}});
    std::_Exit(kExitRuntime);  // threads may still hold the relay; do not unwind it
  }
  return kExitOk;
}
