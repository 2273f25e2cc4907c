//! A server killed with `SIGKILL` while its listener waits for
//! connections leaves its port free at once: a restarted server binds it
//! (with `SO_REUSEADDR`, as tokio's and blockio's listeners set it) the
//! moment the old process is reaped, as it does after a server on
//! `tokio::net`. The server runs in a child process (this test binary,
//! running [`killed_server`]), whose listener has an accept armed, and
//! has accepted one connection, when it is killed.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};

use blockio::aio::{AsyncEngine, CallerDriving, Driving};
use blockio::net::TcpListener;
use socket2::{Domain, Socket, Type};

/// Which engine the child server runs on, from its environment.
const DRIVING: &str = "BLOCKIO_TEST_KILLED_SERVER_DRIVING";

/// The server of [`a_killed_servers_port_binds_at_once`]: prints its
/// port, then accepts forever, printing a line per connection.
#[test]
#[ignore = "the child process of a_killed_servers_port_binds_at_once, which runs it"]
fn killed_server() {
    let b = AsyncEngine::builder();
    let engine = match std::env::var(DRIVING).as_deref() {
        Ok("caller") => b.driving(Driving::Caller(CallerDriving::new())),
        _ => b,
    }
    .build()
    .unwrap();
    let listener =
        futures::executor::block_on(TcpListener::bind_with(&engine, "127.0.0.1:0")).unwrap();
    println!("port {}", listener.local_addr().unwrap().port());
    let accept = async {
        let mut held = Vec::new();
        loop {
            let (s, _) = listener.accept().await.unwrap();
            held.push(s);
            println!("accepted");
        }
    };
    if engine.poll_fd().is_some() {
        let e = engine.clone();
        std::thread::spawn(move || loop {
            e.reap();
            std::thread::sleep(std::time::Duration::from_millis(1));
        });
    }
    futures::executor::block_on(accept)
}

/// Binds a listener to `addr` as a restarted server does.
fn bind(addr: SocketAddr) -> std::io::Result<Socket> {
    let s = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    s.set_reuse_address(true)?;
    s.bind(&addr.into())?;
    s.listen(128)?;
    Ok(s)
}

fn killed_then_bound(driving: &str) {
    for round in 0..10 {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "killed_server", "--ignored", "--nocapture"])
            .args(["--test-threads", "1"])
            .env(DRIVING, driving)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let port: u16 = loop {
            let line = lines.next().expect("the server printed its port").unwrap();
            // (After the harness's "test killed_server ... ".)
            if let Some((_, p)) = line.split_once("port ") {
                break p.trim().parse().unwrap();
            }
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        // One connection accepted: the accept is armed in the server.
        let _client = TcpStream::connect(addr).unwrap();
        loop {
            let line = lines.next().expect("the server accepted").unwrap();
            if line.ends_with("accepted") {
                break;
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        if let Err(e) = bind(addr) {
            let start = std::time::Instant::now();
            while bind(addr).is_err() && start.elapsed().as_secs() < 5 {}
            panic!(
                "{driving}, round {round}: port {port} could not be bound after the server was killed ({e}); it was free {:?} later",
                start.elapsed()
            );
        }
    }
}

#[test]
fn a_killed_servers_port_binds_at_once() {
    killed_then_bound("thread");
}

#[test]
fn a_killed_caller_driven_servers_port_binds_at_once() {
    killed_then_bound("caller");
}
