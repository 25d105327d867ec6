-- enqueue(): a valid event costs one checked expression, one lock and one INSERT; enqueue_batch(): many events in one statement
--
-- Version 10: the same contract, cheaper (issue 26; docs/benchmarks.md,
-- "Enqueue: what one event costs the producer's transaction"). Version 4's
-- enqueue() ran each check as its own statement and read the headers with a
-- query; it inserted with ON CONFLICT (a speculative insertion) also without a
-- dedup key; and it returned its row with another query. Now:
--   - one expression checks a valid event: the field rules, the headers through
--     one jsonpath, and the size against an upper bound (the headers' text form
--     is never shorter than their names and values). When it does not pass,
--     enqueue_refuse() runs version 4's checks one by one and raises naming the
--     field, with the same messages; it returns when only the quick size bound
--     was too coarse, and the event goes in;
--   - an event without a dedup key is a plain INSERT;
--   - the row is returned without a query;
--   - enqueue_batch(...) takes many events as arrays: one statement checks them,
--     one takes their aggregates' locks in key order, one INSERT writes them in
--     the given order (EnqueueBatch in C++ used to send one enqueue() per event).
-- Unchanged: the per-aggregate advisory lock (commit order = seq order within an
-- aggregate), UUIDv7 ids, the dedup key, the limits and their settings, and
-- NOTIFY when outbox.notify is on.

-- Version 4's checks, in its order and with its messages; returns when every
-- check passes.
CREATE FUNCTION {S}.enqueue_refuse(
    aggregate_type text, aggregate_id text, event_type text, payload bytea,
    headers jsonb, dedup_key text)
  RETURNS void
  LANGUAGE plpgsql VOLATILE
AS $fn$
#variable_conflict use_column
DECLARE
  v_bad text;
  v_max integer := coalesce(nullif(current_setting('outbox.max_event_bytes', true), '')::integer,
                            1000000);
  v_max_payload integer := nullif(current_setting('outbox.max_payload_bytes', true), '')::integer;
  v_size bigint;
BEGIN
  IF aggregate_type IS NULL OR aggregate_type = '' THEN
    RAISE EXCEPTION 'outbox.enqueue: aggregate_type is required and must not be empty'
      USING ERRCODE = '22023';
  END IF;
  IF aggregate_type !~ '^[A-Za-z0-9._-]+$' THEN
    RAISE EXCEPTION 'outbox.enqueue: aggregate_type may only contain [A-Za-z0-9._-]; got "%"',
      aggregate_type USING ERRCODE = '22023';
  END IF;
  IF aggregate_id IS NULL OR aggregate_id = '' THEN
    RAISE EXCEPTION 'outbox.enqueue: aggregate_id is required and must not be empty'
      USING ERRCODE = '22023';
  END IF;
  IF event_type IS NULL OR event_type = '' THEN
    RAISE EXCEPTION 'outbox.enqueue: event_type is required and must not be empty'
      USING ERRCODE = '22023';
  END IF;
  IF octet_length(aggregate_type) > 255 OR octet_length(aggregate_id) > 255
     OR octet_length(event_type) > 255 OR octet_length(dedup_key) > 255 THEN
    RAISE EXCEPTION 'outbox.enqueue: aggregate_type, aggregate_id, event_type and dedup_key are limited to 255 bytes'
      USING ERRCODE = '22023';
  END IF;
  IF dedup_key = '' THEN
    RAISE EXCEPTION 'outbox.enqueue: dedup_key must be NULL or non-empty' USING ERRCODE = '22023';
  END IF;
  IF payload IS NULL THEN
    RAISE EXCEPTION 'outbox.enqueue: payload is required (use an empty bytea for none)'
      USING ERRCODE = '22023';
  END IF;
  IF v_max_payload IS NOT NULL AND octet_length(payload) > v_max_payload THEN
    RAISE EXCEPTION 'outbox.enqueue: payload is % bytes; the limit is % (setting outbox.max_payload_bytes)',
      octet_length(payload), v_max_payload USING ERRCODE = '22023';
  END IF;
  IF headers IS NULL OR jsonb_typeof(headers) <> 'object' THEN
    RAISE EXCEPTION 'outbox.enqueue: headers must be a JSON object of string values'
      USING ERRCODE = '22023';
  END IF;
  -- One pass over the headers: the first invalid name, and their size.
  SELECT (array_agg(h.key) FILTER (
            WHERE jsonb_typeof(h.value) <> 'string' OR h.key !~ '^[A-Za-z0-9._-]{1,128}$'
               OR h.key LIKE 'outbox-%'))[1],
         coalesce(sum(octet_length(h.key) + octet_length(h.value #>> '{}')), 0)
    INTO v_bad, v_size
    FROM jsonb_each(headers) AS h;
  IF v_bad IS NOT NULL THEN
    RAISE EXCEPTION 'outbox.enqueue: header "%" is invalid (name [A-Za-z0-9._-]{1,128}, not "outbox-*", string value)',
      v_bad USING ERRCODE = '22023';
  END IF;
  v_size := v_size + octet_length(payload) + octet_length(aggregate_id);
  IF v_size > v_max THEN
    RAISE EXCEPTION 'outbox.enqueue: event is % bytes (payload % + aggregate_id % + headers %); the limit is % (setting outbox.max_event_bytes)',
      v_size, octet_length(payload), octet_length(aggregate_id),
      v_size - octet_length(payload) - octet_length(aggregate_id), v_max
      USING ERRCODE = '22023';
  END IF;
END
$fn$;

-- The quick check of one event: true when every rule of enqueue_refuse()
-- holds, for a valid event without a query (one inlined expression). NULL
-- anywhere gives NULL, which callers read as "not shown valid". The size is an
-- upper bound: the headers' text form is never shorter than their names and
-- values, so a valid event near the limit may not pass (enqueue_refuse()
-- decides it exactly).
CREATE FUNCTION {S}.enqueue_ok(
    aggregate_type text, aggregate_id text, event_type text, payload bytea,
    headers jsonb, dedup_key text)
  RETURNS boolean
  LANGUAGE sql STABLE
AS $fn$
  -- No bounded repetition ({1,255}) in these patterns: PostgreSQL's regex
  -- engine builds a state per repetition on every match (measured: 9 µs a
  -- call against 0.2 µs for '+'); the lengths are checked apart.
  SELECT $1 ~ '^[A-Za-z0-9._-]+$' AND octet_length($1) <= 255
     AND octet_length($2) BETWEEN 1 AND 255
     AND octet_length($3) BETWEEN 1 AND 255
     AND ($6 IS NULL OR octet_length($6) BETWEEN 1 AND 255)
     AND $4 IS NOT NULL
     AND jsonb_typeof($5) = 'object'
     AND NOT jsonb_path_exists($5,
           '$.keyvalue() ? (!(@.key like_regex "^[A-Za-z0-9._-]+$")
                            || @.key starts with "outbox-" || @.value.type() != "string")',
           '{}', true)
     -- Names of at most 128 bytes: no name can be longer in a text form this
     -- short; else no run of 129 name characters after a quote (a value's run
     -- also stops the quick check: the detailed one decides).
     AND (octet_length($5::text) <= 134 OR $5::text !~ '"[A-Za-z0-9._-]{129}')
     AND octet_length($4) <=
           coalesce(nullif(current_setting('outbox.max_payload_bytes', true), '')::integer,
                    2147483647)
     AND octet_length($4) + octet_length($2) + octet_length($5::text) <=
           coalesce(nullif(current_setting('outbox.max_event_bytes', true), '')::integer, 1000000)
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
BEGIN
  IF NOT coalesce({S}.enqueue_ok(enqueue.aggregate_type, enqueue.aggregate_id, enqueue.event_type,
                                 enqueue.payload, enqueue.headers, enqueue.dedup_key), false) THEN
    -- Raises naming the field; returns when only the size bound was too coarse.
    PERFORM {S}.enqueue_refuse(enqueue.aggregate_type, enqueue.aggregate_id, enqueue.event_type,
                               enqueue.payload, enqueue.headers, enqueue.dedup_key);
  END IF;

  -- Serialise enqueuers of one aggregate until commit, so that row order (seq)
  -- equals commit order within an aggregate. Without it a relay could publish
  -- seq 10 while seq 9 of the same aggregate is still uncommitted.
  PERFORM pg_advisory_xact_lock(hashtext('{S}'),
                                hashtext(enqueue.aggregate_type || E'\x1f' || enqueue.aggregate_id));

  IF enqueue.dedup_key IS NULL THEN
    INSERT INTO {S}.outbox AS o (event_id, aggregate_type, aggregate_id, event_type, payload,
                                 headers)
    VALUES ({S}.uuid_v7(), enqueue.aggregate_type, enqueue.aggregate_id, enqueue.event_type,
            enqueue.payload, enqueue.headers)
    RETURNING o.event_id INTO v_id;
  ELSE
    INSERT INTO {S}.outbox AS o (event_id, aggregate_type, aggregate_id, event_type, payload,
                                 headers, dedup_key)
    VALUES ({S}.uuid_v7(), enqueue.aggregate_type, enqueue.aggregate_id, enqueue.event_type,
            enqueue.payload, enqueue.headers, enqueue.dedup_key)
    ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
    RETURNING o.event_id INTO v_id;
    IF v_id IS NULL THEN
      SELECT o.event_id INTO v_id FROM {S}.outbox o WHERE o.dedup_key = enqueue.dedup_key;
      event_id := v_id;
      enqueued := false;
      RETURN NEXT;
      RETURN;
    END IF;
  END IF;
  IF current_setting('outbox.notify', true) = 'on' THEN
    PERFORM pg_notify('outbox_{S}', '');
  END IF;
  event_id := v_id;
  enqueued := true;
  RETURN NEXT;
END
$fn$;

-- Many events in one call, each as enqueue() would take it: the i-th element
-- of each array is the i-th event (headers NULL = '{}', dedup_keys NULL = none).
-- Returns one row per event: its position (from 1), its id, and whether it was
-- enqueued (false: its dedup key existed, or an earlier event of the same call
-- had it). Events of one aggregate get seq in the given order.
--   SELECT * FROM {S}.enqueue_batch(ARRAY['order','order'], ARRAY['42','43'],
--     ARRAY['OrderCreated','OrderCreated'], ARRAY['{}'::bytea, '{}'::bytea],
--     NULL, NULL);
CREATE FUNCTION {S}.enqueue_batch(
    aggregate_types text[], aggregate_ids text[], event_types text[], payloads bytea[],
    headers jsonb[] DEFAULT NULL, dedup_keys text[] DEFAULT NULL)
  RETURNS TABLE (ord integer, event_id uuid, enqueued boolean)
  LANGUAGE plpgsql VOLATILE
AS $fn$
#variable_conflict use_column
DECLARE
  n integer := coalesce(cardinality(enqueue_batch.aggregate_types), 0);
  v_headers jsonb[] := coalesce(enqueue_batch.headers, array_fill(NULL::jsonb, ARRAY[n]));
  v_keys text[] := coalesce(enqueue_batch.dedup_keys, array_fill(NULL::text, ARRAY[n]));
  v_ids uuid[];
  v_new boolean[];
  r record;
BEGIN
  IF coalesce(cardinality(enqueue_batch.aggregate_ids), 0) <> n
     OR coalesce(cardinality(enqueue_batch.event_types), 0) <> n
     OR coalesce(cardinality(enqueue_batch.payloads), 0) <> n
     OR cardinality(v_headers) <> n OR cardinality(v_keys) <> n THEN
    RAISE EXCEPTION 'outbox.enqueue_batch: aggregate_types, aggregate_ids, event_types, payloads (and headers, dedup_keys when given) must have the same length'
      USING ERRCODE = '22023';
  END IF;
  IF n = 0 THEN
    RETURN;
  END IF;
  -- Only the events the quick check does not show valid: none, normally.
  FOR r IN
    SELECT e.i, e.t, e.a, e.et, e.p, coalesce(e.h, '{}'::jsonb) AS h, e.d
    FROM unnest(enqueue_batch.aggregate_types, enqueue_batch.aggregate_ids,
                enqueue_batch.event_types, enqueue_batch.payloads, v_headers, v_keys)
           WITH ORDINALITY AS e(t, a, et, p, h, d, i)
    WHERE NOT coalesce({S}.enqueue_ok(e.t, e.a, e.et, e.p, coalesce(e.h, '{}'::jsonb), e.d), false)
  LOOP
    BEGIN
      PERFORM {S}.enqueue_refuse(r.t, r.a, r.et, r.p, r.h, r.d);
    EXCEPTION WHEN invalid_parameter_value THEN
      RAISE EXCEPTION 'outbox.enqueue_batch: event % of %: %', r.i, n, SQLERRM
        USING ERRCODE = '22023';
    END;
  END LOOP;

  -- The aggregates' locks, in key order (two batches never deadlock on them).
  PERFORM pg_advisory_xact_lock(hashtext('{S}'), s.k)
  FROM (SELECT DISTINCT hashtext(a.t || E'\x1f' || a.i) AS k
        FROM unnest(enqueue_batch.aggregate_types, enqueue_batch.aggregate_ids) AS a(t, i)
        ORDER BY 1) s;

  -- One INSERT in the given order (seq follows it within each aggregate).
  WITH e AS (  -- not inlined (a volatile function): each event's id is drawn once
    SELECT x.i::integer AS i, x.t, x.a, x.et, x.p, coalesce(x.h, '{}'::jsonb) AS h, x.d,
           {S}.uuid_v7() AS id
    FROM unnest(enqueue_batch.aggregate_types, enqueue_batch.aggregate_ids,
                enqueue_batch.event_types, enqueue_batch.payloads, v_headers, v_keys)
           WITH ORDINALITY AS x(t, a, et, p, h, d, i)
  ), ins AS (
    INSERT INTO {S}.outbox AS o (event_id, aggregate_type, aggregate_id, event_type, payload,
                                 headers, dedup_key)
    SELECT e.id, e.t, e.a, e.et, e.p, e.h, e.d FROM e ORDER BY e.i
    ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
    RETURNING o.event_id, o.dedup_key
  )
  SELECT array_agg(coalesce(ins.event_id, (SELECT w.event_id FROM ins w WHERE w.dedup_key = e.d))
                   ORDER BY e.i),
         array_agg(ins.event_id IS NOT NULL ORDER BY e.i)
    INTO v_ids, v_new
  FROM e LEFT JOIN ins ON ins.event_id = e.id;
  -- A duplicate of a row that existed before: its id, read now (a row another
  -- transaction committed while this INSERT waited on it is visible to this
  -- statement, not to the one above).
  FOR k IN 1 .. n LOOP
    IF v_ids[k] IS NULL THEN
      v_ids[k] := (SELECT o.event_id FROM {S}.outbox o WHERE o.dedup_key = v_keys[k]);
    END IF;
  END LOOP;
  IF current_setting('outbox.notify', true) = 'on' AND true = ANY(v_new) THEN
    PERFORM pg_notify('outbox_{S}', '');
  END IF;
  RETURN QUERY SELECT u.k::integer, u.id, u.new
               FROM unnest(v_ids, v_new) WITH ORDINALITY AS u(id, new, k);
END
$fn$;
