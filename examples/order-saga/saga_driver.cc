// saga-driver: the order service's write side — customers placing orders at a
// steady rate and some of them canceling while the saga runs. Each order is one
// local transaction: the order row and its OrderCreated event (outbox::Enqueue
// on the same connection). A cancel is one transaction too: a monotonic flag
// (cancel_requested, only while the order is PENDING) and its
// OrderCancelRequested event; the payment service decides whether it still
// can void the payment.
//
//   saga-driver --db URL [--orders 2000] [--rate 200] [--products 20]
//               [--cancel-at-once-every 10] [--cancel-later-every 10]
// Order n (1..N): product (7n mod P) + 1, quantity n mod 3 + 1, amount in cents.
// --cancel-at-once-every K: orders n = 0 (mod K) are canceled right after they
// are placed (the demo's inventory delays their PaymentAuthorized: the seed's
// late forward event). --cancel-later-every K: orders n = K/2 (mod K) are
// canceled ~0.5 s later, while their saga is under way (often too late).
// Prints "orders placed N, cancels requested C" at the end.
#include <chrono>
#include <deque>

#include "outbox/postgres.h"
#include "saga_common.h"

int main(int argc, char** argv) {
  example::Flags f(argc, argv, "saga-driver",
                   {{"db", ""}, {"orders", "2000"}, {"rate", "200"}, {"products", "20"},
                    {"cancel-at-once-every", "10"}, {"cancel-later-every", "10"}});
  const long orders = f.Int("orders", 1), rate = f.Int("rate", 1), products = f.Int("products", 1);
  const long at_once = f.Int("cancel-at-once-every", 0), later = f.Int("cancel-later-every", 0);
  example::Conn c = example::Connect(f.Required("db"));
  if (PQstatus(c.get()) != CONNECTION_OK) {
    std::cerr << "saga-driver: cannot connect to --db: " << PQerrorMessage(c.get());
    return 1;
  }
  using Clock = std::chrono::steady_clock;
  outbox::EnqueueOptions eo;
  // One local transaction; retried on a transient error (the database may be
  // restarting); false after 50 failed tries.
  auto in_txn = [&](const std::function<bool(std::string*)>& body) {
    std::string err;
    for (int attempt = 0; attempt < 50; ++attempt) {
      if (PQstatus(c.get()) != CONNECTION_OK) PQreset(c.get());
      if (example::Query(c.get(), "BEGIN", {}, &err) && body(&err) &&
          example::Query(c.get(), "COMMIT", {}, &err)) {
        return true;
      }
      example::Query(c.get(), "ROLLBACK");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    std::cerr << "saga-driver: " << err << "\n";
    return false;
  };
  auto cancel = [&](long id, long* cancels) {
    return in_txn([&](std::string* err) {
      example::Res r = example::Query(c.get(),
                                      "UPDATE shop.orders SET cancel_requested = true, updated_at = "
                                      "clock_timestamp() WHERE id = $1 AND status = 'PENDING' AND NOT "
                                      "cancel_requested RETURNING product, qty, amount",
                                      {std::to_string(id)}, err);
      if (!r) return false;
      if (PQntuples(r.get()) == 0) return true;  // decided already: nothing to cancel
      saga::SagaEvent e{"OrderCancelRequested", id, std::atol(PQgetvalue(r.get(), 0, 0)),
                        std::atol(PQgetvalue(r.get(), 0, 1)), std::atol(PQgetvalue(r.get(), 0, 2)), ""};
      auto q = outbox::Enqueue(c.get(), saga::ToOutbox(saga::kOrder, e), eo);
      if (!q.ok()) *err = q.status().ToString();
      if (q.ok()) ++*cancels;
      return q.ok();
    });
  };
  const auto start = Clock::now();
  std::deque<std::pair<Clock::time_point, long>> later_cancels;
  long cancels = 0;
  for (long n = 1; n <= orders; ++n) {
    std::this_thread::sleep_until(start + std::chrono::microseconds(n * 1'000'000 / rate));
    saga::SagaEvent e{"OrderCreated", n, (7 * n) % products + 1, n % 3 + 1, 0, ""};
    e.amount = e.qty * 1000 + e.product;
    const bool ok = in_txn([&](std::string* err) {
      example::Res placed = example::Query(
          c.get(),
          "INSERT INTO shop.orders (id, product, qty, amount, status) VALUES ($1, $2, $3, $4, "
          "'PENDING') ON CONFLICT (id) DO NOTHING RETURNING id",
          {std::to_string(n), std::to_string(e.product), std::to_string(e.qty), std::to_string(e.amount)},
          err);
      if (!placed) return false;
      // A retry after a COMMIT whose answer was lost finds the order placed.
      if (PQntuples(placed.get()) == 0) return true;
      auto q = outbox::Enqueue(c.get(), saga::ToOutbox(saga::kOrder, e), eo);
      if (!q.ok()) *err = q.status().ToString();
      return q.ok();
    });
    if (!ok) return 1;
    if (at_once > 0 && n % at_once == 0 && !cancel(n, &cancels)) return 1;
    if (later > 0 && n % later == later / 2) {
      later_cancels.emplace_back(Clock::now() + std::chrono::milliseconds(500), n);
    }
    while (!later_cancels.empty() && later_cancels.front().first <= Clock::now()) {
      if (!cancel(later_cancels.front().second, &cancels)) return 1;
      later_cancels.pop_front();
    }
  }
  for (const auto& [when, id] : later_cancels) {
    std::this_thread::sleep_until(when);
    if (!cancel(id, &cancels)) return 1;
  }
  std::cout << "orders placed " << orders << ", cancels requested " << cancels << "\n";
  return 0;
}
