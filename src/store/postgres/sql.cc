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

// Version 1: the outbox table, its indexes and the enqueue function.
//
// Index choices (each serves one query):
//   outbox_pkey (seq)                   fenced transitions by row id
//   outbox_event_id_key (event_id)      trace by event id
//   outbox_claim_idx (seq) partial      claim scans due rows in enqueue order
//   outbox_aggregate_idx partial        "is there an earlier unsent event of this aggregate?"
//   outbox_dedup_idx partial unique     dedup keys
//   outbox_sent_idx (sent_at) partial   purge
constexpr const char* kMigration1 = R"SQL(
CREATE TABLE {S}.outbox (
  seq            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  event_id       uuid        NOT NULL UNIQUE,
  aggregate_type text        NOT NULL,
  aggregate_id   text        NOT NULL,
  event_type     text        NOT NULL,
  payload        bytea       NOT NULL,
  headers        jsonb       NOT NULL DEFAULT '{}'::jsonb,
  dedup_key      text,
  status         text        NOT NULL DEFAULT 'PENDING'
                 CHECK (status IN ('PENDING', 'PROCESSING', 'SENT', 'FAILED')),
  attempts       integer     NOT NULL DEFAULT 0,
  -- PENDING: next attempt time. PROCESSING: lease expiry. Database clock only.
  available_at   timestamptz NOT NULL DEFAULT now(),
  lease_owner    text,
  lease_token    bigint,
  last_error     text,
  created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
  claimed_at     timestamptz,
  sent_at        timestamptz,
  failed_at      timestamptz
);
CREATE SEQUENCE {S}.lease_token_seq;
CREATE INDEX outbox_claim_idx ON {S}.outbox (seq) WHERE status IN ('PENDING', 'PROCESSING');
CREATE INDEX outbox_aggregate_idx ON {S}.outbox (aggregate_type, aggregate_id, seq)
  WHERE status <> 'SENT';
CREATE UNIQUE INDEX outbox_dedup_idx ON {S}.outbox (dedup_key) WHERE dedup_key IS NOT NULL;
CREATE INDEX outbox_sent_idx ON {S}.outbox (sent_at) WHERE status = 'SENT';

-- UUID version 7 (time-ordered, so the event_id index stays append-mostly).
CREATE FUNCTION {S}.uuid_v7() RETURNS uuid LANGUAGE sql VOLATILE AS $fn$
  SELECT encode(
    set_bit(set_bit(
      overlay(uuid_send(gen_random_uuid())
              PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint)
                                FROM 3)
              FROM 1 FOR 6),
      52, 1), 53, 1), 'hex')::uuid
$fn$;

)SQL";

// The enqueue function: created by migration 1, replaced by migration 3 (which
// adds the opt-in NOTIFY). {CREATE} and {NOTIFY} are filled in by EnqueueFunction().
constexpr const char* kEnqueueFunction = R"SQL(
-- The enqueue contract, for callers in any language. Call it inside the
-- transaction that writes the business data:
--   SELECT * FROM {S}.enqueue('order', '42', 'OrderCreated', '{"id":42}'::bytea,
--                             '{"traceparent":"00-..."}'::jsonb, 'order-42-created');
-- Returns (event_id, enqueued); enqueued = false when dedup_key already exists.
{CREATE} {S}.enqueue(
    aggregate_type text, aggregate_id text, event_type text, payload bytea,
    headers jsonb DEFAULT '{}'::jsonb, dedup_key text DEFAULT NULL)
  RETURNS TABLE (event_id uuid, enqueued boolean)
  LANGUAGE plpgsql VOLATILE
AS $fn$
#variable_conflict use_column
DECLARE
  v_id uuid;
  v_bad text;
  -- What the relay sends: payload + key (aggregate_id) + header names and values.
  -- The relay's producer admits this much plus its own headers (docs/relay.md).
  v_max integer := coalesce(nullif(current_setting('outbox.max_event_bytes', true), '')::integer,
                            1000000);
  v_max_payload integer := nullif(current_setting('outbox.max_payload_bytes', true), '')::integer;
  v_size bigint;
BEGIN
  IF enqueue.aggregate_type IS NULL OR enqueue.aggregate_type = '' THEN
    RAISE EXCEPTION 'outbox.enqueue: aggregate_type is required and must not be empty'
      USING ERRCODE = '22023';
  END IF;
  IF enqueue.aggregate_type !~ '^[A-Za-z0-9._-]+$' THEN
    RAISE EXCEPTION 'outbox.enqueue: aggregate_type may only contain [A-Za-z0-9._-]; got "%"',
      enqueue.aggregate_type USING ERRCODE = '22023';
  END IF;
  IF enqueue.aggregate_id IS NULL OR enqueue.aggregate_id = '' THEN
    RAISE EXCEPTION 'outbox.enqueue: aggregate_id is required and must not be empty'
      USING ERRCODE = '22023';
  END IF;
  IF enqueue.event_type IS NULL OR enqueue.event_type = '' THEN
    RAISE EXCEPTION 'outbox.enqueue: event_type is required and must not be empty'
      USING ERRCODE = '22023';
  END IF;
  IF octet_length(enqueue.aggregate_type) > 255 OR octet_length(enqueue.aggregate_id) > 255
     OR octet_length(enqueue.event_type) > 255 OR octet_length(enqueue.dedup_key) > 255 THEN
    RAISE EXCEPTION 'outbox.enqueue: aggregate_type, aggregate_id, event_type and dedup_key are limited to 255 bytes'
      USING ERRCODE = '22023';
  END IF;
  IF enqueue.dedup_key = '' THEN
    RAISE EXCEPTION 'outbox.enqueue: dedup_key must be NULL or non-empty' USING ERRCODE = '22023';
  END IF;
  IF enqueue.payload IS NULL THEN
    RAISE EXCEPTION 'outbox.enqueue: payload is required (use an empty bytea for none)'
      USING ERRCODE = '22023';
  END IF;
  IF v_max_payload IS NOT NULL AND octet_length(enqueue.payload) > v_max_payload THEN
    RAISE EXCEPTION 'outbox.enqueue: payload is % bytes; the limit is % (setting outbox.max_payload_bytes)',
      octet_length(enqueue.payload), v_max_payload USING ERRCODE = '22023';
  END IF;
  IF enqueue.headers IS NULL OR jsonb_typeof(enqueue.headers) <> 'object' THEN
    RAISE EXCEPTION 'outbox.enqueue: headers must be a JSON object of string values'
      USING ERRCODE = '22023';
  END IF;
  -- One pass over the headers: the first invalid name, and their size.
  SELECT (array_agg(h.key) FILTER (
            WHERE jsonb_typeof(h.value) <> 'string' OR h.key !~ '^[A-Za-z0-9._-]{1,128}$'
               OR h.key LIKE 'outbox-%'))[1],
         coalesce(sum(octet_length(h.key) + octet_length(h.value #>> '{}')), 0)
    INTO v_bad, v_size
    FROM jsonb_each(enqueue.headers) AS h;
  IF v_bad IS NOT NULL THEN
    RAISE EXCEPTION 'outbox.enqueue: header "%" is invalid (name [A-Za-z0-9._-]{1,128}, not "outbox-*", string value)',
      v_bad USING ERRCODE = '22023';
  END IF;
  v_size := v_size + octet_length(enqueue.payload) + octet_length(enqueue.aggregate_id);
  IF v_size > v_max THEN
    RAISE EXCEPTION 'outbox.enqueue: event is % bytes (payload % + aggregate_id % + headers %); the limit is % (setting outbox.max_event_bytes)',
      v_size, octet_length(enqueue.payload), octet_length(enqueue.aggregate_id),
      v_size - octet_length(enqueue.payload) - octet_length(enqueue.aggregate_id), v_max
      USING ERRCODE = '22023';
  END IF;

  -- Serialise enqueuers of one aggregate until commit, so that row order (seq)
  -- equals commit order within an aggregate. Without it a relay could publish
  -- seq 10 while seq 9 of the same aggregate is still uncommitted.
  PERFORM pg_advisory_xact_lock(hashtext('{S}'),
                                hashtext(enqueue.aggregate_type || E'\x1f' || enqueue.aggregate_id));

  INSERT INTO {S}.outbox AS o (event_id, aggregate_type, aggregate_id, event_type, payload,
                               headers, dedup_key)
  VALUES ({S}.uuid_v7(), enqueue.aggregate_type, enqueue.aggregate_id, enqueue.event_type,
          enqueue.payload, enqueue.headers, enqueue.dedup_key)
  ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
  RETURNING o.event_id INTO v_id;
  IF v_id IS NOT NULL THEN{NOTIFY}
    RETURN QUERY SELECT v_id, true;
    RETURN;
  END IF;
  SELECT o.event_id INTO v_id FROM {S}.outbox o WHERE o.dedup_key = enqueue.dedup_key;
  RETURN QUERY SELECT v_id, false;
END
$fn$;
)SQL";


// Version 4: SKIPPED, a terminal state set by an operator (outboxctl skip) that
// releases the aggregate and keeps the row for audit (who, when, why); the claim
// learns it and returns each row's age on the database's clock; a partial index
// so that counting FAILED and SKIPPED rows never reads the retained SENT ones.
constexpr const char* kMigration4 = R"SQL(
ALTER TABLE {S}.outbox DROP CONSTRAINT outbox_status_check;
ALTER TABLE {S}.outbox ADD CONSTRAINT outbox_status_check
  CHECK (status IN ('PENDING', 'PROCESSING', 'SENT', 'FAILED', 'SKIPPED'));
ALTER TABLE {S}.outbox ADD COLUMN skipped_at timestamptz, ADD COLUMN skipped_by text,
                       ADD COLUMN skip_reason text;
CREATE INDEX outbox_set_aside_idx ON {S}.outbox (status, seq)
  WHERE status IN ('FAILED', 'SKIPPED');
-- Upgrades drop the five-argument claim of versions 2-3; fresh installs have the
-- current one from version 2 already and replace it with itself.
DROP FUNCTION IF EXISTS {S}.claim_ordered(integer, text, bigint, integer, boolean);

-- EnqueueBatch's locks, in lock-key order (see sql::LockAggregates).
CREATE FUNCTION {S}.lock_aggregates(p_types text[], p_ids text[]) RETURNS void
  LANGUAGE plpgsql VOLATILE
AS $fn$
BEGIN
  -- One statement: the subquery's rows reach the lock calls in key order.
  PERFORM pg_advisory_xact_lock(hashtext('{S}'), s.k)
  FROM (SELECT DISTINCT hashtext(a.t || E'\x1f' || a.i) AS k
        FROM unnest(p_types, p_ids) AS a(t, i) ORDER BY 1) s;
END
$fn$;

-- The relay's gauges, every few seconds on every relay: read only the partial
-- indexes of unsent and set-aside rows, never the retained SENT rows (their count
-- is not part of it; see CountSent). A function, so that stale statistics cannot
-- turn an index walk into a scan of the whole table.
CREATE FUNCTION {S}.stats()
  RETURNS TABLE (pending bigint, processing bigint, failed bigint, skipped bigint,
                 oldest_unsent_ms bigint, held_aggregates bigint)
  LANGUAGE sql STABLE
  SET enable_seqscan = off
AS $fn$
  -- One pass over each partial index: unsent rows, and set-aside rows.
  SELECT u.pending, u.processing, a.failed, a.skipped,
    coalesce((SELECT (extract(epoch FROM clock_timestamp() - created_at) * 1000)::bigint
              FROM {S}.outbox WHERE status IN ('PENDING', 'PROCESSING')
              ORDER BY seq LIMIT 1), 0),
    (SELECT count(*) FROM (
       SELECT DISTINCT f.aggregate_type, f.aggregate_id FROM {S}.outbox f
       WHERE f.status IN ('FAILED', 'SKIPPED') AND f.status = 'FAILED' AND EXISTS (
         SELECT 1 FROM {S}.outbox p
         WHERE p.aggregate_type = f.aggregate_type AND p.aggregate_id = f.aggregate_id
           AND p.seq > f.seq AND p.status IN ('PENDING', 'PROCESSING'))) h)
  FROM (SELECT count(*) FILTER (WHERE status = 'PENDING') AS pending,
               count(*) FILTER (WHERE status = 'PROCESSING') AS processing
        FROM {S}.outbox WHERE status IN ('PENDING', 'PROCESSING')) u,
       (SELECT count(*) FILTER (WHERE status = 'FAILED') AS failed,
               count(*) FILTER (WHERE status = 'SKIPPED') AS skipped
        FROM {S}.outbox WHERE status IN ('FAILED', 'SKIPPED')) a
$fn$;
)SQL";

// Version 2: the ordered claim as a function (replaces the one-statement claim
// of the first drafts, which re-scanned every held-back row on each claim).
//
// Walk the heads — due rows with no earlier unsent row of their aggregate — in
// seq order, locking each with SKIP LOCKED so concurrent relays never take the
// same head; behind each head take the contiguous run of that aggregate's later
// due rows (nobody else can take those: they are not heads while our head is
// unsent); stop as soon as the batch is full. Taking whole runs keeps the rows
// behind an in-flight head few, so the walk stays short.
// Rows claimed p_max_attempts times already are not handed out again: the
// shared update below turns them FAILED (they get no run).
constexpr const char* kMigration2Head = R"SQL(
CREATE FUNCTION {S}.claim_ordered(p_batch integer, p_owner text, p_lease_ms bigint,
                                  p_max_attempts integer, p_failed_holds boolean,
                                  p_max_bytes bigint{SWEEP_PARAMS})
  RETURNS TABLE (seq bigint, event_id text, aggregate_type text, aggregate_id text,
                 event_type text, payload bytea, headers text, dedup_key text, attempts integer,
                 lease_token bigint, status text, created_us bigint, age_us bigint)
  LANGUAGE plpgsql VOLATILE
  -- A queue table's statistics are stale by nature (it fills and drains between
  -- ANALYZE runs); with stale stats the planner picks hash or nested-loop-over-
  -- seq-scan anti joins, or bitmap scans plus a sort, that read every unsent
  -- row per claim. The claim is only ever good as ordered index walks that stop
  -- early, so say so.
  SET enable_seqscan = off
  SET enable_bitmapscan = off
  SET enable_sort = off
  SET enable_hashjoin = off
  SET enable_mergejoin = off
AS $fn$
#variable_conflict use_column
DECLARE
  v_seqs bigint[] := '{}';
  v_bytes bigint := 0;  -- payload bytes taken so far (octet_length reads no TOAST)
  v_run bigint[];
  v_run_bytes bigint;
  h record;
  -- An explicit cursor, fetched one row at a time: a FOR loop over a query
  -- prefetches rows, and here each prefetched row is a probe, so a claim that
  -- already had its batch walked on through every row held behind a hot
  -- aggregate (measured: 9,500 probes, 340 ms, for a claim that needed one head).
  heads refcursor;{SWEEP_DECLARE}
BEGIN{SWEEP_BEGIN}
  OPEN heads NO SCROLL FOR
    SELECT o.seq, o.aggregate_type, o.aggregate_id, o.attempts,
           octet_length(o.payload)::bigint AS len{SWEEP_COLS}
    FROM {S}.outbox o
    WHERE o.status IN ('PENDING', 'PROCESSING') AND o.available_at <= now()
      -- A correlated scalar subquery, not NOT EXISTS: the planner may not turn
      -- it into a join, so it is always one index probe per candidate row.
      AND (SELECT e.seq FROM {S}.outbox e
           WHERE e.aggregate_type = o.aggregate_type AND e.aggregate_id = o.aggregate_id
             AND e.seq < o.seq AND e.status NOT IN ('SENT', 'SKIPPED')
             AND (p_failed_holds OR e.status <> 'FAILED')
           LIMIT 1) IS NULL
    ORDER BY o.seq
    LIMIT p_batch  -- never more heads than rows; also makes the planner walk the index
    FOR UPDATE OF o SKIP LOCKED;
  LOOP
    FETCH heads INTO h;
    EXIT WHEN NOT FOUND;{SWEEP_HEAD}
    -- The byte bound: always at least one row, then stop before going over.
    EXIT WHEN cardinality(v_seqs) > 0 AND v_bytes + h.len > p_max_bytes;
    v_seqs := v_seqs || h.seq;
    v_bytes := v_bytes + h.len;
    EXIT WHEN cardinality(v_seqs) >= p_batch;
    IF h.attempts < p_max_attempts THEN
      SELECT coalesce(array_agg(w.seq ORDER BY w.seq), '{}'), coalesce(max(w.run_bytes), 0)
        INTO v_run, v_run_bytes
      FROM (
        SELECT i.seq, bool_and(i.ok) OVER (ORDER BY i.seq) AS prefix_ok,
               sum(i.len) OVER (ORDER BY i.seq) AS run_bytes
        FROM (
          SELECT x.seq, octet_length(x.payload)::bigint AS len,
                 (x.status IN ('PENDING', 'PROCESSING') AND x.available_at <= now()
                  AND x.attempts < p_max_attempts{SWEEP_RUN}) AS ok
          FROM {S}.outbox x
          WHERE x.aggregate_type = h.aggregate_type AND x.aggregate_id = h.aggregate_id
            AND x.seq > h.seq AND x.status NOT IN ('SENT', 'SKIPPED')
            AND (p_failed_holds OR x.status <> 'FAILED')
          ORDER BY x.seq
          LIMIT p_batch - cardinality(v_seqs)
        ) i
      ) w
      WHERE w.prefix_ok AND w.run_bytes <= p_max_bytes - v_bytes;
      v_seqs := v_seqs || v_run;
      v_bytes := v_bytes + v_run_bytes;
      EXIT WHEN cardinality(v_seqs) >= p_batch;
    END IF;
  END LOOP;
  CLOSE heads;
  IF cardinality(v_seqs) = 0 THEN
    RETURN;
  END IF;
  RETURN QUERY
  WITH
)SQL";

constexpr const char* kMigration2Tail = R"SQL(;
END
$fn$;
)SQL";

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

// The claim's shared update, with the parameters named for use inside the
// claim_ordered function instead of $2..$4.
std::string ClaimUpdateForFunction() {
  std::string t = kClaimUpdate;
  // Rows by primary key from the array (a join with an unnested array makes the
  // planner hash the whole table).
  for (auto [from, to] : {std::pair<std::string, std::string>{"$2", "p_owner"},
                          {"$3", "p_lease_ms"}, {"$4", "p_max_attempts"},
                          {"FROM picked, token\nWHERE o.seq = picked.seq",
                           "FROM token\nWHERE o.seq = ANY(v_seqs)"}}) {
    for (std::size_t pos = t.find(from); pos != std::string::npos; pos = t.find(from, pos)) {
      t.replace(pos, from.size(), to);
    }
  }
  return t;
}

// The ordered claim function; `replace` for the migrations that redefine it.
// `sweep`: whether and how it takes the CDC sweeper's bound (two more
// parameters): version 5's time bound, or version 6's, which also leaves the
// rows of transactions the stream has not passed yet (see kMigration6), or
// version 7's, which stops at the first such head instead of walking on past it.
enum class Sweep {
  kNone,
  kTimeBound,
  kCommittedBound,
  kCommittedBoundStops,  // version 7: builds its window after stream_sweep_bound()
  kWindowFromBound,      // version 8: takes the window stream_sweep_bound() walked
};

std::string ClaimFunction(bool replace, Sweep sweep) {
  std::string t = std::string(kMigration2Head) + ClaimUpdateForFunction() + kMigration2Tail;
  if (replace) {
    const std::string from = "CREATE FUNCTION";
    t.replace(t.find(from), from.size(), "CREATE OR REPLACE FUNCTION");
  }
  auto put = [&](const std::string& k, const std::string& v) {
    const auto p = t.find(k);
    t.replace(p, k.size(), v);
  };
  const bool any = sweep != Sweep::kNone;
  const bool stops = sweep == Sweep::kCommittedBoundStops || sweep == Sweep::kWindowFromBound;
  const bool committed = sweep == Sweep::kCommittedBound || stops;
  put("{SWEEP_PARAMS}", any ? ",\n                                  p_sweep_margin_ms bigint, p_stale_ms bigint" : "");
  put("{SWEEP_DECLARE}",
      !any ? ""
      : committed
          ? "\n  v_limit_seq bigint;  -- the CDC sweeper takes only rows below it\n"
            "  v_horizon pg_snapshot;  -- and, of rows never claimed, only those committed in it\n"
            "  v_bounded boolean;\n" +
                std::string(stops
                                ? "  v_window bigint[];  -- the sweeper's rows to look at (a live stream)\n"
                                : "") +
                "  v_ref bigint := pg_snapshot_xmax(pg_current_snapshot())::text::bigint;"
          : "\n  v_limit_seq bigint;  -- the CDC sweeper takes only rows below it");
  put("{SWEEP_BEGIN}",
      !any ? ""
      : sweep == Sweep::kWindowFromBound
          ? "\n  SELECT b.limit_seq, b.horizon, b.window_seqs INTO v_limit_seq, v_horizon, v_window\n"
            "  FROM {S}.stream_sweep_bound(p_sweep_margin_ms, p_stale_ms, p_failed_holds) b;\n"
            "  v_bounded := v_limit_seq IS NOT NULL;  -- no live stream: no bound\n"
            "  v_limit_seq := coalesce(v_limit_seq, 9223372036854775807);"
      : committed
          ? "\n  SELECT b.limit_seq, b.horizon INTO v_limit_seq, v_horizon\n"
            "  FROM {S}.stream_sweep_bound(p_sweep_margin_ms, p_stale_ms) b;\n"
            "  v_bounded := v_limit_seq IS NOT NULL;  -- no live stream: no bound\n"
            "  v_limit_seq := coalesce(v_limit_seq, 9223372036854775807);"
          : "\n  v_limit_seq := coalesce({S}.stream_sweep_limit(p_sweep_margin_ms, p_stale_ms),\n"
            "                          9223372036854775807);");
  put("{SWEEP_COLS}", committed ? ", o.xmin AS row_xid" : "");
  // The bound ends the walk instead of joining the cursor's WHERE: there it
  // made the planner walk the primary key (SENT rows included) instead of the
  // partial index of unsent rows — claims of 300-600 ms on a 20,000-row table.
  put("{SWEEP_HEAD}",
      !any ? ""
      : stops
          ? "\n    EXIT WHEN h.seq >= v_limit_seq;  -- heads come in seq order\n"
            "    -- A head the stream has not passed: it and the heads after it are the\n"
            "    -- stream's for now (see migration 7).\n"
            "    EXIT WHEN v_bounded AND h.attempts = 0\n"
            "              AND NOT {S}.xid_passed(h.row_xid, v_ref, v_horizon);"
      : committed
          ? "\n    EXIT WHEN h.seq >= v_limit_seq;  -- heads come in seq order\n"
            "    CONTINUE WHEN v_bounded AND h.attempts = 0\n"
            "                  AND NOT {S}.xid_passed(h.row_xid, v_ref, v_horizon);  -- the stream's"
          : "\n    EXIT WHEN h.seq >= v_limit_seq;  -- heads come in seq order");
  put("{SWEEP_RUN}", !any ? ""
                     : committed
                         ? " AND x.seq < v_limit_seq\n                  AND (NOT v_bounded OR x.attempts > 0\n"
                           "                       OR {S}.xid_passed(x.xmin, v_ref, v_horizon))"
                         : " AND x.seq < v_limit_seq");
  if (stops) {
    // A live stream's sweeper walks only the window stream_sweep_bound() looked
    // at (the oldest unsent rows): its cursor takes their seqs. Walking the
    // partial index up to v_limit_seq instead, rows the stream was marking
    // (locked: skipped) and the rows behind them (not heads) did not end the
    // walk, and it went through the whole backlog looking for a head: 6.5 s
    // per sweeper claim in the middle of a 200,000-row cdc drain. An upper
    // bound in the cursor's WHERE made the planner walk the primary key
    // through every SENT row (version 5's note).
    const std::string open = "  OPEN heads NO SCROLL FOR";
    const std::string end = "FOR UPDATE OF o SKIP LOCKED;\n";
    const auto a = t.find(open);
    const auto b = t.find(end, a) + end.size();
    std::string cursor = t.substr(a, b - a);
    std::string windowed = cursor;
    const std::string where = "WHERE o.status IN ('PENDING', 'PROCESSING') AND o.available_at <= now()";
    windowed.replace(windowed.find(where), where.size(), where + "\n      AND o.seq = ANY(v_window)");
    auto indent = [](std::string x) {
      for (std::size_t p = 0; (p = x.find('\n', p)) != std::string::npos && p + 1 < x.size(); p += 3) {
        x.insert(p + 1, "  ");
      }
      return "  " + x;
    };
    const std::string build_window =
        sweep == Sweep::kWindowFromBound
            ? ""
            : "    SELECT coalesce(array_agg(w.seq ORDER BY w.seq), '{}') INTO v_window\n"
              "    FROM (SELECT o.seq FROM {S}.outbox o WHERE o.status IN ('PENDING', 'PROCESSING')\n"
              "          ORDER BY o.seq LIMIT 2000) w\n"
              "    WHERE w.seq < v_limit_seq;\n";
    t.replace(a, b - a,
              "  IF v_bounded THEN\n" + build_window + indent(windowed) + "  ELSE\n" +
                  indent(cursor) + "  END IF;\n");
  }
  return t;
}

// Version 5: change data capture (docs/design.md, "CDC").
//   - A publication of the outbox table's INSERTs, which the relay's change
//     stream decodes with the built-in pgoutput plugin. Creating it needs the
//     CREATE privilege on the database; without it the migration goes on with
//     a warning (polling does not need it) and the relay in cdc mode says how
//     to create it.
//   - stream_progress: per replication slot, how far its stream has settled
//     every commit (covered_until, database clock). Written about once a
//     second by the streaming relay, never per event.
//   - stream_sweep_limit(): the CDC sweeper's bound. While a stream's progress
//     is fresh (updated within p_stale_ms), the sweeper takes only rows created
//     before covered_until - p_margin_ms, which the stream has passed (rows it
//     handed back, held, or that a crash left behind); as a seq, the first
//     unsent row newer than that, so the claim's walk stays an index range.
//     NULL when no stream is fresh: the sweeper then polls like a poll relay.
//   - claim_ordered() with the bound (NULL margin: no bound, as before).
constexpr const char* kMigration5 = R"SQL(
CREATE TABLE {S}.stream_progress (
  slot          text        PRIMARY KEY,
  reader        text        NOT NULL,
  confirmed_lsn pg_lsn      NOT NULL,
  covered_until timestamptz NOT NULL,
  updated_at    timestamptz NOT NULL DEFAULT now()
);
DO $do$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'outbox_{S}') THEN
    CREATE PUBLICATION outbox_{S} FOR TABLE {S}.outbox WITH (publish = 'insert');
  END IF;
EXCEPTION WHEN insufficient_privilege THEN
  RAISE WARNING 'outbox: no privilege to create publication outbox_{S}; relay.source = cdc needs it: CREATE PUBLICATION outbox_{S} FOR TABLE {S}.outbox WITH (publish = ''insert'')';
END
$do$;
-- plpgsql with explicit branches: as one SQL statement the planner did not
-- skip the outbox walk when there was no bound (240 ms per claim at 20,000 rows).
CREATE FUNCTION {S}.stream_sweep_limit(p_margin_ms bigint, p_stale_ms bigint) RETURNS bigint
  LANGUAGE plpgsql STABLE
  SET enable_seqscan = off
  SET enable_bitmapscan = off
  SET enable_sort = off
AS $fn$
DECLARE
  v_before timestamptz;
  v_seq bigint;
BEGIN
  IF p_margin_ms IS NULL THEN
    RETURN NULL;
  END IF;
  SELECT min(p.covered_until) INTO v_before FROM {S}.stream_progress p
  WHERE p.updated_at > now() - p_stale_ms * interval '1 millisecond';
  IF v_before IS NULL THEN
    RETURN NULL;  -- no live stream: sweep everything that is due
  END IF;
  v_before := v_before - p_margin_ms * interval '1 millisecond';
  -- The walk passes only the rows the sweeper may take, then stops.
  SELECT o.seq INTO v_seq FROM {S}.outbox o
  WHERE o.status IN ('PENDING', 'PROCESSING') AND o.created_at >= v_before
  ORDER BY o.seq LIMIT 1;
  RETURN coalesce(v_seq, 9223372036854775807);
END
$fn$;
DROP FUNCTION IF EXISTS {S}.claim_ordered(integer, text, bigint, integer, boolean, bigint);
)SQL";

// Version 6: the CDC sweeper leaves the rows of transactions the stream has
// not passed. A row's created_at is its transaction's start, so a producer
// transaction open longer than the margin committed rows "older" than the
// stream's settled point that the stream had not read yet: the sweeper took
// them and both published them (a copy per such event, absorbed by inboxes,
// but the stream is meant to claim nothing).
//   - stream_progress gets a horizon: a snapshot every transaction visible in
//     which had committed before the stream's settled position. Each report
//     notes a candidate (a fresh snapshot and the WAL insert position after
//     it); once the stream has settled past that position, the candidate
//     becomes the horizon and a new one is noted. A transaction visible in a
//     snapshot had written its commit record before the position.
//   - stream_sweep_bound() returns the time bound's seq and the horizon;
//     claims take a row never claimed (attempts = 0) only when the transaction
//     that wrote it is visible in the horizon (xid_passed). Rows the relays
//     have written since (claimed, retried, failed) are the table's life cycle,
//     as before; a replayed row (attempts reset) waits for the horizon to pass
//     its replay (one or two status intervals).
constexpr const char* kMigration6 = R"SQL(
ALTER TABLE {S}.stream_progress ADD COLUMN horizon pg_snapshot, ADD COLUMN candidate pg_snapshot,
                                ADD COLUMN candidate_lsn pg_lsn;
-- Whether the (32-bit) xid p_xid is visible in p_horizon: widened against
-- p_ref (the caller's snapshot xmax, a full xid no row it sees was written by
-- unless locked after an update: such a newer xid has not passed). Frozen xids
-- (below 3) are ancient: passed.
CREATE FUNCTION {S}.xid_passed(p_xid xid, p_ref bigint, p_horizon pg_snapshot) RETURNS boolean
  LANGUAGE sql IMMUTABLE
AS $fn$
  SELECT p_xid::text::bigint < 3
      OR (d BETWEEN 1 AND 2147483648
          AND coalesce(pg_visible_in_snapshot((p_ref - d)::text::xid8, p_horizon), false))
  FROM (SELECT (p_ref % 4294967296 - p_xid::text::bigint + 4294967296) % 4294967296 AS d) x
$fn$;
CREATE FUNCTION {S}.stream_sweep_bound(p_margin_ms bigint, p_stale_ms bigint,
                                       OUT limit_seq bigint, OUT horizon pg_snapshot)
  LANGUAGE plpgsql STABLE
  SET enable_seqscan = off
  SET enable_bitmapscan = off
  SET enable_sort = off
AS $fn$
DECLARE
  v_before timestamptz;
BEGIN
  IF p_margin_ms IS NULL THEN
    RETURN;  -- no bound
  END IF;
  SELECT min(p.covered_until) INTO v_before FROM {S}.stream_progress p
  WHERE p.updated_at > now() - p_stale_ms * interval '1 millisecond';
  IF v_before IS NULL THEN
    RETURN;  -- no live stream: sweep everything that is due
  END IF;
  -- The oldest horizon of the live streams; none yet (NULL) comes first.
  SELECT p.horizon INTO horizon FROM {S}.stream_progress p
  WHERE p.updated_at > now() - p_stale_ms * interval '1 millisecond'
  ORDER BY p.horizon IS NOT NULL, pg_snapshot_xmax(p.horizon)::text::bigint LIMIT 1;
  v_before := v_before - p_margin_ms * interval '1 millisecond';
  SELECT o.seq INTO limit_seq FROM {S}.outbox o
  WHERE o.status IN ('PENDING', 'PROCESSING') AND o.created_at >= v_before
  ORDER BY o.seq LIMIT 1;
  limit_seq := coalesce(limit_seq, 9223372036854775807);
END
$fn$;
)SQL";

// Version 7: stream_sweep_bound() walks at most 2,000 unsent rows for its
// time bound. It walked until the first unsent row newer than the bound —
// through the whole backlog when every unsent row is older (a backlog the
// stream is draining: 240 ms per call at 100,000 rows on an idle machine,
// 1.3-1.6 s with four sweepers at once), on every sweeper claim. Past the
// window the bound is the window's end: the sweeper looks at the 2,000 oldest
// unsent rows at a time, and the window moves as they are sent. A row beyond it
// waits for the rows before it (due later, in a relay's hands, or the
// stream's); with no fresh stream there is no bound and no window.
constexpr const char* kMigration7 = R"SQL(
CREATE OR REPLACE FUNCTION {S}.stream_sweep_bound(p_margin_ms bigint, p_stale_ms bigint,
                                                  OUT limit_seq bigint, OUT horizon pg_snapshot)
  LANGUAGE plpgsql STABLE
  SET enable_seqscan = off
  SET enable_bitmapscan = off
  SET enable_sort = off
  SET jit = off
AS $fn$
DECLARE
  v_before timestamptz;
  v_last bigint;
  v_walked bigint;
BEGIN
  IF p_margin_ms IS NULL THEN
    RETURN;  -- no bound
  END IF;
  SELECT min(p.covered_until) INTO v_before FROM {S}.stream_progress p
  WHERE p.updated_at > now() - p_stale_ms * interval '1 millisecond';
  IF v_before IS NULL THEN
    RETURN;  -- no live stream: sweep everything that is due
  END IF;
  -- The oldest horizon of the live streams; none yet (NULL) comes first.
  SELECT p.horizon INTO horizon FROM {S}.stream_progress p
  WHERE p.updated_at > now() - p_stale_ms * interval '1 millisecond'
  ORDER BY p.horizon IS NOT NULL, pg_snapshot_xmax(p.horizon)::text::bigint LIMIT 1;
  v_before := v_before - p_margin_ms * interval '1 millisecond';
  SELECT min(w.seq) FILTER (WHERE w.created_at >= v_before), max(w.seq), count(*)
    INTO limit_seq, v_last, v_walked
  FROM (SELECT o.seq, o.created_at FROM {S}.outbox o
        WHERE o.status IN ('PENDING', 'PROCESSING')
        ORDER BY o.seq LIMIT 2000) w;
  limit_seq := coalesce(limit_seq,
                        CASE WHEN v_walked < 2000 THEN 9223372036854775807 ELSE v_last + 1 END);
END
$fn$;
)SQL";

// Version 8: rows held behind a FAILED event (on_failed = hold) are left out
// of the sweeper's window. They wait for an operator, maybe for days; with
// 2,000 of them oldest, version 7's window held nothing else, and a row another
// aggregate needed swept (a retry, a row the stream handed back, the gap after
// a lost slot) waited behind them while the stream was live. The aggregates
// with a FAILED event are read once per call from the partial index of FAILED
// rows and probed by hash; the walk still passes the held rows (no index skips
// them), without a probe each (measured: 40 ms for 100,000 held rows). The
// bound also hands its window to the claim, which walked the same rows again.
constexpr const char* kMigration8 = R"SQL(
CREATE FUNCTION {S}.stream_sweep_bound(p_margin_ms bigint, p_stale_ms bigint,
                                       p_failed_holds boolean,
                                       OUT limit_seq bigint, OUT horizon pg_snapshot,
                                       OUT window_seqs bigint[])
  LANGUAGE plpgsql STABLE
  SET enable_seqscan = off
  SET enable_bitmapscan = off
  SET enable_sort = off
  SET jit = off
  SET random_page_cost = 1.1  -- see claim_ordered(), version 9
AS $fn$
DECLARE
  v_before timestamptz;
  v_last bigint;
  v_walked bigint;
  v_seqs bigint[];
BEGIN
  IF p_margin_ms IS NULL THEN
    RETURN;  -- no bound
  END IF;
  SELECT min(p.covered_until) INTO v_before FROM {S}.stream_progress p
  WHERE p.updated_at > now() - p_stale_ms * interval '1 millisecond';
  IF v_before IS NULL THEN
    RETURN;  -- no live stream: sweep everything that is due
  END IF;
  -- The oldest horizon of the live streams; none yet (NULL) comes first.
  SELECT p.horizon INTO horizon FROM {S}.stream_progress p
  WHERE p.updated_at > now() - p_stale_ms * interval '1 millisecond'
  ORDER BY p.horizon IS NOT NULL, pg_snapshot_xmax(p.horizon)::text::bigint LIMIT 1;
  v_before := v_before - p_margin_ms * interval '1 millisecond';
  SELECT min(w.seq) FILTER (WHERE w.created_at >= v_before), max(w.seq), count(*),
         coalesce(array_agg(w.seq ORDER BY w.seq), '{}')
    INTO limit_seq, v_last, v_walked, v_seqs
  FROM (SELECT o.seq, o.created_at FROM {S}.outbox o
        WHERE o.status IN ('PENDING', 'PROCESSING')
          -- Two sets, each read once and probed by hash: the aggregates with a
          -- FAILED event, and their unsent events before one (a head before
          -- its FAILED event stays in the window; there are rarely any).
          AND (NOT p_failed_holds
               OR (o.aggregate_type, o.aggregate_id) NOT IN (
                    SELECT f.aggregate_type, f.aggregate_id FROM {S}.outbox f
                    WHERE f.status = 'FAILED')
               OR o.seq IN (
                    SELECT e.seq FROM {S}.outbox f
                    JOIN {S}.outbox e
                      ON e.aggregate_type = f.aggregate_type AND e.aggregate_id = f.aggregate_id
                     AND e.seq < f.seq AND e.status NOT IN ('SENT', 'SKIPPED')
                    WHERE f.status = 'FAILED'))
        ORDER BY o.seq LIMIT 2000) w;
  limit_seq := coalesce(limit_seq,
                        CASE WHEN v_walked < 2000 THEN 9223372036854775807 ELSE v_last + 1 END);
  SELECT coalesce(array_agg(x ORDER BY x), '{}') INTO window_seqs
  FROM unnest(v_seqs) x WHERE x < limit_seq;
END
$fn$;
)SQL";

// Version 8's tail. The two-argument stream_sweep_bound() stays: the
// unordered claim uses it (a FAILED event holds nothing there, so no row is
// held), and so does a relay of version 7 during an upgrade.
constexpr const char* kMigration8Tail = R"SQL(
ALTER FUNCTION {S}.claim_ordered(integer, text, bigint, integer, boolean, bigint, bigint, bigint)
  SET jit = off;
)SQL";

// Version 9: the polling claim walks a window, and finds heads beyond it by
// aggregate. Its cursor used to walk the unsent rows in seq order until it
// had a batch of heads; when every aggregate's head was in another relay's
// hands (few or hot aggregates, more workers than aggregates, a restart with
// a backlog) it walked the whole backlog for nothing — measured: 1.2 s per
// empty claim at 200,000 rows over 10 aggregates, again and again from every
// idle worker. Now the cursor takes only the window (the oldest
// greatest(2,000, 4 x batch) unsent rows, seq order, as before). Only when the
// window gave nothing and there are unsent rows beyond it, a second pass
// visits aggregates instead of rows: a skip scan over outbox_aggregate_idx
// yields each aggregate's first unsent event — its head — in one index
// descent per aggregate, for the first greatest(2,000, 4 x batch) aggregates
// in key order (bounded, like the window: with a million one-event aggregates
// it would otherwise visit them all); the heads past the window go in seq
// order, locked with SKIP LOCKED, with their runs, as in the first pass. The
// window always holds the oldest rows, so an aggregate the second pass does
// not reach is served once its rows are among them. The CDC sweeper keeps
// stream_sweep_bound()'s window and no second pass (the stream sends the rest).
constexpr const char* kMigration9Head = R"SQL(
CREATE OR REPLACE FUNCTION {S}.claim_ordered(p_batch integer, p_owner text, p_lease_ms bigint,
                                  p_max_attempts integer, p_failed_holds boolean,
                                  p_max_bytes bigint, p_sweep_margin_ms bigint, p_stale_ms bigint)
  RETURNS TABLE (seq bigint, event_id text, aggregate_type text, aggregate_id text,
                 event_type text, payload bytea, headers text, dedup_key text, attempts integer,
                 lease_token bigint, status text, created_us bigint, age_us bigint)
  LANGUAGE plpgsql VOLATILE
  -- Ordered index walks that stop early, or nothing (see version 2).
  SET enable_seqscan = off
  SET enable_bitmapscan = off
  SET enable_sort = off
  SET enable_hashjoin = off
  SET enable_mergejoin = off
  SET jit = off
  -- The table is cached. With the default 4 and statistics from before a
  -- backlog was sent, the planner answered "an earlier unsent event of this
  -- aggregate?" by walking the primary key through every SENT row when
  -- aggregates are few (one probe: 40 ms at 100,000 rows over 10 aggregates).
  SET random_page_cost = 1.1
AS $fn$
#variable_conflict use_column
DECLARE
  v_seqs bigint[] := '{}';
  v_bytes bigint := 0;  -- payload bytes taken so far (octet_length reads no TOAST)
  v_run bigint[];
  v_run_bytes bigint;
  h record;
  -- An explicit cursor, fetched one row at a time (a FOR loop prefetches, and
  -- each prefetched row is a probe).
  heads refcursor;
  v_limit_seq bigint;  -- the CDC sweeper takes only rows below it
  v_horizon pg_snapshot;  -- and, of rows never claimed, only those committed in it
  v_bounded boolean;
  v_window bigint[];  -- the rows the first pass looks at
  v_size integer := greatest(2000, 4 * p_batch);
  v_beyond boolean := false;  -- unsent rows lie past the window (polling only)
  v_end bigint;
  v_ref bigint := pg_snapshot_xmax(pg_current_snapshot())::text::bigint;
BEGIN
  SELECT b.limit_seq, b.horizon, b.window_seqs INTO v_limit_seq, v_horizon, v_window
  FROM {S}.stream_sweep_bound(p_sweep_margin_ms, p_stale_ms, p_failed_holds) b;
  v_bounded := v_limit_seq IS NOT NULL;  -- no live stream: no bound
  v_limit_seq := coalesce(v_limit_seq, 9223372036854775807);
  IF NOT v_bounded THEN
    SELECT coalesce(array_agg(w.seq ORDER BY w.seq), '{}') INTO v_window
    FROM (SELECT o.seq FROM {S}.outbox o WHERE o.status IN ('PENDING', 'PROCESSING')
          ORDER BY o.seq LIMIT v_size) w;
    v_beyond := cardinality(v_window) >= v_size;
    v_end := v_window[cardinality(v_window)];
  END IF;
  FOR v_pass IN 1..2 LOOP
    IF v_pass = 2 THEN
      EXIT WHEN cardinality(v_seqs) > 0 OR NOT v_beyond;
      -- Each aggregate's head: the first entry of outbox_aggregate_idx after
      -- the previous aggregate's that is unsent (under hold FAILED counts: such
      -- a head is not claimable, and the cursor leaves it). The ORDER BY over
      -- the index's own columns keeps the planner on that index; the heads are
      -- sorted in the aggregate, not by a plan that would walk the table in
      -- seq order to avoid a sort.
      WITH RECURSIVE hd(t, i, s) AS (
        (SELECT x.aggregate_type, x.aggregate_id, x.seq FROM {S}.outbox x
         WHERE x.status NOT IN ('SENT', 'SKIPPED') AND (p_failed_holds OR x.status <> 'FAILED')
         ORDER BY x.aggregate_type, x.aggregate_id, x.seq LIMIT 1)
        UNION ALL
        SELECT n.aggregate_type, n.aggregate_id, n.seq FROM hd CROSS JOIN LATERAL (
          SELECT x.aggregate_type, x.aggregate_id, x.seq FROM {S}.outbox x
          WHERE x.status NOT IN ('SENT', 'SKIPPED') AND (p_failed_holds OR x.status <> 'FAILED')
            AND (x.aggregate_type, x.aggregate_id) > (hd.t, hd.i)
          ORDER BY x.aggregate_type, x.aggregate_id, x.seq LIMIT 1) n
      )
      SELECT coalesce(array_agg(h.s ORDER BY h.s), '{}') INTO v_window
      FROM (SELECT hd.s FROM hd LIMIT v_size) h  -- the recursion stops there
      WHERE h.s > v_end;
    END IF;
    -- Both passes: the candidates' heads in seq order, each locked or skipped.
    OPEN heads NO SCROLL FOR
      SELECT o.seq, o.aggregate_type, o.aggregate_id, o.attempts,
             octet_length(o.payload)::bigint AS len, o.xmin AS row_xid
      FROM {S}.outbox o
      WHERE o.status IN ('PENDING', 'PROCESSING') AND o.available_at <= now()
        AND o.seq = ANY(v_window)
        -- A correlated scalar subquery, not NOT EXISTS: the planner may not turn
        -- it into a join, so it is always one index probe per candidate row.
        AND (SELECT e.seq FROM {S}.outbox e
             WHERE e.aggregate_type = o.aggregate_type AND e.aggregate_id = o.aggregate_id
               AND e.seq < o.seq AND e.status NOT IN ('SENT', 'SKIPPED')
               AND (p_failed_holds OR e.status <> 'FAILED')
             LIMIT 1) IS NULL
      ORDER BY o.seq
      LIMIT p_batch  -- never more heads than rows; also makes the planner walk the index
      FOR UPDATE OF o SKIP LOCKED;
    LOOP
      FETCH heads INTO h;
      EXIT WHEN NOT FOUND;
      EXIT WHEN h.seq >= v_limit_seq;  -- heads come in seq order
      -- A head the stream has not passed: it and the heads after it are the
      -- stream's for now (see migration 7).
      EXIT WHEN v_bounded AND h.attempts = 0
                AND NOT {S}.xid_passed(h.row_xid, v_ref, v_horizon);
      -- The byte bound: always at least one row, then stop before going over.
      EXIT WHEN cardinality(v_seqs) > 0 AND v_bytes + h.len > p_max_bytes;
      v_seqs := v_seqs || h.seq;
      v_bytes := v_bytes + h.len;
      EXIT WHEN cardinality(v_seqs) >= p_batch;
      IF h.attempts < p_max_attempts THEN
        SELECT coalesce(array_agg(w.seq ORDER BY w.seq), '{}'), coalesce(max(w.run_bytes), 0)
          INTO v_run, v_run_bytes
        FROM (
          SELECT i.seq, bool_and(i.ok) OVER (ORDER BY i.seq) AS prefix_ok,
                 sum(i.len) OVER (ORDER BY i.seq) AS run_bytes
          FROM (
            SELECT x.seq, octet_length(x.payload)::bigint AS len,
                   (x.status IN ('PENDING', 'PROCESSING') AND x.available_at <= now()
                    AND x.attempts < p_max_attempts AND x.seq < v_limit_seq
                    AND (NOT v_bounded OR x.attempts > 0
                         OR {S}.xid_passed(x.xmin, v_ref, v_horizon))) AS ok
            FROM {S}.outbox x
            WHERE x.aggregate_type = h.aggregate_type AND x.aggregate_id = h.aggregate_id
              AND x.seq > h.seq AND x.status NOT IN ('SENT', 'SKIPPED')
              AND (p_failed_holds OR x.status <> 'FAILED')
            ORDER BY x.seq
            LIMIT p_batch - cardinality(v_seqs)
          ) i
        ) w
        WHERE w.prefix_ok AND w.run_bytes <= p_max_bytes - v_bytes;
        v_seqs := v_seqs || v_run;
        v_bytes := v_bytes + v_run_bytes;
        EXIT WHEN cardinality(v_seqs) >= p_batch;
      END IF;
    END LOOP;
    CLOSE heads;
  END LOOP;
  IF cardinality(v_seqs) = 0 THEN
    RETURN;
  END IF;
  RETURN QUERY
  WITH
)SQL";

// Also version 7: no JIT in the functions that turn sequential scans off. With
// enable_seqscan = off a scan that has no index to use (stream_progress's)
// costs 10^10, far past jit_above_cost, and PostgreSQL compiled it on every
// call: 40-115 ms of CPU per sweeper claim in cdc mode (measured with
// EXPLAIN ANALYZE: "JIT: Functions: 5 ... Total 40.858 ms" for a one-row table).
constexpr const char* kMigration7Tail = R"SQL(
ALTER FUNCTION {S}.claim_ordered(integer, text, bigint, integer, boolean, bigint, bigint, bigint)
  SET jit = off;
ALTER FUNCTION {S}.stats() SET jit = off;
ALTER FUNCTION {S}.lock_aggregates(text[], text[]) SET jit = off;
)SQL";

// Version 6's tail: the claim uses the new bound; the old bound goes.
constexpr const char* kMigration6Tail = R"SQL(
DROP FUNCTION {S}.stream_sweep_limit(bigint, bigint);
)SQL";

}  // namespace

std::string EnqueueFunction(bool replace, bool notify) {
  std::string t = kEnqueueFunction;
  auto put = [&](const std::string& k, const std::string& v) {
    auto p = t.find(k);
    t.replace(p, k.size(), v);
  };
  put("{CREATE}", replace ? "CREATE OR REPLACE FUNCTION" : "CREATE FUNCTION");
  // Opt-in wake-up for idle relays (they LISTEN on outbox_<schema>). Off by
  // default: NOTIFY serialises committing transactions on PostgreSQL's
  // notification queue lock. Turn on with ALTER DATABASE ... SET outbox.notify = on.
  put("{NOTIFY}", notify ? "\n    IF current_setting('outbox.notify', true) = 'on' THEN\n"
                           "      PERFORM pg_notify('outbox_{S}', '');\n    END IF;"
                         : "");
  return t;
}

MigrationSet OutboxMigrations(const std::string& schema) {
  return {"outbox.migrate", "schema_migrations", {
      {1, "outbox table, indexes, enqueue()",
       WithSchema(std::string(kMigration1) + EnqueueFunction(false, false), schema)},
      {2, "claim_ordered()", WithSchema(ClaimFunction(/*replace=*/false, Sweep::kNone), schema)},
      {3, "enqueue(): opt-in NOTIFY (setting outbox.notify)",
       WithSchema(EnqueueFunction(true, true), schema)},
      {4, "SKIPPED state; claim_ordered() returns the age at claim; stats(); lock_aggregates(); enqueue() limits "
          "payload + key + headers (outbox.max_event_bytes)",
       WithSchema(std::string(kMigration4) + ClaimFunction(/*replace=*/true, Sweep::kNone) +
                      EnqueueFunction(true, true),
                  schema)},
      {5, "CDC: publication outbox_<schema>, stream_progress, stream_sweep_limit(); claim_ordered() "
          "takes the sweeper's bound",
       WithSchema(std::string(kMigration5) + ClaimFunction(/*replace=*/false, Sweep::kTimeBound), schema)},
      {6, "CDC: the sweeper leaves rows of transactions the stream has not passed (stream_progress "
          "horizon, stream_sweep_bound())",
       WithSchema(std::string(kMigration6) + ClaimFunction(/*replace=*/true, Sweep::kCommittedBound) +
                      kMigration6Tail,
                  schema)},
      // Version 6's sweeper skipped a head the stream had not passed and walked
      // on. Each skipped head stays locked (FOR UPDATE) until the claim ends, so
      // the sweepers of one or more relays, claiming at once, skipped each
      // other's locked heads and walked the whole unsent backlog looking for
      // more: measured 1.3-1.6 s per claim, four at once, at the start of a
      // 50,000-row cdc drain. Now the walk stops there: the heads after it wait
      // until the stream has passed it (a status interval or two), or until the
      // stream is stale and there is no bound at all.
      {7, "CDC: the sweeper's claim stops at the first head the stream has not passed; its time "
          "bound walks at most 2,000 unsent rows; no JIT in the claim, stats() and lock_aggregates()",
       WithSchema(std::string(kMigration7) +
                      ClaimFunction(/*replace=*/true, Sweep::kCommittedBoundStops) +
                      kMigration7Tail,
                  schema)},
      {8, "CDC: rows held behind a FAILED event stay out of the sweeper's window; "
          "stream_sweep_bound() hands its window to the claim",
       WithSchema(std::string(kMigration8) +
                      ClaimFunction(/*replace=*/true, Sweep::kWindowFromBound) + kMigration8Tail,
                  schema)},
      {9, "claim_ordered(): the polling claim walks a window of the oldest unsent rows and finds "
          "heads beyond it by aggregate (a skip scan), not by walking the backlog",
       WithSchema(std::string(kMigration9Head) + ClaimUpdateForFunction() + kMigration2Tail,
                  schema)},
  }};
}

namespace {

constexpr const char* kInboxMigration1 = R"SQL(
CREATE TABLE {S}.inbox_stamps (
  consumer   text        NOT NULL,
  dedup_key  text        NOT NULL,
  topic      text,
  partition  integer,
  "offset"   bigint,
  applied_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, dedup_key)
);
CREATE INDEX inbox_stamps_age_idx ON {S}.inbox_stamps (consumer, applied_at);
)SQL";

// Duplicates absorbed, per stamp: operators see how often an event came again
// (outboxctl trace), and reports can count absorbed copies from the database.
constexpr const char* kInboxMigration2 = R"SQL(
ALTER TABLE {S}.inbox_stamps ADD COLUMN duplicates integer NOT NULL DEFAULT 0,
                             ADD COLUMN last_duplicate_at timestamptz;
)SQL";

// Ordered mode's parked queue: per (consumer, order key) a FIFO by id of the
// messages that wait behind a failed one (and that one, the head, with its due
// time). The whole message is kept: it is applied from here, never consumed
// again.
constexpr const char* kInboxMigration3 = R"SQL(
CREATE TABLE {S}.inbox_parked (
  id          bigserial   PRIMARY KEY,
  consumer    text        NOT NULL,
  order_key   text        NOT NULL,
  dedup_key   text        NOT NULL,
  topic       text        NOT NULL,
  partition   integer     NOT NULL,
  "offset"    bigint      NOT NULL,
  msg_key     bytea       NOT NULL,
  payload     bytea,
  headers     bytea       NOT NULL,
  ts_ms       bigint      NOT NULL,
  attempts    integer     NOT NULL DEFAULT 0,
  last_error  text,
  due_at      timestamptz NOT NULL,
  parked_at   timestamptz NOT NULL DEFAULT now(),
  UNIQUE (consumer, dedup_key)
);
CREATE INDEX inbox_parked_key_idx ON {S}.inbox_parked (consumer, order_key, id);
)SQL";

}  // namespace

MigrationSet InboxMigrations(const std::string& schema) {
  return {"outbox.inbox.migrate", "inbox_migrations", {
      {1, "inbox_stamps", WithSchema(kInboxMigration1, schema)},
      {2, "inbox_stamps counts duplicates", WithSchema(kInboxMigration2, schema)},
      {3, "inbox_parked: ordered mode's queue per order key", WithSchema(kInboxMigration3, schema)},
  }};
}

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

std::string InboxCountDuplicates(const std::string& schema) {
  return WithSchema(
      "UPDATE {S}.inbox_stamps s SET duplicates = s.duplicates + d.n, last_duplicate_at = now() "
      "FROM (SELECT k, count(*)::int AS n FROM unnest($2::text[]) AS k GROUP BY k) d "
      "WHERE s.consumer = $1 AND s.dedup_key = d.k",
      schema);
}

std::string InboxParkedKeys(const std::string& schema) {
  return WithSchema(
      "SELECT DISTINCT order_key FROM {S}.inbox_parked WHERE consumer = $1 "
      "AND order_key = ANY($2::text[])",
      schema);
}

std::string InboxPark(const std::string& schema) {
  return WithSchema(
      "INSERT INTO {S}.inbox_parked (consumer, order_key, dedup_key, topic, partition, \"offset\", "
      "msg_key, payload, headers, ts_ms, attempts, last_error, due_at) VALUES ($1, $2, $3, $4, "
      "$5, $6, $7, $8, $9, $10, $11, $12, now() + $13 * interval '1 millisecond') "
      "ON CONFLICT (consumer, dedup_key) DO NOTHING",
      schema);
}

std::string InboxDue(const std::string& schema) {
  return WithSchema(
      "SELECT id::text, order_key, dedup_key, topic, partition::text, \"offset\"::text, msg_key, "
      "payload, (payload IS NULL)::text, headers, ts_ms::text, attempts::text, "
      "coalesce(last_error, '') FROM {S}.inbox_parked WHERE consumer = $1 AND order_key IN ("
      "SELECT order_key FROM (SELECT DISTINCT ON (order_key) order_key, due_at FROM "
      "{S}.inbox_parked WHERE consumer = $1 ORDER BY order_key, id) h WHERE h.due_at <= now()) "
      "ORDER BY order_key, id LIMIT $2",
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
      "DELETE FROM {S}.inbox_stamps WHERE (consumer, dedup_key) IN (SELECT consumer, dedup_key "
      "FROM {S}.inbox_stamps WHERE consumer = $1 AND applied_at < now() - $2 * interval '1 second' "
      "ORDER BY applied_at LIMIT $3)",
      schema);
}

std::string MigrateLock(const std::string& schema, const MigrationSet& set) {
  return WithSchema("SELECT pg_advisory_xact_lock(hashtext('" + set.lock_name + "'), hashtext('{S}'))",
                    schema);
}

std::string EnsureMigrationsTable(const std::string& schema, const MigrationSet& set) {
  // The description column came later to the inbox's table: added if missing.
  return WithSchema(R"SQL(
CREATE SCHEMA IF NOT EXISTS {S};
CREATE TABLE IF NOT EXISTS {S}.)SQL" + set.table + R"SQL( (
  version     integer PRIMARY KEY,
  description text NOT NULL,
  applied_at  timestamptz NOT NULL DEFAULT now()
);
ALTER TABLE {S}.)SQL" + set.table + R"SQL( ADD COLUMN IF NOT EXISTS description text NOT NULL DEFAULT '';
)SQL",
                    schema);
}

std::string AppliedVersions(const std::string& schema, const MigrationSet& set) {
  return WithSchema("SELECT version FROM {S}." + set.table + " ORDER BY version", schema);
}

std::string RecordMigration(const std::string& schema, const MigrationSet& set) {
  return WithSchema("INSERT INTO {S}." + set.table + " (version, description) VALUES ($1, $2)",
                    schema);
}

std::string Enqueue(const std::string& schema) {
  return WithSchema(
      "SELECT event_id::text, enqueued FROM {S}.enqueue($1, $2, $3, $4, $5::jsonb, $6)", schema);
}

// Takes a batch's per-aggregate locks (the ones enqueue() takes one by one) up
// front, in lock-key order: two batches over colliding keys then lock in the
// same order and cannot deadlock. enqueue()'s own lock calls are re-entrant.
// (A function so that its plan is cached per session.)
// $1 aggregate types, $2 aggregate ids (text arrays of equal length)
std::string LockAggregates(const std::string& schema) {
  return WithSchema("SELECT {S}.lock_aggregates($1::text[], $2::text[])", schema);
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

std::string CountSent(const std::string& schema) {
  return WithSchema("SELECT count(*) FROM {S}.outbox WHERE status = 'SENT'", schema);
}

}  // namespace outbox::pg::sql
