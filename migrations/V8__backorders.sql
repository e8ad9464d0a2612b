-- Backorders and preorders (issue 15): units beyond what is available, up to a per-product
-- limit, are reserved as backordered and filled oldest first when units arrive.
--
-- stock.reserved stays "allocated units of active reservations" (on hand = available +
-- reserved, as the audit proves it); stock.backordered is the units promised but not on hand:
-- Σ backordered of live (active and confirmed) reservations. The CHECKs are the last line of
-- defence; the engine refuses before them.
ALTER TABLE stock
    ADD COLUMN backorder_limit integer NOT NULL DEFAULT 0,
    ADD COLUMN backordered     integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT backorder_limit_not_negative CHECK (backorder_limit >= 0),
    ADD CONSTRAINT backordered_within_limit CHECK (backordered >= 0 AND backordered <= backorder_limit);

-- A reservation's quantity = allocated + backordered. backorder_arrival orders the backorders
-- of a product: taken from a sequence while the product's stock row is locked, so per product
-- it follows the row lock (created_at is the transaction's start and does not).
ALTER TABLE reservations
    ADD COLUMN backordered       integer NOT NULL DEFAULT 0,
    ADD COLUMN backorder_arrival bigint,
    ADD CONSTRAINT reservations_backordered_range
        CHECK (backordered >= 0 AND backordered <= quantity),
    ADD CONSTRAINT reservations_backorder_has_arrival
        CHECK (backordered = 0 OR backorder_arrival IS NOT NULL);

CREATE SEQUENCE backorder_arrivals;

-- What a fill scans: a product's live backorders in arrival order.
CREATE INDEX reservations_live_backorders
    ON reservations (product_id, backorder_arrival)
    WHERE backordered > 0 AND status IN ('active', 'confirmed');

-- One row per reservation a fill gave units to, append-only: the audit's evidence that fills
-- went in arrival order, and (sold = the reservation was confirmed, so the units went straight
-- to sold) the part of the history that left on hand through a backorder.
CREATE TABLE backorder_fills (
    id             bigserial   PRIMARY KEY,
    product_id     bigint      NOT NULL REFERENCES stock (product_id),
    reservation_id uuid        NOT NULL REFERENCES reservations (id),
    arrival        bigint      NOT NULL,
    quantity       integer     NOT NULL CHECK (quantity > 0),
    sold           boolean     NOT NULL,
    -- The count or adjustment that brought the units: "since the last count" by movement id,
    -- exact even when the count and its fills share a clock tick.
    movement_id    bigint      NOT NULL REFERENCES stock_movements (id),
    -- Taken while the stock row is locked, after the movement that brought the units.
    filled_at      timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX backorder_fills_by_product ON backorder_fills (product_id, id);
CREATE INDEX backorder_fills_by_reservation ON backorder_fills (reservation_id);
