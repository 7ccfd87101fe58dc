//! The per-connection queues are bounded, with a clear answer at the bound:
//! the reply buffer (a client that pipelines without reading is held by TCP
//! flow control, and gets every reply once it reads), the MULTI queue by
//! bytes, and the WATCH list (refused with an error naming the setting).

mod common;

use std::time::Duration;

use common::{config, err, start, Raw};
use roost_resp::protocol::{Frame, Protocol};
use roost_resp::Config;

/// `INFO clients`' `max_reply_buffer_bytes`.
async fn max_reply_buffer(c: &mut Raw) -> usize {
    let Frame::Bulk(info) = c.call(&["INFO", "clients"]).await else {
        panic!("INFO is a bulk string");
    };
    let info = String::from_utf8(info).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("max_reply_buffer_bytes:"))
        .expect("INFO clients reports max_reply_buffer_bytes")
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_of_a_client_that_does_not_read_stay_within_the_buffer_limit() {
    const LIMIT: usize = 64 << 10;
    const VALUE_BYTES: usize = 16 << 10;
    const GETS: usize = 300;
    const BATCH: usize = 4;
    let server = start(Config {
        max_reply_buffer_bytes: LIMIT,
        max_batch_commands: BATCH,
        ..config()
    });
    let value = "v".repeat(VALUE_BYTES);
    let mut setup = Raw::connect(server.addr()).await;
    assert_eq!(
        setup.call(&["SET", "big", &value]).await,
        Frame::Simple("OK".into())
    );

    // 300 GETs in one write: 4.8 MiB of replies the client does not read
    // for a while.
    let mut slow = Raw::connect(server.addr()).await;
    let mut wire = Vec::new();
    for _ in 0..GETS {
        Frame::Array(vec![Frame::bulk("GET"), Frame::bulk("big")])
            .encode(Protocol::Resp2, &mut wire);
    }
    slow.send(&wire).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The buffer holds at most the limit plus one batch's replies.
    let bound = LIMIT + BATCH * (VALUE_BYTES + 16);
    let seen = max_reply_buffer(&mut setup).await;
    assert!(
        seen <= bound,
        "a connection buffered {seen} bytes of replies (bound {bound})"
    );
    // Nothing is lost: every reply arrives, in order, once the client reads.
    for i in 0..GETS {
        assert_eq!(
            slow.frame().await,
            Some(Frame::Bulk(value.clone().into_bytes())),
            "reply {i}"
        );
    }
    assert!(max_reply_buffer(&mut setup).await <= bound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_is_bounded_by_bytes() {
    let server = start(Config {
        max_multi_bytes: 100,
        ..config()
    });
    let mut c = Raw::connect(server.addr()).await;
    let sixty = "x".repeat(58);
    assert_eq!(c.call(&["MULTI"]).await, Frame::Simple("OK".into()));
    assert_eq!(
        c.call(&["SET", "k1", &sixty]).await,
        Frame::Simple("QUEUED".into())
    );
    assert_eq!(
        c.call(&["SET", "k2", &sixty]).await,
        err("ERR MULTI holds at most 100 bytes of keys and values (max_multi_bytes)")
    );
    assert_eq!(
        c.call(&["EXEC"]).await,
        err("EXECABORT Transaction discarded because of previous errors.")
    );
    // Nothing of the refused block was applied; a block within the bound runs.
    assert_eq!(c.call(&["EXISTS", "k1", "k2"]).await, Frame::Integer(0));
    assert_eq!(c.call(&["MULTI"]).await, Frame::Simple("OK".into()));
    assert_eq!(
        c.call(&["SET", "k1", &sixty]).await,
        Frame::Simple("QUEUED".into())
    );
    assert_eq!(
        c.call(&["EXEC"]).await,
        Frame::Array(vec![Frame::Simple("OK".into())])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_is_bounded_by_keys() {
    let server = start(Config {
        max_watched_keys: 3,
        ..config()
    });
    let mut c = Raw::connect(server.addr()).await;
    let mut other = Raw::connect(server.addr()).await;
    // Repeated keys count once.
    assert_eq!(
        c.call(&["WATCH", "a", "b", "a", "b"]).await,
        Frame::Simple("OK".into())
    );
    assert_eq!(
        c.call(&["WATCH", "b", "c"]).await,
        Frame::Simple("OK".into())
    );
    assert_eq!(
        c.call(&["WATCH", "d"]).await,
        err("ERR WATCH holds at most 3 keys per connection (max_watched_keys)")
    );
    // The refused WATCH added nothing: a change of `d` does not abort, a
    // change of `c` (watched before) does.
    assert_eq!(
        other.call(&["SET", "d", "1"]).await,
        Frame::Simple("OK".into())
    );
    assert_eq!(c.call(&["MULTI"]).await, Frame::Simple("OK".into()));
    assert_eq!(
        c.call(&["SET", "a", "1"]).await,
        Frame::Simple("QUEUED".into())
    );
    assert_eq!(
        c.call(&["EXEC"]).await,
        Frame::Array(vec![Frame::Simple("OK".into())])
    );
    assert_eq!(
        c.call(&["WATCH", "a", "b", "c"]).await,
        Frame::Simple("OK".into())
    );
    assert_eq!(
        other.call(&["SET", "c", "2"]).await,
        Frame::Simple("OK".into())
    );
    assert_eq!(c.call(&["MULTI"]).await, Frame::Simple("OK".into()));
    assert_eq!(
        c.call(&["SET", "a", "2"]).await,
        Frame::Simple("QUEUED".into())
    );
    assert_eq!(c.call(&["EXEC"]).await, Frame::NullArray);
    // EXEC forgot the watched keys: three new ones fit again.
    assert_eq!(
        c.call(&["WATCH", "x", "y", "z"]).await,
        Frame::Simple("OK".into())
    );
}
