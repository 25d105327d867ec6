-- the outbox as a log: events written once into a ring of partitions, a lease and a position per slot, exceptions only for failing events
--
-- Issue 42's layout (docs/design.md, "The outbox as a log"), installed in a
-- schema of its own by `outboxctl migrate --layout log`:
--   - log: every event once, into the ring's current partition (log_settings.cur,
--     moved on by rotation once the next partition is empty: partitions by time,
--     log_parts), one B-tree (slot, txid, pos) for the relay's read and a BRIN on
--     pos for trace (the event id carries pos); no UPDATE or DELETE of an event row;
--   - slots: per slot (a hash of the aggregate) a lease (owner, token, expiry)
--     and a position: lo, the snapshot whose events are done; hi, the range in
--     flight (what hi shows and lo does not), done to done_pos;
--   - exceptions: a copy of each event that failed (RETRY, FAILED) or waits
--     behind one (HELD), and what an operator did to it (SKIPPED, or SENT once
--     the retry went out);
--   - dedup: the keys of events that carry one;
--   - outbox: a read-only view with the row store's columns, status derived.
-- The checks, their messages and the per-aggregate lock are the row store's
-- (version 10 of its set), so enqueue() keeps its contract.

CREATE SEQUENCE {S}.log_pos;
CREATE SEQUENCE {S}.lease_token_seq;

-- One row: the ring's size and the slot count, fixed at install (an
-- aggregate's slot must not change while it has events in flight), and the
-- partition producers write (cur), which only rotation moves.
CREATE TABLE {S}.log_settings (
  one boolean PRIMARY KEY DEFAULT true CHECK (one),
  ring integer NOT NULL CHECK (ring >= 3),
  slots integer NOT NULL CHECK (slots BETWEEN 1 AND 1024),
  cur smallint NOT NULL DEFAULT 0 CHECK (cur >= 0 AND cur < ring)
);
INSERT INTO {S}.log_settings (ring, slots) VALUES (8, 16);

CREATE TABLE {S}.log (
  pos bigint NOT NULL,
  part smallint NOT NULL,
  slot smallint NOT NULL,
  txid xid8 NOT NULL DEFAULT pg_current_xact_id(),
  event_id uuid NOT NULL,
  aggregate_type text NOT NULL,
  aggregate_id text NOT NULL,
  event_type text NOT NULL,
  payload bytea NOT NULL,
  headers jsonb NOT NULL DEFAULT '{}'::jsonb,
  dedup_key text,
  created_at timestamptz NOT NULL DEFAULT clock_timestamp()
) PARTITION BY LIST (part);
DO $do$
BEGIN
  FOR p IN 0 .. (SELECT ring FROM {S}.log_settings) - 1 LOOP
    EXECUTE format('CREATE TABLE {S}.log_%s PARTITION OF {S}.log FOR VALUES IN (%s)', p, p);
  END LOOP;
END
$do$;
CREATE INDEX log_read ON {S}.log (slot, txid, pos);
CREATE INDEX log_pos_brin ON {S}.log USING brin (pos);

-- When each partition last became the current one and stopped being it:
-- rotation moves on once the current one is old enough (a share of the
-- retention) and truncates a partition once every slot has passed it and the
-- retention has gone by since it closed.
CREATE TABLE {S}.log_parts (
  part smallint PRIMARY KEY,
  opened_at timestamptz,
  closed_at timestamptz
);
INSERT INTO {S}.log_parts (part, opened_at)
SELECT p, CASE WHEN p = 0 THEN now() END FROM generate_series(0, (SELECT ring FROM {S}.log_settings) - 1) p;

CREATE TABLE {S}.slots (
  slot smallint PRIMARY KEY,
  owner text,                      -- relay id; NULL once released
  token bigint NOT NULL DEFAULT 0,  -- a new one at each take-over: the fence
  expires_at timestamptz NOT NULL DEFAULT '-infinity',
  lo pg_snapshot NOT NULL DEFAULT pg_current_snapshot(),
  hi pg_snapshot,
  done_pos bigint NOT NULL DEFAULT 0,
  restarts integer NOT NULL DEFAULT 0,  -- take-overs from a holder that never released
  moved_at timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 20);
INSERT INTO {S}.slots (slot) SELECT g FROM generate_series(0, (SELECT slots FROM {S}.log_settings) - 1) g;

-- The relays reading the log, each alive while expires_at is ahead: a relay
-- takes its fair share of the slots (the slots over the readers alive), and
-- gives back what is over it, so adding relays spreads the slots.
CREATE TABLE {S}.readers (
  reader text PRIMARY KEY,
  expires_at timestamptz NOT NULL
);

CREATE TABLE {S}.exceptions (
  pos bigint PRIMARY KEY,
  slot smallint NOT NULL,
  event_id uuid NOT NULL,
  aggregate_type text NOT NULL,
  aggregate_id text NOT NULL,
  event_type text NOT NULL,
  payload bytea NOT NULL,
  headers jsonb NOT NULL,
  dedup_key text,
  created_at timestamptz NOT NULL,
  status text NOT NULL CHECK (status IN ('RETRY', 'HELD', 'FAILED', 'SKIPPED', 'SENT')),
  attempts integer NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL DEFAULT now(),
  last_error text,
  lease_owner text,
  lease_token bigint,       -- a retry in flight: its slot's token, until lease_until
  lease_until timestamptz,
  claimed_at timestamptz,
  sent_at timestamptz,
  failed_at timestamptz,
  skipped_at timestamptz,
  skipped_by text,
  skip_reason text,
  log_gone boolean NOT NULL DEFAULT false,  -- its log row went with a rotated partition
  part smallint NOT NULL                    -- the partition of its log row
);
CREATE INDEX exceptions_aggregate ON {S}.exceptions (aggregate_type, aggregate_id, pos)
  WHERE status <> 'SENT';
CREATE INDEX exceptions_slot ON {S}.exceptions (slot, pos) WHERE status IN ('RETRY', 'HELD');

CREATE TABLE {S}.dedup (
  dedup_key text PRIMARY KEY,
  event_id uuid NOT NULL,
  pos bigint NOT NULL,
  part smallint NOT NULL  -- the partition of its event: the key goes with it
);
CREATE INDEX dedup_part ON {S}.dedup (part);

-- The slot of an aggregate (stable: hashtext and the slot count).
CREATE FUNCTION {S}.slot_of(p_type text, p_id text, p_slots integer) RETURNS smallint
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $fn$
  SELECT ((hashtext(p_type || E'\x1f' || p_id) & 2147483647) % p_slots)::smallint
$fn$;

-- A UUIDv7 whose last 62 bits are pos: time-ordered, unique (pos is), and
-- trace finds the row from the id alone (pos_of(), then the BRIN on pos).
CREATE FUNCTION {S}.event_id_for(p_pos bigint) RETURNS uuid
  LANGUAGE sql VOLATILE
AS $fn$
  SELECT encode(
    set_bit(set_bit(set_bit(set_bit(
      overlay(overlay(uuid_send(gen_random_uuid())
                      PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint)
                                        FROM 3)
                      FROM 1 FOR 6)
              PLACING int8send(p_pos) FROM 9 FOR 8),
      52, 1), 53, 1), 71, 1), 70, 0), 'hex')::uuid
$fn$;

CREATE FUNCTION {S}.pos_of(p_id uuid) RETURNS bigint
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $fn$
  SELECT ('x' || substr(replace(p_id::text, '-', ''), 17, 16))::bit(64)::bigint
         & 4611686018427387903
$fn$;

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

-- The enqueue contract, as the row store's (same signature, checks, messages
-- and result): call it inside the transaction that writes the business data.
-- The event is one INSERT into the log; pos is drawn after the aggregate's lock,
-- so pos order is commit order within an aggregate.
CREATE FUNCTION {S}.enqueue(
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

-- Many events in one call, as the row store's enqueue_batch(): the i-th element
-- of each array is the i-th event; one row per event (position from 1, id,
-- enqueued). The first bad event in the caller's order is named; the
-- aggregates' locks are taken in key order; events of one aggregate get pos in
-- the given order.
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

-- Whether slot position (lo, hi, done_pos) has passed the event (txid, pos):
-- lo shows its transaction, or it is in the range in flight at or before done_pos.
CREATE FUNCTION {S}.passed(p_txid xid8, p_pos bigint, p_lo pg_snapshot, p_hi pg_snapshot,
                           p_done bigint) RETURNS boolean
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
AS $fn$
  SELECT pg_visible_in_snapshot(p_txid, p_lo)
         OR (p_hi IS NOT NULL AND pg_visible_in_snapshot(p_txid, p_hi) AND p_pos <= p_done)
$fn$;

-- The keys (slot, txid, pos) of each slot's range (visible in hi, not in lo,
-- after done_pos; hi NULL: a new range, up to this statement's snapshot), in pos
-- order, at most p_limit, with each range's hi. The index is searched from lo's
-- xmax, plus the transactions lo saw running, in two scans each bounded by the
-- index (one OR of the two read every event of the slot): an old open
-- transaction widens no read, and events already passed are not read. Sequential
-- scans are off: the log grows between ANALYZEs, and a plan made when it was
-- small read all of it.
CREATE FUNCTION {S}.read_keys(p_slots smallint[], p_tokens bigint[], p_his text[], p_dones bigint[],
                              p_limit integer)
  RETURNS TABLE (slot text, txid text, pos text, hi text)
  LANGUAGE plpgsql STABLE
  SET enable_seqscan = off
AS $fn$
BEGIN
  RETURN QUERY
  WITH m AS (
    SELECT u.slot, coalesce(u.hi::pg_snapshot, pg_current_snapshot()) AS hi, u.done, s.lo
    FROM unnest(p_slots, p_tokens, p_his, p_dones) u(slot, token, hi, done)
    JOIN {S}.slots s ON s.slot = u.slot AND s.token = u.token)
  SELECT l.slot::text, l.txid::text, l.pos::text, m.hi::text
  FROM m CROSS JOIN LATERAL (
    SELECT r.slot, r.txid, r.pos FROM (
      SELECT l1.slot, l1.txid, l1.pos FROM {S}.log l1
      WHERE l1.slot = m.slot AND l1.txid >= pg_snapshot_xmax(m.lo)
        AND pg_visible_in_snapshot(l1.txid, m.hi) AND l1.pos > m.done
      UNION ALL
      SELECT l2.slot, l2.txid, l2.pos FROM {S}.log l2
      WHERE l2.slot = m.slot AND l2.txid = ANY(ARRAY(SELECT pg_snapshot_xip(m.lo)))
        AND pg_visible_in_snapshot(l2.txid, m.hi) AND l2.pos > m.done) r
    ORDER BY r.pos LIMIT p_limit) l
  ORDER BY l.pos LIMIT p_limit;
END
$fn$;

-- A relay's page: the events of `keys` (slot, txid, pos), one index probe each,
-- in the keys' order, each with whether an earlier exception of its aggregate
-- holds it; an event with an exception row of its own (an operator skipped it
-- before it was read) is left out. A function so that its plan is made once per
-- session: planning the probe over the ring's partitions cost more than running
-- it. Sequential scans are off, as for read_keys().
CREATE FUNCTION {S}.read_page(p_slots smallint[], p_txids text[], p_pos bigint[],
                              p_failed_holds boolean, p_ordered boolean)
  RETURNS TABLE (pos text, event_id text, aggregate_type text, aggregate_id text, event_type text,
                 payload bytea, headers text, dedup_key text, slot text, created_us text,
                 age_us text, txid text, key_index text, held text)
  LANGUAGE plpgsql STABLE
  SET enable_seqscan = off
AS $fn$
BEGIN
  RETURN QUERY
  SELECT l.pos::text, l.event_id::text, l.aggregate_type, l.aggregate_id, l.event_type, l.payload,
         l.headers::text, l.dedup_key, l.slot::text,
         (extract(epoch FROM l.created_at) * 1000000)::bigint::text,
         (extract(epoch FROM now() - l.created_at) * 1000000)::bigint::text,
         l.txid::text, k.i::text,
         (p_ordered AND EXISTS (
            SELECT 1 FROM {S}.exceptions y
            WHERE y.aggregate_type = l.aggregate_type AND y.aggregate_id = l.aggregate_id
              AND y.pos < l.pos AND y.status <> 'SENT' AND y.status <> 'SKIPPED'
              AND (y.status <> 'FAILED' OR p_failed_holds)))::text
  FROM unnest(p_slots, p_txids, p_pos) WITH ORDINALITY k(slot, txid, pos, i)
  CROSS JOIN LATERAL (
    SELECT * FROM {S}.log l0
    WHERE l0.slot = k.slot AND l0.txid = k.txid::xid8 AND l0.pos = k.pos LIMIT 1) l
  WHERE NOT EXISTS (SELECT 1 FROM {S}.exceptions z WHERE z.pos = l.pos)
  ORDER BY k.i;
END
$fn$;

-- The row store's columns, read-only: a log row's status is its exception's
-- when it has one (PROCESSING while a retry of it is in flight), else SENT once
-- its slot's position has passed it, else PENDING — also while a relay
-- publishes it: the log writes nothing per claim. sent_at is the exception's (a
-- log row's own send time is not kept). An exception whose log row went with a
-- rotated partition (a FAILED or SKIPPED event kept for operators) is listed
-- from its copy.
CREATE VIEW {S}.outbox AS
SELECT l.pos AS seq, l.event_id, l.aggregate_type, l.aggregate_id, l.event_type, l.payload,
       l.headers, l.dedup_key,
       CASE WHEN x.status IN ('RETRY', 'HELD') AND x.lease_until > now() THEN 'PROCESSING'
            WHEN x.status IS NOT NULL THEN
              CASE x.status WHEN 'RETRY' THEN 'PENDING' WHEN 'HELD' THEN 'PENDING' ELSE x.status END
            WHEN {S}.passed(l.txid, l.pos, s.lo, s.hi, s.done_pos) THEN 'SENT'
            ELSE 'PENDING' END AS status,
       coalesce(x.attempts, 0) AS attempts,
       coalesce(x.next_attempt_at, l.created_at) AS available_at,
       x.lease_owner, x.lease_token, x.last_error, l.created_at, x.claimed_at,
       x.sent_at, x.failed_at, x.skipped_at, x.skipped_by, x.skip_reason
FROM {S}.log l
JOIN {S}.slots s ON s.slot = l.slot
LEFT JOIN {S}.exceptions x ON x.pos = l.pos
UNION ALL
SELECT x.pos, x.event_id, x.aggregate_type, x.aggregate_id, x.event_type, x.payload, x.headers,
       x.dedup_key,
       CASE WHEN x.status IN ('RETRY', 'HELD') AND x.lease_until > now() THEN 'PROCESSING'
            WHEN x.status IN ('RETRY', 'HELD') THEN 'PENDING' ELSE x.status END,
       x.attempts, x.next_attempt_at, x.lease_owner, x.lease_token, x.last_error, x.created_at,
       x.claimed_at, x.sent_at, x.failed_at, x.skipped_at, x.skipped_by, x.skip_reason
FROM {S}.exceptions x
WHERE x.log_gone;
