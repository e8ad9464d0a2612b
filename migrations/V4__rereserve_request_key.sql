-- Idempotency for good (issue 11): a reservation row records which request wrote it.
--
-- NULL: the order's own reserve request (keyed by the order id). A re-reserve of what expired or
-- was released is its own request with its own key, so that a late retry of either one finds
-- the rows it wrote (whatever their status now) and takes nothing again.
ALTER TABLE reservations ADD COLUMN request_key text;
ALTER TABLE reservations ADD CONSTRAINT reservations_request_key_check
    CHECK (request_key IS NULL
           OR (request_key ~ '^[A-Za-z0-9._:-]+$' AND length(request_key) <= 64));
