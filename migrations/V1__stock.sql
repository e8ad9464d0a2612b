-- Stock and reservations (seed 000), with the version column of seed 004.
-- The CHECK constraints are the last line of defence: no code path may write negative stock.
CREATE TABLE stock (
    product_id  bigint      PRIMARY KEY CHECK (product_id > 0),
    available   integer     NOT NULL,
    reserved    integer     NOT NULL DEFAULT 0,
    version     bigint      NOT NULL DEFAULT 0,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT available_not_negative CHECK (available >= 0),
    CONSTRAINT reserved_not_negative  CHECK (reserved >= 0)
);

-- expired and released are kept apart so that the expired/confirmed ratio can be measured.
CREATE TABLE reservations (
    id          uuid        PRIMARY KEY,
    order_id    text        NOT NULL CHECK (order_id ~ '^[A-Za-z0-9._:-]{1,64}$'),
    product_id  bigint      NOT NULL REFERENCES stock (product_id),
    quantity    integer     NOT NULL CHECK (quantity > 0),
    status      text        NOT NULL DEFAULT 'active'
                CHECK (status IN ('active', 'confirmed', 'released', 'expired')),
    expires_at  timestamptz NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    -- Set while the stock row is locked (clock_timestamp), so it orders consistently with counts.
    settled_at  timestamptz,
    CHECK ((status = 'active') = (settled_at IS NULL))
);

-- One live (active or confirmed) reservation per order and product: the idempotency key.
CREATE UNIQUE INDEX reservations_live_order_product
    ON reservations (order_id, product_id)
    WHERE status IN ('active', 'confirmed');

CREATE INDEX reservations_by_order ON reservations (order_id);

-- What the sweeper scans.
CREATE INDEX reservations_active_by_expiry
    ON reservations (expires_at)
    WHERE status = 'active';

-- Physical counts and adjustments, append-only: the history the audit compares against.
CREATE TABLE stock_movements (
    id          bigserial   PRIMARY KEY,
    product_id  bigint      NOT NULL REFERENCES stock (product_id),
    kind        text        NOT NULL CHECK (kind IN ('count', 'adjustment')),
    -- count: the on-hand quantity counted; adjustment: the signed delta.
    quantity    integer     NOT NULL,
    reason      text        NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    CHECK (kind <> 'count' OR quantity >= 0)
);

CREATE INDEX stock_movements_by_product ON stock_movements (product_id, id);
