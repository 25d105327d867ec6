// The log's slot count, read and changed (issue 42): see ReadPostgresLogSlots
// and SetPostgresLogSlots in outbox/postgres.h.
#include <algorithm>
#include <thread>

#include "migrate.h"
#include "outbox/postgres.h"
#include "sql.h"

namespace outbox {
namespace {

using namespace std::chrono_literals;

constexpr const char* kSlots = R"SQL(
SELECT s.slot::text, coalesce(s.owner, ''),
       CASE WHEN s.owner IS NULL THEN '' ELSE s.expires_at::text END,
       (s.slot >= c.slots)::text, c.slots::text
FROM {S}.slots s, {S}.log_settings c ORDER BY s.slot
)SQL";

// How many events no slot has passed yet (up to 1,000; per slot by pos, unpassed():
// from its lo_pos and its stragglers; an event with an exception copy too: a skipped one
// still has to be passed, or rotation would wait for it in a retired slot),
// plus the exceptions a relay is publishing now (clock_timestamp(): this runs
// again and again in one transaction).
constexpr const char* kUnpassed = R"SQL(
SELECT ((SELECT count(*) FROM (
          SELECT 1 FROM {S}.positions s CROSS JOIN LATERAL
            {S}.unpassed(s.slot, s.lo, s.hi, s.done_pos, s.lo_pos, s.lo_bounds, 1000) u
          LIMIT 1000) n)
        + (SELECT count(*) FROM {S}.exceptions
           WHERE status IN ('RETRY', 'HELD') AND lease_until > clock_timestamp()))::text
)SQL";

// $1 the new count: the count changes (also in log_slot_count, which a
// REPEATABLE READ producer's enqueue() locks: one whose snapshot predates the
// change gets a serialization failure, not the old count); missing slot rows are added
// (lo: now, as at install; lo_pos: the pos sequence's last value — every event of the new
// count is written after this commits, so it does not make a new slot's first
// read start from the log's first event); every slot is given back under a new token (a
// relay's page end and renewal under the old one are refused: it leases again, from the
// positions), those beyond the count retired (no owner, a lease that never
// expires: never taken; the row and its position stay, which rotation reads);
// the open exceptions move to their aggregates' new slots. Rows: the
// exceptions moved.
constexpr const char* kChange = R"SQL(
WITH c AS (UPDATE {S}.log_settings SET slots = $1::int RETURNING slots),
serial AS (UPDATE {S}.log_slot_count SET slots = $1::int RETURNING 1),
added AS (
  INSERT INTO {S}.slots (slot, lo_pos)
  SELECT g, (SELECT CASE WHEN q.is_called THEN q.last_value ELSE 0 END FROM {S}.log_pos q)
  FROM generate_series(0, $1::int - 1) g ON CONFLICT (slot) DO NOTHING RETURNING 1),
fenced AS (
  UPDATE {S}.slots s SET owner = NULL, token = nextval('{S}.lease_token_seq'),
    expires_at = CASE WHEN s.slot < $1::int THEN now() ELSE 'infinity' END,
    lo = p.lo, hi = p.hi, done_pos = p.done_pos, lo_pos = p.lo_pos, lo_bounds = p.lo_bounds,
    hi_lo_pos = p.hi_lo_pos, hi_pos = p.hi_pos, hi_bounds = p.hi_bounds
  FROM {S}.positions p WHERE p.slot = s.slot
  RETURNING 1),
moved AS (
  UPDATE {S}.exceptions x SET slot = {S}.slot_of(x.aggregate_type, x.aggregate_id, $1::int)
  WHERE x.status IN ('RETRY', 'HELD', 'FAILED')
    AND x.slot <> {S}.slot_of(x.aggregate_type, x.aggregate_id, $1::int)
  RETURNING 1)
SELECT (SELECT count(*) FROM moved)::text, (SELECT count(*) FROM fenced)::text,
       (SELECT count(*) FROM added)::text
)SQL";

Result<std::unique_ptr<pg::Session>> LogSession(const PostgresStoreOptions& options) {
  auto session = pg::Session::ConnectFor(
      "slots: ", {options.conninfo, options.connect_timeout, options.statement_timeout, "outboxctl"},
      options.schema);
  if (!session.ok()) return session.status();
  auto held = pg::HeldLayout(**session, options.schema);
  if (!held.ok()) return held.status();
  if (*held != StoreLayout::kLog) {
    return Status::FailedPrecondition("schema " + options.schema +
                                      " holds no log (slots are the log's: `outboxctl migrate "
                                      "--layout log`)");
  }
  return session;
}

}  // namespace

Result<LogSlots> ReadPostgresLogSlots(const PostgresStoreOptions& options) {
  auto session = LogSession(options);
  if (!session.ok()) return session.status();
  auto res = (*session)->Exec("slots", pg::sql::WithSchema(kSlots, options.schema));
  if (!res.ok()) return res.status();
  LogSlots out;
  for (int i = 0; i < PQntuples(res->get()); ++i) {
    out.count = static_cast<int>(pg::GetInt64(res->get(), i, 4));
    out.slots.push_back({.slot = static_cast<int>(pg::GetInt64(res->get(), i, 0)),
                         .owner = pg::GetText(res->get(), i, 1),
                         .expires_at = pg::GetText(res->get(), i, 2),
                         .retired = pg::GetText(res->get(), i, 3) == "true"});
  }
  return out;
}

Result<int> SetPostgresLogSlots(const PostgresStoreOptions& options, int count,
                                std::chrono::milliseconds drain_timeout) {
  if (count < 1 || count > 1024) {
    return Status::InvalidArgument("slots: the count must be 1-1024; got " + std::to_string(count));
  }
  auto session = LogSession(options);
  if (!session.ok()) return session.status();
  pg::Session& s = **session;
  const auto in_schema = [&](const char* text) { return pg::sql::WithSchema(text, options.schema); };
  OUTBOX_RETURN_IF_ERROR(s.ExecScript(
      "slots: lock", "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = " +
                         std::to_string(std::max<std::int64_t>(1, drain_timeout.count())) +
                         "; " + in_schema("LOCK TABLE {S}.log_settings IN ACCESS EXCLUSIVE MODE")));
  auto run = [&]() -> Result<int> {
    auto before = s.Exec("slots: count", in_schema("SELECT slots::text FROM {S}.log_settings"));
    if (!before.ok()) return before.status();
    const int was = static_cast<int>(pg::GetInt64(before->get(), 0, 0));
    if (was == count) return was;
    const auto until = std::chrono::steady_clock::now() + drain_timeout;
    for (;;) {
      auto left = s.Exec("slots: unpassed", in_schema(kUnpassed));
      if (!left.ok()) return left.status();
      const std::int64_t n = pg::GetInt64(left->get(), 0, 0);
      if (n == 0) break;
      if (std::chrono::steady_clock::now() >= until) {
        return Status::FailedPrecondition(
            "slots: " + std::to_string(n) + (n >= 1000 ? " or more" : "") +
            (n == 1 ? " event" : " events") + " of schema " + options.schema +
            (n == 1 ? " is" : " are") + " not published yet after " +
            std::to_string(drain_timeout.count()) +
            " ms (is a relay running, the broker up?); the count changes only once every slot "
            "has passed every event: nothing changed");
      }
      std::this_thread::sleep_for(50ms);
    }
    auto changed = s.Exec("slots: change", in_schema(kChange), {pg::Param::Text(std::to_string(count))});
    if (!changed.ok()) return changed.status();
    return was;
  };
  auto was = run();
  if (!was.ok()) {
    (void)s.ExecScript("slots: rollback", "ROLLBACK");
    return was.status();
  }
  OUTBOX_RETURN_IF_ERROR(s.ExecScript("slots: commit", "COMMIT"));
  return was;
}

}  // namespace outbox
