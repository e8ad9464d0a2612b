-- Citus twin of migrations/V3__cheaper_reservation_checks.sql. The order id check changes as on one
-- node. The triggers do not come: Citus refuses triggers on distributed tables, and they are
-- not needed, because the foreign key they stand in for was never dropped here (V1's twin keeps
-- reservations.product_id REFERENCES stock, co-located, which refuses the same writes: an
-- unknown product, deleting a product that has reservations; moving a reservation to another
-- product is refused by Citus itself, as an update of the distribution column).
ALTER TABLE reservations DROP CONSTRAINT reservations_order_id_check;
ALTER TABLE reservations ADD CONSTRAINT reservations_order_id_check
    CHECK (order_id ~ '^[A-Za-z0-9._:-]+$' AND length(order_id) <= 64);
