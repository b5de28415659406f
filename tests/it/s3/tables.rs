//! Table formats and object_store through fencegate as a drop-in S3 gateway
//! (tests/e2e/tables_client.py, from .venv-tables): obstore's PutMode.Create and PutMode.Update,
//! delta-rs, Iceberg (SQL catalog on SQLite, PyArrowFileIO) and Lance, with writers racing on
//! one table, and SlateDB, whose newer writer fences the older. Each runs through fencegate on
//! the fs backend, through fencegate on the s3 backend over a store that ignores If-Match and
//! If-None-Match (moto behind a proxy that drops them, with `conditional_writes = "fencegate"`),
//! and against that store alone, the negative control (what the script asserts there, and why,
//! is in its docstring). And each system's zombie writer (tests/e2e/tables_zombie.py): writer A
//! writes through lease-bound S3 credentials, pauses past its lease's TTL, writer B takes the
//! lease and commits, A commits with its old credentials; fencegate refuses every write of A's
//! after B's grant, and A's library raises an error that stops it. Through fencegate only, on
//! both of its targets: a store alone has no leases.

use super::fixture::{run_script, Fx, Kind};
use crate::common::s3proxy::{Mode, S3Proxy};
use crate::common::store::{Store, StoreKind};
use crate::common::Server;

#[derive(Clone, Copy)]
enum Target {
    Fs,
    S3WithoutConditions,
    StoreWithoutConditions,
}

/// Which script, and on which bucket.
#[derive(Clone, Copy, PartialEq)]
enum Scenario {
    /// tables_client.py, on `bkt`: writers racing, no tokens.
    Races,
    /// tables_zombie.py, on `fenced`: writers holding leases, every write fenced.
    Zombie,
}

/// The bucket the zombie scenario runs in: one scope per table directory, and only writes that
/// carry a token land, so that A's lease-bound credentials are the only way A writes.
const FENCED: &str = "scope = \"prefix\"\nprefix_segments = 1\nfencing = \"required\"\n";

/// What a run keeps alive until its script is done.
#[allow(dead_code)] // held for their Drop
enum Held {
    Fx(Fx),
    Gated(Store, S3Proxy, Server, tempfile::TempDir),
    Alone(Store, S3Proxy),
}

/// moto behind a proxy that drops the conditional headers: a store without conditions.
async fn store_without_conditions() -> (Store, S3Proxy) {
    let store = Store::start(StoreKind::Moto);
    store.create_bucket("tables").await;
    let proxy = S3Proxy::start(store.endpoint()).await;
    proxy.set(Mode::DropConditions);
    (store, proxy)
}

async fn run(system: &str, target: Target, scenario: Scenario) {
    let root = env!("CARGO_MANIFEST_DIR");
    let python = format!("{root}/.venv-tables/bin/python3");
    assert!(
        std::path::Path::new(&python).exists(),
        "the table formats are missing: run scripts/test, which installs them in .venv-tables"
    );
    let dev = ("fencegate", "fencegate-dev-secret");
    let (_held, endpoint, bucket, creds) = match target {
        Target::Fs => {
            // Bucket `bkt` takes writes without tokens: these libraries cannot send one.
            let fenced: &[(&str, &str)] = match scenario {
                Scenario::Races => &[],
                Scenario::Zombie => &[("fenced", FENCED)],
            };
            let fx = Fx::start_with(Kind::Fs, fenced).await;
            let endpoint = fx.server.url("");
            (Held::Fx(fx), endpoint, "bkt", dev)
        }
        Target::S3WithoutConditions => {
            let (store, proxy) = store_without_conditions().await;
            let dir = tempfile::tempdir().unwrap();
            // One bucket per run: each is probed at start-up, which moto, shared by the
            // tests running at once, is better spared.
            let bucket = match scenario {
                Scenario::Races => "[buckets.bkt]\nfencing = \"optional\"\n".to_string(),
                Scenario::Zombie => format!("[buckets.fenced]\n{FENCED}"),
            };
            // Deletes are unconditional there too, which fencegate accepts only when told.
            let config = format!(
                "[backends.store]\nkind = \"s3\"\nendpoint = \"{}\"\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\nconditional_writes = \"fencegate\"\nunsafe_unconditional_deletes = true\n\n{bucket}backend = \"store\"\nbackend_bucket = \"tables\"\n",
                proxy.endpoint()
            );
            let server = Server::start(&dir.path().join("data"), Some(&config));
            let endpoint = server.url("");
            (Held::Gated(store, proxy, server, dir), endpoint, "bkt", dev)
        }
        Target::StoreWithoutConditions => {
            let (store, proxy) = store_without_conditions().await;
            let endpoint = proxy.endpoint();
            (
                Held::Alone(store, proxy),
                endpoint,
                "tables",
                ("test", "test"),
            )
        }
    };
    let gated = if matches!(target, Target::StoreWithoutConditions) {
        "store"
    } else {
        "fencegate"
    };
    let (script, bucket, done) = match scenario {
        Scenario::Races => ("tables_client.py", bucket, format!("{system} passed")),
        Scenario::Zombie => {
            assert_eq!(gated, "fencegate", "a store alone has no leases");
            (
                "tables_zombie.py",
                "fenced",
                format!("{system} zombie passed"),
            )
        }
    };
    let mut cmd = tokio::process::Command::new(&python);
    cmd.arg(format!("{root}/tests/e2e/{script}"))
        .env("FG_SYSTEM", system)
        .env("FG_TARGET", gated)
        .env("FG_ENDPOINT", &endpoint)
        .env("FG_BUCKET", bucket)
        .env("AWS_ACCESS_KEY_ID", creds.0)
        .env("AWS_SECRET_ACCESS_KEY", creds.1)
        .env("AWS_DEFAULT_REGION", "us-east-1")
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        // The libraries would otherwise look for instance credentials and a default endpoint.
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE");
    run_script(&mut cmd, &done).await;
}

/// One test per system, target and scenario.
macro_rules! systems {
    ($($name:ident: $system:literal),* $(,)?) => {
        $(mod $name {
            use super::{run, Scenario::*, Target};
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn through_fencegate_on_fs() { run($system, Target::Fs, Races).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn through_fencegate_on_a_store_without_conditions() {
                run($system, Target::S3WithoutConditions, Races).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn against_that_store_alone() {
                run($system, Target::StoreWithoutConditions, Races).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn its_zombie_writer_is_fenced_on_fs() { run($system, Target::Fs, Zombie).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn its_zombie_writer_is_fenced_on_a_store_without_conditions() {
                run($system, Target::S3WithoutConditions, Zombie).await
            }
        })*
    };
}

systems! {
    obstore: "obstore",
    deltalake: "deltalake",
    iceberg: "iceberg",
    lance: "lance",
    slatedb: "slatedb",
}
