//! Several instances over one store, the fence table on a real etcd.

mod azure;
mod early_read;
mod etcd_store;
mod gcs;
mod limits;
mod no_conditions;
mod one_endpoint;
mod protocol;
mod script;
mod tombstones;

/// One cluster at a time: each is 3 etcd members, a store and the instances, on 2 cores.
pub(crate) static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A write through an instance, retried every 200 ms while the answer is 503
/// `CommitInProgress` (a paused instance's commit of the key has not reached its deadline), as
/// a client would, for up to 30 s: the final answer and how long it took.
pub(crate) async fn put_past_commit_in_progress(
    c: &reqwest::Client,
    url: &str,
    token: &str,
    body: &'static [u8],
) -> (u16, serde_json::Value, std::time::Duration) {
    let started = std::time::Instant::now();
    loop {
        let (s, answer) = crate::common::put(c, url, Some(token), body).await;
        if s != 503 || started.elapsed() > std::time::Duration::from_secs(30) {
            return (s, answer, started.elapsed());
        }
        assert_eq!(
            answer["error"].as_str(),
            Some("CommitInProgress"),
            "{answer}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
