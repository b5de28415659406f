//! Keys that try to leave the data directory: they are refused with a 4xx or stored inside it,
//! and nothing appears anywhere else.

use crate::common;
use common::{client, files_below, raw_request, Server};

#[tokio::test]
async fn nothing_escapes_the_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let s = Server::start(&data, None);
    let c = client();
    let before_outside = files_below(dir.path())
        .into_iter()
        .filter(|p| !p.starts_with(&data))
        .collect::<Vec<_>>();

    let long = "k".repeat(1024);
    let too_long = "k".repeat(1025);
    let deep = "a/".repeat(300) + "z";
    let long_segment = "s".repeat(600) + "/x";
    let keys: Vec<(&str, bool)> = vec![
        ("..", false),
        ("../escape", false),
        ("a/../../escape", false),
        ("%2e%2e/escape", false),
        ("%2E%2E%2Fescape", false),
        ("./x", false),
        ("a%00b", false),
        ("a%0Ab", false),
        ("%FF%FE", false),
        (&too_long, false),
        ("..%5C..%5Cescape", true),
        ("%5C%5Cserver%5Cshare", true),
        ("a//b", true),
        ("trailing/", true),
        ("...", true),
        (".hidden", true),
        ("%2Fabsolute", true),
        (&long, true),
        (&deep, true),
        (&long_segment, true),
        ("%E6%97%A5%E6%9C%AC%E8%AA%9E/%E3%83%95", true),
    ];
    for (key, stored) in &keys {
        let path = format!("/v1/objects/default/{key}");
        let (status, body) = raw_request(
            s.addr,
            &format!("PUT {path} HTTP/1.1\r\nFencing-Token: 1"),
            b"x",
        );
        if *stored {
            assert_eq!(status, 200, "{key:?} should be stored inside: {body}");
            let (status, back) = raw_request(s.addr, &format!("GET {path} HTTP/1.1"), b"");
            assert_eq!((status, back.as_str()), (200, "x"), "{key:?} reads back");
        } else {
            assert!(
                (400..500).contains(&status),
                "{key:?} gave {status}: {body}"
            );
            let body: serde_json::Value = serde_json::from_str(&body).unwrap();
            assert!(body["error"].is_string(), "{key:?}: {body}");
        }
    }
    // Listing returns each stored key exactly as written.
    let list: serde_json::Value = c
        .get(s.url("/v1/objects/default"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let listed = list["objects"].as_array().unwrap().len();
    assert_eq!(listed, keys.iter().filter(|(_, stored)| *stored).count());

    let after_outside = files_below(dir.path())
        .into_iter()
        .filter(|p| !p.starts_with(&data))
        .filter(|p| p.extension().is_none_or(|e| e != "toml"))
        .collect::<Vec<_>>();
    assert_eq!(
        before_outside, after_outside,
        "a file appeared outside the data directory"
    );
    for f in files_below(&data) {
        let canonical = f.canonicalize().unwrap();
        assert!(canonical.starts_with(data.canonicalize().unwrap()), "{f:?}");
    }
}
