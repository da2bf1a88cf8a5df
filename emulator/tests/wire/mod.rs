//! Raw HTTP against the emulator, shared by the test files that need to see status codes,
//! content types and bodies exactly as they go over the wire.

#![allow(dead_code)]

use std::time::Duration;

use modelplane_emulator::{Emulator, RunningEmulator};
use serde_json::Value;

pub async fn start() -> RunningEmulator {
    // A long periodic bookmark interval, so the only bookmarks a test sees are the ones
    // the real server sends before a watch's timeout.
    Emulator::builder()
        .bookmark_interval(Duration::from_secs(600))
        .start()
        .await
        .expect("emulator starts")
}

/// One HTTP response as the wire has it.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub content_type: String,
    pub body: String,
}

impl Resp {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
    /// The lines of a watch stream, parsed.
    pub fn events(&self) -> Vec<Value> {
        self.body
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// A request over a raw TCP connection (the tests need no HTTP client crate); the whole
/// response is read, so a watch is read until the server ends it.
pub async fn request(
    emu: &RunningEmulator,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &str,
) -> Resp {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let url = emu.url();
    let host = url.strip_prefix("http://").unwrap().trim_end_matches('/');
    let mut s = tokio::net::TcpStream::connect(host).await.unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if let Some(ct) = content_type {
        req.push_str(&format!("Content-Type: {ct}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.unwrap();
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = raw.split_once("\r\n\r\n").unwrap();
    let status = head[9..12].parse().unwrap();
    let header = |name: &str| {
        head.lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
            })
            .unwrap_or_default()
    };
    let body = if header("transfer-encoding") == "chunked" {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    Resp {
        status,
        content_type: header("content-type"),
        body,
    }
}

pub fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        s = &rest[n + 2..];
    }
    out
}

pub async fn post(emu: &RunningEmulator, path: &str, body: Value) -> Resp {
    request(
        emu,
        "POST",
        path,
        Some("application/json"),
        &body.to_string(),
    )
    .await
}
