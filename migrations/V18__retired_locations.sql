-- Retiring a location (issue 27, item 4): a location that holds nothing (no unit available or
-- reserved there for any product) may be retired; it then takes no count, no priority and no
-- new stock, and the lists show when it was retired. The row stays: allocations and sales that
-- name it keep their history.
--
-- `locations` is a reference table on Citus; the same file runs there as it is.
ALTER TABLE locations ADD COLUMN retired_at timestamptz;
