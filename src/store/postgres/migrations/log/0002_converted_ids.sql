-- converted_ids and pos_for(): events that came from a row store keep their ids, found by trace
--
-- Version 2 of the log set. A schema converted from the row store
-- (`outboxctl migrate --layout log` on a row schema) keeps each event's id: a
-- consumer's inbox knows the events by it, and an event in flight during the
-- conversion is published again under the same id. Those ids do not carry
-- their position (the log's own ids do: pos_of()), so the conversion writes
-- one row per converted event here, and pos_for() reads it before pos_of().
-- Written only by the conversion; rotation deletes a partition's rows with the
-- partition, except those of events still listed from an exception copy.

CREATE TABLE {S}.converted_ids (
  event_id uuid PRIMARY KEY,
  pos bigint NOT NULL,
  part smallint NOT NULL  -- the partition the conversion wrote: the rows go with it
);
CREATE INDEX converted_ids_part ON {S}.converted_ids (part);

-- The position of the event with id p_id: a converted event's from
-- converted_ids, else the one the id carries.
CREATE FUNCTION {S}.pos_for(p_id uuid) RETURNS bigint
  LANGUAGE sql STABLE PARALLEL SAFE
AS $fn$
  SELECT coalesce((SELECT c.pos FROM {S}.converted_ids c WHERE c.event_id = p_id), {S}.pos_of(p_id))
$fn$;
