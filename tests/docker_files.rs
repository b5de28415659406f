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
    let config = fencegate::config::Config::load(&Path::new(ROOT).join("docker/fencegate.toml"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(config.listen.port(), 8080);
    let dockerfile = std::fs::read_to_string(Path::new(ROOT).join("docker/Dockerfile")).unwrap();
    assert!(dockerfile.contains(&config.server.data_dir.display().to_string()));
    let compose = std::fs::read_to_string(Path::new(ROOT).join("docker/compose.yaml")).unwrap();
    assert!(compose.contains("dockerfile: docker/Dockerfile"));
    assert!(compose.contains(&config.server.data_dir.display().to_string()));
}
