// outbox-consumer: exactly-once effects with no consumer code. Each
// [[handler]] is a consumer group on one topic, applied through the inbox
// (outbox::Consumer): a `sql` handler's statement commits with the stamp; an
// `http` handler's POST is stamped after its 2xx. docs/consumer.md.
//
//   outbox-consumer --config FILE [--set KEY=VALUE]... [--migrate] [--print-config] [--version]
//
// Exit codes: 0 stopped after SIGTERM/SIGINT; 1 runtime failure (HTTP port
// unavailable, the inbox schema could not be migrated, a consumer stopped on
// an error); 2 bad configuration or usage; 130 second signal: immediate exit
// (safe: offsets are committed only after the effects).
#include <signal.h>
#include <systemd/sd-daemon.h>

#include <atomic>
#include <mutex>
#include <iostream>
#include <memory>
#include <thread>

#include "cli.h"
#include "config.h"
#include "consumer_config.h"
#include "handlers.h"
#include "signals.h"
#include "outbox/consumer.h"
#include "outbox/http.h"
#include "outbox/kafka.h"
#include "outbox/rabbitmq.h"
#include "outbox/mariadb_inbox.h"
#include "outbox/metrics.h"
#include "outbox/postgres_inbox.h"
#include "outbox/version.h"

namespace {

namespace cd = outbox::consumer_daemon;
constexpr int kExitOk = 0, kExitRuntime = 1, kExitConfig = 2, kExitForced = 130;

bool IsMariaDb(const std::string& url) { return url.rfind("mysql://", 0) == 0; }

// One [[handler]]: its inbox store (own database session), its group member,
// its engine and the thread that runs it.
struct Pipeline {
  const cd::HandlerConfig* handler = nullptr;
  std::unique_ptr<cd::HttpEffect> http;
  std::unique_ptr<outbox::InboxStore> store;
  std::unique_ptr<outbox::InboxSource> source;
  std::unique_ptr<outbox::Consumer> consumer;
  std::thread thread;
  outbox::Status result;
};

// Stops every consumer started so far, and each one started after, once: on a
// signal, or when one of them fails (the process then ends with exit 1, and
// systemd restarts it). Thread-safety: any thread.
class StopAll {
 public:
  void Add(outbox::Consumer* c) {
    std::lock_guard l(mu_);
    consumers_.push_back(c);
    if (stopped_) c->Stop();
  }
  void Now() {
    std::lock_guard l(mu_);
    stopped_ = true;
    for (outbox::Consumer* c : consumers_) c->Stop();
  }

 private:
  std::mutex mu_;
  bool stopped_ = false;
  std::vector<outbox::Consumer*> consumers_;
};

// The handler's inbox store on the configured database. Unavailable while the
// database is down (the caller retries).
outbox::Result<std::unique_ptr<outbox::InboxStore>> OpenStore(const cd::Config& c, Pipeline& p) {
  const cd::HandlerConfig& h = *p.handler;
  if (IsMariaDb(c.database_url)) {
    outbox::MariaDbInboxOptions o{c.database_url, h.group, c.statement_timeout, c.connect_timeout};
    if (h.kind() == cd::HandlerKind::kSql) return outbox::OpenMariaDbInbox(o, cd::MariaDbSqlHandler(h.sql));
    return outbox::OpenMariaDbInbox(o, [e = p.http.get()](const outbox::InboundMessage& m, st_mysql*) {
      return e->Post(m);
    });
  }
  outbox::PostgresInboxOptions o;
  o.conninfo = c.database_url;
  o.schema = c.inbox_schema;
  o.consumer = h.group;
  o.statement_timeout = c.statement_timeout;
  o.connect_timeout = c.connect_timeout;
  o.classify_sqlstate = outbox::SqlHandlerErrorClass;
  if (h.kind() == cd::HandlerKind::kSql) return outbox::OpenPostgresInbox(o, cd::PostgresSqlHandler(h.sql));
  o.effects_outside_transaction = true;  // a failed POST does not repeat the batch's earlier ones
  return outbox::OpenPostgresInbox(o, [e = p.http.get()](const outbox::InboundMessage& m, pg_conn*) {
    return e->Post(m);
  });
}

// Why the handlers are not running yet, for /readyz (any thread).
class StartingReason {
 public:
  void Set(std::string why) {
    std::lock_guard l(mu_);
    why_ = std::move(why);
  }
  std::string Get() const {
    std::lock_guard l(mu_);
    return why_;
  }

 private:
  mutable std::mutex mu_;
  std::string why_;
};

// Opens the store (and migrates it when asked, else checks that its schema is
// there at this build's version), retrying with backoff while the database is
// unavailable or the schema missing: nothing is consumed before. False when a
// stop came first; an error that is not an outage is returned.
outbox::Result<bool> OpenWithRetry(const cd::Config& c, Pipeline& p, bool migrate,
                                   const std::atomic<bool>& stop, outbox::Logger& logger,
                                   std::atomic<int>& waiting, StartingReason& reason) {
  std::chrono::milliseconds backoff{200};
  std::string said;  // the schema's last complaint, logged once
  for (;;) {
    auto store = OpenStore(c, p);
    outbox::Status st = store.status();
    if (store.ok()) st = migrate ? (*store)->Migrate() : (*store)->CheckSchema();
    if (st.ok()) {
      p.store = std::move(*store);
      reason.Set("");
      return true;
    }
    const bool schema = st.code() == outbox::Code::kFailedPrecondition;
    if (!st.retryable() && !schema) return st;
    ++waiting;
    if (schema) {
      reason.Set(p.handler->group + ": " + st.message());
      if (st.message() != said) {
        logger.Error("inbox schema not ready; nothing is consumed until it is",
                     {{"group", p.handler->group}, {"error", st.message()}});
        said = st.message();
      }
    } else {
      reason.Set("");
      logger.Warn("inbox database unavailable; retrying",
                  {{"group", p.handler->group}, {"error", st.ToString()}});
    }
    const auto until = std::chrono::steady_clock::now() + backoff;
    while (!stop && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    --waiting;
    if (stop) return false;
    backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
  }
}

// /readyz: 200 once every handler runs and none reports its database or broker
// unusable; else why not. The lambdas run on the HTTP server's threads. Each
// consumer is set before its thread counts itself running: once every one
// runs, reading them is safe.
void WireReadiness(outbox::MetricsServer::Options& http, const std::vector<Pipeline>& pipelines,
                   const std::atomic<int>& running, const std::atomic<int>& waiting,
                   const StartingReason& starting) {
  const auto engines_say = [&pipelines, &running] {
    std::string why;
    if (running != static_cast<int>(pipelines.size())) return why;
    for (const Pipeline& p : pipelines) {
      const std::string r = p.consumer->NotReadyReason();
      if (!r.empty()) why += (why.empty() ? "" : "; ") + p.handler->group + ": " + r;
    }
    return why;
  };
  http.ready = [engines_say, &pipelines, &running] {
    return running == static_cast<int>(pipelines.size()) && engines_say().empty();
  };
  http.not_ready_reason = [engines_say, &starting, &waiting] {
    const std::string engines = engines_say();
    if (!engines.empty()) return "not ready: " + engines + "\n";
    const std::string schema = starting.Get();
    if (!schema.empty()) return "not ready: " + schema + "\n";
    return std::string("not ready: ") +
           (waiting > 0 ? "inbox database unavailable\n" : "handlers starting\n");
  };
}

outbox::ConsumerOptions EngineOptions(const cd::Config& c, const cd::HandlerConfig& h) {
  outbox::ConsumerOptions o;
  o.topics = {h.topic};
  o.group = h.group;  // its retry and dead-letter copies are its own (outbox-group)
  o.retry_delays = h.retries;
  o.ordered = h.ordered;
  o.batch_size = c.batch_size;
  o.batch_wait = c.batch_wait;
  o.stamp_retention = c.stamp_retention;
  o.metrics_labels = "consumer=\"" + outbox::PrometheusLabelValue(h.group) + "\"";
  return o;
}

// Each handler's HTTP effect and Kafka group member: what a bad value in the
// configuration can still fail, before anything touches the database.
outbox::Status BuildPipelines(const cd::Config& c, outbox::Logger& logger, std::vector<Pipeline>& pipelines) {
  for (std::size_t i = 0; i < pipelines.size(); ++i) {
    Pipeline& p = pipelines[i];
    p.handler = &c.handlers[i];
    if (p.handler->kind() == cd::HandlerKind::kHttp) {
      auto e = cd::HttpEffect::Create(*p.handler);
      if (!e.ok()) return e.status();
      p.http = std::move(*e);
    }
    outbox::Result<std::unique_ptr<outbox::InboxSource>> source = outbox::Status::Internal("no broker");
    if (p.handler->broker == "rabbitmq") {
      outbox::RabbitMqInboxSourceOptions ro;
      ro.broker = c.rabbitmq;
      ro.group = p.handler->group;
      ro.prefetch = c.rabbitmq_prefetch;
      ro.single_active_consumer = p.handler->ordered;  // one reader per queue: per-key order
      source = outbox::OpenRabbitMqInboxSource(ro, logger);
      // The queues now: one the broker refuses as inequivalent (it exists with
      // other arguments) is a configuration error; an unreachable broker is not
      // (the source retries).
      if (source.ok()) {
        const outbox::Status declared =
            outbox::DeclareRabbitMqInbox(ro, outbox::SubscribedTopics(EngineOptions(c, *p.handler)));
        if (declared.code() == outbox::Code::kInvalidArgument) {
          return outbox::Status::InvalidArgument(
              "handler." + std::to_string(i) + " (group " + p.handler->group + ", ordered = " +
              (p.handler->ordered ? "true" : "false") + "): " + declared.message());
        }
        if (!declared.ok()) {
          logger.Warn("rabbitmq: could not declare the handler's queues yet; retrying in the background",
                      {{"group", p.handler->group}, {"error", declared.message()}});
        }
      }
    } else {
      outbox::KafkaInboxSourceOptions so;
      so.properties = c.kafka;
      so.properties["group.id"] = p.handler->group;
      source = outbox::OpenKafkaInboxSource(so, logger);
    }
    if (!source.ok()) {
      return outbox::Status::InvalidArgument("handler." + std::to_string(i) + ": " + source.status().message());
    }
    p.source = std::move(*source);
  }
  return outbox::Status::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  const sigset_t sigs = outbox::tools::BlockStopSignals();  // tools/common/signals.h
  CLI::App app{"outbox-consumer: applies each event's effect exactly once, with no consumer code.\n"
               "Values come from --config FILE < OUTBOX_* variables (and their _FILE forms) < --set.\n"
               "Keys, handlers, metrics and exit codes: docs/consumer.md.",
               "outbox-consumer"};
  std::string config_path;
  std::vector<std::string> sets;
  bool print_config = false, migrate = false;
  app.add_option("--config", config_path, "the TOML configuration file");
  app.add_option("--set", sets, "one configuration key, e.g. handler.0.ordered=true (repeatable)")
      ->allow_extra_args(false)
      ->type_name("KEY=VALUE");
  app.add_flag("--print-config", print_config, "print the effective configuration (secrets redacted) and exit");
  app.add_flag("--migrate", migrate, "create/upgrade the inbox schema before starting");
  app.set_version_flag("--version", std::string("outbox-consumer ") + OUTBOX_VERSION_STRING);
  if (auto code = outbox::tools::ParseOrExit(app, argc, argv, "outbox-consumer")) return *code;
  std::vector<std::pair<std::string, std::string>> overrides;
  for (const std::string& s : sets) {
    const auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::cerr << "outbox-consumer: --set needs KEY=VALUE, got " << s << "\n";
      return kExitConfig;
    }
    overrides.emplace_back(s.substr(0, eq), s.substr(eq + 1));
  }
  auto text = outbox::config::ReadFile(config_path);
  auto cfg = text.ok() ? cd::LoadConfig(*text, config_path.empty() ? "<none>" : config_path,
                                        outbox::config::OutboxEnvironment(), overrides)
                       : outbox::Result<cd::Config>(text.status());
  if (!cfg.ok()) {
    std::cerr << "outbox-consumer: configuration error: " << cfg.status().message() << "\n";
    return kExitConfig;
  }
  if (print_config) {
    std::cout << cd::PrintConfig(*cfg);
    return kExitOk;
  }
  outbox::StreamLogger logger(cfg->log_json, cfg->log_level);

  std::vector<Pipeline> pipelines(cfg->handlers.size());
  if (outbox::Status st = BuildPipelines(*cfg, logger, pipelines); !st.ok()) {
    std::cerr << "outbox-consumer: configuration error: " << st.message() << "\n";
    return kExitConfig;
  }

  outbox::MetricsRegistry registry;
  std::atomic<int> running{0}, waiting{0};
  StartingReason starting;
  std::atomic<bool> stop{false};
  StopAll stop_all;
  const auto colon = cfg->http_listen.rfind(':');
  outbox::MetricsServer::Options http_options;
  http_options.host = cfg->http_listen.substr(0, colon);
  http_options.port = std::atoi(cfg->http_listen.substr(colon + 1).c_str());  // 0: a free port
  WireReadiness(http_options, pipelines, running, waiting, starting);
  auto http = outbox::MetricsServer::Start(http_options, registry);
  if (!http.ok()) {
    logger.Error("cannot listen for HTTP", {{"http.listen", cfg->http_listen}});
    return kExitRuntime;
  }
  logger.Info("http listening", {{"address", http_options.host + ":" + std::to_string((*http)->port())}});
  if (const std::string from_env = cd::KeysFromEnvironment(outbox::config::OutboxEnvironment(), overrides);
      !from_env.empty()) {
    // An OUTBOX_PG_URL left in a shell replaces the file's database.url: say so.
    logger.Info("configuration from the environment, over the file", {{"keys", from_env}});
  }

  std::thread signal_thread([&, sigs] {
    int sig = 0;
    sigwait(&sigs, &sig);
    logger.Info("signal received; stopping gracefully (send again to exit at once)",
                {{"signal", std::to_string(sig)}});
    sd_notify(0, "STOPPING=1");
    stop = true;
    stop_all.Now();
    sigwait(&sigs, &sig);
    logger.Warn("second signal: exiting now; uncommitted offsets are consumed again");
    std::_Exit(kExitForced);
  });
  signal_thread.detach();
  // Ready for systemd once the configuration is loaded and /metrics listens: a
  // database outage is retried with backoff and reported on /readyz, and does
  // not fail the start.
  sd_notify(0, "READY=1");

  int code = kExitOk;
  for (std::size_t i = 0; i < pipelines.size() && !stop; ++i) {
    Pipeline& p = pipelines[i];
    auto opened = OpenWithRetry(*cfg, p, migrate, stop, logger, waiting, starting);
    if (opened.ok() && !*opened) break;  // stopped while the database was down
    auto consumer = opened.ok()
                        ? outbox::Consumer::Create(EngineOptions(*cfg, *p.handler), *p.source, *p.store,
                                                   cd::MakeDedup(p.handler->dedup), logger, &registry)
                        : outbox::Result<std::unique_ptr<outbox::Consumer>>(opened.status());
    if (!consumer.ok()) {
      logger.Error("cannot start the handler", {{"group", p.handler->group}, {"error", consumer.status().ToString()}});
      code = kExitRuntime;
      break;
    }
    p.consumer = std::move(*consumer);
    stop_all.Add(p.consumer.get());
    p.thread = std::thread([&p, &running, &logger, &stop, &stop_all] {
      ++running;
      p.result = p.consumer->Run();
      --running;
      if (!p.result.ok()) {
        logger.Error("consumer stopped on an error; stopping the other handlers",
                     {{"group", p.handler->group}, {"error", p.result.ToString()}});
        stop = true;
        stop_all.Now();
      }
    });
    logger.Info("handler started", {{"group", p.handler->group}, {"topic", p.handler->topic}});
  }
  if (code != kExitOk) stop_all.Now();  // the handlers already running end their batch
  for (Pipeline& p : pipelines) {
    if (p.thread.joinable()) p.thread.join();
    if (!p.result.ok()) code = kExitRuntime;
  }
  http->reset();
  return code;
}
