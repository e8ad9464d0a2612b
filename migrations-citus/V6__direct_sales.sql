-- Citus twin of migrations/V6__direct_sales.sql: sale items distributed by product (next to the stock
-- rows a sale takes from), the sale's id in a reference table.
--
-- What Citus refuses here, and what refuses the same writes instead:
-- - sale_items.sale_id REFERENCES sales with sales keyed by its own id (not co-located): sales is
--   a reference table, which a distributed table may reference, so the foreign key stays (a
--   direct sale pays one replicated write for its key; sales are not the hot path).
-- - the primary key (sale_id, product_id) holds the distribution column already: it stays.
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

CREATE TABLE sales (
    sale_id     text        PRIMARY KEY
                CHECK (sale_id ~ '^[A-Za-z0-9._:-]+$' AND length(sale_id) <= 64),
    created_at  timestamptz NOT NULL DEFAULT now()
);
SELECT create_reference_table('sales');

CREATE TABLE sale_items (
    sale_id     text        NOT NULL,
    product_id  bigint      NOT NULL,
    quantity    integer     NOT NULL CHECK (quantity > 0),
    sold_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (sale_id, product_id)
);
SELECT create_distributed_table('sale_items', 'product_id', colocate_with => 'stock');
ALTER TABLE sale_items ADD CONSTRAINT sale_items_sale_id_fkey
    FOREIGN KEY (sale_id) REFERENCES sales (sale_id);
ALTER TABLE sale_items ADD CONSTRAINT sale_items_product_id_fkey
    FOREIGN KEY (product_id) REFERENCES stock (product_id);

CREATE INDEX sale_items_by_product ON sale_items (product_id, sold_at);
