-- Citus twin of migrations/V7__locations.sql: the same tables, columns and checks; the
-- per-location rows distributed by product next to the stock rows and reservations they belong
-- to, the locations themselves a reference table.
--
-- What Citus refuses here, and what refuses the same writes instead:
-- - foreign keys from distributed tables to `locations` keyed by its own id (not co-located):
--   `locations` is a reference table, which a distributed table may reference, so they stay.
-- - reservation_allocations.reservation_id REFERENCES reservations (id): on Citus reservations
--   are keyed by (product_id, id), so the reference names (product_id, reservation_id) and the
--   primary key is (product_id, reservation_id, location_id). A reservation belongs to one
--   product (that reference proves it), so the key refuses exactly the writes the portable
--   (reservation_id, location_id) key refuses.
-- - several constraints in one ALTER TABLE: each is added by its own statement.
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

CREATE TABLE locations (
    location_id text        PRIMARY KEY
                CHECK (location_id ~ '^[A-Za-z0-9._:-]+$' AND length(location_id) <= 64),
    priority    integer     NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now()
);
SELECT create_reference_table('locations');

ALTER TABLE stock ADD COLUMN located boolean NOT NULL DEFAULT false;

CREATE TABLE stock_locations (
    product_id  bigint      NOT NULL,
    location_id text        NOT NULL,
    available   integer     NOT NULL,
    reserved    integer     NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (product_id, location_id),
    CONSTRAINT location_available_not_negative CHECK (available >= 0),
    CONSTRAINT location_reserved_not_negative  CHECK (reserved >= 0)
);
SELECT create_distributed_table('stock_locations', 'product_id', colocate_with => 'stock');
ALTER TABLE stock_locations ADD CONSTRAINT stock_locations_product_id_fkey
    FOREIGN KEY (product_id) REFERENCES stock (product_id);
ALTER TABLE stock_locations ADD CONSTRAINT stock_locations_location_id_fkey
    FOREIGN KEY (location_id) REFERENCES locations (location_id);

ALTER TABLE reservations ADD COLUMN allocated boolean NOT NULL DEFAULT false;

CREATE TABLE reservation_allocations (
    reservation_id uuid    NOT NULL,
    product_id     bigint  NOT NULL,
    location_id    text    NOT NULL,
    quantity       integer NOT NULL CHECK (quantity > 0),
    PRIMARY KEY (product_id, reservation_id, location_id)
);
SELECT create_distributed_table('reservation_allocations', 'product_id', colocate_with => 'stock');
ALTER TABLE reservation_allocations ADD CONSTRAINT reservation_allocations_reservation_id_fkey
    FOREIGN KEY (product_id, reservation_id) REFERENCES reservations (product_id, id);
ALTER TABLE reservation_allocations ADD CONSTRAINT reservation_allocations_location_fkey
    FOREIGN KEY (product_id, location_id) REFERENCES stock_locations (product_id, location_id);

CREATE INDEX reservation_allocations_by_location
    ON reservation_allocations (product_id, location_id);

CREATE TABLE sale_allocations (
    sale_id     text    NOT NULL,
    product_id  bigint  NOT NULL,
    location_id text    NOT NULL,
    quantity    integer NOT NULL CHECK (quantity > 0),
    PRIMARY KEY (sale_id, product_id, location_id)
);
SELECT create_distributed_table('sale_allocations', 'product_id', colocate_with => 'stock');
ALTER TABLE sale_allocations ADD CONSTRAINT sale_allocations_sale_fkey
    FOREIGN KEY (sale_id, product_id) REFERENCES sale_items (sale_id, product_id);
ALTER TABLE sale_allocations ADD CONSTRAINT sale_allocations_location_fkey
    FOREIGN KEY (product_id, location_id) REFERENCES stock_locations (product_id, location_id);

ALTER TABLE stock_movements ADD COLUMN location_id text;
ALTER TABLE stock_movements ADD CONSTRAINT stock_movements_location_id_fkey
    FOREIGN KEY (location_id) REFERENCES locations (location_id);
