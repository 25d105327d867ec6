-- outbox table, indexes, enqueue()
--
-- Version 1: the outbox table, its indexes and the enqueue function.
--
-- Index choices (each serves one query):
--   outbox_pkey (seq)                   fenced transitions by row id
--   outbox_event_id_key (event_id)      trace by event id
--   outbox_claim_idx (seq) partial      claim scans due rows in enqueue order
--   outbox_aggregate_idx partial        "is there an earlier unsent event of this aggregate?"
--   outbox_dedup_idx partial unique     dedup keys
--   outbox_sent_idx (sent_at) partial   purge

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


-- The enqueue contract, for callers in any language. Call it inside the
-- transaction that writes the business data:
--   SELECT * FROM {S}.enqueue('order', '42', 'OrderCreated', '{"id":42}'::bytea,
--                             '{"traceparent":"00-..."}'::jsonb, 'order-42-created');
-- Returns (event_id, enqueued); enqueued = false when dedup_key already exists.
CREATE FUNCTION {S}.enqueue(
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
    RETURN QUERY SELECT v_id, true;
    RETURN;
  END IF;
  SELECT o.event_id INTO v_id FROM {S}.outbox o WHERE o.dedup_key = enqueue.dedup_key;
  RETURN QUERY SELECT v_id, false;
END
$fn$;
