-- Money holds (issue 14): pending transfers, balance limits and linked transfer groups.
--
-- An account keeps, next to its posted `balance`, the sum of its live pending debits (`held`)
-- and credits (`pending_credits`), updated in the same transaction as the transfer row whose
-- status they follow; the audit recomputes both from the pending rows. `available` is
-- `balance - held`. Limits: `min_balance` (NULL only for the system account: no lower limit)
-- and `max_balance` (NULL: none). Pending debits count against `min_balance`, pending credits
-- against `max_balance`, so posting, voiding or expiring a hold can never break a limit: the
-- CHECKs below are invariants, the last line of defence behind the checks the code makes on
-- the locked rows (computed in numeric, so the CHECK itself cannot overflow).
ALTER TABLE accounts
    ADD COLUMN held            bigint NOT NULL DEFAULT 0 CHECK (held >= 0),
    ADD COLUMN pending_credits bigint NOT NULL DEFAULT 0 CHECK (pending_credits >= 0),
    ADD COLUMN min_balance     bigint DEFAULT 0,
    ADD COLUMN max_balance     bigint;

UPDATE accounts SET min_balance = NULL WHERE id = 0;

-- `balance >= 0` becomes `balance - held >= min_balance` (a negative minimum is a credit line).
ALTER TABLE accounts DROP CONSTRAINT balance_not_negative;
ALTER TABLE accounts
    ADD CONSTRAINT limits_only_for_customers
        CHECK ((id = 0) = (min_balance IS NULL) AND (id <> 0 OR max_balance IS NULL)),
    ADD CONSTRAINT limits_ordered
        CHECK (max_balance IS NULL OR min_balance IS NULL OR max_balance >= min_balance),
    ADD CONSTRAINT available_within_min
        CHECK (min_balance IS NULL OR balance::numeric - held >= min_balance),
    ADD CONSTRAINT pending_within_max
        CHECK (max_balance IS NULL OR balance::numeric + pending_credits <= max_balance);

-- A linked group: its transfers were applied together, all or none. Keyed by the client's id,
-- so a replay finds it and answers with its transfers (`group_position` keeps their order).
CREATE TABLE transfer_groups (
    id          text        PRIMARY KEY CHECK (id ~ '^[A-Za-z0-9._:-]{1,64}$'),
    size        smallint    NOT NULL CHECK (size BETWEEN 1 AND 100),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- A transfer is `posted` at once (as before) or `pending` until exactly one of post, void or
-- expiry settles it. Each of those is `UPDATE … WHERE status = 'pending'` under the account
-- locks, so only one can move it. `posted_amount` is what a posted hold moved (1..=amount); NULL
-- on a posted row means the whole amount, so every existing row and every one-shot INSERT stays
-- as it was. `timeout_s`/`expires_at` are set only for a transfer created pending, which is also
-- how a replay tells the two kinds of request apart.
ALTER TABLE transfers
    ADD COLUMN status         text        NOT NULL DEFAULT 'posted'
               CHECK (status IN ('pending', 'posted', 'voided', 'expired')),
    ADD COLUMN posted_amount  bigint,
    ADD COLUMN timeout_s      integer     CHECK (timeout_s BETWEEN 1 AND 2592000),
    ADD COLUMN expires_at     timestamptz,
    ADD COLUMN settled_at     timestamptz,
    ADD COLUMN group_id       text        REFERENCES transfer_groups (id),
    ADD COLUMN group_position smallint    CHECK (group_position BETWEEN 0 AND 99);

ALTER TABLE transfers
    ADD CONSTRAINT posted_amount_only_when_posted
        CHECK (posted_amount IS NULL
               OR (status = 'posted' AND posted_amount BETWEEN 1 AND amount)),
    ADD CONSTRAINT pending_has_deadline
        CHECK ((timeout_s IS NULL) = (expires_at IS NULL)
               -- only a transfer created pending can be pending, voided or expired
               AND (status = 'posted' OR expires_at IS NOT NULL)),
    ADD CONSTRAINT holds_are_transfers
        CHECK (expires_at IS NULL OR kind = 'transfer'),
    ADD CONSTRAINT group_position_with_group
        CHECK ((group_id IS NULL) = (group_position IS NULL));

-- The sweeper's scan: only live holds, by deadline.
CREATE INDEX transfers_pending_due ON transfers (expires_at) WHERE status = 'pending';
CREATE UNIQUE INDEX transfers_group_position ON transfers (group_id, group_position)
    WHERE group_id IS NOT NULL;
