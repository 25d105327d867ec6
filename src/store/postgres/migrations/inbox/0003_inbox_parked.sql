-- inbox_parked: ordered mode's queue per order key

CREATE TABLE {S}.inbox_parked (
  id          bigserial   PRIMARY KEY,
  consumer    text        NOT NULL,
  order_key   text        NOT NULL,
  dedup_key   text        NOT NULL,
  topic       text        NOT NULL,
  partition   integer     NOT NULL,
  "offset"    bigint      NOT NULL,
  msg_key     bytea       NOT NULL,
  payload     bytea,
  headers     bytea       NOT NULL,
  ts_ms       bigint      NOT NULL,
  attempts    integer     NOT NULL DEFAULT 0,
  last_error  text,
  due_at      timestamptz NOT NULL,
  parked_at   timestamptz NOT NULL DEFAULT now(),
  UNIQUE (consumer, dedup_key)
);
CREATE INDEX inbox_parked_key_idx ON {S}.inbox_parked (consumer, order_key, id);
