// saga-report: the order saga's report, computed only from what the system
// stored — the three services' databases (orders on PostgreSQL, payments on
// MariaDB, stock on PostgreSQL: their business tables, histories, outbox rows
// and inbox stamps) and the three topics read from the beginning. It keeps no
// counters of its own and trusts no process's log.
//
//   saga-report --order-db URL --payment-db mysql://... --inventory-db URL
//               --bootstrap HOST:PORT --orders N [--topic-prefix saga]
//               [--expect-faults 0|1]
// Exit status: 0 when every check holds (the verdict), 1 otherwise, 2 bad usage.
// --expect-faults 1 also requires that the injected failures happened and were
// absorbed (a duplicated PaymentAuthorized delivered, a late PaymentAuthorized
// ignored after its cancellation): a run without them would prove nothing.
#include <cstdio>
#include <map>
#include <tuple>

#include "../common/read_topic.h"
#include "saga_common.h"

namespace {

using Rows = std::vector<std::vector<std::string>>;

Rows Pg(PGconn* c, const std::string& sql) {
  std::string err;
  example::Res r = example::Query(c, sql, {}, &err);
  if (!r) {
    std::cerr << "saga-report: " << err;
    std::exit(1);
  }
  Rows out;
  for (int i = 0; i < PQntuples(r.get()); ++i) {
    std::vector<std::string> row;
    for (int j = 0; j < PQnfields(r.get()); ++j) row.emplace_back(PQgetvalue(r.get(), i, j));
    out.push_back(std::move(row));
  }
  return out;
}

Rows My(MYSQL* c, const std::string& sql) {
  std::string err;
  auto r = saga::MyRows(c, sql, &err);
  if (!r) {
    std::cerr << "saga-report: " << err << "\n";
    std::exit(1);
  }
  return *r;
}

long L(const std::string& s) { return std::atol(s.c_str()); }

void Line(const char* label, const std::string& value, const std::string& note = "") {
  std::printf("  %-52s %10s%s%s\n", label, value.c_str(), note.empty() ? "" : "   ", note.c_str());
}
void Line(const char* label, long value, const std::string& note = "") {
  Line(label, std::to_string(value), note);
}

// A history (ordered by id) is a chain of allowed transitions: the first comes
// from `initial`, each next one from where the previous one went.
long BrokenChains(const Rows& history, const std::string& initial,
                  const std::set<std::pair<std::string, std::string>>& allowed) {
  std::map<std::string, std::string> at;  // entity -> current state
  std::set<std::string> broken;
  for (const auto& h : history) {  // entity, from, to
    auto it = at.find(h[0]);
    const std::string cur = it == at.end() ? initial : it->second;
    if (h[1] != cur || !allowed.count({h[1], h[2]})) broken.insert(h[0]);
    at[h[0]] = h[2];
  }
  return static_cast<long>(broken.size());
}

}  // namespace

int main(int argc, char** argv) {
  example::Flags f(argc, argv, "saga-report",
                   {{"order-db", ""}, {"payment-db", ""}, {"inventory-db", ""}, {"bootstrap", ""},
                    {"orders", ""}, {"topic-prefix", "saga"}, {"expect-faults", "0"}});
  const long n_orders = f.Int("orders", 1);
  const bool expect_faults = f.Int("expect-faults", 0) != 0;
  example::Conn od = example::Connect(f.Required("order-db"));
  example::Conn id = example::Connect(f.Required("inventory-db"));
  if (PQstatus(od.get()) != CONNECTION_OK || PQstatus(id.get()) != CONNECTION_OK) {
    std::cerr << "saga-report: cannot connect: " << PQerrorMessage(od.get()) << PQerrorMessage(id.get());
    return 1;
  }
  std::string err;
  saga::MyConn pd = saga::MyConnect(f.Required("payment-db"), &err);
  if (!pd) {
    std::cerr << "saga-report: cannot connect to --payment-db: " << err << "\n";
    return 1;
  }

  // --- What each service stored. ---
  struct Order {
    std::string status;
    bool cancel_requested = false;
    long product = 0, qty = 0;
  };
  std::map<std::string, Order> orders;
  for (const auto& r : Pg(od.get(), "SELECT id, status, cancel_requested, product, qty FROM shop.orders")) {
    orders[r[0]] = {r[1], r[2] == "t", L(r[3]), L(r[4])};
  }
  std::map<std::string, std::string> payments;
  long voided_customer = 0, voided_stock = 0;
  for (const auto& r : My(pd.get(), "SELECT order_id, status, coalesce(reason, '') FROM payments")) {
    payments[r[0]] = r[1];
    voided_customer += r[1] == "CANCELED" && r[2] == "customer";
    voided_stock += r[1] == "CANCELED" && r[2] == "stock";
  }
  std::map<std::string, std::string> reservations;
  for (const auto& r : Pg(id.get(), "SELECT order_id, status FROM stock.reservations")) reservations[r[0]] = r[1];

  std::map<std::string, long> by_state;
  long in_flight = 0, cancel_requested = 0, cancel_effective = 0, cancel_too_late = 0;
  long confirmed = 0, captured = 0, canceled_with_capture = 0, mismatched = 0;
  std::map<long, long> confirmed_qty;  // product -> quantity of confirmed orders
  for (const auto& [oid, o] : orders) {
    ++by_state[o.status];
    if (o.status == "PENDING") ++in_flight;
    if (o.cancel_requested) {
      ++cancel_requested;
      if (o.status == "CANCELED") ++cancel_effective;
      if (o.status == "CONFIRMED") ++cancel_too_late;
    }
    const std::string pay = payments.count(oid) ? payments[oid] : "-";
    const std::string res = reservations.count(oid) ? reservations[oid] : "-";
    if (o.status == "CONFIRMED") {
      ++confirmed;
      confirmed_qty[o.product] += o.qty;
      if (pay != "CAPTURED" || res != "RESERVED") ++mismatched;
    } else if (o.status == "CANCELED") {
      if (pay == "CAPTURED") ++canceled_with_capture;
      if (pay != "CANCELED" || res == "RESERVED") ++mismatched;
    }
  }
  for (const auto& [oid, s] : payments) captured += s == "CAPTURED";

  // Stock: per product, initial - available = reserved - released = confirmed quantities.
  long stock_leaks = 0;
  std::map<long, std::tuple<long, long, long, long>> stock;  // initial, available, reserved, released
  for (const auto& r : Pg(id.get(), "SELECT i.product, i.initial, i.available, "
                                    "coalesce(sum(m.delta) FILTER (WHERE m.kind = 'reserve'), 0), "
                                    "coalesce(-sum(m.delta) FILTER (WHERE m.kind = 'release'), 0) "
                                    "FROM stock.items i LEFT JOIN stock.movements m USING (product) "
                                    "GROUP BY 1, 2, 3 ORDER BY 1")) {
    const long p = L(r[0]), initial = L(r[1]), available = L(r[2]), reserved = L(r[3]), released = L(r[4]);
    stock[p] = {initial, available, reserved, released};
    if (initial - available != reserved - released || reserved - released != confirmed_qty[p]) ++stock_leaks;
  }
  const long double_reservations = L(Pg(id.get(), "SELECT count(*) FROM (SELECT order_id FROM stock.movements "
                                                  "GROUP BY order_id, kind HAVING count(*) > 1) x")[0][0]);
  const long release_before_reserve = L(Pg(id.get(),
      "SELECT count(*) FROM stock.movements r WHERE r.kind = 'release' AND NOT EXISTS "
      "(SELECT 1 FROM stock.movements f WHERE f.order_id = r.order_id AND f.kind = 'reserve' AND f.id < r.id)")[0][0]);
  const long late_forward = L(Pg(id.get(), "SELECT count(*) FROM stock.late_forward")[0][0]);

  // Histories: only allowed transitions, each from where the previous one went.
  const long order_regressions = BrokenChains(
      Pg(od.get(), "SELECT order_id, from_status, to_status FROM shop.order_history ORDER BY id"),
      "PENDING", {{"PENDING", "CONFIRMED"}, {"PENDING", "CANCELED"}});
  const long payment_regressions = BrokenChains(
      My(pd.get(), "SELECT order_id, coalesce(from_status, ''), to_status FROM payment_history ORDER BY id"),
      "", {{"", "AUTHORIZED"}, {"", "CANCELED"}, {"AUTHORIZED", "CAPTURED"}, {"AUTHORIZED", "CANCELED"}});
  const long reservation_regressions = BrokenChains(
      Pg(id.get(), "SELECT order_id, coalesce(from_status, ''), to_status FROM stock.reservation_history "
                   "ORDER BY id"),
      "", {{"", "RESERVED"}, {"", "REJECTED"}, {"", "CANCELED"}, {"RESERVED", "RELEASED"}});

  // --- The topics: copies per event id; the payment outbox names their types. ---
  const std::string bootstrap = f.Required("bootstrap"), prefix = f.Str("topic-prefix");
  std::map<std::string, example::Topic> topics;
  std::string topic_errors;
  for (const char* t : {saga::kOrder, saga::kPayment, saga::kInventory}) {
    topics[t] = example::ReadTopic(bootstrap, prefix + "." + t, "saga-report");
    if (!topics[t].error.empty()) topic_errors += std::string(" ") + t + ": " + topics[t].error;
  }
  std::map<std::string, std::string> payment_event_type;
  for (const auto& r : My(pd.get(), "SELECT event_id, event_type FROM outbox")) payment_event_type[r[0]] = r[1];
  long authorized_duplicated = 0;
  for (const auto& [eid, copies] : topics[saga::kPayment].copies) {
    if (copies > 1 && payment_event_type[eid] == "PaymentAuthorized") ++authorized_duplicated;
  }
  const long absorbed_order = L(Pg(od.get(), "SELECT coalesce(sum(duplicates), 0) FROM inbox.inbox_stamps")[0][0]);
  const long absorbed_inventory = L(Pg(id.get(), "SELECT coalesce(sum(duplicates), 0) FROM inbox.inbox_stamps")[0][0]);
  const long absorbed_payment = L(My(pd.get(), "SELECT coalesce(sum(duplicates), 0) FROM inbox_stamps")[0][0]);
  long unsent = 0;
  for (PGconn* c : {od.get(), id.get()}) {
    unsent += L(Pg(c, "SELECT count(*) FROM outbox.outbox WHERE status IN ('PENDING', 'PROCESSING', 'FAILED')")[0][0]);
  }
  unsent += L(My(pd.get(), "SELECT count(*) FROM outbox WHERE status IN ('PENDING', 'PROCESSING', 'FAILED')")[0][0]);

  // --- The report. ---
  std::printf("\n== order saga report (from the three databases and the topics)\n");
  Line("orders placed", static_cast<long>(orders.size()), "of " + std::to_string(n_orders));
  for (const auto& [s, k] : by_state) Line(("  " + s).c_str(), k);
  Line("  left in flight (PENDING)", in_flight);
  Line("  cancels requested by customers", cancel_requested);
  Line("    canceled", cancel_effective);
  Line("    too late (payment already captured: confirmed)", cancel_too_late);
  Line("payments captured", captured, "orders confirmed: " + std::to_string(confirmed));
  Line("payments voided: customer's cancel / stock short", std::to_string(voided_customer) + " / " +
                                                            std::to_string(voided_stock));
  Line("canceled orders with a captured payment", canceled_with_capture);
  Line("orders whose payment/reservation disagree", mismatched);
  long reserved_total = 0, released_total = 0;
  for (const auto& [p, t] : stock) {
    reserved_total += std::get<2>(t);
    released_total += std::get<3>(t);
  }
  Line("stock reserved - released (units)", std::to_string(reserved_total) + " - " + std::to_string(released_total));
  long confirmed_units = 0;
  for (const auto& [p, q] : confirmed_qty) confirmed_units += q;
  Line("  = units of confirmed orders", confirmed_units);
  Line("  products where stock does not add up", stock_leaks);
  Line("  orders reserved or released twice", double_reservations);
  Line("compensations without their forward step", release_before_reserve);
  Line("late PaymentAuthorized ignored after the cancel", late_forward);
  Line("state regressions (order / payment / reservation)",
       std::to_string(order_regressions) + " / " + std::to_string(payment_regressions) + " / " +
           std::to_string(reservation_regressions));
  for (const auto& [t, tp] : topics) {
    Line(("messages on " + prefix + "." + t).c_str(), tp.messages,
         "distinct events " + std::to_string(tp.copies.size()));
  }
  Line("PaymentAuthorized events delivered more than once", authorized_duplicated);
  Line("copies absorbed by the inboxes (order/payment/inventory)",
       std::to_string(absorbed_order) + "/" + std::to_string(absorbed_payment) + "/" +
           std::to_string(absorbed_inventory));
  Line("outbox rows not sent (3 databases)", unsent);

  std::vector<std::string> problems;
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) problems.push_back(what);
  };
  check(static_cast<long>(orders.size()) == n_orders, "orders placed != --orders");
  check(in_flight == 0, "orders left in flight");
  check(captured == confirmed, "payments captured != orders confirmed");
  check(canceled_with_capture == 0, "a canceled order has a captured payment");
  check(mismatched == 0, "payment or reservation disagrees with the order");
  check(stock_leaks == 0, "stock does not add up");
  check(double_reservations == 0, "double reservation or release");
  check(release_before_reserve == 0, "a compensation without its forward step");
  check(order_regressions + payment_regressions + reservation_regressions == 0, "a state regression");
  check(unsent == 0, "outbox rows not sent");
  check(topic_errors.empty(), "topics not read:" + topic_errors);
  if (expect_faults) {
    check(authorized_duplicated > 0, "no duplicated PaymentAuthorized was delivered (fault not injected?)");
    check(late_forward > 0, "no late PaymentAuthorized came after its cancel (fault not injected?)");
    check(absorbed_order + absorbed_payment + absorbed_inventory > 0, "no duplicate was absorbed");
  }
  std::printf("  verdict: %s\n", problems.empty() ? "OK" : "FAILED");
  for (const auto& p : problems) std::printf("    - %s\n", p.c_str());
  return problems.empty() ? 0 : 1;
}
