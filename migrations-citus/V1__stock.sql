-- Citus twin of migrations/V1__stock.sql: the same tables, columns and checks, distributed by product so
-- that a reservation's whole transaction (its stock row, its reservation rows, its movements) is
-- one shard's. Rules of this directory (migrations-citus/): ARCHITECTURE.md, "On Citus".
--
-- What Citus refuses here, and what refuses the same writes instead:
-- - a primary key without the distribution column: reservations and stock_movements are keyed by
--   (product_id, id). Their ids stay unique by construction (a random v4 uuid chosen by saldo; a
--   sequence), which is the one uniqueness the database no longer checks on its own.
-- - nothing else: the foreign keys to stock are co-located, so Citus keeps them.
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

CREATE TABLE stock (
    product_id  bigint      PRIMARY KEY CHECK (product_id > 0),
    available   integer     NOT NULL,
    reserved    integer     NOT NULL DEFAULT 0,
    version     bigint      NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT available_not_negative CHECK (available >= 0),
    CONSTRAINT reserved_not_negative  CHECK (reserved >= 0)
);
SELECT create_distributed_table('stock', 'product_id');

CREATE TABLE reservations (
    id          uuid        NOT NULL,
    order_id    text        NOT NULL CHECK (order_id ~ '^[A-Za-z0-9._:-]{1,64}$'),
    product_id  bigint      NOT NULL,
    quantity    integer     NOT NULL CHECK (quantity > 0),
    status      text        NOT NULL DEFAULT 'active'
                CHECK (status IN ('active', 'confirmed', 'released', 'expired')),
    expires_at  timestamptz NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    settled_at  timestamptz,
    CHECK ((status = 'active') = (settled_at IS NULL)),
    PRIMARY KEY (product_id, id)
);
SELECT create_distributed_table('reservations', 'product_id', colocate_with => 'stock');
ALTER TABLE reservations ADD CONSTRAINT reservations_product_id_fkey
    FOREIGN KEY (product_id) REFERENCES stock (product_id);

-- Holds the distribution column already: Citus enforces it per shard, which is exact.
CREATE UNIQUE INDEX reservations_live_order_product
    ON reservations (order_id, product_id)
    WHERE status IN ('active', 'confirmed');

CREATE INDEX reservations_by_order ON reservations (order_id);

CREATE INDEX reservations_active_by_expiry
    ON reservations (expires_at)
    WHERE status = 'active';

-- The router of an order (Citus only): which products it has reservations on, so confirm,
-- release and a replay visit those products' shards and no others. Written in the reserve's
-- transaction (a 2PC when the order's shard is not its products'); products only ever added.
CREATE TABLE orders (
    order_id    text        PRIMARY KEY CHECK (order_id ~ '^[A-Za-z0-9._:-]{1,64}$'),
    products    bigint[]    NOT NULL CHECK (cardinality(products) BETWEEN 1 AND 100),
    created_at  timestamptz NOT NULL DEFAULT now()
);
SELECT create_distributed_table('orders', 'order_id', colocate_with => 'none');

CREATE TABLE stock_movements (
    id          bigserial   NOT NULL,
    product_id  bigint      NOT NULL,
    kind        text        NOT NULL CHECK (kind IN ('count', 'adjustment')),
    quantity    integer     NOT NULL,
    reason      text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK (kind <> 'count' OR quantity >= 0),
    PRIMARY KEY (product_id, id)
);
SELECT create_distributed_table('stock_movements', 'product_id', colocate_with => 'stock');
ALTER TABLE stock_movements ADD CONSTRAINT stock_movements_product_id_fkey
    FOREIGN KEY (product_id) REFERENCES stock (product_id);

CREATE INDEX stock_movements_by_product ON stock_movements (product_id, id);
