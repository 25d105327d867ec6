-- inbox_stamps, inbox_parked
--
-- The inbox: a stamp per (consumer, dedup key), written in the transaction of
-- the effect; the ordered mode's parked queue. Keys up to 512 characters
-- (the primary key stays under InnoDB's 3,072-byte limit in utf8mb4).

CREATE TABLE IF NOT EXISTS inbox_stamps (
  consumer          VARCHAR(128) NOT NULL,
  dedup_key         VARCHAR(512) NOT NULL,
  topic             VARCHAR(255) NULL,
  `partition`       INT          NULL,
  `offset`          BIGINT       NULL,
  applied_at        DATETIME(6)  NOT NULL,
  duplicates        INT          NOT NULL DEFAULT 0,
  last_duplicate_at DATETIME(6)  NULL,
  PRIMARY KEY (consumer, dedup_key),
  KEY inbox_stamps_age (consumer, applied_at)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS inbox_parked (
  id          BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
  consumer    VARCHAR(128) NOT NULL,
  order_key   VARCHAR(512) NOT NULL,
  dedup_key   VARCHAR(512) NOT NULL,
  topic       VARCHAR(255) NOT NULL,
  `partition` INT          NOT NULL,
  `offset`    BIGINT       NOT NULL,
  msg_key     LONGBLOB     NOT NULL,
  payload     LONGBLOB     NULL,
  headers     LONGBLOB     NOT NULL,
  ts_ms       BIGINT       NOT NULL,
  attempts    INT          NOT NULL DEFAULT 0,
  last_error  TEXT         NULL,
  due_at      DATETIME(6)  NOT NULL,
  parked_at   DATETIME(6)  NOT NULL,
  UNIQUE KEY inbox_parked_dedup (consumer, dedup_key),
  KEY inbox_parked_key (consumer, order_key, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
