-- The outbox: every change saldo decides is appended here by the transaction that makes it, so
-- an event exists exactly when its change committed.
--
-- `xid` is the writing transaction's id: events are put in feed order (the `feed` table) only
-- once every transaction below them has ended (below the oldest one still running: its
-- snapshot's xmin), so an event that commits late with a lower id is never skipped, and in an
-- order that keeps each stream's positions increasing (see saldo::events). Each event belongs
-- to a stream (a product, an order, a sale, an account, a transfer) and has a
-- gap-free position in it: a product's is its stock row's version after the write; an order's
-- is counted on its reservation rows (`order_position`), which every transaction that writes an
-- order's event holds locked. On Citus this table stays a plain table of the coordinator,
-- written inside the distributed transaction: one xid space, one horizon.
CREATE TABLE events (
    xid         xid8        NOT NULL DEFAULT pg_current_xact_id(),
    id          bigint      GENERATED ALWAYS AS IDENTITY,
    stream_type text        NOT NULL,
    stream_id   text        NOT NULL,
    position    bigint      NOT NULL,
    type        text        NOT NULL,
    at          timestamptz NOT NULL DEFAULT now(),
    data        jsonb       NOT NULL,
    PRIMARY KEY (xid, id),
    CONSTRAINT events_stream_kind
        CHECK (stream_type IN ('product', 'order', 'sale', 'account', 'transfer')),
    CONSTRAINT events_position_positive CHECK (position > 0),
    CONSTRAINT events_stream_position UNIQUE (stream_type, stream_id, position)
);

-- The feed: events in the order readers follow, numbered by `seq` (gap-free, increasing).
CREATE TABLE feed (
    seq bigint PRIMARY KEY,
    xid xid8   NOT NULL,
    id  bigint NOT NULL,
    CONSTRAINT feed_event UNIQUE (xid, id)
);

-- The sequencer's state (one row): how far it has looked in (xid, id) order, the last `seq`
-- it gave, and how far retention has pruned (a cursor before `pruned_seq` lost events).
CREATE TABLE feed_state (
    only_row   boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    next_xid   xid8   NOT NULL DEFAULT '0',
    next_id    bigint NOT NULL DEFAULT 0,
    last_seq   bigint NOT NULL DEFAULT 0,
    pruned_seq bigint NOT NULL DEFAULT 0
);
INSERT INTO feed_state DEFAULT VALUES;

-- Events the sequencer has looked at and held back: their stream's previous event is not in
-- the feed yet.
CREATE TABLE feed_deferred (
    xid xid8   NOT NULL,
    id  bigint NOT NULL,
    PRIMARY KEY (xid, id)
);

-- An order's position in its event stream, carried by its reservation rows: the greatest over
-- its rows is the position of its latest event (0: none yet).
ALTER TABLE reservations ADD COLUMN order_position bigint NOT NULL DEFAULT 0;

-- An account's position in its event stream: the position of its latest `account.changed`,
-- counted on its row by every write of the ledger (under the row lock).
ALTER TABLE accounts ADD COLUMN event_position bigint NOT NULL DEFAULT 0;
