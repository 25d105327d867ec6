// saga-service: one of the three services of the order saga (seed 004), as a
// consumer whose effects and outgoing events commit in one transaction with its
// inbox stamp (README.md in this folder):
//
//   --role order      PostgreSQL: orders. Consumes saga.payment:
//                     PaymentCaptured -> CONFIRMED, PaymentCanceled -> CANCELED.
//   --role payment    MariaDB: payments. Consumes saga.order and saga.inventory:
//                     OrderCreated -> authorize (PaymentAuthorized),
//                     OrderCancelRequested -> void an authorization (PaymentCanceled),
//                     InventoryReserved -> capture (PaymentCaptured),
//                     InventoryRejected -> void (PaymentCanceled, compensation).
//   --role inventory  PostgreSQL: stock. Consumes saga.payment:
//                     PaymentAuthorized -> reserve (InventoryReserved) or reject
//                     (InventoryRejected), PaymentCanceled -> release (compensation).
//
// Every handler is guarded the seed's way, so that a duplicate, an early or a
// late event changes nothing: the inbox stamps the event id; every effect is a
// conditional write on a business key (one payment and one reservation per
// order) and a monotonic state transition (WHERE status IN (...)); a
// compensation applies only where its forward step did, and one that finds
// nothing leaves a tombstone so the late forward step does not happen after it.
// Triggers record every status change in each service's history table, which
// the report (saga-report) checks for regressions.
//
//   saga-service --role order|payment|inventory --db URL --bootstrap HOST:PORT
//                [--topic-prefix saga] [--group saga-<role>]
//                [--products 20] [--stock 100] [--delay-authorized-every 0]
//                [--metrics-port -1]
// --products/--stock (inventory): the catalogue, created the first time: every
// product starts with --stock units.
// --delay-authorized-every K (inventory): a PaymentAuthorized of an order whose
// id is a multiple of K fails once on purpose, so it comes back from the retry
// topic about a second later — after its PaymentCanceled when the customer
// canceled at once (the seed's late PaymentAuthorized).
#include <cstring>

#include "outbox/consumer.h"
#include "outbox/http.h"
#include "outbox/inbox.h"
#include "outbox/kafka.h"
#include "outbox/log.h"
#include "outbox/mariadb.h"
#include "outbox/mariadb_inbox.h"
#include "outbox/postgres.h"
#include "outbox/postgres_inbox.h"
#include "outbox/saga.h"
#include "saga_common.h"

namespace {

using outbox::HandlerResult;
using saga::SagaEvent;

constexpr const char* kOrderSchema = R"SQL(
CREATE SCHEMA IF NOT EXISTS shop;
CREATE TABLE IF NOT EXISTS shop.orders (
  id               bigint      PRIMARY KEY,
  product          integer     NOT NULL,
  qty              integer     NOT NULL,
  amount           bigint      NOT NULL,
  status           text        NOT NULL CHECK (status IN ('PENDING', 'CONFIRMED', 'CANCELED')),
  cancel_requested boolean     NOT NULL DEFAULT false,
  created_at       timestamptz NOT NULL DEFAULT clock_timestamp(),
  updated_at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- Every status change, written by a trigger (not by the handlers): the report
-- checks that each order moved once, from PENDING, and never back.
CREATE TABLE IF NOT EXISTS shop.order_history (
  id          bigserial   PRIMARY KEY,
  order_id    bigint      NOT NULL,
  from_status text,
  to_status   text        NOT NULL,
  at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE OR REPLACE FUNCTION shop.record_order_status() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.status IS DISTINCT FROM OLD.status THEN
    INSERT INTO shop.order_history (order_id, from_status, to_status) VALUES (NEW.id, OLD.status, NEW.status);
  END IF;
  RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER order_history AFTER UPDATE ON shop.orders
  FOR EACH ROW EXECUTE FUNCTION shop.record_order_status();
)SQL";

constexpr const char* kInventorySchema = R"SQL(
CREATE SCHEMA IF NOT EXISTS stock;
CREATE TABLE IF NOT EXISTS stock.items (
  product   integer PRIMARY KEY,
  initial   integer NOT NULL,
  available integer NOT NULL CHECK (available >= 0)
);
-- One reservation decision per order (the business key): RESERVED, REJECTED
-- (stock short), RELEASED (compensated) or CANCELED (a tombstone: the
-- cancellation came before the forward step, which then must not happen).
CREATE TABLE IF NOT EXISTS stock.reservations (
  order_id   bigint      PRIMARY KEY,
  product    integer     NOT NULL,
  qty        integer     NOT NULL,
  status     text        NOT NULL CHECK (status IN ('RESERVED', 'REJECTED', 'RELEASED', 'CANCELED')),
  updated_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- Every stock movement, with no unique key on purpose: a double reservation
-- would show as two rows (the report checks).
CREATE TABLE IF NOT EXISTS stock.movements (
  id       bigserial   PRIMARY KEY,
  order_id bigint      NOT NULL,
  product  integer     NOT NULL,
  delta    integer     NOT NULL,
  kind     text        NOT NULL CHECK (kind IN ('reserve', 'release')),
  event_id text,
  at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- Every reservation decision and change, written by a trigger.
CREATE TABLE IF NOT EXISTS stock.reservation_history (
  id          bigserial   PRIMARY KEY,
  order_id    bigint      NOT NULL,
  from_status text,
  to_status   text        NOT NULL,
  at          timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE OR REPLACE FUNCTION stock.record_reservation_status() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status THEN
    INSERT INTO stock.reservation_history (order_id, from_status, to_status)
    VALUES (NEW.order_id, CASE WHEN TG_OP = 'UPDATE' THEN OLD.status END, NEW.status);
  END IF;
  RETURN NEW;
END $$;
CREATE OR REPLACE TRIGGER reservation_history AFTER INSERT OR UPDATE ON stock.reservations
  FOR EACH ROW EXECUTE FUNCTION stock.record_reservation_status();
-- Forward events that came after their compensation and were ignored.
CREATE TABLE IF NOT EXISTS stock.late_forward (
  id       bigserial   PRIMARY KEY,
  order_id bigint      NOT NULL,
  event_id text,
  at       timestamptz NOT NULL DEFAULT clock_timestamp()
);
)SQL";

const char* const kPaymentSchema[] = {
    "CREATE TABLE IF NOT EXISTS payments ("
    "  order_id   BIGINT       PRIMARY KEY,"
    "  amount     BIGINT       NOT NULL,"
    "  status     VARCHAR(16)  NOT NULL CHECK (status IN ('AUTHORIZED', 'CAPTURED', 'CANCELED')),"
    "  reason     VARCHAR(16),"
    "  updated_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB",
    // Every status change, written by triggers (not by the handlers).
    "CREATE TABLE IF NOT EXISTS payment_history ("
    "  id          BIGINT       AUTO_INCREMENT PRIMARY KEY,"
    "  order_id    BIGINT       NOT NULL,"
    "  from_status VARCHAR(16),"
    "  to_status   VARCHAR(16)  NOT NULL,"
    "  at          TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),"
    "  KEY (order_id)) ENGINE=InnoDB",
    "CREATE TRIGGER IF NOT EXISTS payment_history_insert AFTER INSERT ON payments FOR EACH ROW "
    "INSERT INTO payment_history (order_id, from_status, to_status) VALUES (NEW.order_id, NULL, NEW.status)",
    "CREATE TRIGGER IF NOT EXISTS payment_history_update AFTER UPDATE ON payments FOR EACH ROW "
    "BEGIN IF NOT (NEW.status <=> OLD.status) THEN "
    "INSERT INTO payment_history (order_id, from_status, to_status) VALUES (NEW.order_id, OLD.status, NEW.status); "
    "END IF; END",
};

std::string EventId(const outbox::InboundMessage& m) {
  const std::string* id = m.Header("outbox-event-id");
  return id ? *id : "";
}

// --- order (PostgreSQL) ---

HandlerResult OrderHandle(const SagaEvent& e, pg_conn* txn) {
  const char* to = e.type == "PaymentCaptured"   ? "CONFIRMED"
                   : e.type == "PaymentCanceled" ? "CANCELED"
                                                 : nullptr;
  if (!to) return HandlerResult::Ok();  // PaymentAuthorized: nothing for the order to do
  // Monotonic: only a PENDING order moves, once. A late or repeated payment
  // outcome finds it CONFIRMED or CANCELED and changes nothing.
  const outbox::saga::StateColumn orders{"shop.orders", "id", "status"};
  const std::string from[] = {"PENDING"};
  auto moved = outbox::saga::Transition(txn, orders, std::to_string(e.order), from, to);
  if (!moved.ok()) return HandlerResult::Transient("orders: " + moved.status().ToString());
  std::string err;
  if (*moved && !example::Query(txn, "UPDATE shop.orders SET updated_at = clock_timestamp() WHERE id = $1",
                                {std::to_string(e.order)}, &err)) {
    return HandlerResult::Transient("orders: " + err);
  }
  return HandlerResult::Ok();
}

// --- inventory (PostgreSQL) ---

HandlerResult Emit(pg_conn* txn, const SagaEvent& e) {
  outbox::EnqueueOptions o;
  auto r = outbox::Enqueue(txn, saga::ToOutbox(saga::kInventory, e), o);
  if (!r.ok()) return HandlerResult::Transient("enqueue " + e.type + ": " + r.status().ToString());
  return HandlerResult::Ok();
}

HandlerResult InventoryHandle(const SagaEvent& e, const std::string& event_id, pg_conn* txn) {
  const std::string order = std::to_string(e.order), product = std::to_string(e.product),
                    qty = std::to_string(e.qty);
  std::string err;
  if (e.type == "PaymentAuthorized") {
    // Business key first: one reservation decision per order.
    example::Res prior = example::Query(
        txn, "SELECT status FROM stock.reservations WHERE order_id = $1 FOR UPDATE", {order}, &err);
    if (!prior) return HandlerResult::Transient("reservations: " + err);
    if (PQntuples(prior.get()) == 1) {
      if (std::strcmp(PQgetvalue(prior.get(), 0, 0), "CANCELED") == 0 &&
          !example::Query(txn, "INSERT INTO stock.late_forward (order_id, event_id) VALUES ($1, $2)",
                          {order, event_id}, &err)) {
        return HandlerResult::Transient("late_forward: " + err);
      }
      return HandlerResult::Ok();  // decided already (or canceled first): nothing more
    }
    example::Res took = example::Query(
        txn, "UPDATE stock.items SET available = available - $2 WHERE product = $1 AND available >= $2",
        {product, qty}, &err);
    if (!took) return HandlerResult::Transient("stock: " + err);
    const bool reserved = std::strcmp(PQcmdTuples(took.get()), "1") == 0;
    if (!example::Query(txn,
                        "INSERT INTO stock.reservations (order_id, product, qty, status) VALUES ($1, $2, $3, $4)",
                        {order, product, qty, reserved ? "RESERVED" : "REJECTED"}, &err) ||
        (reserved && !example::Query(txn,
                                     "INSERT INTO stock.movements (order_id, product, delta, kind, event_id) "
                                     "VALUES ($1, $2, $3, 'reserve', $4)",
                                     {order, product, qty, event_id}, &err))) {
      return HandlerResult::Transient("reserve: " + err);
    }
    SagaEvent out = e;
    out.type = reserved ? "InventoryReserved" : "InventoryRejected";
    out.reason.clear();
    return Emit(txn, out);
  }
  if (e.type == "PaymentCanceled") {
    // Compensation: releases only a reservation that was made.
    example::Res rel = example::Query(
        txn, "UPDATE stock.reservations SET status = 'RELEASED', updated_at = clock_timestamp() "
             "WHERE order_id = $1 AND status = 'RESERVED' RETURNING product, qty",
        {order}, &err);
    if (!rel) return HandlerResult::Transient("release: " + err);
    if (PQntuples(rel.get()) == 1) {
      const std::string p = PQgetvalue(rel.get(), 0, 0), q = PQgetvalue(rel.get(), 0, 1);
      if (!example::Query(txn, "UPDATE stock.items SET available = available + $2 WHERE product = $1",
                          {p, q}, &err) ||
          !example::Query(txn,
                          "INSERT INTO stock.movements (order_id, product, delta, kind, event_id) "
                          "VALUES ($1, $2, -$3::int, 'release', $4)",
                          {order, p, q, event_id}, &err)) {
        return HandlerResult::Transient("release: " + err);
      }
      return HandlerResult::Ok();
    }
    // Nothing reserved (yet): a tombstone, so a late PaymentAuthorized reserves nothing.
    if (!example::Query(txn,
                        "INSERT INTO stock.reservations (order_id, product, qty, status) "
                        "VALUES ($1, $2, $3, 'CANCELED') ON CONFLICT (order_id) DO NOTHING",
                        {order, product, qty}, &err)) {
      return HandlerResult::Transient("tombstone: " + err);
    }
    return HandlerResult::Ok();
  }
  return HandlerResult::Ok();  // PaymentCaptured: nothing to do here
}

// --- payment (MariaDB) ---

std::string Q(MYSQL* c, const std::string& s) {
  std::string out(s.size() * 2 + 1, '\0');
  out.resize(mysql_real_escape_string(c, out.data(), s.data(), static_cast<unsigned long>(s.size())));
  return "'" + out + "'";
}

HandlerResult PaymentHandle(const SagaEvent& e, MYSQL* txn) {
  const std::string order = std::to_string(e.order);
  std::string err;
  // One guarded statement; true when it changed the row.
  auto apply = [&](const std::string& sql, bool* changed) {
    if (!saga::MyExec(txn, sql, &err)) return false;
    *changed = saga::MyAffected(txn) == 1;
    return true;
  };
  auto emit = [&](const char* type, const char* reason) -> HandlerResult {
    SagaEvent out = e;
    out.type = type;
    out.reason = reason;
    auto r = outbox::Enqueue(txn, saga::ToOutbox(saga::kPayment, out));
    if (!r.ok()) return HandlerResult::Transient(std::string("enqueue ") + type + ": " + r.status().ToString());
    return HandlerResult::Ok();
  };
  bool changed = false;
  if (e.type == "OrderCreated") {
    // Business key: one payment per order. A second OrderCreated — or one that
    // comes after its order's cancellation — authorizes nothing.
    if (!apply("INSERT IGNORE INTO payments (order_id, amount, status) VALUES (" + order + ", " +
                   std::to_string(e.amount) + ", 'AUTHORIZED')",
               &changed)) {
      return HandlerResult::Transient("authorize: " + err);
    }
    if (!changed) return HandlerResult::Ok();
    return emit("PaymentAuthorized", "");
  }
  if (e.type == "OrderCancelRequested" || e.type == "InventoryRejected") {
    const char* reason = e.type == "InventoryRejected" ? "stock" : "customer";
    // Compensation: voids only an authorization (a captured payment stays:
    // the customer's cancel came too late and the order is confirmed).
    if (!apply("UPDATE payments SET status = 'CANCELED', reason = " + Q(txn, reason) +
                   ", updated_at = CURRENT_TIMESTAMP(6) WHERE order_id = " + order +
                   " AND status = 'AUTHORIZED'",
               &changed)) {
      return HandlerResult::Transient("void: " + err);
    }
    if (changed) return emit("PaymentCanceled", reason);
    if (e.type == "OrderCancelRequested") {
      // The cancel came before its OrderCreated (that one is on a retry):
      // a tombstone, so the late OrderCreated authorizes nothing; the order
      // still needs its answer.
      if (!apply("INSERT IGNORE INTO payments (order_id, amount, status, reason) VALUES (" + order +
                     ", " + std::to_string(e.amount) + ", 'CANCELED', 'customer')",
                 &changed)) {
        return HandlerResult::Transient("tombstone: " + err);
      }
      if (changed) return emit("PaymentCanceled", "customer");
    }
    return HandlerResult::Ok();
  }
  if (e.type == "InventoryReserved") {
    if (!apply("UPDATE payments SET status = 'CAPTURED', updated_at = CURRENT_TIMESTAMP(6) "
               "WHERE order_id = " + order + " AND status = 'AUTHORIZED'",
               &changed)) {
      return HandlerResult::Transient("capture: " + err);
    }
    // Not AUTHORIZED any more: voided by the customer's cancel; the inventory
    // releases its reservation on that PaymentCanceled.
    if (!changed) return HandlerResult::Ok();
    return emit("PaymentCaptured", "");
  }
  return HandlerResult::Ok();
}

}  // namespace

int main(int argc, char** argv) {
  const example::StopSignals signals;
  example::Flags f(argc, argv, "saga-service",
                   {{"role", ""}, {"db", ""}, {"bootstrap", ""}, {"topic-prefix", "saga"},
                    {"group", ""}, {"delay-authorized-every", "0"}, {"metrics-port", "-1"},
                    {"products", "20"}, {"stock", "100"},
                    {"fetch-wait-ms", "20"}});
  const std::string role = f.Required("role");
  if (role != "order" && role != "payment" && role != "inventory") {
    f.Usage("--role must be order, payment or inventory, got \"" + role + "\"");
  }
  const std::string db = f.Required("db");
  const std::string prefix = f.Str("topic-prefix");
  const std::string group = f.Str("group").empty() ? "saga-" + role : f.Str("group");
  const long delay_every = f.Int("delay-authorized-every", 0);
  const std::string bootstrap = f.Required("bootstrap");
  outbox::StreamLogger logger(false, outbox::LogLevel::kInfo);
  const std::string who = "saga-service[" + role + "]";

  // Permanent: the message breaks the contract (dead-letter topic); the
  // handlers return Transient for database trouble (retry topics).
  auto decode = [](const outbox::InboundMessage& m) -> outbox::Result<SagaEvent> {
    return saga::Decode(m.payload);
  };
  outbox::DedupKeyFn dedup = [](const outbox::InboundMessage& m) -> outbox::Result<std::string> {
    const std::string id = EventId(m);
    if (id.empty()) return outbox::Status::InvalidArgument("no outbox-event-id header");
    return id;
  };

  std::unique_ptr<outbox::InboxStore> inbox;
  std::vector<std::string> topics;
  if (role == "payment") {
    std::string err;
    saga::MyConn c = saga::MyConnect(db, &err);
    if (!c) {
      std::cerr << who << ": cannot connect to --db: " << err << "\n";
      return 1;
    }
    for (const char* s : kPaymentSchema) {
      if (!saga::MyExec(c.get(), s, &err)) {
        std::cerr << who << ": schema: " << err << "\n";
        return 1;
      }
    }
    outbox::MariaDbInboxOptions io;
    io.url = db;
    io.consumer = group;
    auto in = outbox::OpenMariaDbInbox(io, [&](const outbox::InboundMessage& m, st_mysql* txn) {
      auto e = decode(m);
      if (!e.ok()) return HandlerResult::Permanent(e.status().message());
      return PaymentHandle(*e, txn);
    });
    if (!in.ok()) {
      std::cerr << who << ": inbox: " << in.status().ToString() << "\n";
      return 1;
    }
    inbox = std::move(in).value();
    topics = {prefix + "." + saga::kOrder, prefix + "." + saga::kInventory};
  } else {
    example::Conn c = example::Connect(db);
    if (PQstatus(c.get()) != CONNECTION_OK) {
      std::cerr << who << ": cannot connect to --db: " << PQerrorMessage(c.get());
      return 1;
    }
    if (!example::Script(c.get(), role == "order" ? kOrderSchema : kInventorySchema, "schema")) return 1;
    if (role == "inventory" &&
        !example::Query(c.get(),
                        "INSERT INTO stock.items SELECT p, $2::int, $2::int FROM generate_series(1, $1::int) p "
                        "ON CONFLICT DO NOTHING",
                        {std::to_string(f.Int("products", 1)), std::to_string(f.Int("stock", 0))})) {
      std::cerr << who << ": stock: " << PQerrorMessage(c.get());
      return 1;
    }
    outbox::PostgresInboxOptions io;
    io.conninfo = db;
    io.consumer = group;
    outbox::Handler handler = [&, role](const outbox::InboundMessage& m, pg_conn* txn) {
      auto e = decode(m);
      if (!e.ok()) return HandlerResult::Permanent(e.status().message());
      if (role == "order") return OrderHandle(*e, txn);
      if (e->type == "PaymentAuthorized" && delay_every > 0 && e->order % delay_every == 0 &&
          m.Header(outbox::inbox_headers::kOrigTopic) == nullptr) {
        return HandlerResult::Transient("injected: PaymentAuthorized delayed (--delay-authorized-every)");
      }
      return InventoryHandle(*e, EventId(m), txn);
    };
    auto in = outbox::OpenPostgresInbox(io, handler);
    if (!in.ok()) {
      std::cerr << who << ": inbox: " << in.status().ToString() << "\n";
      return 1;
    }
    inbox = std::move(in).value();
    topics = {prefix + "." + saga::kPayment};
  }
  if (auto st = inbox->Migrate(); !st.ok()) {
    std::cerr << who << ": inbox migrate: " << st.ToString() << "\n";
    return 1;
  }
  outbox::KafkaInboxSourceOptions so;
  so.properties = {{"bootstrap.servers", bootstrap}, {"group.id", group},
                   {"session.timeout.ms", "6000"}, {"heartbeat.interval.ms", "500"},
                   {"fetch.wait.max.ms", std::to_string(f.Int("fetch-wait-ms", 0))}};
  auto source = outbox::OpenKafkaInboxSource(so, logger);
  if (!source.ok()) {
    std::cerr << who << ": " << source.status().ToString() << "\n";
    return 1;
  }
  outbox::ConsumerOptions co;
  co.topics = topics;
  co.batch_wait = std::chrono::milliseconds(5);
  co.retry_delays = {std::chrono::seconds(1), std::chrono::seconds(2), std::chrono::seconds(5)};
  outbox::MetricsRegistry metrics;
  auto consumer = outbox::Consumer::Create(co, **source, *inbox, dedup, logger, &metrics);
  if (!consumer.ok()) {
    std::cerr << who << ": " << consumer.status().ToString() << "\n";
    return 1;
  }
  std::unique_ptr<outbox::MetricsServer> metrics_server;
  if (const long port = f.Int("metrics-port", -1); port >= 0) {
    auto ms = outbox::MetricsServer::Start("127.0.0.1", static_cast<int>(port), metrics);
    if (!ms.ok()) {
      std::cerr << who << ": --metrics-port: " << ms.status().ToString() << "\n";
      return 2;
    }
    metrics_server = std::move(ms).value();
    logger.Info(who + ": metrics listening",
                {{"address", "127.0.0.1:" + std::to_string(metrics_server->port())}});
  }
  outbox::Consumer* raw = consumer->get();
  signals.OnStop([raw] { raw->Stop(); });
  logger.Info(who + ": consuming", {{"group", group}});
  outbox::Status st = raw->Run();
  auto n = raw->counters();
  logger.Info(who + ": stopped", {{"applied", std::to_string(n.applied)},
                                  {"duplicates", std::to_string(n.duplicates)},
                                  {"retried", std::to_string(n.retried)},
                                  {"dead_lettered", std::to_string(n.dead_lettered)}});
  if (!st.ok()) {
    std::cerr << who << ": " << st.ToString() << "\n";
    return 1;
  }
  return 0;
}
