// outboxctl dlt replay: dead-lettered messages back to the topic they came from.
#include <iostream>

#include "ctl.h"
#include "outbox/kafka.h"
#include "outbox/rabbitmq.h"

namespace outbox::ctl {
namespace {

using nlohmann::json;

int DltReplay(const Options& o) {
  if (o.topic.empty() && o.queue.empty()) return Usage("dlt replay: --topic (Kafka) or --queue (RabbitMQ) is required");
  if (!o.queue.empty() && o.rabbitmq.url.empty()) {
    return Usage("dlt replay --queue: no broker: pass --amqp, set OUTBOX_RABBITMQ_URL, or --config a file "
                 "with rabbitmq.url");
  }
  if (!o.queue.empty()) {
    if (outbox::Status st = outbox::ValidateRabbitMqOptions(o.rabbitmq); !st.ok()) return Usage(st.message());
  } else if (!o.kafka.count("bootstrap.servers")) {
    return Usage("dlt replay: no broker: pass --bootstrap, set OUTBOX_KAFKA_BOOTSTRAP, or --config "
                 "a file with kafka.properties.bootstrap.servers");
  }
  outbox::ReplayFilter f;
  f.key = o.dlt_key;
  if (o.since_ms >= 0) f.since = std::chrono::system_clock::time_point(std::chrono::milliseconds(o.since_ms));
  if (o.until_ms >= 0) f.until = std::chrono::system_clock::time_point(std::chrono::milliseconds(o.until_ms));
  outbox::tools::Progress progress;
  const auto on_progress = [&](std::uint64_t scanned, std::uint64_t matched) {
    progress.Update("dlt replay: " + std::to_string(scanned) + " scanned, " + std::to_string(matched) +
                    " to replay ...");
  };
  const std::string& from = o.queue.empty() ? o.topic : o.queue;
  auto r = o.queue.empty() ? outbox::ReplayDeadLetters(o.kafka, o.topic, f, o.dry_run, on_progress)
                           : outbox::ReplayRabbitMqDeadLetters(o.rabbitmq, o.queue, f, o.dry_run, on_progress);
  progress.Done();
  if (!r.ok()) return Fail(r.status(), o.json);
  if (o.json) {
    std::cout << json{{"ok", true},
                      {o.queue.empty() ? "topic" : "queue", from},
                      {"scanned", r->scanned},
                      {"replayed", r->replayed},
                      {"not_replayable", r->not_replayable},
                      {"dry_run", o.dry_run}}
                     .dump()
              << "\n";
  } else {
    std::cout << (o.dry_run ? "would replay " : "replayed ") << r->replayed << " of " << r->scanned
              << " dead-lettered messages from " << from << "\n";
    for (const std::string& n : r->not_replayable) std::cout << "not replayed: " << n << "\n";
  }
  return kExitOk;
}

}  // namespace

void AddDltCommands(CLI::App& app, Options& o, Commands& out) {
  auto* dlt = app.add_subcommand("dlt", "dead-letter topics (Kafka) and queues (RabbitMQ)");
  dlt->require_subcommand(1);
  auto* dlt_replay = dlt->add_subcommand("replay", "dead-lettered messages back to their topic");
  auto* topic = dlt_replay->add_option("--topic", o.topic, "Kafka: the dead-letter topic (orders.dlt)");
  auto* queue = dlt_replay->add_option("--queue", o.queue,
                                       "RabbitMQ: the group's dead-letter queue (billing.orders.dlt); replayed "
                                       "messages leave it for the group's queue");
  topic->excludes(queue);
  dlt_replay->add_option("--key", o.dlt_key, "only messages with this key");
  dlt_replay->add_option("--since", o.since_ms, "only messages at or after this time (ms since the epoch)")
      ->check(CLI::NonNegativeNumber);
  dlt_replay->add_option("--until", o.until_ms, "only messages at or before this time (ms since the epoch)")
      ->check(CLI::NonNegativeNumber);
  dlt_replay->add_flag("--dry-run", o.dry_run, "count, send nothing");
  out.push_back({dlt_replay, DltReplay, /*needs_outbox_db=*/false});
}
}  // namespace outbox::ctl
