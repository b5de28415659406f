//! CORS in a real browser: headless Chromium (Debian's `chromium`, which scripts/test
//! installs) loads a page from another origin (a second listener here) whose script uploads
//! through a presigned PUT carrying a fencing token, reads the object back through a presigned
//! GET, and reads the 409 of a stale token; it writes what it saw into the page, and the test
//! reads the page's DOM as Chromium dumps it.

use crate::common;
use crate::common::sign::{presign_method, Creds};
use common::Server;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const DEV: Creds = Creds {
    key: "fencegate",
    secret: "fencegate-dev-secret",
};

/// The page: each step's outcome in its own element, `done` last.
fn page(put: &str, get: &str, stale: &str) -> String {
    format!(
        r#"<!doctype html>
<html><body>
<div id="put">pending</div><div id="get">pending</div><div id="stale">pending</div>
<div id="error"></div><div id="done"></div>
<script>
const show = (id, text) => {{ document.getElementById(id).textContent = text; }};
(async () => {{
  try {{
    const put = await fetch({put:?}, {{ method: "PUT", body: "from the browser" }});
    show("put", "put " + put.status + " etag " + (put.headers.get("ETag") || "unreadable"));
    const get = await fetch({get:?});
    show("get", "get " + get.status + " body " + (await get.text()));
    const stale = await fetch({stale:?}, {{ method: "PUT", body: "from a zombie" }});
    const code = ((await stale.text()).match(/<Code>([^<]*)<\/Code>/) || [])[1];
    show("stale", "stale " + stale.status + " code " + code);
  }} catch (e) {{
    show("error", "error " + e);
  }}
  show("done", "finished");
}})();
</script>
</body></html>"#
    )
}

/// Serves `html` to every request on `listener` (the page's own origin).
async fn serve_page(listener: tokio::net::TcpListener, html: String) {
    loop {
        let Ok((mut conn, _)) = listener.accept().await else {
            return;
        };
        let html = html.clone();
        tokio::spawn(async move {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let answer = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{html}",
                html.len()
            );
            let _ = conn.write_all(answer.as_bytes()).await;
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_from_another_origin_uploads_reads_back_and_sees_a_stale_tokens_409() {
    let chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect(
            "Debian's chromium is installed (scripts/test installs it: apt-get install chromium)",
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &dir.path().join("data"),
        Some(&format!(
            "[buckets.web]\nfencing = \"required\"\n\n[[buckets.web.cors]]\nallowed_origins = [\"{origin}\"]\nallowed_methods = [\"GET\", \"PUT\"]\nallowed_headers = [\"*\"]\nexpose_headers = [\"ETag\"]\nmax_age_secs = 60\n"
        )),
    );
    let presigned = |method: &str, query: &str| {
        presign_method(
            method,
            &server.url(&format!("/web/page.txt{query}")),
            DEV,
            Duration::from_secs(600),
        )
    };
    let html = page(
        &presigned("PUT", "?x-amz-meta-fencing-token=7"),
        &presigned("GET", ""),
        &presigned("PUT", "?x-amz-meta-fencing-token=3"),
    );
    let page_server = tokio::spawn(serve_page(listener, html));

    let profile = tempfile::tempdir().unwrap();
    let out = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--virtual-time-budget=30000",
                "--dump-dom",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(format!("{origin}/"))
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("chromium finishes within 120 s")
    .expect("chromium runs");
    page_server.abort();
    let dom = String::from_utf8_lossy(&out.stdout);
    let text = |id: &str| {
        let open = format!("<div id=\"{id}\">");
        dom.split_once(open.as_str())
            .and_then(|(_, rest)| rest.split_once("</div>"))
            .map_or(String::new(), |(t, _)| t.to_string())
    };
    let said = format!(
        "the page said: {:?}\nchromium's stderr: {}",
        ["put", "get", "stale", "error", "done"].map(text),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text("done"), "finished", "{said}");
    assert_eq!(text("error"), "", "{said}");
    // The ETag is readable only through the rule's Access-Control-Expose-Headers.
    let put = text("put");
    assert!(put.starts_with("put 200 etag \""), "{said}");
    assert_eq!(text("get"), "get 200 body from the browser", "{said}");
    // The 409 is readable only if the error answer carries Access-Control-Allow-Origin.
    assert_eq!(text("stale"), "stale 409 code StaleFencingToken", "{said}");
    // And the store holds the holder's write, not the zombie's.
    let c = common::moto::client_with(&server.url(""), DEV.key, DEV.secret);
    let obj = c
        .get_object()
        .bucket("web")
        .key("page.txt")
        .send()
        .await
        .unwrap();
    assert_eq!(
        obj.body.collect().await.unwrap().into_bytes().as_ref(),
        b"from the browser"
    );
}
