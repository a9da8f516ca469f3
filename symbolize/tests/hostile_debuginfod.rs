//! A debuginfod server that misbehaves — endless bodies, absurd lengths, a trickle of bytes,
//! garbage — is cut off by ebsym's size and time limits, and nothing it sent enters the
//! cache. The server is a real TCP peer on 127.0.0.1 (a few lines of HTTP below): the point
//! is what the client does with a hostile one, which the real debuginfod never is.
use ebtrace_symbolize::debuginfod::{Client, Config, Kind};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// How the server answers every request.
#[derive(Clone, Copy)]
enum Behaviour {
    /// 200 without a length, then bytes until the client hangs up.
    Endless,
    /// 200 with `Content-Length: 10 GiB`.
    HugeLength,
    /// 200 with a small length, then one byte every 300 ms.
    Trickle,
    /// 200 with random bytes of the announced length.
    Garbage,
}

/// Serves `b` on a free port of 127.0.0.1 until the test ends; returns the base URL.
fn serve(b: Behaviour) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            std::thread::spawn(move || answer(s, b));
        }
    });
    format!("http://127.0.0.1:{port}")
}

fn answer(mut s: TcpStream, b: Behaviour) {
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    while r.read_line(&mut line).is_ok_and(|n| n > 2) {
        line.clear();
    }
    let _ = match b {
        Behaviour::Endless => {
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
            let chunk = vec![0x7fu8; 64 << 10];
            loop {
                if s.write_all(&chunk).is_err() {
                    break;
                }
            }
            Ok(())
        }
        Behaviour::HugeLength => s.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Length: 10737418240\r\nConnection: close\r\n\r\nxx",
        ),
        Behaviour::Trickle => {
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n");
            for _ in 0..1000 {
                if s.write_all(b"x").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(300));
            }
            Ok(())
        }
        Behaviour::Garbage => {
            let body: Vec<u8> = (0..4096u32)
                .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
                .collect();
            let _ = s.write_all(
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                )
                .as_bytes(),
            );
            s.write_all(&body)
        }
    };
}

fn client(url: String, cache: &std::path::Path) -> Client {
    let mut c = Config::new(vec![url]);
    c.cache_dir = cache.to_path_buf();
    c.timeout = Duration::from_secs(2);
    c.max_size = 1 << 20;
    c.progress = false;
    Client::new(c)
}

/// Fetches a made-up build-id from a server behaving like `b`: no file, the reason, and how
/// long it took; the cache stays empty.
fn fetch_from(b: Behaviour) -> (String, Duration) {
    let cache = tempfile::tempdir().unwrap();
    let c = client(serve(b), cache.path());
    let id = [0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89];
    let t = Instant::now();
    let got = c.fetch(&id, Kind::Debuginfo);
    let took = t.elapsed();
    assert!(got.path.is_none(), "a file came from a hostile server");
    assert_eq!(got.searched.len(), 1);
    let why = format!("{:?}", got.searched[0].outcome);
    // Nothing left in the cache: no entry, no temporary file.
    let left: Vec<_> = walk(cache.path());
    assert!(left.is_empty(), "left in the cache: {left:?}");
    (why, took)
}

fn walk(d: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn an_endless_body_is_cut_at_the_size_cap() {
    let (why, took) = fetch_from(Behaviour::Endless);
    assert!(why.contains("cap"), "{why}");
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn an_absurd_length_is_refused_before_reading() {
    let (why, took) = fetch_from(Behaviour::HugeLength);
    assert!(why.contains("cap"), "{why}");
    assert!(took < Duration::from_secs(2), "{took:?}");
}

#[test]
fn a_trickling_body_is_cut_at_the_time_limit() {
    let (why, took) = fetch_from(Behaviour::Trickle);
    assert!(
        why.contains("timed out") || why.contains("Timeout") || why.contains("transfer"),
        "{why}"
    );
    // The 2 s limit, plus a little.
    assert!(took < Duration::from_secs(5), "{took:?}");
}

#[test]
fn garbage_is_refused_and_not_cached() {
    let (why, _) = fetch_from(Behaviour::Garbage);
    assert!(
        why.contains("Unreadable") || why.contains("BuildIdMismatch"),
        "{why}"
    );
}
