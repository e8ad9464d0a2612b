-- Citus twin of migrations/V19__order_returns.sql, laid out as V6's sales are: the return's key
-- in a reference table, its items distributed by product (next to the stock rows a return
-- writes). `reservations.returned` and its CHECK are plain column changes Citus propagates.
--
-- What Citus refuses here, and what refuses the same writes instead:
-- - return_items.return_id REFERENCES order_returns (not co-located): order_returns is a
--   reference table, which a distributed table may reference, so the foreign key stays.
-- - the primary key (return_id, product_id) holds the distribution column already: it stays.
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

ALTER TABLE reservations ADD COLUMN returned integer NOT NULL DEFAULT 0;
ALTER TABLE reservations
    ADD CONSTRAINT reservations_returned_within_confirmed
        CHECK (returned >= 0 AND returned <= quantity - backordered);

CREATE TABLE order_returns (
    return_id   text        PRIMARY KEY
                CHECK (return_id ~ '^[A-Za-z0-9._:-]+$' AND length(return_id) <= 64),
    order_id    text        NOT NULL,
    reason      text        NOT NULL CHECK (char_length(reason) BETWEEN 1 AND 200),
    created_at  timestamptz NOT NULL DEFAULT now()
);
SELECT create_reference_table('order_returns');

CREATE TABLE return_items (
    return_id   text        NOT NULL,
    product_id  bigint      NOT NULL,
    quantity    integer     NOT NULL CHECK (quantity > 0),
    location_id text,
    returned_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (return_id, product_id)
);
SELECT create_distributed_table('return_items', 'product_id', colocate_with => 'stock');
ALTER TABLE return_items ADD CONSTRAINT return_items_return_id_fkey
    FOREIGN KEY (return_id) REFERENCES order_returns (return_id);
ALTER TABLE return_items ADD CONSTRAINT return_items_product_id_fkey
    FOREIGN KEY (product_id) REFERENCES stock (product_id);

CREATE INDEX return_items_by_product ON return_items (product_id, returned_at);
