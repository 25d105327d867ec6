-- inbox_stamps

CREATE TABLE {S}.inbox_stamps (
  consumer   text        NOT NULL,
  dedup_key  text        NOT NULL,
  topic      text,
  partition  integer,
  "offset"   bigint,
  applied_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, dedup_key)
);
CREATE INDEX inbox_stamps_age_idx ON {S}.inbox_stamps (consumer, applied_at);
