-- inbox_try_apply(): the inbox for a consumer that keeps its own client
--
-- Version 2: PostgreSQL's try_apply() for MariaDB. Called first inside the
-- transaction that applies the effects; returns one row, `applied`: 1 new
-- (apply the effects), 0 a duplicate (apply nothing, it is counted):
--   START TRANSACTION;
--   CALL inbox_try_apply('mailer', '<event id>', 'outbox.event.user', 3, 1042);
--   COMMIT;
-- The stamp is the C++ inbox's row (inbox_stamps): it commits or rolls back
-- with the effects; a second transaction with the same key waits for the
-- first's row lock, then counts as a duplicate if it committed.
DELIMITER $$
-- The parameters are wider than the columns and in the table's character set,
-- so a key too long for the stamp is refused rather than cut (two keys cut to
-- the same prefix would be one stamp: an effect skipped).
CREATE PROCEDURE inbox_try_apply(
    IN p_consumer TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN p_dedup_key TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin,
    IN p_topic TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, IN p_partition INT,
    IN p_offset BIGINT)
  MODIFIES SQL DATA
BEGIN
  IF p_consumer IS NULL OR p_consumer = '' THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'inbox.try_apply: consumer is required and must not be empty';
  END IF;
  IF p_dedup_key IS NULL OR p_dedup_key = '' THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'inbox.try_apply: dedup_key is required and must not be empty';
  END IF;
  IF char_length(p_consumer) > 128 OR char_length(p_dedup_key) > 512
     OR char_length(p_topic) > 255 THEN
    SIGNAL SQLSTATE '22023' SET MESSAGE_TEXT = 'inbox.try_apply: consumer, dedup_key and topic are limited to 128, 512 and 255 characters';
  END IF;
  INSERT INTO inbox_stamps (consumer, dedup_key, topic, `partition`, `offset`, applied_at)
  VALUES (p_consumer, p_dedup_key, p_topic, p_partition, p_offset, UTC_TIMESTAMP(6))
  ON DUPLICATE KEY UPDATE duplicates = duplicates + 1, last_duplicate_at = UTC_TIMESTAMP(6);
  -- 1: inserted; 2: the existing row was updated (a duplicate).
  SELECT IF(ROW_COUNT() = 1, 1, 0) AS applied;
END
$$
DELIMITER ;
