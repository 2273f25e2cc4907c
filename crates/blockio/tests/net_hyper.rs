//! hyper serving HTTP on `blockio::net` (through `hyper-util`'s `TokioIo`
//! and the tokio I/O traits), checked with `curl` as the client.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::Command;

use blockio::aio::AsyncEngine;
use blockio::net::TcpListener;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

/// `GET /hello` greets; anything else echoes its body.
async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let hello = req.uri().path() == "/hello";
    let body = req.into_body().collect().await.expect("body").to_bytes();
    let reply = if hello {
        Bytes::from_static(b"hello from blockio\n")
    } else {
        body
    };
    Ok(Response::new(Full::new(reply)))
}

/// A hyper server on its own multi-thread runtime; its address.
fn serve() -> SocketAddr {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let engine = AsyncEngine::new().unwrap();
            let listener = TcpListener::bind_with(&engine, "127.0.0.1:0")
                .await
                .unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), hyper::service::service_fn(handle));
                    conn.await.expect("the connection failed");
                });
            }
        });
    });
    rx.recv().unwrap()
}

fn curl(args: &[&str]) -> Vec<u8> {
    let out = Command::new("curl")
        .args(["--silent", "--show-error", "--fail", "--max-time", "60"])
        .args(args)
        .output()
        .expect("curl runs (scripts/install-deps installs it)");
    assert!(
        out.status.success(),
        "curl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn hyper_serves_curl_on_blockio_streams() {
    let addr = serve();
    let hello = format!("http://{addr}/hello");
    assert_eq!(curl(&[&hello]), b"hello from blockio\n");

    // Ten requests on one kept-alive connection.
    let many: Vec<&str> = std::iter::repeat_n(hello.as_str(), 10).collect();
    assert_eq!(curl(&many), b"hello from blockio\n".repeat(10));

    // A 3 MiB body of varied bytes, echoed: every byte through both the
    // trait reads and the write-behind.
    let dir = tempfile::tempdir().unwrap();
    let body: Vec<u8> = (0..3u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let path = dir.path().join("body");
    std::fs::write(&path, &body).unwrap();
    let data = format!("@{}", path.display());
    let echo = format!("http://{addr}/echo");
    let got = curl(&[
        "--data-binary",
        &data,
        "-H",
        "Content-Type: application/octet-stream",
        &echo,
    ]);
    assert_eq!(got.len(), body.len());
    assert!(got == body, "the echoed body differs");
}
