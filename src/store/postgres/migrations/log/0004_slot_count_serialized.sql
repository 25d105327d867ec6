-- log_slot_count: a producer whose snapshot predates a slot-count change gets a serialization failure, not the old count
--
-- Version 4 of the log set. enqueue() and enqueue_batch() read the slot count
-- from log_settings through the transaction's snapshot. Under READ COMMITTED
-- that is the count at the statement (and `outboxctl slots --set` waits, under
-- its lock on log_settings, for every transaction that read it). Under
-- REPEATABLE READ or SERIALIZABLE a snapshot taken before a change committed
-- still shows the old count: an event written with it could land in a retired
-- slot (never read) or in its aggregate's old slot (read apart from the
-- aggregate's newer events). So those transactions also take a share lock
-- on log_slot_count's one row, which the change updates: a row changed after
-- the snapshot raises 40001 (could not serialize access), and the producer's
-- retry, as for any serialization failure, uses the new count. (FOR SHARE, not
-- FOR KEY SHARE: a key-share lock follows a non-key update without failing.) Rotation does
-- not touch this row (it moves log_settings.cur), so it causes no such failure.

CREATE TABLE {S}.log_slot_count (
  one boolean PRIMARY KEY DEFAULT true CHECK (one),
  slots integer NOT NULL
);
INSERT INTO {S}.log_slot_count (slots) SELECT slots FROM {S}.log_settings;

CREATE OR REPLACE FUNCTION {S}.enqueue(
    aggregate_type text, aggregate_id text, event_type text, payload bytea,
    headers jsonb DEFAULT '{}'::jsonb, dedup_key text DEFAULT NULL)
  RETURNS TABLE (event_id uuid, enqueued boolean)
  LANGUAGE plpgsql VOLATILE
AS $fn$
#variable_conflict use_column
DECLARE
  v_set {S}.log_settings;
  v_pos bigint;
  v_id uuid;
BEGIN
  IF NOT coalesce({S}.enqueue_ok(enqueue.aggregate_type, enqueue.aggregate_id, enqueue.event_type,
                                 enqueue.payload, enqueue.headers, enqueue.dedup_key), false) THEN
    PERFORM {S}.enqueue_refuse(enqueue.aggregate_type, enqueue.aggregate_id, enqueue.event_type,
                               enqueue.payload, enqueue.headers, enqueue.dedup_key);
  END IF;
  PERFORM pg_advisory_xact_lock(hashtext('{S}'),
                                hashtext(enqueue.aggregate_type || E'\x1f' || enqueue.aggregate_id));
  SELECT * INTO v_set FROM {S}.log_settings;
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    -- A snapshot older than a slot-count change must not use the old count.
    PERFORM 1 FROM {S}.log_slot_count FOR SHARE;
  END IF;
  v_pos := nextval('{S}.log_pos');
  v_id := {S}.event_id_for(v_pos);
  IF enqueue.dedup_key IS NOT NULL THEN
    INSERT INTO {S}.dedup AS d (dedup_key, event_id, pos, part)
    VALUES (enqueue.dedup_key, v_id, v_pos, v_set.cur)
    ON CONFLICT (dedup_key) DO NOTHING;
    IF NOT FOUND THEN
      event_id := (SELECT d.event_id FROM {S}.dedup d WHERE d.dedup_key = enqueue.dedup_key);
      enqueued := false;
      RETURN NEXT;
      RETURN;
    END IF;
  END IF;
  INSERT INTO {S}.log (pos, part, slot, event_id, aggregate_type, aggregate_id, event_type, payload,
                       headers, dedup_key)
  VALUES (v_pos, v_set.cur,
          {S}.slot_of(enqueue.aggregate_type, enqueue.aggregate_id, v_set.slots), v_id,
          enqueue.aggregate_type, enqueue.aggregate_id, enqueue.event_type, enqueue.payload,
          enqueue.headers, enqueue.dedup_key);
  IF current_setting('outbox.notify', true) = 'on' THEN
    PERFORM pg_notify('outbox_{S}', '');
  END IF;
  event_id := v_id;
  enqueued := true;
  RETURN NEXT;
END
$fn$;

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
  v_keys text[] := CASE WHEN enqueue_batch.dedup_keys IS NULL THEN array_fill(NULL::text, ARRAY[n])
                        ELSE ARRAY(SELECT u.k FROM unnest(enqueue_batch.dedup_keys)
                                            WITH ORDINALITY AS u(k, i) ORDER BY u.i) END;
  v_set {S}.log_settings;
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
  FOR r IN
    SELECT e.i, e.t, e.a, e.et, e.p, coalesce(e.h, '{}'::jsonb) AS h, e.d
    FROM unnest(enqueue_batch.aggregate_types, enqueue_batch.aggregate_ids,
                enqueue_batch.event_types, enqueue_batch.payloads, v_headers, v_keys)
           WITH ORDINALITY AS e(t, a, et, p, h, d, i)
    WHERE NOT coalesce({S}.enqueue_ok(e.t, e.a, e.et, e.p, coalesce(e.h, '{}'::jsonb), e.d), false)
    ORDER BY e.i
  LOOP
    BEGIN
      PERFORM {S}.enqueue_refuse(r.t, r.a, r.et, r.p, r.h, r.d);
    EXCEPTION WHEN invalid_parameter_value THEN
      RAISE EXCEPTION 'outbox.enqueue_batch: event % of %: %', r.i, n, SQLERRM
        USING ERRCODE = '22023';
    END;
  END LOOP;

  PERFORM pg_advisory_xact_lock(hashtext('{S}'), s.k)
  FROM (SELECT DISTINCT hashtext(a.t || E'\x1f' || a.i) AS k
        FROM unnest(enqueue_batch.aggregate_types, enqueue_batch.aggregate_ids) AS a(t, i)
        ORDER BY 1) s;
  SELECT * INTO v_set FROM {S}.log_settings;
  IF current_setting('transaction_isolation') <> 'read committed' THEN
    -- A snapshot older than a slot-count change must not use the old count.
    PERFORM 1 FROM {S}.log_slot_count FOR SHARE;
  END IF;

  -- Each event in the caller's order: its key (the first of a key in this call
  -- wins; a key that existed before returns that event's id), then its row.
  FOR r IN
    SELECT x.i::integer AS i, x.t, x.a, x.et, x.p, coalesce(x.h, '{}'::jsonb) AS h, x.d
    FROM unnest(enqueue_batch.aggregate_types, enqueue_batch.aggregate_ids,
                enqueue_batch.event_types, enqueue_batch.payloads, v_headers, v_keys)
           WITH ORDINALITY AS x(t, a, et, p, h, d, i)
    ORDER BY x.i
  LOOP
    DECLARE
      v_pos bigint := nextval('{S}.log_pos');
      v_id uuid := {S}.event_id_for(v_pos);
    BEGIN
      IF r.d IS NOT NULL THEN
        INSERT INTO {S}.dedup AS d (dedup_key, event_id, pos, part)
        VALUES (r.d, v_id, v_pos, v_set.cur)
        ON CONFLICT (dedup_key) DO NOTHING;
        IF NOT FOUND THEN
          ord := r.i;
          event_id := (SELECT d.event_id FROM {S}.dedup d WHERE d.dedup_key = r.d);
          enqueued := false;
          RETURN NEXT;
          CONTINUE;
        END IF;
      END IF;
      INSERT INTO {S}.log (pos, part, slot, event_id, aggregate_type, aggregate_id, event_type,
                           payload, headers, dedup_key)
      VALUES (v_pos, v_set.cur, {S}.slot_of(r.t, r.a, v_set.slots), v_id,
              r.t, r.a, r.et, r.p, r.h, r.d);
      ord := r.i;
      event_id := v_id;
      enqueued := true;
      RETURN NEXT;
    END;
  END LOOP;
  IF current_setting('outbox.notify', true) = 'on' THEN
    PERFORM pg_notify('outbox_{S}', '');
  END IF;
END
$fn$;
