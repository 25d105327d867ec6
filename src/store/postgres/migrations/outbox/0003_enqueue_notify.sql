-- enqueue(): opt-in NOTIFY (setting outbox.notify)
--
-- Version 3: enqueue() wakes idle relays with NOTIFY when the setting outbox.notify is on
-- (ALTER DATABASE ... SET outbox.notify = on). Off by default: NOTIFY serialises
-- committing transactions on PostgreSQL's notification queue lock.

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
