-- the claim's update is HOT: the partial indexes read a generated column, phase, that a claim does not change; the table keeps half of each new page free
--
-- Version 13. A claim sets status PENDING -> PROCESSING, and status was in
-- every partial index's predicate, so PostgreSQL could not make the claim's
-- update a heap-only (HOT) one: each claimed row got new entries in the
-- primary key, event_id, claim and aggregate indexes, the claim's largest cost
-- (pg_stat_statements: 71 % of the claim, about 43 us a row; a second such
-- update marks it SENT). Now:
--   - phase, generated from status and stored, is 0 for PENDING and
--     PROCESSING (unsent), 1 for SENT, 2 for FAILED, 3 for SKIPPED; status
--     keeps its values and stays what everything reads and writes;
--   - the four partial indexes that named status name phase instead, so a
--     change between PENDING and PROCESSING (claim, reschedule) changes no
--     indexed column;
--   - fillfactor 50: an insert fills half a page, leaving the claim's new
--     row versions room on the same page (a HOT update needs it). Measured in
--     isolation: the claim's update of 500 rows from 19-27 us to 4-6 us a row.
-- The functions whose queries walk those indexes are the same as before with
-- their predicates on phase (the planner matches a partial index only through
-- the predicate's own column). Adding a stored column rewrites the table,
-- holding an ACCESS EXCLUSIVE lock meanwhile (enqueues wait): purge SENT rows
-- before upgrading a large outbox (CHANGELOG.md, migration 13).

DROP INDEX {S}.outbox_claim_idx;
DROP INDEX {S}.outbox_aggregate_idx;
DROP INDEX {S}.outbox_sent_idx;
DROP INDEX {S}.outbox_set_aside_idx;
ALTER TABLE {S}.outbox
  ADD COLUMN phase smallint GENERATED ALWAYS AS (
    CASE status WHEN 'PENDING' THEN 0 WHEN 'PROCESSING' THEN 0 WHEN 'SENT' THEN 1
                WHEN 'FAILED' THEN 2 ELSE 3 END) STORED;
-- Apart, after the rewrite: the rows there stay packed; new pages keep room.
ALTER TABLE {S}.outbox SET (fillfactor = 50);
CREATE INDEX outbox_claim_idx ON {S}.outbox (seq) WHERE phase = 0;
CREATE INDEX outbox_aggregate_idx ON {S}.outbox (aggregate_type, aggregate_id, seq)
  WHERE phase <> 1;
CREATE INDEX outbox_sent_idx ON {S}.outbox (sent_at) WHERE phase = 1;
CREATE INDEX outbox_set_aside_idx ON {S}.outbox (phase, seq) WHERE phase >= 2;

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
        WHERE o.phase = 0
        ORDER BY o.seq LIMIT 2000) w;
  limit_seq := coalesce(limit_seq,
                        CASE WHEN v_walked < 2000 THEN 9223372036854775807 ELSE v_last + 1 END);
END
$fn$;

CREATE OR REPLACE FUNCTION {S}.stream_sweep_bound(p_margin_ms bigint, p_stale_ms bigint,
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
        WHERE o.phase = 0
          -- Two sets, each read once and probed by hash: the aggregates with a
          -- FAILED event, and their unsent events before one (a head before
          -- its FAILED event stays in the window; there are rarely any).
          AND (NOT p_failed_holds
               OR (o.aggregate_type, o.aggregate_id) NOT IN (
                    SELECT f.aggregate_type, f.aggregate_id FROM {S}.outbox f
                    WHERE f.phase = 2)
               OR o.seq IN (
                    SELECT e.seq FROM {S}.outbox f
                    JOIN {S}.outbox e
                      ON e.aggregate_type = f.aggregate_type AND e.aggregate_id = f.aggregate_id
                     AND e.seq < f.seq AND e.phase NOT IN (1, 3)
                    WHERE f.phase = 2))
        ORDER BY o.seq LIMIT 2000) w;
  limit_seq := coalesce(limit_seq,
                        CASE WHEN v_walked < 2000 THEN 9223372036854775807 ELSE v_last + 1 END);
  SELECT coalesce(array_agg(x ORDER BY x), '{}') INTO window_seqs
  FROM unnest(v_seqs) x WHERE x < limit_seq;
END
$fn$;

CREATE OR REPLACE FUNCTION {S}.stats()
  RETURNS TABLE (pending bigint, processing bigint, failed bigint, skipped bigint,
                 oldest_unsent_ms bigint, held_aggregates bigint)
  LANGUAGE sql STABLE
  SET enable_seqscan = off
  SET jit = off
AS $fn$
  -- One pass over each partial index: unsent rows, and set-aside rows.
  SELECT u.pending, u.processing, a.failed, a.skipped,
    coalesce((SELECT (extract(epoch FROM clock_timestamp() - created_at) * 1000)::bigint
              FROM {S}.outbox WHERE phase = 0
              ORDER BY seq LIMIT 1), 0),
    (SELECT count(*) FROM (
       SELECT DISTINCT f.aggregate_type, f.aggregate_id FROM {S}.outbox f
       WHERE f.phase = 2 AND EXISTS (
         SELECT 1 FROM {S}.outbox p
         WHERE p.aggregate_type = f.aggregate_type AND p.aggregate_id = f.aggregate_id
           AND p.seq > f.seq AND p.phase = 0)) h)
  FROM (SELECT count(*) FILTER (WHERE status = 'PENDING') AS pending,
               count(*) FILTER (WHERE status = 'PROCESSING') AS processing
        FROM {S}.outbox WHERE phase = 0) u,
       (SELECT count(*) FILTER (WHERE status = 'FAILED') AS failed,
               count(*) FILTER (WHERE status = 'SKIPPED') AS skipped
        FROM {S}.outbox WHERE phase >= 2) a
$fn$;

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
    FROM (SELECT o.seq FROM {S}.outbox o WHERE o.phase = 0
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
         WHERE x.phase NOT IN (1, 3) AND (p_failed_holds OR x.phase <> 2)
         ORDER BY x.aggregate_type, x.aggregate_id, x.seq LIMIT 1)
        UNION ALL
        SELECT n.aggregate_type, n.aggregate_id, n.seq FROM hd CROSS JOIN LATERAL (
          SELECT x.aggregate_type, x.aggregate_id, x.seq FROM {S}.outbox x
          WHERE x.phase NOT IN (1, 3) AND (p_failed_holds OR x.phase <> 2)
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
      WHERE o.phase = 0 AND o.available_at <= now()
        AND o.seq = ANY(v_window)
        -- A correlated scalar subquery, not NOT EXISTS: the planner may not turn
        -- it into a join, so it is always one index probe per candidate row.
        AND (SELECT e.seq FROM {S}.outbox e
             WHERE e.aggregate_type = o.aggregate_type AND e.aggregate_id = o.aggregate_id
               AND e.seq < o.seq AND e.phase NOT IN (1, 3)
               AND (p_failed_holds OR e.phase <> 2)
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
                   (x.phase = 0 AND x.available_at <= now()
                    AND x.attempts < p_max_attempts AND x.seq < v_limit_seq
                    AND (NOT v_bounded OR x.attempts > 0
                         OR {S}.xid_passed(x.xmin, v_ref, v_horizon))) AS ok
            FROM {S}.outbox x
            WHERE x.aggregate_type = h.aggregate_type AND x.aggregate_id = h.aggregate_id
              AND x.seq > h.seq AND x.phase NOT IN (1, 3)
              AND (p_failed_holds OR x.phase <> 2)
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
  AND o.phase = 0 AND o.available_at <= now()
RETURNING o.seq, o.event_id::text, o.aggregate_type, o.aggregate_id, o.event_type, o.payload,
          o.headers::text, o.dedup_key, o.attempts, o.lease_token, o.status,
          (extract(epoch FROM o.created_at) * 1000000)::bigint AS created_us,
          (extract(epoch FROM now() - o.created_at) * 1000000)::bigint AS age_us
;
END
$fn$;
