//! No Docker engine runs here, so the files in docker/ are checked for consistency instead:
//! every path they copy exists, the binary and config they name are the real ones, and the
//! container's config file is valid.

use std::path::Path;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn dockerfile_copies_paths_that_exist() {
    let dockerfile = std::fs::read_to_string(Path::new(ROOT).join("docker/Dockerfile")).unwrap();
    let mut copies = 0;
    for line in dockerfile
        .lines()
        .filter(|l| l.starts_with("COPY ") && !l.contains("--from"))
    {
        let parts: Vec<&str> = line.split_whitespace().collect();
        for src in &parts[1..parts.len() - 1] {
            assert!(
                Path::new(ROOT).join(src).exists(),
                "Dockerfile copies missing {src}"
            );
            copies += 1;
        }
    }
    assert!(copies >= 3);
    assert!(dockerfile.contains("--bin fencegate"));
    assert!(dockerfile.contains("EXPOSE 8080"));
    assert!(dockerfile.contains("/healthz"));
}

#[test]
fn container_config_is_valid_and_matches_the_dockerfile() {
    // Without the secret the container config does not load (compose refuses to start too).
    let path = Path::new(ROOT).join("docker/fencegate.toml");
    std::env::remove_var("FENCEGATE_APP_SECRET");
    let err = fencegate::config::Config::load(&path)
        .unwrap_err()
        .to_string();
    assert!(err.contains("FENCEGATE_APP_SECRET"), "{err}");
    std::env::set_var("FENCEGATE_APP_SECRET", "test-secret");
    std::env::remove_var("FENCEGATE_ADMIN_TOKEN");
    let err = fencegate::config::Config::load(&path)
        .unwrap_err()
        .to_string();
    assert!(err.contains("FENCEGATE_ADMIN_TOKEN"), "{err}");
    std::env::set_var(
        "FENCEGATE_ADMIN_TOKEN",
        "a-test-admin-token-of-enough-length",
    );
    let config = fencegate::config::Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    // Not development mode: the port it exposes needs a key.
    assert_eq!(config.keys.len(), 1);
    assert!(!config.listen.ip().is_loopback());
    fencegate::server::check_protected(&config).unwrap();
    assert_eq!(config.listen.port(), 8080);
    let dockerfile = std::fs::read_to_string(Path::new(ROOT).join("docker/Dockerfile")).unwrap();
    assert!(dockerfile.contains(&config.server.data_dir.display().to_string()));
    let compose = std::fs::read_to_string(Path::new(ROOT).join("docker/compose.yaml")).unwrap();
    assert!(compose.contains("dockerfile: docker/Dockerfile"));
    assert!(compose.contains(&config.server.data_dir.display().to_string()));
    assert!(compose.contains("FENCEGATE_APP_SECRET: ${FENCEGATE_APP_SECRET:?"));
    // The admin port is closed by its token, and published on the host's loopback only.
    assert!(config.admin_token.is_some());
    let admin = config.admin_listen.expect("an admin listener");
    assert!(compose.contains(&format!("\"127.0.0.1:{0}:{0}\"", admin.port())));
    assert!(compose.contains("FENCEGATE_ADMIN_TOKEN: ${FENCEGATE_ADMIN_TOKEN:?"));

    cluster_files_agree(&dockerfile);
}

/// docker/cluster.compose.yaml and docker/cluster.toml (README, "Run several instances"): the
/// config loads (with the same environment), shares the fence table on the compose file's
/// three etcd services and writes to its store service, and both instances run it.
fn cluster_files_agree(dockerfile: &str) {
    let path = Path::new(ROOT).join("docker/cluster.toml");
    let config = fencegate::config::Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let compose =
        std::fs::read_to_string(Path::new(ROOT).join("docker/cluster.compose.yaml")).unwrap();
    let etcd = config
        .etcd
        .as_ref()
        .expect("cluster.toml shares the fence table on etcd");
    assert_eq!(etcd.endpoints.len(), 3);
    for (n, endpoint) in etcd.endpoints.iter().enumerate() {
        let name = format!("etcd{}", n + 1);
        assert_eq!(endpoint, &format!("http://{name}:2379"));
        assert!(
            compose.contains(&format!("  {name}:\n")),
            "no service {name}"
        );
        assert!(compose.contains(&format!("ETCD_ADVERTISE_CLIENT_URLS: {endpoint}")));
    }
    assert!(compose.contains("image: quay.io/coreos/etcd:v3.4.23"));
    let backend = serde_json::to_string(&config.backends["store"]).unwrap();
    assert!(backend.contains("http://store:4566"), "{backend}");
    assert!(compose.contains("  store:\n") && compose.contains("GATEWAY_PORT=4566"));
    assert!(compose.contains("http://store:4566/fencegate-cluster"));
    assert_eq!(
        config.buckets["default"].backend_bucket.as_deref(),
        Some("fencegate-cluster")
    );
    assert!(compose.contains("dockerfile: docker/Dockerfile"));
    assert!(compose.contains("./cluster.toml:/etc/fencegate/cluster.toml:ro"));
    for n in [1, 2] {
        assert!(compose.contains(&format!("  fencegate{n}:\n    <<: *fencegate")));
    }
    assert!(compose.contains(&format!("fencegate1:{}", config.server.data_dir.display())));
    assert!(
        dockerfile.contains("protobuf-compiler"),
        "the build needs protoc for etcd-client"
    );
    assert!(!config.keys.is_empty());
    fencegate::server::check_protected(&config).unwrap();
}
