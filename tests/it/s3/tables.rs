//! Table formats and object_store through fencegate as a drop-in S3 gateway
//! (tests/e2e/tables_client.py, from .venv-tables): obstore's PutMode.Create and PutMode.Update,
//! delta-rs, Iceberg (SQL catalog on SQLite, PyArrowFileIO) and Lance, with writers racing on
//! one table, and SlateDB, whose newer writer fences the older. Each runs through fencegate on the fs backend, through fencegate on the s3
//! backend over moto (a store without every condition: fencegate starts there with its
//! opt-in), and against moto alone, the negative control (what the script asserts there, and
//! why, is in its docstring).

use super::fixture::{run_script, Fx, Kind};
use crate::common::store::{Store, StoreKind};

#[derive(Clone, Copy)]
enum Target {
    Fs,
    S3OverMoto,
    MotoAlone,
}

async fn run(system: &str, target: Target) {
    let root = env!("CARGO_MANIFEST_DIR");
    let python = format!("{root}/.venv-tables/bin/python3");
    assert!(
        std::path::Path::new(&python).exists(),
        "the table formats are missing: run scripts/test, which installs them in .venv-tables"
    );
    // Kept alive until the script is done: the fixture (fencegate, and moto behind it) or moto.
    let (_fx, _store, endpoint, bucket, creds) = match target {
        Target::Fs | Target::S3OverMoto => {
            let kind = match target {
                Target::Fs => Kind::Fs,
                _ => Kind::S3Moto,
            };
            // Bucket `bkt` takes writes without tokens: these libraries cannot send one.
            let fx = Fx::start(kind).await;
            let endpoint = fx.server.url("");
            (
                Some(fx),
                None,
                endpoint,
                "bkt",
                ("fencegate", "fencegate-dev-secret"),
            )
        }
        Target::MotoAlone => {
            let store = Store::start(StoreKind::Moto);
            store.create_bucket("tables").await;
            let endpoint = store.endpoint();
            (None, Some(store), endpoint, "tables", ("test", "test"))
        }
    };
    let gated = if matches!(target, Target::MotoAlone) {
        "store"
    } else {
        "fencegate"
    };
    let mut cmd = tokio::process::Command::new(&python);
    cmd.arg(format!("{root}/tests/e2e/tables_client.py"))
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
    run_script(&mut cmd, &format!("{system} passed")).await;
}

/// One test per system and target.
macro_rules! systems {
    ($($name:ident: $system:literal),* $(,)?) => {
        $(mod $name {
            use super::{run, Target};
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn through_fencegate_on_fs() { run($system, Target::Fs).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn through_fencegate_on_s3_over_moto() { run($system, Target::S3OverMoto).await }
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn against_moto_alone() { run($system, Target::MotoAlone).await }
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
