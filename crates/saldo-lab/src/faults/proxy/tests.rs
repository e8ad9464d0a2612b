//! The proxy against a real TCP echo server on 127.0.0.1: every mode, the limits, and that a
//! fault reaches live connections as well as new ones. Timing is only ever asserted as a lower
//! bound (a delay is at least what was asked) or as "nothing arrived" while nothing may.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{Cut, Limits, Mode, Proxy, ProxyError};

/// Any wait that should end promptly ends within this, or the test fails.
const PROMPTLY: Duration = Duration::from_secs(10);
/// How long a blackholed connection is watched for bytes that must not come.
const QUIET: Duration = Duration::from_millis(300);

/// An echo server: every connection gets back what it sends, until it closes.
async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut read, mut write) = stream.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
                let _ = write.shutdown().await;
            });
        }
    });
    addr
}

async fn proxy_with(limits: Limits) -> Proxy {
    Proxy::start(echo_server().await, limits)
        .await
        .expect("start the proxy")
}

async fn connect(proxy: &Proxy) -> TcpStream {
    tokio::time::timeout(PROMPTLY, TcpStream::connect(proxy.addr()))
        .await
        .expect("connect in time")
        .expect("connect")
}

/// Sends `message` and reads it back.
async fn round_trip(stream: &mut TcpStream, message: &[u8]) {
    stream.write_all(message).await.expect("write");
    let mut back = vec![0u8; message.len()];
    tokio::time::timeout(PROMPTLY, stream.read_exact(&mut back))
        .await
        .expect("echo in time")
        .expect("echo");
    assert_eq!(back, message);
}

/// What reading a cut connection gives: `Ok(0)` (end of stream) or the error.
async fn read_after_cut(stream: &mut TcpStream) -> std::io::Result<usize> {
    let mut buf = [0u8; 64];
    tokio::time::timeout(PROMPTLY, stream.read(&mut buf))
        .await
        .expect("the cut reached the client in time")
}

#[tokio::test]
async fn passes_bytes_both_ways_in_order() {
    let proxy = proxy_with(Limits::default()).await;
    let mut stream = connect(&proxy).await;
    round_trip(&mut stream, b"hello").await;
    // Far more than one chunk and than a direction may hold: read while writing.
    let big: Vec<u8> = (0..2_000_000u32).map(|i| (i % 251) as u8).collect();
    let (mut read, mut write) = stream.split();
    let sending = async {
        write.write_all(&big).await.expect("write");
    };
    let mut back = vec![0u8; big.len()];
    let receiving = async {
        read.read_exact(&mut back).await.expect("read");
    };
    tokio::time::timeout(PROMPTLY, async { tokio::join!(sending, receiving) })
        .await
        .expect("in time");
    assert!(back == big, "the bytes came back changed or out of order");
    assert!(proxy.stats().forwarded_bytes >= 2 * big.len() as u64);
}

#[tokio::test]
async fn a_delay_holds_every_chunk_at_least_that_long_each_way() {
    const DELAY: Duration = Duration::from_millis(200);
    let proxy = proxy_with(Limits::default()).await;
    let mut stream = connect(&proxy).await;
    round_trip(&mut stream, b"warm").await;
    proxy.set(Mode::Delay(DELAY)).expect("delay");
    for _ in 0..3 {
        let started = tokio::time::Instant::now();
        round_trip(&mut stream, b"slow").await;
        assert!(
            started.elapsed() >= 2 * DELAY,
            "a round trip took {:?}",
            started.elapsed()
        );
    }
    proxy.set(Mode::Pass).expect("pass");
    round_trip(&mut stream, b"fast again").await;
}

#[tokio::test]
async fn a_reset_cuts_live_connections_and_new_ones_until_it_ends() {
    let proxy = proxy_with(Limits::default()).await;
    let mut live = connect(&proxy).await;
    round_trip(&mut live, b"before").await;

    proxy.set(Mode::Drop(Cut::Reset)).expect("drop");
    let err = read_after_cut(&mut live)
        .await
        .expect_err("a reset, not data");
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}");
    let mut new = connect(&proxy).await;
    let _ = new.write_all(b"anyone?").await;
    match read_after_cut(&mut new).await {
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}"),
        Ok(n) => assert_eq!(n, 0, "no echo while dropping"),
    }
    assert!(proxy.stats().cut >= 2, "{:?}", proxy.stats());

    proxy.set(Mode::Pass).expect("pass");
    let mut after = connect(&proxy).await;
    round_trip(&mut after, b"after").await;
}

#[tokio::test]
async fn a_close_ends_live_connections_with_end_of_stream() {
    let proxy = proxy_with(Limits::default()).await;
    let mut live = connect(&proxy).await;
    round_trip(&mut live, b"before").await;
    proxy.set(Mode::Drop(Cut::Close)).expect("drop");
    assert_eq!(read_after_cut(&mut live).await.expect("a FIN"), 0);
    proxy.set(Mode::Pass).expect("pass");
    let mut after = connect(&proxy).await;
    round_trip(&mut after, b"after").await;
}

#[tokio::test]
async fn a_blackhole_delivers_nothing_until_it_heals_then_everything_in_order() {
    let proxy = proxy_with(Limits::default()).await;
    let mut live = connect(&proxy).await;
    round_trip(&mut live, b"before").await;

    proxy.set(Mode::Blackhole).expect("blackhole");
    let mut new = connect(&proxy).await;
    live.write_all(b"one ").await.expect("write");
    live.write_all(b"two").await.expect("write");
    new.write_all(b"ping").await.expect("write");
    let mut buf = [0u8; 16];
    for stream in [&mut live, &mut new] {
        let quiet = tokio::time::timeout(QUIET, stream.read(&mut buf)).await;
        assert!(
            quiet.is_err(),
            "something came through the blackhole: {quiet:?}"
        );
    }
    let forwarded = proxy.stats().forwarded_bytes;

    proxy.set(Mode::Pass).expect("heal");
    let mut back = [0u8; 7];
    tokio::time::timeout(PROMPTLY, live.read_exact(&mut back))
        .await
        .expect("in time")
        .expect("read");
    assert_eq!(&back, b"one two");
    let mut back = [0u8; 4];
    tokio::time::timeout(PROMPTLY, new.read_exact(&mut back))
        .await
        .expect("in time")
        .expect("read");
    assert_eq!(&back, b"ping");
    assert!(proxy.stats().forwarded_bytes > forwarded);
}

#[tokio::test]
async fn a_blackhole_then_a_reset_discards_what_it_held() {
    let proxy = proxy_with(Limits::default()).await;
    let mut live = connect(&proxy).await;
    round_trip(&mut live, b"before").await;
    proxy.set(Mode::Blackhole).expect("blackhole");
    live.write_all(b"lost").await.expect("write");
    proxy.set(Mode::Drop(Cut::Reset)).expect("drop");
    let err = read_after_cut(&mut live).await.expect_err("a reset");
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}");
}

#[tokio::test]
async fn connections_over_the_limit_are_reset() {
    let proxy = proxy_with(Limits {
        max_connections: 1,
        ..Limits::default()
    })
    .await;
    let mut first = connect(&proxy).await;
    round_trip(&mut first, b"first").await;
    let mut second = connect(&proxy).await;
    let _ = second.write_all(b"second").await;
    match read_after_cut(&mut second).await {
        Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset, "{e}"),
        Ok(n) => assert_eq!(n, 0, "no echo over the limit"),
    }
    assert_eq!(proxy.stats().refused, 1);
    round_trip(&mut first, b"still fine").await;
}

#[tokio::test]
async fn it_relays_to_loopback_only_and_bounds_the_delay() {
    let outside: SocketAddr = "192.0.2.1:5432".parse().expect("addr");
    assert!(matches!(
        Proxy::start(outside, Limits::default()).await,
        Err(ProxyError::NotLoopback(_))
    ));
    let zero = Limits {
        queued_chunks: 0,
        ..Limits::default()
    };
    assert!(matches!(
        Proxy::start(echo_server().await, zero).await,
        Err(ProxyError::ZeroLimit("queued_chunks"))
    ));
    let proxy = proxy_with(Limits::default()).await;
    assert!(proxy.addr().ip().is_loopback());
    assert!(matches!(
        proxy.set(Mode::Delay(Duration::from_secs(31))),
        Err(ProxyError::DelayTooLong { .. })
    ));
    assert_eq!(proxy.mode(), Mode::Pass);
}
