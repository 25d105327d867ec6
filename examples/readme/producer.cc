// The producer: an order row and its OrderPlaced event commit in one transaction, so the
// event exists exactly when the order does. outbox-relay publishes it after the commit.
#include <cstdio>
#include <string>

#include "outbox/postgres.h"
#include "readme.h"  // Env, Connect, Exec, Die: environment and libpq plumbing

int main() {
  const std::string url = readme::Env("OUTBOX_PG_URL");
  auto store = outbox::OpenPostgresStore({.conninfo = url, .schema = "readme"});
  if (!store.ok()) readme::Die(store.status().ToString());
  if (auto applied = (*store)->Migrate(); !applied.ok()) readme::Die(applied.status().ToString());

  readme::Conn db = readme::Connect(url);
  readme::Exec(db.get(),
               "CREATE TABLE IF NOT EXISTS readme_orders (id bigserial PRIMARY KEY, "
               "total numeric NOT NULL)");
  readme::Exec(db.get(), "BEGIN");
  const std::string id =
      readme::Exec(db.get(), "INSERT INTO readme_orders (total) VALUES (99.5) RETURNING id");
  outbox::Event placed;
  placed.aggregate_type = "readme_order";  // names the topic: outbox.event.readme_order
  placed.aggregate_id = id;                // becomes the message key
  placed.event_type = "OrderPlaced";
  placed.payload = R"({"total":99.5})";
  outbox::EnqueueOptions options;
  options.schema = "readme";
  // Enqueue writes on our open transaction and never commits: our COMMIT decides for both.
  auto enqueued = outbox::Enqueue(db.get(), placed, options);
  if (!enqueued.ok()) readme::Die(enqueued.status().ToString());  // exiting rolls back
  readme::Exec(db.get(), "COMMIT");
  std::printf("order %s committed with event %s\n", id.c_str(), enqueued->event_id.c_str());
}
