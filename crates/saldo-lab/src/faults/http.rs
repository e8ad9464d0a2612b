//! The fault lab's HTTP client: one HTTP/1.1 request per connection (`Connection: close`), so
//! every request stands alone and "no answer" means exactly that request got none. Bounded:
//! the whole exchange by a timeout, the answer by [`MAX_ANSWER_BYTES`].

use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Largest answer read; a longer one counts as no answer.
pub const MAX_ANSWER_BYTES: u64 = 1024 * 1024;

/// What one request got.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// A status and its JSON body (`Null` when empty or not JSON).
    Status(u16, Value),
    /// No answer: refused, reset, timed out, or unreadable (why, for the report).
    None(String),
}

impl Answer {
    pub fn status(&self) -> Option<u16> {
        match self {
            Answer::Status(status, _) => Some(*status),
            Answer::None(_) => None,
        }
    }

    /// The body, `Null` when there was no answer.
    pub fn body(&self) -> &Value {
        match self {
            Answer::Status(_, body) => body,
            Answer::None(_) => &Value::Null,
        }
    }
}

/// A request: method, path, bearer token and optional JSON body.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub method: &'static str,
    pub path: String,
    pub body: Option<Value>,
}

/// Sends `request` to `addr` (`host:port`) with `token`, within `timeout`.
pub async fn send(addr: &str, token: &str, request: &Request, timeout: Duration) -> Answer {
    match tokio::time::timeout(timeout, exchange(addr, token, request)).await {
        Ok(Ok(answer)) => answer,
        Ok(Err(why)) => Answer::None(why),
        Err(_) => Answer::None(format!("no answer within {timeout:?}")),
    }
}

async fn exchange(addr: &str, token: &str, request: &Request) -> Result<Answer, String> {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let body = request
        .body
        .as_ref()
        .map(Value::to_string)
        .unwrap_or_default();
    let head = format!(
        "{} {} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Authorization: Bearer {token}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n",
        request.method,
        request.path,
        body.len()
    );
    stream
        .write_all(format!("{head}{body}").as_bytes())
        .await
        .map_err(|e| format!("write: {e}"))?;
    let mut raw = Vec::new();
    (&mut stream)
        .take(MAX_ANSWER_BYTES + 1)
        .read_to_end(&mut raw)
        .await
        .map_err(|e| format!("read: {e}"))?;
    if raw.len() as u64 > MAX_ANSWER_BYTES {
        return Err(format!("an answer over {MAX_ANSWER_BYTES} bytes"));
    }
    parse(&raw)
}

/// A complete HTTP/1.1 answer read to the end of the connection.
pub fn parse(raw: &[u8]) -> Result<Answer, String> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").ok_or("no end of the header")?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or("no status")?;
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_owned()
    };
    let value = serde_json::from_str(&body).unwrap_or(Value::Null);
    Ok(Answer::Status(status, value))
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_plain_and_chunked_answers() {
        let plain = b"HTTP/1.1 201 Created\r\ncontent-length: 9\r\n\r\n{\"a\": 1}";
        assert_eq!(parse(plain), Ok(Answer::Status(201, json!({"a": 1}))));
        let chunked = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\n{\"b\"\r\n3\r\n: 2\r\n1\r\n}\r\n0\r\n\r\n";
        assert_eq!(parse(chunked), Ok(Answer::Status(200, json!({"b": 2}))));
        let empty = b"HTTP/1.1 204 No Content\r\n\r\n";
        assert_eq!(parse(empty), Ok(Answer::Status(204, Value::Null)));
        assert!(parse(b"HTTP/1.1 200 OK\r\n").is_err(), "a cut header");
    }

    #[tokio::test]
    async fn a_refused_connection_is_no_answer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        drop(listener);
        let request = Request {
            method: "GET",
            path: "/readyz".into(),
            body: None,
        };
        let answer = send(&addr, "t", &request, Duration::from_secs(5)).await;
        assert!(matches!(answer, Answer::None(_)), "{answer:?}");
    }
}
