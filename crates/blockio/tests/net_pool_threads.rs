//! On the thread-pool backend, a server that only uses sockets starts no
//! pool thread: sockets wait for readiness on one thread, and the pool's
//! threads start with the first file operation. (Its own test binary: it
//! counts the process's threads, which no other test may change.)

use std::io::{Read, Write};

use blockio::aio::{AsyncEngine, AsyncFile};
use blockio::net::TcpListener;
use blockio::{BackendChoice, ReadPath};

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

#[test]
fn pool_threads_start_with_the_first_file_operation() {
    let before = threads();
    let engine = AsyncEngine::builder()
        .backend(BackendChoice::ThreadPool)
        .fallback_threads(16)
        // The file read below must reach the pool, not be served from
        // the page cache on this thread.
        .read_path(ReadPath::AlwaysSubmit)
        .build()
        .unwrap();
    assert_eq!(engine.fallback_threads(), 16);
    let listener =
        futures::executor::block_on(TcpListener::bind_with(&engine, "127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    let peer = std::thread::spawn(move || {
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        // Only a hang makes the pong wait a minute: it fails the test.
        c.set_read_timeout(Some(std::time::Duration::from_secs(60)))
            .unwrap();
        c.write_all(b"ping").unwrap();
        let mut back = [0u8; 4];
        c.read_exact(&mut back).unwrap();
        back
    });
    futures::executor::block_on(async {
        let (s, _) = listener.accept().await.unwrap();
        let (n, buf) = s.read(vec![0u8; 4]).await;
        assert_eq!(n.unwrap(), 4);
        s.write_all(buf).await.0.unwrap();
    });
    assert_eq!(&peer.join().unwrap(), b"ping");
    // The readiness thread only (the peer's thread has ended).
    assert_eq!(
        threads(),
        before + 1,
        "a sockets-only engine started pool threads"
    );
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), b"file").unwrap();
    let f = AsyncFile::open(&engine, file.path()).unwrap();
    let (n, buf) = futures::executor::block_on(f.read_at(vec![0u8; 4], 0));
    assert_eq!((n.unwrap(), &buf[..]), (4, &b"file"[..]));
    // (its workers start as the work needs them, up to 16: one for one read)
    assert_eq!(
        threads(),
        before + 1 + 1,
        "the pool started with the file read"
    );
    assert_eq!(engine.fallback_threads(), 16);
}
