-- inbox_parked keeps a NULL message key
--
-- Version 3: a message produced with no key (NULL) was parked with an empty
-- key and came back to its handler as '' rather than NULL.
ALTER TABLE inbox_parked MODIFY msg_key LONGBLOB NULL;
