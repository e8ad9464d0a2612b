-- Citus twin of migrations/V21__stock_states.sql: the same columns and checks (Citus propagates
-- them), and `stock_moves` distributed by product next to the stock rows a move writes.
--
-- What Citus refuses here, and what refuses the same writes instead:
-- - stock_moves.product_id REFERENCES stock: both are co-located, so it stays, added after the
--   table is distributed.
-- - the primary key (product_id, move_id) holds the distribution column already: it stays.
-- - several constraints in one ALTER TABLE, or a column added with its CHECK: each constraint
--   is added by its own statement, named.
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

ALTER TABLE stock ADD COLUMN damaged integer NOT NULL DEFAULT 0;
ALTER TABLE stock ADD COLUMN safety_stock integer NOT NULL DEFAULT 0;
ALTER TABLE stock ADD COLUMN incoming integer NOT NULL DEFAULT 0;
ALTER TABLE stock ADD CONSTRAINT stock_states_not_negative
    CHECK (damaged >= 0 AND safety_stock >= 0 AND incoming >= 0);
ALTER TABLE stock_locations ADD COLUMN damaged integer NOT NULL DEFAULT 0;
ALTER TABLE stock_locations ADD COLUMN safety_stock integer NOT NULL DEFAULT 0;
ALTER TABLE stock_locations ADD COLUMN incoming integer NOT NULL DEFAULT 0;
ALTER TABLE stock_locations ADD CONSTRAINT stock_locations_states_not_negative
    CHECK (damaged >= 0 AND safety_stock >= 0 AND incoming >= 0);

ALTER TABLE stock_movements DROP CONSTRAINT stock_movements_kind_check;
ALTER TABLE stock_movements ADD CONSTRAINT stock_movements_kind_check
    CHECK (kind IN ('count', 'adjustment', 'move'));

CREATE TABLE stock_moves (
    product_id    bigint      NOT NULL,
    move_id       text        NOT NULL
                  CHECK (move_id ~ '^[A-Za-z0-9._:-]+$' AND length(move_id) <= 64),
    quantity      integer     NOT NULL CHECK (quantity > 0),
    from_state    text        NOT NULL
                  CHECK (from_state IN ('available', 'damaged', 'safety_stock', 'incoming')),
    from_location text,
    to_state      text        NOT NULL
                  CHECK (to_state IN ('available', 'damaged', 'safety_stock', 'incoming')),
    to_location   text,
    reason        text        NOT NULL CHECK (char_length(reason) BETWEEN 1 AND 200),
    moved_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (product_id, move_id)
);
SELECT create_distributed_table('stock_moves', 'product_id', colocate_with => 'stock');
ALTER TABLE stock_moves ADD CONSTRAINT stock_moves_product_id_fkey
    FOREIGN KEY (product_id) REFERENCES stock (product_id);

ALTER TABLE return_items ADD COLUMN state text NOT NULL DEFAULT 'available';
ALTER TABLE return_items ADD CONSTRAINT return_items_state_known
    CHECK (state IN ('available', 'damaged', 'safety_stock', 'incoming'));

-- A move's event (`stock.moved`) is the only event of its own stream, `move:<product>:<move_id>`
-- (as a sale's `sale.created` is of `sale:<id>`): the product's stream is numbered by its stock
-- row's version, which the move's write records as `stock.changed`.
ALTER TABLE events DROP CONSTRAINT events_stream_kind;
ALTER TABLE events ADD CONSTRAINT events_stream_kind
    CHECK (stream_type IN ('product', 'order', 'sale', 'account', 'transfer', 'move'));
