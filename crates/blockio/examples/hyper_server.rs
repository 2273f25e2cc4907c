//! An HTTP server: hyper on `blockio::net`, through `hyper-util`'s
//! `TokioIo` (needs the `tokio` feature).
//!
//! ```text
//! cargo run -p blockio --features tokio --example hyper_server -- 127.0.0.1:3000
//! curl http://127.0.0.1:3000/hello
//! ```
//!
//! Every connection is a task on tokio's runtime; its reads and writes are
//! io_uring operations of one shared engine (epoll where io_uring is
//! blocked).

use std::convert::Infallible;

use blockio::aio::AsyncEngine;
use blockio::net::TcpListener;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

/// Answers `GET /hello` with a greeting and echoes any other request's body.
async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_owned();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => Bytes::from(format!("cannot read the body: {e}\n")),
    };
    let reply = if path == "/hello" {
        Bytes::from_static(b"hello from blockio\n")
    } else {
        body
    };
    Ok(Response::new(Full::new(reply)))
}

fn main() -> std::io::Result<()> {
    let addr = std::env::args().nth(1).unwrap_or("127.0.0.1:3000".into());
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        // Default settings: idle keep-alive connections hold no slot of the
        // engine's queue depth.
        let engine = AsyncEngine::new()?;
        let listener = TcpListener::bind_with(&engine, addr.as_str()).await?;
        eprintln!("listening on http://{}", listener.local_addr()?);
        // `incoming()` rather than a loop around `accept()`: out of
        // descriptors (EMFILE), it yields the error and pauses before the
        // next accept (1 ms, doubling up to 100 ms), so the server neither
        // dies nor spins, and accepts again once connections close.
        let mut incoming = listener.incoming();
        loop {
            let (stream, peer) = match incoming.next().await {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("accept: {e}");
                    continue;
                }
            };
            tokio::spawn(async move {
                let service = hyper::service::service_fn(handle);
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service);
                if let Err(e) = conn.await {
                    eprintln!("{peer}: {e}");
                }
            });
        }
    })
}
