-- Returns (issue 27, item 1): `POST /v1/orders/{id}/returns` brings confirmed units of an
-- order back into `available` (at a location, for a product stocked per location), with a
-- reason, idempotent by its own `return_id` (unique across orders).
--
-- `reservations.returned` counts, per confirmed line, the units that came back. Every return
-- raises it with a conditional UPDATE (`returned + n <= quantity - backordered`) on the line's
-- row, which it holds locked (an order's reservation rows are the first lock of every order
-- path), and the CHECK behind it makes "never more than was confirmed" the database's rule too.
-- `quantity - backordered` is what left the shelf for the customer (a confirmed backorder's
-- units count once they were filled). The column is added with a constant default: no rewrite.
ALTER TABLE reservations ADD COLUMN returned integer NOT NULL DEFAULT 0;
ALTER TABLE reservations
    ADD CONSTRAINT reservations_returned_within_confirmed
        CHECK (returned >= 0 AND returned <= quantity - backordered);

-- The return's key and what it was for.
CREATE TABLE order_returns (
    return_id   text        PRIMARY KEY
                CHECK (return_id ~ '^[A-Za-z0-9._:-]+$' AND length(return_id) <= 64),
    order_id    text        NOT NULL,
    reason      text        NOT NULL CHECK (char_length(reason) BETWEEN 1 AND 200),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- What came back, per product: the stock audit adds these since the last count to what is on
-- hand (`returned_at` taken while the stock row is locked, like `sale_items.sold_at`).
CREATE TABLE return_items (
    return_id   text        NOT NULL REFERENCES order_returns (return_id),
    product_id  bigint      NOT NULL REFERENCES stock (product_id),
    quantity    integer     NOT NULL CHECK (quantity > 0),
    -- Where the units went (products stocked per location); NULL otherwise.
    location_id text,
    returned_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (return_id, product_id)
);

CREATE INDEX return_items_by_product ON return_items (product_id, returned_at);
