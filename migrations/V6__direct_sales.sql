-- Direct sales (issue 15; seed 000's path for slow payment methods): units go from available
-- straight to sold, with nothing reserved. Keyed by the client's sale id: a replay finds the
-- rows and answers the original result, other items under the same id are a conflict.
CREATE TABLE sales (
    sale_id     text        PRIMARY KEY
                CHECK (sale_id ~ '^[A-Za-z0-9._:-]+$' AND length(sale_id) <= 64),
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE sale_items (
    sale_id     text        NOT NULL REFERENCES sales (sale_id),
    product_id  bigint      NOT NULL REFERENCES stock (product_id),
    quantity    integer     NOT NULL CHECK (quantity > 0),
    -- Taken while the stock row is locked (clock_timestamp), so "sold since the last count"
    -- is ordered the way the row lock ordered the writes, like reservations.settled_at.
    sold_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (sale_id, product_id)
);

-- What the audit sums per product since its last count.
CREATE INDEX sale_items_by_product ON sale_items (product_id, sold_at);
