//! `kiln serve`: MIME types, index pages, 404s and refused path traversal, over real sockets.

use kiln::serve::Server;
use std::io::{Read, Write};
use std::net::TcpStream;

fn get(addr: std::net::SocketAddr, target: &str) -> (String, Vec<u8>) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).unwrap();
    let split = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8(buf[..split].to_vec()).unwrap();
    (head, buf[split + 4..].to_vec())
}

#[test]
fn serves_files_with_their_mime_types_and_refuses_escapes() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("www");
    std::fs::create_dir_all(root.join("models")).unwrap();
    std::fs::write(tmp.path().join("secret.txt"), "outside").unwrap();
    let files = [
        ("index.html", "text/html"),
        ("app.js", "text/javascript"),
        ("mod.mjs", "text/javascript"),
        ("kiln_bg.wasm", "application/wasm"),
        ("pkg.json", "application/json"),
        ("models/mnist.safetensors", "application/octet-stream"),
        ("style.css", "text/css"),
        ("logo.png", "image/png"),
        ("icon.svg", "image/svg+xml"),
    ];
    for (i, (name, _)) in files.iter().enumerate() {
        std::fs::write(root.join(name), format!("body {i} of {name}")).unwrap();
    }
    let server = Server::bind(&root, "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = server.local_addr().unwrap();
    assert_eq!(
        server.url().unwrap(),
        format!("http://127.0.0.1:{}/", addr.port())
    );
    std::thread::spawn(move || server.run());

    for (i, (name, mime)) in files.iter().enumerate() {
        let (head, body) = get(addr, &format!("/{name}?v=1"));
        assert!(head.starts_with("HTTP/1.1 200"), "{name}: {head}");
        assert!(
            head.contains(&format!("Content-Type: {mime}")),
            "{name}: {head}"
        );
        assert_eq!(body, format!("body {i} of {name}").into_bytes());
    }
    let (head, body) = get(addr, "/");
    assert!(
        head.contains("text/html") && body.starts_with(b"body 0"),
        "{head}"
    );
    assert!(get(addr, "/nope.js").0.starts_with("HTTP/1.1 404"));
    for evil in [
        "/../secret.txt",
        "/models/../../secret.txt",
        "/%2e%2e/secret.txt",
        "/..%2fsecret.txt",
        "/..\\secret.txt",
    ] {
        let (head, body) = get(addr, evil);
        assert!(head.starts_with("HTTP/1.1 403"), "{evil}: {head}");
        assert!(
            !String::from_utf8_lossy(&body).contains("outside"),
            "{evil}"
        );
    }
}

#[test]
fn a_missing_directory_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let e = Server::bind(&tmp.path().join("absent"), "127.0.0.1:0".parse().unwrap()).unwrap_err();
    assert!(e.to_string().contains("absent"), "{e}");
}
