//! A recorded history: every operation the clients sent (reserve, confirm, release, transfer,
//! hold, post, void), the answer it got, and the answers of the replays that settled it.
//!
//! What an answer says about the operation ([`verdict`]): a 2xx applied it; a 4xx refused it,
//! and a 503 carrying `"applied": false` says it was not applied — both promise nothing was
//! written; anything else (no answer, a 5xx without that promise, `"applied": null`) leaves
//! the outcome unknown. [`settle`] learns every unknown outcome by sending the same request
//! again (the same idempotency key: order id, transfer id, or the hold's own route), which
//! never applies an operation twice.

use std::time::Duration;

use serde_json::{json, Value};

use super::http::{self, Answer, Request};

/// Every hold the clients make lives this long: far longer than a run, so the sweeper never
/// settles one and every hold's fate is the clients'.
pub const HOLD_TIMEOUT_S: i64 = 3_600;

/// One operation, with its idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `POST /v1/reservations`: (product, quantity) per item.
    Reserve {
        order: String,
        items: Vec<(i64, i32)>,
    },
    Confirm {
        order: String,
    },
    Release {
        order: String,
    },
    /// A transfer posted at once.
    Transfer {
        id: String,
        from: i64,
        to: i64,
        amount: i64,
    },
    /// A pending transfer (`"pending": true`).
    Hold {
        id: String,
        from: i64,
        to: i64,
        amount: i64,
    },
    /// Posts `amount` of hold `id`.
    Post {
        id: String,
        amount: i64,
    },
    Void {
        id: String,
    },
}

impl Op {
    /// The HTTP request that makes it.
    pub fn request(&self) -> Request {
        let (method, path, body) = match self {
            Op::Reserve { order, items } => {
                let items: Vec<Value> = items
                    .iter()
                    .map(|(p, q)| json!({"product_id": p, "quantity": q}))
                    .collect();
                (
                    "POST",
                    "/v1/reservations".to_owned(),
                    Some(json!({"order_id": order, "items": items})),
                )
            }
            Op::Confirm { order } => ("POST", format!("/v1/orders/{order}/confirm"), None),
            Op::Release { order } => ("POST", format!("/v1/orders/{order}/release"), None),
            Op::Transfer {
                id,
                from,
                to,
                amount,
            } => (
                "POST",
                "/v1/transfers".to_owned(),
                Some(json!({"id": id, "from": from, "to": to, "amount": amount})),
            ),
            Op::Hold {
                id,
                from,
                to,
                amount,
            } => (
                "POST",
                "/v1/transfers".to_owned(),
                Some(json!({"id": id, "from": from, "to": to, "amount": amount,
                            "pending": true, "timeout_s": HOLD_TIMEOUT_S})),
            ),
            Op::Post { id, amount } => (
                "POST",
                format!("/v1/transfers/{id}/post"),
                Some(json!({ "amount": amount })),
            ),
            Op::Void { id } => ("POST", format!("/v1/transfers/{id}/void"), None),
        };
        Request { method, path, body }
    }
}

/// What an answer says about its operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Applied,
    /// Refused (4xx) or `"applied": false`: nothing of it was written.
    NotApplied,
    Unknown,
}

/// See the module docs.
pub fn verdict(answer: &Answer) -> Verdict {
    match answer {
        Answer::Status(200..=299, _) => Verdict::Applied,
        Answer::Status(400..=499, _) => Verdict::NotApplied,
        Answer::Status(503, body) if body["applied"] == json!(false) => Verdict::NotApplied,
        _ => Verdict::Unknown,
    }
}

/// Whether a replay's answer tells the operation's outcome: applied (2xx, a replay answers
/// with what is there) or refused (4xx, with nothing of it there).
fn replay_decides(answer: &Answer) -> bool {
    matches!(answer, Answer::Status(200..=499, _))
}

/// One operation and everything it was answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Which client sent it (and so which sequence it belongs to).
    pub client: usize,
    pub op: Op,
    /// The answer while the faults ran.
    pub answer: Answer,
    /// The answers of the replays that settled it, in order.
    pub replays: Vec<Answer>,
}

impl Record {
    pub fn new(client: usize, op: Op, answer: Answer) -> Record {
        Record {
            client,
            op,
            answer,
            replays: Vec::new(),
        }
    }

    /// The answer that decided its outcome: its own answer unless unknown, else the first
    /// replay that was applied or refused; while nothing decided, its own (unknown) answer. A
    /// replay's 503, even with `"applied": false`, decides nothing: it says the replay applied
    /// nothing, not whether the first attempt did.
    pub fn deciding(&self) -> &Answer {
        if verdict(&self.answer) != Verdict::Unknown {
            return &self.answer;
        }
        self.replays
            .iter()
            .find(|a| replay_decides(a))
            .unwrap_or(&self.answer)
    }

    /// Its outcome as far as it is known.
    pub fn outcome(&self) -> Verdict {
        verdict(self.deciding())
    }

    /// Every answer it got, the first one and the replays'.
    pub fn answers(&self) -> impl Iterator<Item = &Answer> {
        std::iter::once(&self.answer).chain(&self.replays)
    }
}

/// How the unknown outcomes are learned: at most `attempts` replays each, `pause` after one
/// that is still unknown, each bounded by `timeout`.
#[derive(Debug, Clone, Copy)]
pub struct Settle {
    pub attempts: usize,
    pub pause: Duration,
    pub timeout: Duration,
}

impl Default for Settle {
    fn default() -> Self {
        Settle {
            attempts: 20,
            pause: Duration::from_millis(250),
            timeout: Duration::from_secs(30),
        }
    }
}

/// Replays, in history order, every operation whose outcome is unknown until a replay is
/// applied or refused (or the attempts run out). Returns the operations still unknown. Call it
/// once nothing of the history can still be in flight (on Citus: after the 2PC recovery), or
/// a refusal could answer for a first attempt that commits later.
pub async fn settle(addr: &str, token: &str, history: &mut [Record], how: Settle) -> Vec<Op> {
    let mut unknown = Vec::new();
    for record in history.iter_mut() {
        for _ in 0..how.attempts {
            if record.outcome() != Verdict::Unknown {
                break;
            }
            let answer = http::send(addr, token, &record.op.request(), how.timeout).await;
            let still_unknown = !replay_decides(&answer);
            record.replays.push(answer);
            if still_unknown {
                tokio::time::sleep(how.pause).await;
            }
        }
        if record.outcome() == Verdict::Unknown {
            unknown.push(record.op.clone());
        }
    }
    unknown
}

/// How many records of `history` have each outcome: (applied, not applied, unknown).
pub fn tally(history: &[Record]) -> (usize, usize, usize) {
    let mut counts = (0, 0, 0);
    for record in history {
        match record.outcome() {
            Verdict::Applied => counts.0 += 1,
            Verdict::NotApplied => counts.1 += 1,
            Verdict::Unknown => counts.2 += 1,
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_promises_what_its_status_and_applied_say() {
        let cases = [
            (Answer::Status(201, json!({})), Verdict::Applied),
            (
                Answer::Status(200, json!({"replayed": true})),
                Verdict::Applied,
            ),
            (Answer::Status(409, json!({})), Verdict::NotApplied),
            (Answer::Status(404, json!({})), Verdict::NotApplied),
            (
                Answer::Status(503, json!({"applied": false})),
                Verdict::NotApplied,
            ),
            (
                Answer::Status(503, json!({"applied": null})),
                Verdict::Unknown,
            ),
            (Answer::Status(503, json!({})), Verdict::Unknown),
            (Answer::Status(500, json!({})), Verdict::Unknown),
            (Answer::None("reset".into()), Verdict::Unknown),
        ];
        for (answer, expected) in cases {
            assert_eq!(verdict(&answer), expected, "{answer:?}");
        }
    }

    #[test]
    fn the_first_known_answer_decides() {
        let op = Op::Void { id: "h".into() };
        let mut record = Record::new(0, op, Answer::None("cut".into()));
        assert_eq!(record.outcome(), Verdict::Unknown);
        record.replays.push(Answer::Status(503, json!({})));
        assert_eq!(record.outcome(), Verdict::Unknown);
        // A replay that applied nothing says nothing about the first attempt.
        record
            .replays
            .push(Answer::Status(503, json!({"applied": false})));
        assert_eq!(record.outcome(), Verdict::Unknown);
        record.replays.push(Answer::Status(409, json!({})));
        record.replays.push(Answer::Status(200, json!({})));
        assert_eq!(record.outcome(), Verdict::NotApplied);
        assert_eq!(record.answers().count(), 5);
    }

    #[test]
    fn requests_carry_their_keys() {
        let hold = Op::Hold {
            id: "h-1".into(),
            from: 1,
            to: 2,
            amount: 30,
        };
        let request = hold.request();
        assert_eq!(request.path, "/v1/transfers");
        let body = request.body.expect("a body");
        assert_eq!(
            (&body["id"], &body["pending"]),
            (&json!("h-1"), &json!(true))
        );
        let post = Op::Post {
            id: "h-1".into(),
            amount: 10,
        };
        assert_eq!(post.request().path, "/v1/transfers/h-1/post");
        let confirm = Op::Confirm {
            order: "o-1".into(),
        };
        assert_eq!(confirm.request().path, "/v1/orders/o-1/confirm");
    }
}
