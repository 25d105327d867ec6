-- CDC: publication outbox_<schema>, stream_progress, stream_sweep_limit(); claim_ordered() takes the sweeper's bound
--
-- Version 5: change data capture (docs/design.md, "CDC").
--   - A publication of the outbox table's INSERTs, which the relay's change
--     stream decodes with the built-in pgoutput plugin. Creating it needs the
--     CREATE privilege on the database; without it the migration goes on with
--     a warning (polling does not need it) and the relay in cdc mode says how
--     to create it.
--   - stream_progress: per replication slot, how far its stream has settled
--     every commit (covered_until, database clock). Written about once a
--     second by the streaming relay, never per event.
--   - stream_sweep_limit(): the CDC sweeper's bound. While a stream's progress
--     is fresh (updated within p_stale_ms), the sweeper takes only rows created
--     before covered_until - p_margin_ms, which the stream has passed (rows it
--     handed back, held, or that a crash left behind); as a seq, the first
--     unsent row newer than that, so the claim's walk stays an index range.
--     NULL when no stream is fresh: the sweeper then polls like a poll relay.
--   - claim_ordered() with the bound (NULL margin: no bound, as before).

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

CREATE FUNCTION {S}.claim_ordered(p_batch integer, p_owner text, p_lease_ms bigint,
                                  p_max_attempts integer, p_failed_holds boolean,
                                  p_max_bytes bigint,
                                  p_sweep_margin_ms bigint, p_stale_ms bigint)
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
  heads refcursor;
  v_limit_seq bigint;  -- the CDC sweeper takes only rows below it
BEGIN
  v_limit_seq := coalesce({S}.stream_sweep_limit(p_sweep_margin_ms, p_stale_ms),
                          9223372036854775807);
  OPEN heads NO SCROLL FOR
    SELECT o.seq, o.aggregate_type, o.aggregate_id, o.attempts,
           octet_length(o.payload)::bigint AS len
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
    EXIT WHEN NOT FOUND;
    EXIT WHEN h.seq >= v_limit_seq;  -- heads come in seq order
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
                  AND x.attempts < p_max_attempts AND x.seq < v_limit_seq) AS ok
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

token AS (SELECT nextval('{S}.lease_token_seq') AS t)
UPDATE {S}.outbox o SET
  status       = CASE WHEN o.attempts >= p_max_attempts THEN 'FAILED' ELSE 'PROCESSING' END,
  attempts     = CASE WHEN o.attempts >= p_max_attempts THEN o.attempts ELSE o.attempts + 1 END,
  lease_owner  = p_owner,
  lease_token  = token.t,
  available_at = now() + p_lease_ms * interval '1 millisecond',
  claimed_at   = now(),
  failed_at    = CASE WHEN o.attempts >= p_max_attempts THEN now() END,
  last_error   = CASE WHEN o.attempts >= p_max_attempts
                      THEN 'claimed ' || o.attempts || ' times without finishing (max_attempts '
                           || p_max_attempts || '); last error: ' || coalesce(o.last_error, 'none')
                      ELSE o.last_error END
FROM token
WHERE o.seq = ANY(v_seqs)
  AND o.status IN ('PENDING', 'PROCESSING') AND o.available_at <= now()
RETURNING o.seq, o.event_id::text, o.aggregate_type, o.aggregate_id, o.event_type, o.payload,
          o.headers::text, o.dedup_key, o.attempts, o.lease_token, o.status,
          (extract(epoch FROM o.created_at) * 1000000)::bigint AS created_us,
          (extract(epoch FROM now() - o.created_at) * 1000000)::bigint AS age_us
;
END
$fn$;
