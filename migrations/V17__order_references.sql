-- References and metadata on orders (issue 26, part 2): an order's reserve request may carry the
-- caller's own id for it (`reference`: the cart, the checkout, the payment; 1..=128 characters,
-- not unique) and `metadata` (a JSON object of string values, bounded as on transfers: V13).
--
-- They are the order's first request's, so they are written on that request's reservation rows
-- (the rows that request wrote are how every later request of the order is told apart from it:
-- see `stock::decide::plan`) and nowhere else; rows a re-reserve or a backorder fill writes carry
-- none. Part of the reserve's idempotency comparison: the same order id with another reference
-- or metadata is a conflict. Rows are written once and the columns never change.
--
-- Existing rows have neither (NULL); columns are added bare (no default, no rewrite), so the
-- same file runs on Citus as it is (only the distributed `reservations` is altered).
ALTER TABLE reservations ADD COLUMN reference text;
ALTER TABLE reservations ADD COLUMN metadata jsonb;
ALTER TABLE reservations
    ADD CONSTRAINT reservations_reference_length
        CHECK (char_length(reference) BETWEEN 1 AND 128);
ALTER TABLE reservations
    ADD CONSTRAINT reservations_metadata_object CHECK (jsonb_typeof(metadata) = 'object');
-- `GET /v1/orders?reference=`: the orders carrying a reference, in order id order.
CREATE INDEX reservations_by_reference ON reservations (reference, order_id)
    WHERE reference IS NOT NULL;
