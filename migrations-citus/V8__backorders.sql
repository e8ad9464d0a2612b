-- Citus twin of migrations/V8__backorders.sql: the same columns, checks, sequence and index, and
-- the fill history distributed by product next to the stock rows and reservations it names.
--
-- What Citus refuses here, and what refuses the same writes instead:
-- - several constraints in one ALTER TABLE: each is added by its own statement (same names,
--   same checks).
-- - backorder_fills.reservation_id REFERENCES reservations (id) and movement_id REFERENCES
--   stock_movements (id): on Citus those tables are keyed by (product_id, id), so the references
--   name (product_id, reservation_id) and (product_id, movement_id). They refuse every write the
--   portable ones refuse (an unknown reservation or movement), and also a fill naming another
--   product's reservation or movement, which no code path writes.
-- - a primary key without the distribution column: backorder_fills is keyed by (product_id, id);
--   its id comes from a sequence (unique by construction, as stock_movements' id).
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

ALTER TABLE stock ADD COLUMN backorder_limit integer NOT NULL DEFAULT 0;
ALTER TABLE stock ADD COLUMN backordered integer NOT NULL DEFAULT 0;
ALTER TABLE stock ADD CONSTRAINT backorder_limit_not_negative CHECK (backorder_limit >= 0);
ALTER TABLE stock ADD CONSTRAINT backordered_within_limit
    CHECK (backordered >= 0 AND backordered <= backorder_limit);

ALTER TABLE reservations ADD COLUMN backordered integer NOT NULL DEFAULT 0;
ALTER TABLE reservations ADD COLUMN backorder_arrival bigint;
ALTER TABLE reservations ADD CONSTRAINT reservations_backordered_range
    CHECK (backordered >= 0 AND backordered <= quantity);
ALTER TABLE reservations ADD CONSTRAINT reservations_backorder_has_arrival
    CHECK (backordered = 0 OR backorder_arrival IS NOT NULL);

CREATE SEQUENCE backorder_arrivals;

CREATE INDEX reservations_live_backorders
    ON reservations (product_id, backorder_arrival)
    WHERE backordered > 0 AND status IN ('active', 'confirmed');

CREATE TABLE backorder_fills (
    id             bigserial   NOT NULL,
    product_id     bigint      NOT NULL,
    reservation_id uuid        NOT NULL,
    arrival        bigint      NOT NULL,
    quantity       integer     NOT NULL CHECK (quantity > 0),
    sold           boolean     NOT NULL,
    movement_id    bigint      NOT NULL,
    filled_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (product_id, id)
);
SELECT create_distributed_table('backorder_fills', 'product_id', colocate_with => 'stock');
ALTER TABLE backorder_fills ADD CONSTRAINT backorder_fills_product_id_fkey
    FOREIGN KEY (product_id) REFERENCES stock (product_id);
ALTER TABLE backorder_fills ADD CONSTRAINT backorder_fills_reservation_id_fkey
    FOREIGN KEY (product_id, reservation_id) REFERENCES reservations (product_id, id);
ALTER TABLE backorder_fills ADD CONSTRAINT backorder_fills_movement_id_fkey
    FOREIGN KEY (product_id, movement_id) REFERENCES stock_movements (product_id, id);

CREATE INDEX backorder_fills_by_product ON backorder_fills (product_id, id);
CREATE INDEX backorder_fills_by_reservation ON backorder_fills (reservation_id);
