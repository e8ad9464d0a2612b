-- Stock states and moves (issue 27, item 2): besides `available` and `reserved`, a product (and
-- each of its locations) holds units in named non-sellable states: `damaged`, `safety_stock`,
-- `incoming`. Units in a state are not available: no take reads these columns, so they are never
-- reserved or sold. `POST /v1/products/{id}/moves` moves units between `available` and the
-- states, and between locations, idempotent by its `move_id` (per product: the route is the
-- product's), with a reason.
--
-- One column per state (a fixed set): a move is one UPDATE of the row it holds locked, and the
-- CHECKs make "never negative" the database's rule too. Added with a constant default: no
-- rewrite. A located product's `stock` row stays the sum of its locations, states included.
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

-- A move that changes the product's `available` also records a movement of kind `move` (the
-- signed change of `available`) in the product's history, so the on-hand audit (last count +
-- adjustments and moves since it − …) keeps its meaning, and a move into `available` is an
-- arrival its backorder fills can name, as counts and adjustments are.
ALTER TABLE stock_movements DROP CONSTRAINT stock_movements_kind_check;
ALTER TABLE stock_movements ADD CONSTRAINT stock_movements_kind_check
    CHECK (kind IN ('count', 'adjustment', 'move'));

-- The moves themselves: the idempotency key and what each did (the states audit sums them).
-- `moved_at` is taken while the product's stock row is locked.
CREATE TABLE stock_moves (
    product_id    bigint      NOT NULL REFERENCES stock (product_id),
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

-- A return may put its units into a state (absent: `available`, as before).
ALTER TABLE return_items ADD COLUMN state text NOT NULL DEFAULT 'available';
ALTER TABLE return_items ADD CONSTRAINT return_items_state_known
    CHECK (state IN ('available', 'damaged', 'safety_stock', 'incoming'));

-- A move's event (`stock.moved`) is the only event of its own stream, `move:<product>:<move_id>`
-- (as a sale's `sale.created` is of `sale:<id>`): the product's stream is numbered by its stock
-- row's version, which the move's write records as `stock.changed`.
ALTER TABLE events DROP CONSTRAINT events_stream_kind;
ALTER TABLE events ADD CONSTRAINT events_stream_kind
    CHECK (stream_type IN ('product', 'order', 'sale', 'account', 'transfer', 'move'));
