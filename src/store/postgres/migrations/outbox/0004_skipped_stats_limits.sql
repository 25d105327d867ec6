-- SKIPPED state; claim_ordered() returns the age at claim; stats(); lock_aggregates(); enqueue() limits payload + key + headers (outbox.max_event_bytes)
--
-- Version 4: SKIPPED, a terminal state set by an operator (outboxctl skip) that
-- releases the aggregate and keeps the row for audit (who, when, why); the claim
-- learns it and returns each row's age on the database's clock; a partial index
-- so that counting FAILED and SKIPPED rows never reads the retained SENT ones.

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

CREATE OR REPLACE FUNCTION {S}.claim_ordered(p_batch integer, p_owner text, p_lease_ms bigint,
                                  p_max_attempts integer, p_failed_holds boolean,
                                  p_max_bytes bigint)
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
BEGIN
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
                  AND x.attempts < p_max_attempts) AS ok
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

-- The enqueue contract, for callers in any language. Call it inside the
-- transaction that writes the business data:
--   SELECT * FROM {S}.enqueue('order', '42', 'OrderCreated', '{"id":42}'::bytea,
--                             '{"traceparent":"00-..."}'::jsonb, 'order-42-created');
-- Returns (event_id, enqueued); enqueued = false when dedup_key already exists.
CREATE OR REPLACE FUNCTION {S}.enqueue(
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
  IF v_id IS NOT NULL THEN
    IF current_setting('outbox.notify', true) = 'on' THEN
      PERFORM pg_notify('outbox_{S}', '');
    END IF;
    RETURN QUERY SELECT v_id, true;
    RETURN;
  END IF;
  SELECT o.event_id INTO v_id FROM {S}.outbox o WHERE o.dedup_key = enqueue.dedup_key;
  RETURN QUERY SELECT v_id, false;
END
$fn$;
