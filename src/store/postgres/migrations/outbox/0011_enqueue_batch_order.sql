-- enqueue_batch(): arrays with any lower bound, and the first bad event in the caller's order named
--
-- Version 11 replaces version 10's enqueue_batch() (same signature, same
-- contract). Version 10 looked up a duplicate's id with dedup_keys[k] for k
-- from 1, so a dedup_keys array whose bounds did not start at 1 (a valid
-- text[], e.g. '[0:1]={a,b}') returned the wrong event's id or none; and when
-- several events failed the quick check, the one its error named depended on
-- the plan, not on the caller's order. Now the keys are renumbered from 1 in
-- their element order, and the events that fail the quick check are checked in
-- the caller's order.

CREATE OR REPLACE FUNCTION {S}.enqueue_batch(
    aggregate_types text[], aggregate_ids text[], event_types text[], payloads bytea[],
    headers jsonb[] DEFAULT NULL, dedup_keys text[] DEFAULT NULL)
  RETURNS TABLE (ord integer, event_id uuid, enqueued boolean)
  LANGUAGE plpgsql VOLATILE
AS $fn$
#variable_conflict use_column
DECLARE
  n integer := coalesce(cardinality(enqueue_batch.aggregate_types), 0);
  v_headers jsonb[] := coalesce(enqueue_batch.headers, array_fill(NULL::jsonb, ARRAY[n]));
  -- Indexed below by position from 1, whatever bounds the caller's array had
  -- ('[0:1]={a,b}' is a valid text[]): rebuilt in its element order.
  v_keys text[] := CASE WHEN enqueue_batch.dedup_keys IS NULL THEN array_fill(NULL::text, ARRAY[n])
                        ELSE ARRAY(SELECT u.k FROM unnest(enqueue_batch.dedup_keys)
                                            WITH ORDINALITY AS u(k, i) ORDER BY u.i) END;
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
    ORDER BY e.i  -- the first bad event in the caller's order is the one named
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
