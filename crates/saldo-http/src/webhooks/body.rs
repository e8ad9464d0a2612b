//! The JSON body of one delivery request, `{"events":[…]}`, bounded twice: at most
//! [`saldo::webhooks::MAX_BATCH`] events (the feed read) and at most [`MAX_BODY_BYTES`] (here:
//! an order's event carries up to 100 lines, so 500 of them could be megabytes). A batch that
//! would pass the byte bound is cut after the last event that fits, and the cursor moves only
//! past what was sent; one event alone is always sent, whatever its size.

use saldo::events::Event;

/// Largest body a delivery sends when it holds more than one event.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

const HEAD: &[u8] = b"{\"events\":[";
const TAIL: &[u8] = b"]}";

/// The body of the longest prefix of `events` within [`MAX_BODY_BYTES`] (at least one event),
/// and how many events it carries. The bytes are what `serde_json` writes for the object.
pub fn within_limit(events: &[Event]) -> Result<(Vec<u8>, usize), serde_json::Error> {
    let mut body = HEAD.to_vec();
    let mut sent = 0;
    for event in events {
        let one = serde_json::to_vec(event)?;
        let separator = usize::from(sent > 0);
        if sent > 0 && body.len() + separator + one.len() + TAIL.len() > MAX_BODY_BYTES {
            break;
        }
        if sent > 0 {
            body.push(b',');
        }
        body.extend_from_slice(&one);
        sent += 1;
    }
    body.extend_from_slice(TAIL);
    Ok((body, sent))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: i64, padding: usize) -> Event {
        Event {
            cursor: format!("e2.{seq:x}"),
            seq,
            id: seq,
            kind: "stock.changed".to_owned(),
            stream: "product:1".to_owned(),
            position: seq,
            at: chrono::Utc::now(),
            data: serde_json::json!({ "pad": "x".repeat(padding) }),
        }
    }

    #[derive(serde::Serialize)]
    struct Body<'a> {
        events: &'a [Event],
    }

    #[test]
    fn a_small_batch_is_sent_whole_as_serde_writes_it() {
        let events: Vec<Event> = (1..=3).map(|s| event(s, 10)).collect();
        let (body, sent) = within_limit(&events).expect("body");
        assert_eq!(sent, 3);
        let whole = serde_json::to_vec(&Body { events: &events }).expect("serde");
        assert_eq!(body, whole);
    }

    #[test]
    fn a_large_batch_is_cut_within_the_bound_and_one_event_always_goes() {
        let events: Vec<Event> = (1..=10).map(|s| event(s, 300 * 1024)).collect();
        let (body, sent) = within_limit(&events).expect("body");
        assert_eq!(sent, 3, "three of 300 KiB fit in 1 MiB, four do not");
        assert!(body.len() <= MAX_BODY_BYTES);
        let parsed: serde_json::Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(parsed["events"].as_array().map(Vec::len), Some(3));

        let huge = [event(1, 2 * MAX_BODY_BYTES)];
        let (body, sent) = within_limit(&huge).expect("body");
        assert_eq!(sent, 1);
        assert!(body.len() > MAX_BODY_BYTES);
        assert_eq!(
            within_limit(&[]).expect("body"),
            (b"{\"events\":[]}".to_vec(), 0)
        );
    }
}
