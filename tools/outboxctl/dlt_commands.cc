// outboxctl dlt replay: dead-lettered messages back to the topic they came from.
#include <iostream>

#include "ctl.h"
#include "outbox/kafka.h"

namespace outbox::ctl {
namespace {

using nlohmann::json;

int DltReplay(const Options& o) {
  if (!o.kafka.count("bootstrap.servers")) {
    return Usage("dlt replay: no broker: pass --bootstrap, set OUTBOX_KAFKA_BOOTSTRAP, or --config "
                 "a file with kafka.properties.bootstrap.servers");
  }
  outbox::ReplayFilter f;
  f.key = o.dlt_key;
  if (o.since_ms >= 0) f.since = std::chrono::system_clock::time_point(std::chrono::milliseconds(o.since_ms));
  if (o.until_ms >= 0) f.until = std::chrono::system_clock::time_point(std::chrono::milliseconds(o.until_ms));
  outbox::tools::Progress progress;
  auto r = outbox::ReplayDeadLetters(o.kafka, o.topic, f, o.dry_run,
                                     [&](std::uint64_t scanned, std::uint64_t matched) {
                                       progress.Update("dlt replay: " + std::to_string(scanned) +
                                                       " scanned, " + std::to_string(matched) +
                                                       " to replay ...");
                                     });
  progress.Done();
  if (!r.ok()) return Fail(r.status(), o.json);
  if (o.json) {
    std::cout << json{{"ok", true},
                      {"topic", o.topic},
                      {"scanned", r->scanned},
                      {"replayed", r->replayed},
                      {"not_replayable", r->not_replayable},
                      {"dry_run", o.dry_run}}
                     .dump()
              << "\n";
  } else {
    std::cout << (o.dry_run ? "would replay " : "replayed ") << r->replayed << " of " << r->scanned
              << " dead-lettered messages from " << o.topic << "\n";
    for (const std::string& n : r->not_replayable) std::cout << "not replayed: " << n << "\n";
  }
  return kExitOk;
}

}  // namespace

void AddDltCommands(CLI::App& app, Options& o, Commands& out) {
  auto* dlt = app.add_subcommand("dlt", "dead-letter topics");
  dlt->require_subcommand(1);
  auto* dlt_replay = dlt->add_subcommand("replay", "dead-lettered messages back to their topic");
  dlt_replay->add_option("--topic", o.topic, "the dead-letter topic")->required();
  dlt_replay->add_option("--key", o.dlt_key, "only messages with this key");
  dlt_replay->add_option("--since", o.since_ms, "only messages at or after this time (ms since the epoch)")
      ->check(CLI::NonNegativeNumber);
  dlt_replay->add_option("--until", o.until_ms, "only messages at or before this time (ms since the epoch)")
      ->check(CLI::NonNegativeNumber);
  dlt_replay->add_flag("--dry-run", o.dry_run, "count, send nothing");
  out.push_back({dlt_replay, DltReplay, /*needs_outbox_db=*/false});
}
}  // namespace outbox::ctl
