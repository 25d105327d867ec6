-- outbox table, aggregate locks, lease token sequence, outbox_enqueue()
--
-- Version 1: the outbox table, the per-aggregate lock rows and the enqueue
-- procedure.
--   outbox                   one row per event, seq = enqueue order; every time
--                            is UTC_TIMESTAMP(6), the database's clock. No
--                            partial indexes in MariaDB: the claim walks
--                            (status, seq) one state at a time, runs behind a
--                            head walk (aggregate, seq), and "an earlier unsent
--                            row?" probes (aggregate, status, seq) per state, so
--                            none of them reads the SENT rows kept for retention.
--   outbox_aggregate_locks   65,536 lock rows; an aggregate's is
--                            crc32(type ␟ id) % 65536. MariaDB has no
--                            transaction-scoped advisory locks (GET_LOCK is held
--                            by the session past COMMIT), so enqueue locks this
--                            row (SELECT ... FOR UPDATE by primary key) before it
--                            inserts: two transactions enqueueing for one
--                            aggregate take their seqs in commit order, which
--                            the ordered claim relies on.
--   outbox_enqueue()         the enqueue contract for every language (C++ calls
--                            it too): validates, locks, dedups, inserts, and
--                            returns one row (event_id, enqueued).

CREATE TABLE IF NOT EXISTS outbox (
  seq            BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
  event_id       CHAR(36)     NOT NULL,
  aggregate_type VARCHAR(255) NOT NULL,
  aggregate_id   VARCHAR(255) NOT NULL,
  event_type     VARCHAR(255) NOT NULL,
  payload        LONGBLOB     NOT NULL,
  headers        LONGTEXT     NOT NULL,
  dedup_key      VARCHAR(255) NULL,
  status         VARCHAR(16)  NOT NULL DEFAULT 'PENDING',
  attempts       INT          NOT NULL DEFAULT 0,
  available_at   DATETIME(6)  NOT NULL,
  created_at     DATETIME(6)  NOT NULL,
  lease_owner    VARCHAR(255) NULL,
  lease_token    BIGINT       NULL,
  claimed_at     DATETIME(6)  NULL,
  sent_at        DATETIME(6)  NULL,
  failed_at      DATETIME(6)  NULL,
  last_error     TEXT         NULL,
  skipped_at     DATETIME(6)  NULL,
  skipped_by     VARCHAR(255) NULL,
  skip_reason    TEXT         NULL,
  UNIQUE KEY outbox_event_id (event_id),
  UNIQUE KEY outbox_dedup_key (dedup_key),
  KEY outbox_unsent (status, seq),
  KEY outbox_aggregate (aggregate_type, aggregate_id, seq),
  KEY outbox_aggregate_state (aggregate_type, aggregate_id, status, seq),
  CONSTRAINT outbox_status CHECK (status IN ('PENDING', 'PROCESSING', 'SENT', 'FAILED', 'SKIPPED'))
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS outbox_aggregate_locks (
  bucket INT NOT NULL PRIMARY KEY
) ENGINE = InnoDB;

-- Every bucket exists from the start: enqueue only ever locks an existing row
-- by primary key — a record lock, never a gap or an insert.
-- (16 steps of recursion: max_recursive_iterations is 1,000 by default, and a
-- first version that counted to 65,535 stopped there without an error.)
INSERT IGNORE INTO outbox_aggregate_locks (bucket)
WITH RECURSIVE d (n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM d WHERE n < 15)
SELECT a.n * 4096 + b.n * 256 + c.n * 16 + e.n FROM d a, d b, d c, d e;

CREATE SEQUENCE IF NOT EXISTS outbox_lease_token_seq START WITH 1;

-- Limits as in PostgreSQL's enqueue(): @outbox_max_event_bytes (default
-- 1,000,000: payload + aggregate_id + header names and values) and the
-- optional @outbox_max_payload_bytes, set per session by the caller.
DELIMITER $$
CREATE OR REPLACE PROCEDURE outbox_enqueue(
    IN p_aggregate_type VARCHAR(255), IN p_aggregate_id VARCHAR(255), IN p_event_type VARCHAR(255),
    IN p_payload LONGBLOB, IN p_headers LONGTEXT, IN p_dedup_key VARCHAR(255))
  MODIFIES SQL DATA
BEGIN
  DECLARE v_id CHAR(36);
  DECLARE v_existing CHAR(36);
  DECLARE v_keys LONGTEXT;
  DECLARE v_key TEXT;
  DECLARE v_i INT DEFAULT 0;
  DECLARE v_size BIGINT DEFAULT 0;
  DECLARE v_max BIGINT DEFAULT coalesce(@outbox_max_event_bytes, 1000000);
  DECLARE v_msg TEXT;
  DECLARE v_dup INT DEFAULT 0;
  DECLARE v_bucket INT;
  -- A concurrent enqueue of the same dedup key committed first (READ COMMITTED
  -- has no gap lock to stop both from inserting): ours is the duplicate.
  DECLARE CONTINUE HANDLER FOR 1062 SET v_dup = 1;
  IF p_aggregate_type IS NULL OR p_aggregate_type = '' THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'outbox.enqueue: aggregate_type is required and must not be empty';
  END IF;
  IF p_aggregate_type NOT REGEXP '^[A-Za-z0-9._-]+$' THEN
    SET v_msg = concat('outbox.enqueue: aggregate_type may only contain [A-Za-z0-9._-]; got "', p_aggregate_type, '"');
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = v_msg;
  END IF;
  IF p_aggregate_id IS NULL OR p_aggregate_id = '' THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'outbox.enqueue: aggregate_id is required and must not be empty';
  END IF;
  IF p_event_type IS NULL OR p_event_type = '' THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'outbox.enqueue: event_type is required and must not be empty';
  END IF;
  IF octet_length(p_aggregate_type) > 255 OR octet_length(p_aggregate_id) > 255
     OR octet_length(p_event_type) > 255 OR octet_length(p_dedup_key) > 255 THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'outbox.enqueue: aggregate_type, aggregate_id, event_type and dedup_key are limited to 255 bytes';
  END IF;
  IF p_dedup_key = '' THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'outbox.enqueue: dedup_key must be NULL or non-empty';
  END IF;
  IF p_payload IS NULL THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'outbox.enqueue: payload is required (use an empty value for none)';
  END IF;
  IF @outbox_max_payload_bytes IS NOT NULL AND octet_length(p_payload) > @outbox_max_payload_bytes THEN
    SET v_msg = concat('outbox.enqueue: payload is ', octet_length(p_payload), ' bytes; the limit is ',
                       @outbox_max_payload_bytes, ' (variable @outbox_max_payload_bytes)');
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = v_msg;
  END IF;
  SET p_headers = coalesce(p_headers, '{}');
  IF NOT json_valid(p_headers) OR json_type(p_headers) <> 'OBJECT' THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'outbox.enqueue: headers must be a JSON object of string values';
  END IF;
  SET v_keys = json_keys(p_headers);
  WHILE v_i < coalesce(json_length(v_keys), 0) DO
    SET v_key = json_unquote(json_extract(v_keys, concat('$[', v_i, ']')));
    IF v_key NOT REGEXP '^[A-Za-z0-9._-]{1,128}$' OR v_key LIKE 'outbox-%'
       OR json_type(json_extract(p_headers, concat('$."', v_key, '"'))) <> 'STRING' THEN
      SET v_msg = concat('outbox.enqueue: header "', v_key,
                         '" is invalid (name [A-Za-z0-9._-]{1,128}, not "outbox-*", string value)');
      SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = v_msg;
    END IF;
    SET v_size = v_size + octet_length(v_key) +
                 octet_length(json_unquote(json_extract(p_headers, concat('$."', v_key, '"'))));
    SET v_i = v_i + 1;
  END WHILE;
  SET v_size = v_size + octet_length(p_payload) + octet_length(p_aggregate_id);
  IF v_size > v_max THEN
    SET v_msg = concat('outbox.enqueue: event is ', v_size, ' bytes (payload ', octet_length(p_payload),
                       ' + aggregate_id ', octet_length(p_aggregate_id), ' + headers ',
                       v_size - octet_length(p_payload) - octet_length(p_aggregate_id),
                       '); the limit is ', v_max, ' (variable @outbox_max_event_bytes)');
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = v_msg;
  END IF;
  -- The aggregate's lock bucket, held to COMMIT: same-aggregate enqueues
  -- serialise here. An existing row locked by primary key: a record lock, never
  -- a gap, so producers of other aggregates do not deadlock with this one under
  -- REPEATABLE READ (the caller's isolation level, whatever it is).
  SET v_bucket = crc32(concat(p_aggregate_type, char(31), p_aggregate_id)) % 65536;
  SELECT bucket INTO v_i FROM outbox_aggregate_locks WHERE bucket = v_bucket FOR UPDATE;
  -- A plain read: a locking one on a missing key would lock a gap (and IF
  -- EXISTS (SELECT ...) in a routine reads with shared next-key locks). A row
  -- this snapshot cannot see yet surfaces as a unique-key error below.
  IF p_dedup_key IS NOT NULL THEN
    SELECT event_id INTO v_existing FROM outbox WHERE dedup_key = p_dedup_key;
  END IF;
  IF v_existing IS NOT NULL THEN
    SELECT v_existing AS event_id, 0 AS enqueued;
  ELSE
    SET v_id = uuid();
    INSERT INTO outbox (event_id, aggregate_type, aggregate_id, event_type, payload, headers,
                        dedup_key, available_at, created_at)
    VALUES (v_id, p_aggregate_type, p_aggregate_id, p_event_type, p_payload, p_headers, p_dedup_key,
            utc_timestamp(6), utc_timestamp(6));
    IF v_dup = 1 THEN
      SELECT event_id INTO v_existing FROM outbox WHERE dedup_key = p_dedup_key LOCK IN SHARE MODE;
      SELECT v_existing AS event_id, 0 AS enqueued;
    ELSE
      SELECT v_id AS event_id, 1 AS enqueued;
    END IF;
  END IF;
END
$$
DELIMITER ;
