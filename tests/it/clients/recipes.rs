//! The lock-service recipes (examples/recipes, examples/etcd) against the real services:
//! tests/e2e/recipes.sh starts redis-server, PostgreSQL and etcd on loopback ports, and each
//! recipe shows its zombie refused with 409 StaleFencingToken and the new holder's data kept.
//! Beside it: docs/locks-and-tokens.md and the recipes give each lock service objects of its
//! own, as that page's rule 2 demands (tokens of two services are not comparable).

use crate::common::Server;
use std::process::Command;

#[test]
fn redis_postgres_etcd_and_lease_recipes_fence_their_zombies() {
    let root = env!("CARGO_MANIFEST_DIR");
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), None);
    let out = Command::new("bash")
        .arg(format!("{root}/tests/e2e/recipes.sh"))
        .current_dir(root)
        .env("FENCEGATE", server.addr.to_string())
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the recipes failed (exit 2: a service is missing; scripts/test installs them):\n{stdout}\n{stderr}"
    );
    for recipe in ["redis", "postgres", "etcd", "lease"] {
        assert!(
            stdout.contains(&format!("== {recipe}: passed")),
            "{recipe} did not pass:\n{stdout}\n{stderr}"
        );
    }
    assert!(stdout.contains("4 passed, 0 failed"), "{stdout}");
    assert!(stdout.contains("StaleFencingToken"), "{stdout}");
}

/// The object names following each of `markers` in `text` (`/v1/objects/default/NAME`, ...).
fn objects_named(text: &str, markers: &[&str]) -> std::collections::BTreeSet<String> {
    let mut found = std::collections::BTreeSet::new();
    for marker in markers {
        for (at, _) in text.match_indices(marker) {
            let name: String = text[at + marker.len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || "._-".contains(*c))
                .collect();
            if !name.is_empty() && !name.starts_with('$') {
                found.insert(name);
            }
        }
    }
    found
}

/// A newcomer following docs/locks-and-tokens.md section after section wrote a lease token 3
/// and then had a PostgreSQL token 3 accepted on the same object: each lock service's section,
/// and each recipe in examples/, must name objects no other service's does.
#[test]
fn each_lock_service_writes_objects_of_its_own() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = std::fs::read_to_string(root.join("docs/locks-and-tokens.md")).unwrap();
    let markers = [
        "/v1/objects/default/",
        "s3://default/",
        "\"key\":\"",
        "KEY=",
        "fencegate:default/",
        "name = 'default/",
        "lock:default/",
    ];
    let mut owner: std::collections::BTreeMap<String, String> = Default::default();
    let mut sections = 0;
    for section in doc.split("\n## (").skip(1) {
        let service = section.lines().next().unwrap_or_default().to_string();
        sections += 1;
        for object in objects_named(section, &markers) {
            if let Some(other) = owner.insert(object.clone(), service.clone()) {
                assert_eq!(
                    other, service,
                    "docs/locks-and-tokens.md writes {object} from two lock services"
                );
            }
        }
    }
    assert!(
        sections >= 5 && owner.len() >= 5,
        "{sections} sections: {owner:?}"
    );

    // The recipes: the default KEY of each service's scripts (examples/etcd holds two).
    let mut recipe_owner: std::collections::BTreeMap<String, String> = Default::default();
    for dir in ["examples/recipes", "examples/etcd"] {
        for entry in std::fs::read_dir(root.join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            let service = if dir.ends_with("etcd") {
                "etcd".into()
            } else {
                stem
            };
            for key in objects_named(&text, &["KEY=\"${KEY:-", "environ.get(\"KEY\", \""]) {
                if let Some(other) = recipe_owner.insert(key.clone(), service.clone()) {
                    assert_eq!(other, service, "two recipes default to the object {key}");
                }
            }
        }
    }
    assert!(recipe_owner.len() >= 6, "{recipe_owner:?}");
}
