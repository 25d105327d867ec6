// The order saga of seed 004 (examples/order-saga/README.md): the events the
// three services exchange, their payload, and a thin libmariadb wrapper for the
// payment service and the report. Example code, not part of the library's API.
#ifndef OUTBOX_EXAMPLES_ORDER_SAGA_SAGA_COMMON_H_
#define OUTBOX_EXAMPLES_ORDER_SAGA_SAGA_COMMON_H_

#include <mysql.h>
#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "../common/example.h"
#include "outbox/event.h"
#include "outbox/status.h"

namespace saga {

using namespace example;  // NOLINT: the example helpers

// Aggregate types, which are also the topics' last part (saga.order, ...): the
// relays run with kafka.topic_template = <prefix>.{aggregate_type}.
inline constexpr char kOrder[] = "order";
inline constexpr char kPayment[] = "payment";
inline constexpr char kInventory[] = "inventory";

// One payload shape for every event of the saga. Every event of an order's
// saga is keyed by the order id (the aggregate id), so each service's events
// of one order are published in commit order.
struct SagaEvent {
  std::string type;  // OrderCreated, OrderCancelRequested, PaymentAuthorized, ...
  long order = 0;
  long product = 0;
  long qty = 0;
  long amount = 0;     // cents
  std::string reason;  // PaymentCanceled: customer | stock
};

inline std::string Encode(const SagaEvent& e) {
  nlohmann::json j = {{"type", e.type}, {"orderId", e.order}, {"product", e.product},
                      {"qty", e.qty}, {"amount", e.amount}};
  if (!e.reason.empty()) j["reason"] = e.reason;
  return j.dump();
}

inline outbox::Result<SagaEvent> Decode(const std::string& payload) {
  try {
    auto j = nlohmann::json::parse(payload);
    SagaEvent e;
    e.type = j.at("type").get<std::string>();
    e.order = j.at("orderId").get<long>();
    e.product = j.at("product").get<long>();
    e.qty = j.at("qty").get<long>();
    e.amount = j.at("amount").get<long>();
    e.reason = j.value("reason", "");
    if (e.order <= 0 || e.qty <= 0) return outbox::Status::InvalidArgument("orderId and qty must be > 0");
    return e;
  } catch (const std::exception& ex) {
    return outbox::Status::InvalidArgument(std::string("payload breaks the saga's contract: ") + ex.what());
  }
}

// The outbox event for `e`, published by the service `aggregate_type`. Its
// dedup key "<type>:<order>" (one event of each type per order) makes a second
// enqueue of it write nothing, and lets `outboxctl trace PaymentAuthorized:42`
// find an order's event in any of the three outboxes.
inline outbox::Event ToOutbox(const char* aggregate_type, const SagaEvent& e) {
  outbox::Event ev;
  ev.aggregate_type = aggregate_type;
  ev.aggregate_id = std::to_string(e.order);
  ev.event_type = e.type;
  ev.payload = Encode(e);
  ev.dedup_key = e.type + ":" + std::to_string(e.order);
  return ev;
}

// --- libmariadb, just enough for the payment service and the report. ---

struct MyDeleter {
  void operator()(MYSQL* c) const { mysql_close(c); }
  void operator()(MYSQL_RES* r) const { mysql_free_result(r); }
};
using MyConn = std::unique_ptr<MYSQL, MyDeleter>;
using MyRes = std::unique_ptr<MYSQL_RES, MyDeleter>;

// mysql://user[:password]@host[:port]/database
inline MyConn MyConnect(const std::string& url, std::string* error) {
  const std::string prefix = "mysql://";
  if (url.rfind(prefix, 0) != 0) {
    *error = "not a mysql:// URL";
    return nullptr;
  }
  std::string rest = url.substr(prefix.size());
  const auto at = rest.rfind('@');
  std::string user = "root", password, host = rest, db;
  if (at != std::string::npos) {
    user = rest.substr(0, at);
    host = rest.substr(at + 1);
    if (auto c = user.find(':'); c != std::string::npos) {
      password = user.substr(c + 1);
      user = user.substr(0, c);
    }
  }
  if (auto s = host.find('/'); s != std::string::npos) {
    db = host.substr(s + 1);
    host = host.substr(0, s);
  }
  unsigned port = 3306;
  if (auto c = host.find(':'); c != std::string::npos) {
    port = static_cast<unsigned>(std::stoul(host.substr(c + 1)));
    host = host.substr(0, c);
  }
  MyConn c(mysql_init(nullptr));
  if (!mysql_real_connect(c.get(), host.c_str(), user.c_str(),
                          password.empty() ? nullptr : password.c_str(), db.c_str(), port, nullptr,
                          CLIENT_FOUND_ROWS)) {
    *error = mysql_error(c.get());
    return nullptr;
  }
  return c;
}

// Runs one statement; false with the server's message in *error.
inline bool MyExec(MYSQL* c, const std::string& sql, std::string* error = nullptr) {
  if (mysql_real_query(c, sql.data(), sql.size()) != 0) {
    if (error) *error = mysql_error(c);
    return false;
  }
  MyRes drop(mysql_store_result(c));
  return true;
}

// Rows affected by the last statement (found rows: CLIENT_FOUND_ROWS).
inline long MyAffected(MYSQL* c) { return static_cast<long>(mysql_affected_rows(c)); }

// All rows of a query as text (NULL as ""); nullopt on error.
inline std::optional<std::vector<std::vector<std::string>>> MyRows(MYSQL* c, const std::string& sql,
                                                                    std::string* error = nullptr) {
  if (mysql_real_query(c, sql.data(), sql.size()) != 0) {
    if (error) *error = mysql_error(c);
    return std::nullopt;
  }
  MyRes r(mysql_store_result(c));
  std::vector<std::vector<std::string>> out;
  if (!r) return out;
  const unsigned n = mysql_num_fields(r.get());
  while (MYSQL_ROW row = mysql_fetch_row(r.get())) {
    std::vector<std::string> v;
    for (unsigned i = 0; i < n; ++i) v.emplace_back(row[i] ? row[i] : "");
    out.push_back(std::move(v));
  }
  return out;
}

}  // namespace saga

#endif  // OUTBOX_EXAMPLES_ORDER_SAGA_SAGA_COMMON_H_
