//! Contract line 2: an acknowledged token survives kill -9. Also: staging files left by a
//! crash are cleared on restart.

use crate::common;
use common::{client, get_bytes, put, Server};

#[tokio::test]
async fn acknowledged_tokens_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let c = client();
    let s = Server::start(&data, None);
    for (i, key) in ["a", "b/c", "d"].iter().enumerate() {
        let token = (100 + i).to_string();
        let (status, _) = put(&c, &s.object_url("default", key), Some(&token), b"acked").await;
        assert_eq!(status, 200);
    }
    // A fence advanced without a write, and a delete, are acknowledgements too.
    let resp = c
        .post(s.url("/v1/fences/default/e"))
        .header("Fencing-Token", "500")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let resp = c
        .delete(s.object_url("default", "d"))
        .header("Fencing-Token", "300")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    // A crash mid-upload leaves a staging file behind.
    std::fs::write(data.join("objects/.staging/leftover.tmp"), b"half").unwrap();
    s.kill9();

    let s = Server::start(&data, None);
    for (key, n) in [("a", 100), ("b/c", 101), ("e", 500), ("d", 300)] {
        let below = (n - 1).to_string();
        let (status, body) = put(&c, &s.object_url("default", key), Some(&below), b"late").await;
        assert_eq!(status, 409, "{key}: {body}");
        assert_eq!(body["highest"], n);
    }
    assert_eq!(
        get_bytes(&c, &s.object_url("default", "a")).await.1,
        b"acked"
    );
    assert_eq!(get_bytes(&c, &s.object_url("default", "d")).await.0, 404);
    // The holder of the acknowledged token carries on, and nothing is mistaken for a bypass.
    assert_eq!(
        put(&c, &s.object_url("default", "a"), Some("100"), b"next")
            .await
            .0,
        200
    );
    assert_eq!(
        put(&c, &s.object_url("default", "d"), Some("300"), b"again")
            .await
            .0,
        200
    );
    assert!(common::files_below(&data.join("objects/.staging")).is_empty());
}
