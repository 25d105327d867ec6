// The conversion of a row store into the log: see convert.h.
#include "convert.h"

#include <regex>
#include <set>

#include "migrate.h"
#include "sql.h"

namespace outbox::pg {
namespace {

// The row store's functions, by name, as its files create them: the
// conversion drops every overload of each (the log set creates its own).
std::string RowStoreFunctionNames() {
  static const std::regex kCreate(R"(FUNCTION \{S\}\.([a-z_0-9]+)\s*\()");
  std::set<std::string> names;
  for (const store::EmbeddedFile& f : OutboxMigrationFiles()) {
    const std::string text(f.text);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), kCreate);
         it != std::sregex_iterator(); ++it) {
      names.insert((*it)[1].str());
    }
  }
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "'" : ", '") + n + "'";
  return "ARRAY[" + list + "]::text[]";
}

// Under the migrations' lock, before the log set's files: waits for the
// producers and relays writing the table (30 s at most), refuses a schema a
// change stream reads, then takes the row store apart, its table set aside.
constexpr const char* kSetAside = R"SQL(
SET LOCAL lock_timeout = '30s';
SET LOCAL statement_timeout = 0;
DO $do$
BEGIN
  IF to_regclass('{S}.schema_migrations') IS NULL THEN
    RAISE EXCEPTION 'schema {S} holds no row store any more (another conversion ran first)'
      USING ERRCODE = '55000';
  END IF;
END
$do$;
LOCK TABLE {S}.outbox IN ACCESS EXCLUSIVE MODE;
DO $do$
DECLARE
  -- a stream's progress row, or a logical slot of this database by the
  -- relay's default name (outbox_<schema>) that may not have written one yet
  v_slot text := coalesce(
    (SELECT slot FROM {S}.stream_progress ORDER BY slot LIMIT 1),
    (SELECT slot_name::text FROM pg_replication_slots
     WHERE slot_name = 'outbox_{S}' AND database = current_database()));
BEGIN
  IF v_slot IS NOT NULL THEN
    RAISE EXCEPTION 'schema {S} is read by a change stream (replication slot %, {S}.stream_progress): relay.source = cdc is not built on the log yet; keep the row store, or stop the cdc relays, drop their slot (pg_drop_replication_slot) and DELETE FROM {S}.stream_progress before converting', v_slot
      USING ERRCODE = '55000';
  END IF;
END
$do$;
ALTER TABLE {S}.outbox RENAME TO outbox_converting;
DO $do$
DECLARE
  f regprocedure;
BEGIN
  FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
           WHERE p.pronamespace = '{S}'::regnamespace AND p.proname = ANY(%FUNCTIONS%) LOOP
    EXECUTE 'DROP FUNCTION ' || f;
  END LOOP;
  BEGIN
    DROP PUBLICATION IF EXISTS outbox_{S};
  EXCEPTION WHEN insufficient_privilege THEN
    RAISE WARNING 'outbox: no privilege to drop publication outbox_{S}; it is empty after the conversion: DROP PUBLICATION outbox_{S}';
  END;
END
$do$;
DROP SEQUENCE {S}.lease_token_seq;
DROP TABLE {S}.stream_progress;
DROP TABLE {S}.schema_migrations;
)SQL";

// Once the log set is installed: every slot's lo shows this transaction as
// running, so the rows it copies into the log are read once it commits (its
// snapshot's running transactions stay running in it, and so do those between
// its xmax and this one's id, which the snapshot does not list), then the rows
// move, and the old table goes.
constexpr const char* kMoveRows = R"SQL(
UPDATE {S}.slots SET lo = (
  SELECT (least(c.xmin, x.id)::text || ':' || greatest(c.xmax, x.id + 1)::text || ':' ||
          (SELECT string_agg(v::text, ',' ORDER BY v)
           FROM (SELECT pg_snapshot_xip(c.s)::text::bigint AS v
                 UNION SELECT generate_series(least(c.xmax, x.id), x.id)) u))::pg_snapshot
  FROM (SELECT s, pg_snapshot_xmin(s)::text::bigint AS xmin, pg_snapshot_xmax(s)::text::bigint AS xmax
        FROM pg_current_snapshot() s) c,
       (SELECT pg_current_xact_id()::text::bigint AS id) x);
CREATE TEMP TABLE outbox_converted ON COMMIT DROP AS
SELECT o.*,
       -- into the log: unsent, never attempted, and no later unsent event of its
       -- aggregate attempted (that one becomes a RETRY copy, which a claim hands
       -- out before the log's events: so must this one be, to go first)
       (o.status = 'PENDING' AND o.attempts = 0 AND NOT coalesce(bool_or(
          o.status IN ('PENDING', 'PROCESSING') AND NOT (o.status = 'PENDING' AND o.attempts = 0))
          OVER (PARTITION BY o.aggregate_type, o.aggregate_id ORDER BY o.seq
                ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING), false)) AS into_log,
       {S}.slot_of(o.aggregate_type, o.aggregate_id, c.slots) AS slot, c.cur AS part
FROM {S}.outbox_converting o, {S}.log_settings c;
INSERT INTO {S}.log (pos, part, slot, event_id, aggregate_type, aggregate_id, event_type, payload,
                     headers, dedup_key, created_at)
SELECT seq, part, slot, event_id, aggregate_type, aggregate_id, event_type, payload, headers,
       dedup_key, created_at
FROM outbox_converted WHERE into_log ORDER BY seq;
INSERT INTO {S}.exceptions (pos, slot, part, event_id, aggregate_type, aggregate_id, event_type,
                            payload, headers, dedup_key, created_at, status, attempts,
                            next_attempt_at, last_error, claimed_at, sent_at, failed_at,
                            skipped_at, skipped_by, skip_reason, log_gone)
SELECT seq, slot, part, event_id, aggregate_type, aggregate_id, event_type, payload, headers,
       dedup_key, created_at,
       CASE WHEN status IN ('PENDING', 'PROCESSING') THEN 'RETRY' ELSE status END, attempts,
       CASE WHEN status = 'PENDING' THEN available_at ELSE now() END, last_error, claimed_at,
       sent_at, failed_at, skipped_at, skipped_by, skip_reason, true
FROM outbox_converted WHERE NOT into_log;
INSERT INTO {S}.dedup (dedup_key, event_id, pos, part)
SELECT dedup_key, event_id, seq, part FROM outbox_converted WHERE dedup_key IS NOT NULL;
INSERT INTO {S}.converted_ids (event_id, pos, part)
SELECT event_id, seq, part FROM outbox_converted;
SELECT setval('{S}.log_pos', greatest(1, (SELECT max(seq) FROM outbox_converted),
  pg_sequence_last_value(pg_get_serial_sequence('{S}.outbox_converting', 'seq')::regclass)));
DROP TABLE {S}.outbox_converting;
)SQL";

constexpr const char* kCounts = R"SQL(
SELECT count(*) FILTER (WHERE into_log)::text,
       count(*) FILTER (WHERE NOT into_log AND status IN ('PENDING', 'PROCESSING'))::text,
       count(*) FILTER (WHERE status IN ('FAILED', 'SKIPPED'))::text,
       count(*) FILTER (WHERE status = 'SENT')::text
FROM outbox_converted
)SQL";

}  // namespace

Result<LogConversion> ConvertRowsToLog(Session& session, const std::string& schema) {
  LogConversion out;
  auto held = HeldLayout(session, schema);
  if (!held.ok()) return held.status();
  if (*held != StoreLayout::kRows) return out;
  OUTBOX_RETURN_IF_ERROR(RunMigrations(session, schema, kOutboxSet));
  RunSteps steps;
  steps.before = [&]() -> Status {
    std::string text = sql::WithSchema(kSetAside, schema);
    const std::string marker = "%FUNCTIONS%";
    text.replace(text.find(marker), marker.size(), RowStoreFunctionNames());
    return session.ExecScript("convert: set the row store aside", text);
  };
  steps.after = [&]() -> Status {
    OUTBOX_RETURN_IF_ERROR(
        session.ExecScript("convert: move the rows", sql::WithSchema(kMoveRows, schema)));
    auto counts = session.Exec("convert: count", kCounts);
    if (!counts.ok()) return counts.status();
    out.into_log = GetInt64(counts->get(), 0, 0);
    out.retries = GetInt64(counts->get(), 0, 1);
    out.terminal = GetInt64(counts->get(), 0, 2);
    out.sent = GetInt64(counts->get(), 0, 3);
    return Status::Ok();
  };
  OUTBOX_RETURN_IF_ERROR(RunMigrations(session, schema, kLogSet, &out.applied, 0, steps));
  out.converted = true;
  return out;
}

}  // namespace outbox::pg

namespace outbox {

Result<LogConversion> ConvertPostgresRowsToLog(const PostgresStoreOptions& options) {
  auto session = pg::Session::ConnectFor(
      "convert: ", {options.conninfo, options.connect_timeout, options.statement_timeout, "outboxctl"},
      options.schema);
  if (!session.ok()) return session.status();
  return pg::ConvertRowsToLog(**session, options.schema);
}

}  // namespace outbox
