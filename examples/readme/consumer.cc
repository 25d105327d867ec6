// The consumer: ships each OrderPlaced event once. The inbox stamps the event and runs the
// handler's statements in the same transaction, so a copy delivered again changes nothing.
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "outbox/consumer.h"
#include "outbox/kafka.h"
#include "outbox/postgres_inbox.h"
#include "readme.h"  // Env, Connect, Exec, Die: environment and libpq plumbing

int main() {
  const std::string url = readme::Env("OUTBOX_PG_URL");
  readme::Exec(readme::Connect(url).get(),
               "CREATE TABLE IF NOT EXISTS readme_shipments (order_id text PRIMARY KEY)");
  std::string shipped;
  outbox::SinkHandler ship = [&](const outbox::InboundMessage& m, outbox::StatementSink& sink) {
    sink.Add("INSERT INTO readme_shipments (order_id) VALUES ($1)", {m.key});  // key: order id
    shipped = m.key;
    return outbox::HandlerResult::Ok();
  };
  auto inbox = outbox::OpenPostgresInbox(
      {.conninfo = url, .schema = "readme_inbox", .consumer = "readme-shipping"}, ship);
  if (!inbox.ok()) readme::Die(inbox.status().ToString());
  if (outbox::Status st = (*inbox)->Migrate(); !st.ok()) readme::Die(st.ToString());
  outbox::StreamLogger logger(/*json=*/false, outbox::LogLevel::kWarn);
  auto source = outbox::OpenKafkaInboxSource(
      {.properties = {{"bootstrap.servers", readme::Env("OUTBOX_KAFKA_BOOTSTRAP")},
                      {"group.id", "readme-shipping"}}},
      logger);
  if (!source.ok()) readme::Die(source.status().ToString());
  auto consumer = outbox::Consumer::Create({.topics = {"outbox.event.readme_order"}}, **source,
                                           **inbox, outbox::DedupByEventId(), logger);
  if (!consumer.ok()) readme::Die(consumer.status().ToString());

  // Run() returns after Stop(): stop once an event is applied (committed), or after ~60 s.
  std::jthread stopper([&c = **consumer] {
    for (int i = 0; i < 600 && c.counters().applied == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    c.Stop();
  });
  if (outbox::Status st = (*consumer)->Run(); !st.ok()) readme::Die(st.ToString());
  if ((*consumer)->counters().applied == 0) readme::Die("no event applied within 60 s");
  std::printf("shipped order %s: stamp and shipment committed together\n", shipped.c_str());
}
