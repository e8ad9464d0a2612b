-- Stock per location (issue 15): warehouses and stores, allocation in priority order.
--
-- The `stock` row stays the product's total (available = Σ location available, reserved =
-- Σ location reserved; an audit invariant), so every existing reader keeps its meaning. A
-- product is `located` from its first location count on; products never given a location keep
-- their one row and pay nothing: the strategies' conditional takes add `AND NOT located`, and
-- only a located product (zero rows affected, then the existing refusal read) takes the
-- located path. Lock order on that path: stock rows in product order, then stock_locations
-- rows in (product, location) order; no path locks a location row without its stock row.
CREATE TABLE locations (
    location_id text        PRIMARY KEY
                CHECK (location_id ~ '^[A-Za-z0-9._:-]+$' AND length(location_id) <= 64),
    -- Allocation order: lower first, then by id.
    priority    integer     NOT NULL DEFAULT 0,
    created_at  timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE stock ADD COLUMN located boolean NOT NULL DEFAULT false;

CREATE TABLE stock_locations (
    product_id  bigint      NOT NULL REFERENCES stock (product_id),
    location_id text        NOT NULL REFERENCES locations (location_id),
    available   integer     NOT NULL,
    reserved    integer     NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (product_id, location_id),
    CONSTRAINT location_available_not_negative CHECK (available >= 0),
    CONSTRAINT location_reserved_not_negative  CHECK (reserved >= 0)
);

-- Which reservation rows have allocations (written by the located path): read with the row,
-- so confirm, release and expiry look allocations up only for the rows that have them.
ALTER TABLE reservations ADD COLUMN allocated boolean NOT NULL DEFAULT false;

-- Where a reservation's units came from. Written once with the reservation, never changed:
-- settling the reservation moves the units at these locations.
CREATE TABLE reservation_allocations (
    reservation_id uuid    NOT NULL REFERENCES reservations (id),
    product_id     bigint  NOT NULL,
    location_id    text    NOT NULL,
    quantity       integer NOT NULL CHECK (quantity > 0),
    PRIMARY KEY (reservation_id, location_id),
    FOREIGN KEY (product_id, location_id) REFERENCES stock_locations (product_id, location_id)
);

CREATE INDEX reservation_allocations_by_location
    ON reservation_allocations (product_id, location_id);

-- Where a direct sale's units came from (located products only).
CREATE TABLE sale_allocations (
    sale_id     text    NOT NULL,
    product_id  bigint  NOT NULL,
    location_id text    NOT NULL,
    quantity    integer NOT NULL CHECK (quantity > 0),
    PRIMARY KEY (sale_id, product_id, location_id),
    FOREIGN KEY (sale_id, product_id) REFERENCES sale_items (sale_id, product_id),
    FOREIGN KEY (product_id, location_id) REFERENCES stock_locations (product_id, location_id)
);

-- A location's count is recorded with its location. The product's own history stays the rows
-- with no location: each location count also records the product's new total as a count, so
-- the product audit (last count + adjustments − confirmed − sold) keeps its meaning.
ALTER TABLE stock_movements ADD COLUMN location_id text REFERENCES locations (location_id);
