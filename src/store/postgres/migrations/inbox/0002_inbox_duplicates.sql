-- inbox_stamps counts duplicates

ALTER TABLE {S}.inbox_stamps ADD COLUMN duplicates integer NOT NULL DEFAULT 0,
                             ADD COLUMN last_duplicate_at timestamptz;
