#include "sql.h"

#include <set>

#include "outbox/event.h"

namespace outbox::pg::sql {

bool IsIdentifier(std::string_view name, std::size_t max_bytes) {
  bool ok = !name.empty() && name.size() <= max_bytes &&
            ((name[0] >= 'a' && name[0] <= 'z') || name[0] == '_');
  for (char c : name) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
  }
  return ok;
}

bool IsReservedWord(std::string_view name) {
  // PostgreSQL's reserved key words (PostgreSQL 15, appendix C): unquoted, they
  // cannot name a schema, table or column ("order.outbox" is a syntax error).
  static const std::set<std::string, std::less<>> kReserved = {
      "all", "analyse", "analyze", "and", "any", "array", "as", "asc", "asymmetric",
      "authorization", "binary", "both", "case", "cast", "check", "collate", "collation",
      "column", "concurrently", "constraint", "create", "cross", "current_catalog",
      "current_date", "current_role", "current_schema", "current_time", "current_timestamp",
      "current_user", "default", "deferrable", "desc", "distinct", "do", "else", "end",
      "except", "false", "fetch", "for", "foreign", "freeze", "from", "full", "grant", "group",
      "having", "ilike", "in", "initially", "inner", "intersect", "into", "is", "isnull", "join",
      "lateral", "leading", "left", "like", "limit", "localtime", "localtimestamp", "natural",
      "not", "notnull", "null", "offset", "on", "only", "or", "order", "outer", "overlaps",
      "placing", "primary", "references", "returning", "right", "select", "session_user",
      "similar", "some", "symmetric", "table", "tablesample", "then", "to", "trailing", "true",
      "union", "unique", "user", "using", "variadic", "verbose", "when", "where", "window",
      "with"};
  return kReserved.count(name) > 0;
}

std::string StorableText(const std::string& s, std::size_t max_bytes) {
  if (IsValidText(s)) return s.substr(0, max_bytes);
  std::string out;
  for (char c : s) out += (static_cast<unsigned char>(c) < 0x80 && c != 0) ? c : '?';
  return out.substr(0, max_bytes);
}

std::string WithSchema(std::string text, const std::string& schema) {
  const std::string marker = "{S}";
  for (std::size_t pos = text.find(marker); pos != std::string::npos;
       pos = text.find(marker, pos + schema.size())) {
    text.replace(pos, marker.size(), schema);
  }
  return text;
}

namespace {

// The unordered claim (relay.ordering = none): the oldest due rows, locked with
// SKIP LOCKED, then the claims' shared update. The ordered claim is the
// function claim_ordered() that the migrations install (migrations/outbox/).
constexpr const char* kClaimUnordered = R"SQL(
WITH candidates AS (
  SELECT o.seq, octet_length(o.payload)::bigint AS len, o.attempts, o.xmin AS row_xid
  FROM {S}.outbox o
  WHERE o.status IN ('PENDING', 'PROCESSING') AND o.available_at <= now()
  ORDER BY o.seq
  LIMIT $1
  FOR UPDATE OF o SKIP LOCKED
),
bound AS (SELECT b.limit_seq, b.horizon,
                 pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS ref
          FROM {S}.stream_sweep_bound($7, $8) b),
picked AS (  -- the byte bound: at least one row, then stop before going over $6
  SELECT c.seq FROM (
    SELECT seq, attempts, row_xid, sum(len) OVER (ORDER BY seq) AS cum,
           row_number() OVER (ORDER BY seq) AS n
    FROM candidates) c, bound b
  WHERE (c.n = 1 OR c.cum <= $6)
    -- The CDC sweeper's bound, applied after the walk (see claim_ordered).
    AND (b.limit_seq IS NULL
         OR (c.seq < b.limit_seq
             AND (c.attempts > 0 OR {S}.xid_passed(c.row_xid, b.ref, b.horizon))))
),
)SQL";

// The claim's result, fetched in binary format so that payloads arrive as raw
// bytes (not hex text, twice their size): every other column as text, whose
// binary form is its text.
constexpr const char* kClaimColumns =
    "c.seq::text, c.event_id, c.aggregate_type, c.aggregate_id, c.event_type, c.payload, "
    "c.headers, c.dedup_key, c.attempts::text, c.lease_token::text, c.status, "
    "c.created_us::text, c.age_us::text";

// lease_owner stays on SENT and FAILED rows: who sent it, or who gave up on it.
// Shared tail of both claims: one token per claim, attempts counted at claim
// time (a crash cannot undo that), lease expiry from the database clock.
constexpr const char* kClaimUpdate = R"SQL(
token AS (SELECT nextval('{S}.lease_token_seq') AS t)
UPDATE {S}.outbox o SET
  status       = CASE WHEN o.attempts >= $4 THEN 'FAILED' ELSE 'PROCESSING' END,
  attempts     = CASE WHEN o.attempts >= $4 THEN o.attempts ELSE o.attempts + 1 END,
  lease_owner  = $2,
  lease_token  = token.t,
  available_at = now() + $3 * interval '1 millisecond',
  claimed_at   = now(),
  failed_at    = CASE WHEN o.attempts >= $4 THEN now() END,
  last_error   = CASE WHEN o.attempts >= $4
                      THEN 'claimed ' || o.attempts || ' times without finishing (max_attempts '
                           || $4 || '); last error: ' || coalesce(o.last_error, 'none')
                      ELSE o.last_error END
FROM picked, token
WHERE o.seq = picked.seq
  AND o.status IN ('PENDING', 'PROCESSING') AND o.available_at <= now()
RETURNING o.seq, o.event_id::text, o.aggregate_type, o.aggregate_id, o.event_type, o.payload,
          o.headers::text, o.dedup_key, o.attempts, o.lease_token, o.status,
          (extract(epoch FROM o.created_at) * 1000000)::bigint AS created_us,
          (extract(epoch FROM now() - o.created_at) * 1000000)::bigint AS age_us
)SQL";

}  // namespace


// FAILED rows back to PENDING, due now, attempts reset (the error is kept,
// prefixed). The rows held behind them get their attempts reset too, so one
// replay releases the whole aggregate.
// $1 event id ('' = any), $2 aggregate id, $3 event type, $4 dry run
std::string ReplayFailed(const std::string& s) {
  return WithSchema(R"SQL(
WITH target AS (
  SELECT seq, aggregate_type, aggregate_id FROM {S}.outbox
  WHERE status = 'FAILED' AND ($1 = '' OR event_id = CASE WHEN $1 ~ '^\{?[0-9a-fA-F]{8}-?([0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}\}?$' THEN $1::uuid END)
    AND ($2 = '' OR aggregate_id = $2) AND ($3 = '' OR event_type = $3)
  ORDER BY seq
  FOR UPDATE
), done AS (
  UPDATE {S}.outbox o SET status = 'PENDING', attempts = 0, available_at = now(),
                          lease_owner = NULL, failed_at = NULL,
                          last_error = 'replayed by outboxctl; before: ' || coalesce(o.last_error, '')
  FROM target t WHERE o.seq = t.seq AND NOT $4::boolean
  RETURNING o.seq
), followers AS (
  UPDATE {S}.outbox o SET attempts = 0
  FROM (SELECT aggregate_type, aggregate_id, min(seq) AS first_seq FROM target
        GROUP BY aggregate_type, aggregate_id) t
  WHERE o.aggregate_type = t.aggregate_type AND o.aggregate_id = t.aggregate_id
    AND o.seq > t.first_seq AND o.status = 'PENDING' AND NOT $4::boolean
  RETURNING o.seq
)
SELECT (SELECT count(*) FROM target) AS matched, (SELECT count(*) FROM done) AS replayed,
       (SELECT count(*) FROM followers) AS released,
       coalesce((SELECT extract(epoch FROM now() - min(o.created_at))::bigint FROM {S}.outbox o
                 JOIN target t ON o.seq = t.seq), 0) AS oldest_age_s
)SQL", s);
}

// One FAILED or PENDING event set aside for good: SKIPPED, with who, when and
// why; the rows held behind it get their attempts reset (as on replay).
// $1 event id, $2 who, $3 reason, $4 dry run
std::string Skip(const std::string& s) {
  return WithSchema(R"SQL(
WITH target AS (
  SELECT seq, status, aggregate_type, aggregate_id FROM {S}.outbox
  WHERE event_id = CASE WHEN $1 ~ '^\{?[0-9a-fA-F]{8}-?([0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}\}?$' THEN $1::uuid END
  FOR UPDATE
), done AS (
  UPDATE {S}.outbox o SET status = 'SKIPPED', skipped_at = now(), skipped_by = $2,
                          skip_reason = $3, lease_owner = NULL
  FROM target t
  WHERE o.seq = t.seq AND t.status IN ('FAILED', 'PENDING') AND NOT $4::boolean
  RETURNING o.seq
), followers AS (
  UPDATE {S}.outbox o SET attempts = 0
  FROM target t
  WHERE o.aggregate_type = t.aggregate_type AND o.aggregate_id = t.aggregate_id
    AND o.seq > t.seq AND o.status = 'PENDING' AND t.status IN ('FAILED', 'PENDING')
    AND NOT $4::boolean
  RETURNING o.seq
)
SELECT coalesce((SELECT status FROM target), '') AS status,
       (SELECT count(*) FROM done) AS skipped, (SELECT count(*) FROM followers) AS released
)SQL", s);
}

// The columns of an EventRecord (postgres_store.cc reads them in this order).
constexpr const char* kRecordColumns = R"SQL(
SELECT seq, event_id, aggregate_type, aggregate_id, event_type, status, attempts,
       extract(epoch FROM now() - created_at)::float8 AS age_s,
       coalesce(dedup_key, '') AS dedup_key, coalesce(last_error, '') AS last_error,
       coalesce(lease_owner, '') AS lease_owner, created_at::text AS created_at,
       coalesce(claimed_at::text, '') AS claimed_at, coalesce(sent_at::text, '') AS sent_at,
       coalesce(failed_at::text, '') AS failed_at, coalesce(skipped_at::text, '') AS skipped_at,
       coalesce(skipped_by, '') AS skipped_by, coalesce(skip_reason, '') AS skip_reason
)SQL";

std::string List(const std::string& s) {
  return WithSchema(std::string(kRecordColumns) + R"SQL(FROM {S}.outbox
WHERE ($1 = '' OR status = upper($1)) AND ($2 = '' OR aggregate_id = $2)
  AND ($3 = '' OR event_type = $3)
  AND ($4::bigint = 0 OR created_at < now() - $4::bigint * interval '1 second')
ORDER BY seq
LIMIT $5::int
)SQL", s);
}

// The event id is compared as a uuid (the unique index; a key that is not a
// UUID matches no id): compared as text it read the whole table (179 ms at
// 1,000,000 rows, bench/run_dashboard_bench.sh).
std::string Find(const std::string& s) {
  return WithSchema(std::string(kRecordColumns) +
                        ", headers::text, octet_length(payload), substring(payload from 1 for 4096) "
                        R"SQL(FROM {S}.outbox WHERE event_id = )SQL" + "CASE WHEN $1 ~ '^\\{?[0-9a-fA-F]{8}-?([0-9a-fA-F]{4}-?){3}[0-9a-fA-F]{12}\\}?$' THEN $1::uuid END" + R"SQL( OR dedup_key = $1
ORDER BY seq
)SQL", s);
}

std::string OldestUnsent(const std::string& s) {
  // The smallest seq of each partial index, then that row's enqueue time.
  return WithSchema(R"SQL(
SELECT (extract(epoch FROM created_at) * 1000000)::bigint FROM {S}.outbox
WHERE seq = (SELECT min(seq) FROM (
  (SELECT min(seq) AS seq FROM {S}.outbox WHERE status IN ('PENDING', 'PROCESSING'))
  UNION ALL
  (SELECT min(seq) FROM {S}.outbox WHERE status = 'FAILED')) m)
)SQL", s);
}

std::string InboxInsertStamps(const std::string& schema) {
  return WithSchema(
      "INSERT INTO {S}.inbox_stamps (consumer, dedup_key, topic, partition, \"offset\") "
      "SELECT $1, k, t, p, o FROM unnest($2::text[], $3::text[], $4::int[], $5::bigint[]) "
      "AS x(k, t, p, o) ON CONFLICT DO NOTHING RETURNING dedup_key",
      schema);
}

std::string InboxInsertStamp(const std::string& schema) {
  return WithSchema(
      "INSERT INTO {S}.inbox_stamps (consumer, dedup_key, topic, partition, \"offset\") "
      "VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
      schema);
}

std::string InboxDeleteStamps(const std::string& schema) {
  // key_hash = inbox_key() finds the stamp through the primary key (keys of
  // any length, migration 0005); the whole key is then compared.
  return WithSchema(
      "DELETE FROM {S}.inbox_stamps s USING unnest($2::text[]) AS d(k) WHERE s.consumer = $1 "
      "AND s.key_hash = {S}.inbox_key(d.k) AND s.dedup_key = d.k",
      schema);
}

std::string InboxCountDuplicates(const std::string& schema) {
  return WithSchema(
      "UPDATE {S}.inbox_stamps s SET duplicates = s.duplicates + d.n, last_duplicate_at = now() "
      "FROM (SELECT k, count(*)::int AS n FROM unnest($2::text[]) AS k GROUP BY k) d "
      "WHERE s.consumer = $1 AND s.key_hash = {S}.inbox_key(d.k) AND s.dedup_key = d.k",
      schema);
}

std::string InboxParkedKeys(const std::string& schema) {
  return WithSchema(
      "SELECT DISTINCT p.order_key FROM {S}.inbox_parked p, unnest($2::text[]) AS o(k) "
      "WHERE p.consumer = $1 AND {S}.inbox_key(p.order_key) = {S}.inbox_key(o.k) "
      "AND p.order_key = o.k",
      schema);
}

std::string InboxPark(const std::string& schema) {
  return WithSchema(
      "INSERT INTO {S}.inbox_parked (consumer, order_key, dedup_key, topic, partition, \"offset\", "
      "msg_key, payload, headers, ts_ms, attempts, last_error, due_at) VALUES ($1, $2, $3, $4, "
      "$5, $6, $7, $8, $9, $10, $11, $12, now() + $13 * interval '1 millisecond') "
      "ON CONFLICT DO NOTHING",
      schema);
}

std::string InboxDue(const std::string& schema) {
  return WithSchema(
      "SELECT id::text, order_key, dedup_key, topic, partition::text, \"offset\"::text, msg_key, "
      "payload, (payload IS NULL)::text, headers, ts_ms::text, attempts::text, "
      "coalesce(last_error, '') FROM {S}.inbox_parked WHERE consumer = $1 AND "
      "{S}.inbox_key(order_key) IN (SELECT k FROM (SELECT DISTINCT ON ({S}.inbox_key(order_key)) "
      "{S}.inbox_key(order_key) AS k, due_at FROM {S}.inbox_parked WHERE consumer = $1 "
      "ORDER BY {S}.inbox_key(order_key), id) h WHERE h.due_at <= now()) "
      "ORDER BY {S}.inbox_key(order_key), id LIMIT $2",
      schema);
}

std::string InboxUnpark(const std::string& schema) {
  return WithSchema("DELETE FROM {S}.inbox_parked WHERE consumer = $1 AND id = ANY($2::bigint[])",
                    schema);
}

std::string InboxReschedule(const std::string& schema) {
  return WithSchema(
      "UPDATE {S}.inbox_parked SET attempts = $3, last_error = $4, "
      "due_at = now() + $5 * interval '1 millisecond' WHERE consumer = $1 AND id = $2",
      schema);
}

std::string InboxFindStamps(const std::string& schema) {
  return WithSchema(R"SQL(
SELECT consumer, dedup_key, applied_at::text, coalesce(topic, ''),
       coalesce(partition::text, ''), coalesce("offset"::text, ''), duplicates
FROM {S}.inbox_stamps WHERE dedup_key = ANY($1::text[]) ORDER BY consumer, applied_at
)SQL", schema);
}

std::string InboxSummary(const std::string& schema) {
  return WithSchema(R"SQL(
WITH s AS (
  SELECT consumer, count(*) AS stamps,
         count(*) FILTER (WHERE applied_at < now() - $1 * interval '1 second') AS older,
         coalesce(extract(epoch FROM now() - min(applied_at))::bigint, 0) AS oldest,
         coalesce(sum(duplicates), 0) AS duplicates
  FROM {S}.inbox_stamps GROUP BY consumer
), p AS (
  SELECT consumer, count(*) AS parked,
         coalesce(extract(epoch FROM now() - min(parked_at))::bigint, 0) AS oldest
  FROM {S}.inbox_parked GROUP BY consumer
)
SELECT coalesce(s.consumer, p.consumer), coalesce(s.stamps, 0), coalesce(s.older, 0),
       coalesce(s.oldest, 0), coalesce(p.parked, 0), coalesce(p.oldest, 0),
       coalesce(s.duplicates, 0)
FROM s FULL JOIN p ON p.consumer = s.consumer ORDER BY 1
)SQL", schema);
}

std::string InboxPurgeStamps(const std::string& schema) {
  return WithSchema(
      "DELETE FROM {S}.inbox_stamps WHERE ctid = ANY(ARRAY(SELECT ctid "
      "FROM {S}.inbox_stamps WHERE consumer = $1 AND applied_at < now() - $2 * interval '1 second' "
      "ORDER BY applied_at LIMIT $3))",
      schema);
}

std::string MigrateLock(const std::string& schema, const std::string& lock_name) {
  return WithSchema("SELECT pg_advisory_xact_lock(hashtext('" + lock_name + "'), hashtext('{S}'))",
                    schema);
}

std::string EnsureMigrationsTable(const std::string& schema, const std::string& table) {
  // The description column came later to the inbox's table: added if missing.
  return WithSchema(R"SQL(
CREATE SCHEMA IF NOT EXISTS {S};
CREATE TABLE IF NOT EXISTS {S}.)SQL" + table + R"SQL( (
  version     integer PRIMARY KEY,
  description text NOT NULL,
  applied_at  timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE {S}.)SQL" + table + R"SQL( ADD COLUMN IF NOT EXISTS description text NOT NULL DEFAULT '';
)SQL",
                    schema);
}

std::string AppliedVersions(const std::string& schema, const std::string& table) {
  return WithSchema("SELECT version FROM {S}." + table + " ORDER BY version", schema);
}

std::string RecordMigration(const std::string& schema, const std::string& table) {
  return WithSchema("INSERT INTO {S}." + table + " (version, description) VALUES ($1, $2)",
                    schema);
}

// The function in the select list, not in FROM: the row comes back as one
// composite, "(event_id,t|f)", and the server, which parses and plans this
// unnamed statement on every call, has no function scan to plan (a small
// saving; docs/benchmarks.md, "Enqueue").
std::string Enqueue(const std::string& schema) {
  return WithSchema("SELECT {S}.enqueue($1, $2, $3, $4, $5, $6)", schema);
}

// Many events in one call (migration 10): $1 aggregate types, $2 aggregate
// ids, $3 event types, $4 payloads, $5 headers, $6 dedup keys, arrays of equal
// length. enqueue_batch() takes the aggregates' locks in key order (two batches
// never deadlock) and returns (position from 1, event id, enqueued) per event.
std::string EnqueueBatch(const std::string& schema) {
  return WithSchema(
      "SELECT ord, event_id::text, enqueued FROM {S}.enqueue_batch($1::text[], $2::text[], "
      "$3::text[], $4::bytea[], $5::jsonb[], $6::text[])",
      schema);
}

std::string ClaimOrdered(const std::string& schema) {
  return WithSchema(std::string("SELECT ") + kClaimColumns +
                        " FROM {S}.claim_ordered($1, $2, $3, $4, $5, $6, $7, $8) c",
                    schema);
}

std::string ClaimUnordered(const std::string& schema) {
  return WithSchema(std::string("WITH claimed AS (") + kClaimUnordered + kClaimUpdate +
                        ") SELECT " + kClaimColumns + " FROM claimed c",
                    schema);
}

// The transitions select rows by primary key (`seq = ANY(...)`) and find each
// row's token (and delay, error) by its position in the input arrays — no join,
// so the plan is index lookups whatever the (always stale) statistics of a
// queue table say.
//
// Token 0 names a row the change stream published without claiming it (no
// claim ever has token 0: lease_token_seq starts at 1). Such a transition
// applies while the row is PENDING — nobody holds it — and is refused once a
// claim has taken it (PROCESSING) or it has left the life cycle.
std::string MarkSentUpdate(const std::string& schema) {
  // 'SENT' is accepted too so that retrying a mark whose commit reply was lost
  // reports the rows as applied instead of refused.
  return WithSchema(R"SQL(
UPDATE {S}.outbox o SET status = 'SENT', sent_at = coalesce(o.sent_at, now()), last_error = NULL
WHERE o.seq = ANY($1::bigint[])
  AND CASE WHEN ($2::bigint[])[array_position($1::bigint[], o.seq)] = 0
           THEN o.status IN ('PENDING', 'SENT')
           ELSE o.lease_token = ($2::bigint[])[array_position($1::bigint[], o.seq)]
                AND o.status IN ('PROCESSING', 'SENT') END
RETURNING o.seq
)SQL",
                    schema);
}

std::string MarkSentDelete(const std::string& schema) {
  return WithSchema(R"SQL(
DELETE FROM {S}.outbox o
WHERE o.seq = ANY($1::bigint[])
  AND CASE WHEN ($2::bigint[])[array_position($1::bigint[], o.seq)] = 0
           THEN o.status = 'PENDING'
           ELSE o.lease_token = ($2::bigint[])[array_position($1::bigint[], o.seq)]
                AND o.status = 'PROCESSING' END
RETURNING o.seq
)SQL",
                    schema);
}

std::string Reschedule(const std::string& schema) {
  return WithSchema(R"SQL(
UPDATE {S}.outbox o SET
  status = 'PENDING',
  -- The claim counted an attempt; give it back when it did not implicate the
  -- event. A streamed row (token 0) was not claimed: count the attempt here.
  attempts = CASE WHEN (($1::jsonb -> (array_position($2::bigint[], o.seq) - 1)) ->> 'token')::bigint = 0
                  THEN o.attempts + CASE WHEN (($1::jsonb -> (array_position($2::bigint[], o.seq) - 1)) ->> 'counts')::boolean
                                         THEN 1 ELSE 0 END
                  WHEN (($1::jsonb -> (array_position($2::bigint[], o.seq) - 1)) ->> 'counts')::boolean
                  THEN o.attempts ELSE greatest(o.attempts - 1, 0) END,
  available_at = now() + (($1::jsonb -> (array_position($2::bigint[], o.seq) - 1)) ->> 'delay_ms')::bigint
                         * interval '1 millisecond',
  lease_owner = NULL,
  last_error = ($1::jsonb -> (array_position($2::bigint[], o.seq) - 1)) ->> 'error'
WHERE o.seq = ANY($2::bigint[])
  AND CASE WHEN (($1::jsonb -> (array_position($2::bigint[], o.seq) - 1)) ->> 'token')::bigint = 0
           THEN o.status = 'PENDING'
           ELSE o.lease_token = (($1::jsonb -> (array_position($2::bigint[], o.seq) - 1)) ->> 'token')::bigint
                AND o.status = 'PROCESSING' END
RETURNING o.seq
)SQL",
                    schema);
}

std::string MarkFailed(const std::string& schema) {
  return WithSchema(R"SQL(
UPDATE {S}.outbox o SET
  status = 'FAILED', failed_at = now(),
  last_error = ($1::jsonb -> (array_position($2::bigint[], o.seq) - 1)) ->> 'error'
WHERE o.seq = ANY($2::bigint[])
  AND CASE WHEN (($1::jsonb -> (array_position($2::bigint[], o.seq) - 1)) ->> 'token')::bigint = 0
           THEN o.status = 'PENDING'
           ELSE o.lease_token = (($1::jsonb -> (array_position($2::bigint[], o.seq) - 1)) ->> 'token')::bigint
                AND o.status = 'PROCESSING' END
RETURNING o.seq
)SQL",
                    schema);
}

std::string PurgeSent(const std::string& schema) {
  return WithSchema(R"SQL(
WITH victims AS (
  SELECT seq FROM {S}.outbox
  WHERE status = 'SENT' AND sent_at < now() - $1 * interval '1 second'
  ORDER BY sent_at
  LIMIT $2
  FOR UPDATE SKIP LOCKED
)
DELETE FROM {S}.outbox o USING victims v WHERE o.seq = v.seq
)SQL",
                    schema);
}

// What the table says about the rows a change stream decoded ($1 their seqs, in
// commit order; $2 FAILED holds its aggregate; $3 the caller's own acked rows
// whose SENT mark is still on its way). `earlier_unsent`: for the first row of
// each aggregate in the batch, whether (1) or not (0) an earlier event of that
// aggregate is still unsent, $3 left out. LIMIT 1, not a count up to 100,000:
// the count walked a held aggregate's whole tail on every check, and with few
// aggregates its estimate put the statement past jit_above_cost — PostgreSQL
// JIT-compiled every check (225-330 ms for 2,000 rows over 10 aggregates,
// against 4-7 ms; the stream drained 2,951 events/s) — by row, not by count: an acked row someone else
// marked SENT meanwhile must not hide another unsent one; the later rows of the aggregate in the batch committed after it
// (enqueue serialises an aggregate's enqueuers), so the caller walks them.
std::string StreamStates(const std::string& schema) {
  return WithSchema(R"SQL(
SELECT o.seq, o.status, o.attempts, o.available_at <= now() AS due,
       CASE WHEN o.seq = f.first_seq THEN (
         SELECT count(*) FROM (
           SELECT 1 FROM {S}.outbox e
           WHERE e.aggregate_type = o.aggregate_type AND e.aggregate_id = o.aggregate_id
             AND e.seq < o.seq AND e.status NOT IN ('SENT', 'SKIPPED')
             AND ($2::boolean OR e.status <> 'FAILED')
             AND e.seq <> ALL($3::bigint[])
           LIMIT 1) x) ELSE 0 END AS earlier_unsent
FROM {S}.outbox o
JOIN (SELECT aggregate_type, aggregate_id, min(seq) AS first_seq FROM {S}.outbox
      WHERE seq = ANY($1::bigint[]) GROUP BY aggregate_type, aggregate_id) f
  ON f.aggregate_type = o.aggregate_type AND f.aggregate_id = o.aggregate_id
WHERE o.seq = ANY($1::bigint[])
)SQL",
                    schema);
}

// $1 slot, $2 reader, $3 confirmed LSN (text), $4 covered until (µs since the Unix epoch)
std::string SaveStreamProgress(const std::string& schema) {
  return WithSchema(R"SQL(
INSERT INTO {S}.stream_progress AS p (slot, reader, confirmed_lsn, covered_until, updated_at,
                                      candidate, candidate_lsn)
VALUES ($1, $2, $3::pg_lsn, to_timestamp($4::bigint / 1000000.0), now(),
        pg_current_snapshot(), pg_current_wal_insert_lsn())
ON CONFLICT (slot) DO UPDATE SET reader = EXCLUDED.reader, confirmed_lsn = EXCLUDED.confirmed_lsn,
  covered_until = greatest(p.covered_until, EXCLUDED.covered_until), updated_at = now(),
  horizon = CASE WHEN p.candidate_lsn <= EXCLUDED.confirmed_lsn THEN p.candidate
                 ELSE p.horizon END,
  candidate = CASE WHEN p.candidate_lsn <= EXCLUDED.confirmed_lsn THEN EXCLUDED.candidate
                   ELSE p.candidate END,
  candidate_lsn = CASE WHEN p.candidate_lsn <= EXCLUDED.confirmed_lsn THEN EXCLUDED.candidate_lsn
                       ELSE p.candidate_lsn END
)SQL",
                    schema);
}

// $1 slot, $2 reader. A new row: covered until now, at the slot's confirmed
// position, with a first candidate horizon (none yet: the sweepers take no
// fresh row until the stream has settled past the candidate). An existing
// row keeps its progress and horizon; only its reader and freshness change.
std::string OpenStreamProgress(const std::string& schema) {
  return WithSchema(R"SQL(
INSERT INTO {S}.stream_progress AS p (slot, reader, confirmed_lsn, covered_until, updated_at,
                                      candidate, candidate_lsn)
VALUES ($1::text, $2::text,
        coalesce((SELECT s.confirmed_flush_lsn FROM pg_replication_slots s
                  WHERE s.slot_name = $1::text),
                 '0/0'::pg_lsn),
        now(), now(), pg_current_snapshot(), pg_current_wal_insert_lsn())
ON CONFLICT (slot) DO UPDATE SET reader = EXCLUDED.reader, updated_at = now()
)SQL",
                    schema);
}

// $1 slot
std::string DropStreamProgress(const std::string& schema) {
  return WithSchema("DELETE FROM {S}.stream_progress WHERE slot = $1", schema);
}

// $1 slot: retained WAL (bytes behind the current position), whether a reader
// is attached, the slot's WAL status ('lost' once invalidated), and the stream
// lag (now - covered_until of its progress; NULL without progress).
std::string SlotStatus(const std::string& schema) {
  return WithSchema(R"SQL(
SELECT (SELECT coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn), 0)::bigint),
       s.active, coalesce(s.wal_status, ''),
       (SELECT (extract(epoch FROM clock_timestamp() - p.covered_until) * 1000)::bigint
        FROM {S}.stream_progress p WHERE p.slot = $1)
FROM pg_replication_slots s WHERE s.slot_name = $1
)SQL",
                    schema);
}

std::string Stats(const std::string& schema) {
  return WithSchema("SELECT * FROM {S}.stats()", schema);
}

// Rows: ('m', minute, sent, failed, NULL) per minute with activity, then
// ('r', relay, last seen, rows, role) per relay; all text. Each part walks a
// partial index: SENT rows by sent_at, FAILED ones by the set-aside index,
// unsent ones by the claim index — never the whole table.
std::string RecentActivity(const std::string& schema) {
  return WithSchema(R"SQL(
WITH since AS (SELECT now() - $1::bigint * interval '1 second' AS t),
recent AS (
  SELECT o.sent_at AS at, true AS sent, o.lease_owner, o.claimed_at
  FROM {S}.outbox o, since WHERE o.status = 'SENT' AND o.sent_at >= since.t
  UNION ALL
  SELECT o.failed_at, false, o.lease_owner, o.claimed_at
  FROM {S}.outbox o, since WHERE o.status = 'FAILED' AND o.failed_at >= since.t
  UNION ALL
  SELECT NULL, false, o.lease_owner, o.claimed_at
  FROM {S}.outbox o, since WHERE o.status IN ('PENDING', 'PROCESSING') AND o.claimed_at >= since.t
)
SELECT kind, a, b, c, d FROM (
  SELECT 'm' AS kind, (floor(extract(epoch FROM r.at) / 60)::bigint * 60)::text AS a,
         count(*) FILTER (WHERE r.sent)::text AS b, count(*) FILTER (WHERE NOT r.sent)::text AS c,
         NULL::text AS d
  FROM recent r WHERE r.at IS NOT NULL GROUP BY 2
  UNION ALL
  SELECT 'r', r.lease_owner, max(r.claimed_at)::text, count(*)::text, 'claims'
  FROM recent r, since WHERE r.lease_owner IS NOT NULL AND r.claimed_at >= since.t
  GROUP BY r.lease_owner
  UNION ALL
  SELECT 'r', p.reader, p.updated_at::text, '0', 'stream ' || p.slot
  FROM {S}.stream_progress p, since WHERE p.updated_at >= since.t) t
ORDER BY kind, a
)SQL",
                    schema);
}

std::string HeldLayout() {
  return "SELECT CASE WHEN to_regclass(quote_ident($1) || '.log_migrations') IS NOT NULL THEN 'log' "
         "WHEN to_regclass(quote_ident($1) || '.schema_migrations') IS NOT NULL THEN 'rows' ELSE '' END";
}

std::string CountSent(const std::string& schema) {
  return WithSchema("SELECT count(*) FROM {S}.outbox WHERE status = 'SENT'", schema);
}

}  // namespace outbox::pg::sql

namespace outbox::pg::sql {

// $1 schema. One row per object (name, definition) in the schema, as
// `outboxctl migrate --check` compares them; the versions tables are the
// runner's, not a migration's.
std::string CatalogObjects() {
  return R"SQL(
WITH objs AS (
  SELECT 'table ' || c.relname || ' column ' || a.attname AS object,
         format_type(a.atttypid, a.atttypmod)
           || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
           || coalesce(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), '')
           || CASE WHEN a.attidentity <> '' THEN ' IDENTITY ' || a.attidentity::text ELSE '' END
           || ' #' || a.attnum AS definition
  FROM pg_attribute a
  JOIN pg_class c ON c.oid = a.attrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT 'constraint ' || k.conname || ' on ' || c.relname, pg_get_constraintdef(k.oid)
  FROM pg_constraint k
  JOIN pg_class c ON c.oid = k.conrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname = $1
  UNION ALL
  SELECT 'index ' || indexname, indexdef FROM pg_indexes WHERE schemaname = $1
  UNION ALL
  SELECT 'function ' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',
         pg_get_functiondef(p.oid)
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
  WHERE n.nspname = $1
  UNION ALL
  SELECT 'sequence ' || sequencename,
         data_type::text || ' start ' || start_value || ' by ' || increment_by || ' min ' ||
         min_value || ' max ' || max_value || ' cycle ' || cycle
  FROM pg_sequences WHERE schemaname = $1
)
SELECT object, definition FROM objs
WHERE object NOT LIKE 'table schema\_migrations %' AND object NOT LIKE 'table inbox\_migrations %'
  AND object NOT LIKE 'table log\_migrations %' AND object NOT LIKE '% on log\_migrations'
  AND object NOT LIKE '% on schema\_migrations' AND object NOT LIKE '% on inbox\_migrations'
  AND object NOT IN ('index schema_migrations_pkey', 'index inbox_migrations_pkey',
                     'index log_migrations_pkey')
ORDER BY object
)SQL";
}

// $1 schema, $2 versions table: whether the table exists.
std::string HasTable() {
  return "SELECT to_regclass(quote_ident($1) || '.' || quote_ident($2)) IS NOT NULL";
}

}  // namespace outbox::pg::sql
