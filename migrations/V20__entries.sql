-- Statements and balances at a time (issue 26, part 3): every change of an account's counters
-- writes one entry per account it changes, in the same transaction, under that account's row
-- lock: which transfer changed it and how (`kind`, `direction`, `amount`), and its `balance`,
-- `held` and `pending_credits` right after. A statement page is a range of one account's
-- entries; a balance at a time is its last entry at or before that time.
--
-- `seq` numbers an account's entries 1, 2, … without gaps; `accounts.entry_seq` is the seq of
-- its latest entry (0: none yet), kept under the row lock like `event_position`, so a second
-- entry under a taken seq fails on the primary key (the transaction reruns), never a silent
-- gap. `at` is the time of the write, `clock_timestamp()` taken while the account's row is
-- locked (on Citus the coordinator's): unlike the transaction's start (`now()`, which an
-- earlier-started transaction that locked later would put before its predecessor), it never
-- goes back along an account's seq, so "the last entry at or before T" and "the entries from
-- T1 to T2" are ranges of the `(account_id, at, seq)` index.
--
-- Kinds: a transfer posted at once moves `balance` (`transfer`, `deposit`, `withdrawal`,
-- `reversal`, `opening`); `hold` moves `held` (debit side) and `pending_credits` (credit
-- side) by `amount`; `post` moves `balance` by the posted `amount` and releases the whole hold;
-- `void` and `expire` release the hold (`amount`, balance unchanged); `repair` is a repair of
-- the counters (`amount` the balance's change, its sign the direction). `direction` is the
-- account's side: `debit` for the transfer's source, `credit` for its destination.
-- `transfer_id` is NULL for an account's own opening without a balance, a repair, and the
-- entries this migration writes. `currency` is what moved (NULL on the system account's
-- entries that move no currency).
--
-- No foreign key to accounts: every entry is written by the engine under its account's row
-- lock, and a foreign key would cost a check per row on the batched engine's hot path; the
-- ledger audit compares each account's latest entry with its counters instead.
--
-- Existing accounts: one `opening` entry each (seq 1), with their counters as they are when
-- this runs and this migration's time. History before it is not known: a balance asked for a
-- time before it finds no entry (the service answers 404 `no-balance-at`).
ALTER TABLE accounts ADD COLUMN entry_seq bigint NOT NULL DEFAULT 0;

CREATE TABLE entries (
    account_id            bigint      NOT NULL,
    seq                   bigint      NOT NULL CHECK (seq >= 1),
    transfer_id           text,
    kind                  text        NOT NULL
                          CHECK (kind IN ('opening', 'transfer', 'deposit', 'withdrawal',
                                          'reversal', 'hold', 'post', 'void', 'expire',
                                          'repair')),
    direction             text        NOT NULL CHECK (direction IN ('debit', 'credit')),
    amount                bigint      NOT NULL CHECK (amount >= 0),
    currency              text,
    balance_after         bigint      NOT NULL,
    held_after            bigint      NOT NULL CHECK (held_after >= 0),
    pending_credits_after bigint      NOT NULL CHECK (pending_credits_after >= 0),
    at                    timestamptz NOT NULL,
    PRIMARY KEY (account_id, seq)
);
-- Statement pages (`at` from/to, keyset on (at, seq)) and the balance at a time (the last at
-- or before it): one range scan each.
CREATE INDEX entries_at ON entries (account_id, at, seq);

INSERT INTO entries (account_id, seq, transfer_id, kind, direction, amount, currency,
                     balance_after, held_after, pending_credits_after, at)
SELECT id, 1, NULL, 'opening', CASE WHEN balance < 0 THEN 'debit' ELSE 'credit' END,
       abs(balance), currency, balance, held, pending_credits, now()
  FROM accounts;
UPDATE accounts SET entry_seq = 1;
