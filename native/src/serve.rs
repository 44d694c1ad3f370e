//! `kiln serve`: a small static file server for the demo page (std::net, a thread per connection).
//!
//! GET and HEAD only; `/` and directories serve their `index.html`; paths that would leave the
//! root (`..`, absolute or drive components) are refused with 403; missing files are 404.

use crate::core::{Error, Result};
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

/// The MIME type served for a file name, by extension.
pub fn mime_type(path: &Path) -> &'static str {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("html" | "htm") => "text/html; charset=utf-8",
        Some("js" | "mjs") => "text/javascript; charset=utf-8",
        Some("wasm") => "application/wasm",
        Some("json" | "map") => "application/json",
        Some("jsonl") => "application/jsonl",
        Some("css") => "text/css; charset=utf-8",
        Some("png") => "image/png",
        Some("svg") => "image/svg+xml",
        Some("txt" | "md") => "text/plain; charset=utf-8",
        Some("ico") => "image/x-icon",
        _ => "application/octet-stream",
    }
}

/// A static file server bound to an address, serving one directory.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    root: PathBuf,
}

impl Server {
    /// Binds `addr` (port 0 picks a free port) to serve the files under `root`.
    pub fn bind(root: &Path, addr: SocketAddr) -> Result<Server> {
        let root = root.canonicalize().map_err(|e| {
            Error::io(
                "serve",
                format!("expected a directory to serve at {}: {e}", root.display()),
            )
        })?;
        if !root.is_dir() {
            return Err(Error::io(
                "serve",
                format!("expected a directory, found a file: {}", root.display()),
            ));
        }
        let listener = TcpListener::bind(addr)
            .map_err(|e| Error::io("serve", format!("cannot listen on {addr}: {e}")))?;
        Ok(Server { listener, root })
    }
    /// The address actually bound.
    pub fn local_addr(&self) -> Result<SocketAddr> {
        Ok(self.listener.local_addr()?)
    }
    /// The URL to open in a browser.
    pub fn url(&self) -> Result<String> {
        let addr = self.local_addr()?;
        let host = if addr.ip().is_unspecified() {
            "localhost".to_string()
        } else {
            addr.ip().to_string()
        };
        Ok(format!("http://{host}:{}/", addr.port()))
    }
    /// Serves requests until the process ends, one thread per connection.
    pub fn run(&self) -> Result<()> {
        for stream in self.listener.incoming() {
            let Ok(stream) = stream else { continue };
            let root = self.root.clone();
            std::thread::spawn(move || {
                // A client that disconnects mid-response is not the server's problem.
                let _ = handle(stream, &root);
            });
        }
        Ok(())
    }
}

/// Answers the requests of one connection (keep-alive until the client closes or idles).
fn handle(stream: TcpStream, root: &Path) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    loop {
        let mut request = String::new();
        if reader.read_line(&mut request)? == 0 {
            return Ok(());
        }
        // Headers: read and ignore, noting whether the client wants the connection closed.
        let mut close = request.contains("HTTP/1.0");
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if lower.starts_with("connection:") && lower.contains("close") {
                close = true;
            }
        }
        let mut parts = request.split_whitespace();
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let (status, mime, body) = respond(method, target, root);
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {mime}\r\nContent-Length: {}\r\n\
             Cache-Control: no-cache\r\nX-Content-Type-Options: nosniff\r\n{}\r\n",
            body.len(),
            if close { "Connection: close\r\n" } else { "" }
        );
        out.write_all(head.as_bytes())?;
        if method != "HEAD" {
            out.write_all(&body)?;
        }
        out.flush()?;
        if close {
            return Ok(());
        }
    }
}

/// Status line, MIME type and body for one request.
fn respond(method: &str, target: &str, root: &Path) -> (&'static str, &'static str, Vec<u8>) {
    let text = "text/plain; charset=utf-8";
    if method != "GET" && method != "HEAD" {
        return (
            "405 Method Not Allowed",
            text,
            b"only GET and HEAD\n".to_vec(),
        );
    }
    let Some(path) = resolve(root, target) else {
        return ("403 Forbidden", text, b"forbidden path\n".to_vec());
    };
    let path = if path.is_dir() {
        path.join("index.html")
    } else {
        path
    };
    match std::fs::read(&path) {
        Ok(body) => ("200 OK", mime_type(&path), body),
        Err(_) => ("404 Not Found", text, b"not found\n".to_vec()),
    }
}

/// The file a request target names under `root`, or `None` when it would leave `root`.
pub fn resolve(root: &Path, target: &str) -> Option<PathBuf> {
    let path = target.split(['?', '#']).next().unwrap_or("");
    let decoded = percent_decode(path)?;
    let mut out = root.to_path_buf();
    for part in decoded.split('/') {
        // Each segment must be one normal path component: no `..`, `.`, drive or backslash tricks.
        let mut comps = Path::new(part).components();
        match (comps.next(), comps.next()) {
            (None, _) => continue,
            (Some(Component::Normal(c)), None) if !part.contains('\\') => out.push(c),
            (Some(Component::CurDir), None) => continue,
            _ => return None,
        }
    }
    // Symlinks inside the root must not lead outside it either.
    match out.canonicalize() {
        Ok(real) if !real.starts_with(root) => None,
        _ => Some(out),
    }
}

/// `%2e%2E` -> `..`; `None` for malformed escapes, NUL bytes or non-UTF-8 results.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    if out.contains(&0) {
        return None;
    }
    String::from_utf8(out).ok()
}
