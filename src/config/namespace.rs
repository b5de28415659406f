//! Where buckets' objects live, so that no two buckets (configured, or created through the S3
//! API) can reach the same object (two buckets over one object would each keep a fence for
//! it), and nothing fencegate keeps on disk sits inside an fs backend's root or holds one.

use super::*;

/// Where a bucket's objects live, for telling whether two buckets could reach the same object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Namespace {
    /// Keys starting with `prefix` in store bucket `bucket` of the store at `store` (its
    /// endpoint, or "AWS").
    S3 {
        store: String,
        bucket: String,
        prefix: String,
    },
    /// Everything below a directory.
    Fs { dir: PathBuf },
}

impl Namespace {
    /// Whether every object of `other` lies in this namespace (the same store, and this prefix
    /// or directory a prefix of the other's; an empty prefix holds the whole store bucket).
    pub fn contains(&self, other: &Namespace) -> bool {
        match (self, other) {
            (
                Namespace::S3 {
                    store,
                    bucket,
                    prefix,
                },
                Namespace::S3 {
                    store: s2,
                    bucket: b2,
                    prefix: p2,
                },
            ) => store == s2 && bucket == b2 && p2.starts_with(prefix.as_str()),
            (Namespace::Fs { dir }, Namespace::Fs { dir: d2 }) => d2.starts_with(dir),
            _ => false,
        }
    }

    /// Whether the two can hold the same object: one contains the other.
    pub fn overlaps(&self, other: &Namespace) -> bool {
        self.contains(other) || other.contains(self)
    }
}

impl std::fmt::Display for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Namespace::S3 {
                store,
                bucket,
                prefix,
            } if prefix.is_empty() => write!(f, "all of store bucket {bucket} at {store}"),
            Namespace::S3 {
                store,
                bucket,
                prefix,
            } => write!(f, "prefix {prefix:?} of store bucket {bucket} at {store}"),
            Namespace::Fs { dir } => write!(f, "directory {}", dir.display()),
        }
    }
}

/// `path` made absolute and free of `.` and `..`, without touching the disk (it may not exist).
/// A path as the file system resolves it: the longest existing ancestor canonicalized
/// (symlinks followed), the rest appended lexically. Two spellings of one directory (a
/// symlink) then compare equal.
fn resolved_path(path: &Path) -> PathBuf {
    let lexical = lexical_absolute(path);
    let mut base = lexical.clone();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(&base) {
            return rest.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (base.file_name().map(|n| n.to_os_string()), base.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                base = parent.to_path_buf();
            }
            _ => return lexical,
        }
    }
}

/// An endpoint as the network resolves it: `scheme://ip:port` of its host's lowest address,
/// so that two spellings of one store (`localhost`, `127.0.0.1`) compare equal. A host that
/// does not resolve (no DNS where the config is checked) stays as written.
fn resolved_endpoint(endpoint: &str) -> String {
    // Parsed by hand: this module is also built into the config fuzz target, without `http`.
    let text = endpoint.trim_end_matches('/').to_ascii_lowercase();
    let Some((scheme, rest)) = text.split_once("://") else {
        return text;
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(':') && p.bytes().all(|b| b.is_ascii_digit()) => {
            (h, p.parse::<u16>().ok())
        }
        _ => (authority, None),
    };
    let port = port.unwrap_or(if scheme == "https" { 443 } else { 80 });
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match std::net::ToSocketAddrs::to_socket_addrs(&(host, port)) {
        Ok(addrs) => match addrs.map(|a| a.ip()).min() {
            Some(ip) => format!("{scheme}://{}{path}", SocketAddr::new(ip, port)),
            None => text,
        },
        Err(_) => text,
    }
}

fn lexical_absolute(path: &Path) -> PathBuf {
    use std::path::Component;
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

impl Config {
    /// Where `bucket` (served under `policy`) keeps its objects.
    pub fn namespace(&self, bucket: &str, policy: &BucketPolicy) -> Namespace {
        match &self.backends[&policy.backend] {
            BackendConfig::Fs { root } => Namespace::Fs {
                dir: resolved_path(&self.fs_root(root).join(bucket)),
            },
            // A container is an s3 bucket's like: a place in one store.
            BackendConfig::Azure(az) => Namespace::S3 {
                store: format!(
                    "azure:{}",
                    az.endpoint
                        .as_deref()
                        .map(resolved_endpoint)
                        .or_else(|| az.account.clone())
                        .unwrap_or_default()
                ),
                bucket: policy
                    .backend_bucket
                    .clone()
                    .unwrap_or_else(|| bucket.to_string()),
                prefix: policy.backend_prefix.clone(),
            },
            BackendConfig::Gcs(g) => Namespace::S3 {
                store: format!(
                    "gcs:{}",
                    g.endpoint
                        .as_deref()
                        .map(resolved_endpoint)
                        .unwrap_or_else(|| "https://storage.googleapis.com".into())
                ),
                bucket: policy
                    .backend_bucket
                    .clone()
                    .unwrap_or_else(|| bucket.to_string()),
                prefix: policy.backend_prefix.clone(),
            },
            BackendConfig::S3(s3) => Namespace::S3 {
                store: s3
                    .endpoint
                    .as_deref()
                    .map_or("AWS".to_string(), resolved_endpoint),
                bucket: policy
                    .backend_bucket
                    .clone()
                    .unwrap_or_else(|| bucket.to_string()),
                prefix: policy.backend_prefix.clone(),
            },
        }
    }

    /// Where every bucket created through the S3 API lives: below this namespace.
    pub(super) fn created_root(&self) -> Option<Namespace> {
        // Bucket "" is the root: the fs root directory, or the template's store prefix.
        let template = self.bucket_defaults.as_ref()?;
        Some(self.namespace("", template))
    }

    /// Refuses buckets whose namespaces overlap: two fence rows would guard one object, and a
    /// tombstone written through one bucket could be revived through the other. `created` are
    /// the buckets created through the S3 API (a configured bucket of the same name wins).
    pub fn check_namespaces(
        &self,
        created: &BTreeMap<String, BucketPolicy>,
    ) -> Result<(), ConfigError> {
        let conflict = self
            .namespace_conflict(created)
            .map(|(_, message, fix)| (message, fix))
            .or_else(|| {
                self.own_dirs_conflict()
                    .map(|(_, message, fix)| (message, fix))
            });
        match conflict {
            None => Ok(()),
            Some((message, fix)) => Err(ConfigError {
                source_name: self.source.clone(),
                location: None,
                variable: None,
                message,
                fix,
            }),
        }
    }

    /// The first overlap [`Config::check_namespaces`] refuses: the bucket it is found at, the
    /// problem and the fix.
    pub(super) fn namespace_conflict(
        &self,
        created: &BTreeMap<String, BucketPolicy>,
    ) -> Option<(String, String, String)> {
        let mut all: Vec<(String, &str, Namespace)> = Vec::new();
        for (name, policy) in &self.buckets {
            all.push((format!("bucket {name}"), name, self.namespace(name, policy)));
        }
        for (name, policy) in created {
            if !self.buckets.contains_key(name) && self.backends.contains_key(&policy.backend) {
                all.push((
                    format!("bucket {name} (created through the S3 API)"),
                    name,
                    self.namespace(name, policy),
                ));
            }
        }
        for (i, (a, _, na)) in all.iter().enumerate() {
            for (b, bucket, nb) in &all[i + 1..] {
                if na.overlaps(nb) {
                    return Some((bucket.to_string(),
                        format!("{a} and {b} overlap in the store: {a} is {na}, {b} is {nb}, so one object would have two fences and a delete through one could be undone through the other"),
                        "give each its own place: backend_prefix values of which neither is a prefix of the other (an empty prefix takes the whole store bucket), a different backend_bucket, or a different fs root; then move the objects there".to_string(),
                    ));
                }
            }
        }
        if let Some(root) = self.created_root() {
            for (a, bucket, na) in &all {
                if na.contains(&root) {
                    return Some((bucket.to_string(),
                        format!("{a} is {na}, which holds every bucket [bucket_defaults] creates through the S3 API ({root}), so their objects would also be {a}'s"),
                        format!("give {a} a backend_prefix of its own that [bucket_defaults] does not use, or set [bucket_defaults] backend_prefix (or backend_bucket) to a place outside it"),
                    ));
                }
            }
        }
        None
    }

    /// The first fs backend root that holds or lies in what fencegate keeps on disk (its
    /// `data_dir`, whose `fences`, `uploads` and `spool` a bucket of that name would be; the
    /// RocksDB fence table; the upload and spool directories): the field at fault, the problem
    /// and the fix. A bucket's objects and fencegate's own files would be one directory, each
    /// taking the other's files for its own.
    pub(super) fn own_dirs_conflict(&self) -> Option<(Vec<String>, String, String)> {
        let data_dir = resolved_path(&self.server.data_dir);
        let rocks = (self.fence_store.kind == FenceStoreKind::Rocksdb)
            .then(|| resolved_path(&self.fence_store_path()));
        let own = [
            ("the multipart upload directory", data_dir.join("uploads")),
            ("the spool directory", data_dir.join("spool")),
        ];
        let at = |name: &str| vec!["backends".to_string(), name.to_string(), "root".to_string()];
        for (name, backend) in &self.backends {
            let BackendConfig::Fs { root: raw } = backend else {
                continue;
            };
            let root = resolved_path(&self.fs_root(raw));
            if let Ok(rest) = data_dir.strip_prefix(&root) {
                let clash = match rest.components().next() {
                    None => {
                        "fences, uploads or spool would be fencegate's own directory".to_string()
                    }
                    Some(first) => format!(
                        "{} would be fencegate's data_dir",
                        first.as_os_str().to_string_lossy()
                    ),
                };
                return Some((
                    at(name),
                    format!("fs backend {name}'s root {} holds [server] data_dir {}: a bucket named {clash}, and its objects fencegate's own files", root.display(), data_dir.display()),
                    format!("give backend {name} a root outside data_dir (unset, it is <data_dir>/objects), or move data_dir out of {}", root.display()),
                ));
            }
            if let Some(fences) = rocks
                .as_ref()
                .filter(|f| f.starts_with(&root) || root.starts_with(f))
            {
                let place = if self.fence_store.path.is_some() {
                    vec!["fence_store".to_string(), "path".to_string()]
                } else {
                    at(name)
                };
                return Some((
                    place,
                    format!("the fence table {} and fs backend {name}'s root {} overlap: the table's files would be a bucket's objects (or the objects inside the table), and a write or delete through that bucket could corrupt every fence", fences.display(), root.display()),
                    format!("set [fence_store] path to a directory outside every fs backend's root (unset, it is <data_dir>/fences), or give backend {name} a root of its own"),
                ));
            }
            if let Some((what, dir)) = own.iter().find(|(_, dir)| root.starts_with(dir)) {
                return Some((
                    at(name),
                    format!("fs backend {name}'s root {} is inside {what} {}, which fencegate keeps for itself", root.display(), dir.display()),
                    format!("give backend {name} a root outside data_dir's uploads and spool (unset, it is <data_dir>/objects)"),
                ));
            }
        }
        None
    }

    /// Why a bucket named `name`, created with the `[bucket_defaults]` policy `policy`, cannot
    /// coexist with the buckets in `existing`: the first one it would overlap.
    pub fn overlap_with(
        &self,
        name: &str,
        policy: &BucketPolicy,
        existing: &BTreeMap<String, BucketPolicy>,
    ) -> Option<String> {
        let mine = self.namespace(name, policy);
        existing
            .iter()
            .filter(|(other, p)| other.as_str() != name && self.backends.contains_key(&p.backend))
            .find_map(|(other, p)| {
                let theirs = self.namespace(other, p);
                mine.overlaps(&theirs).then(|| {
                    format!("would be {mine}, which overlaps bucket {other} ({theirs}); choose a name whose place is not inside bucket {other}'s, or give bucket {other} a backend_prefix of its own")
                })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str) -> ConfigError {
        parse(text, "f.toml").expect_err("an overlap with fencegate's own files")
    }

    #[test]
    fn an_fs_root_may_not_hold_or_lie_in_fencegates_own_files() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let server = format!("[server]\ndata_dir = \"{}\"\n", data.display());
        let fs =
            |root: &str| format!("{server}\n[backends.local]\nkind = \"fs\"\nroot = \"{root}\"\n");
        // The root is data_dir: buckets fences, uploads, spool would be fencegate's own.
        let e = refused(&fs(&data.display().to_string()));
        assert!(e.message.contains("fences, uploads or spool"), "{e}");
        assert_eq!(e.location.map(|l| l.0), Some(6), "the root's line: {e}");
        // A root above data_dir: the bucket named after it would be data_dir.
        let e = refused(&fs(&dir.path().display().to_string()));
        assert!(e.message.contains("a bucket named data would be"), "{e}");
        // Inside the upload directory.
        let e = refused(&fs(&data.join("uploads/x").display().to_string()));
        assert!(e.message.contains("multipart upload directory"), "{e}");
        // The fence table inside a root, or inside one bucket's directory.
        let objects = dir.path().join("objects");
        for fences in [objects.clone(), objects.join("default/fences")] {
            let e = refused(&format!(
                "{}\n[fence_store]\npath = \"{}\"\n",
                fs(&objects.display().to_string()),
                fences.display()
            ));
            assert!(e.message.contains("the fence table"), "{e}");
            assert_eq!(e.location.map(|l| l.0), Some(9), "the path's line: {e}");
            assert!(e.fix.contains("[fence_store] path"), "{e}");
        }
        // A root that holds the (default) fence table: data_dir/fences.
        let e = refused(&format!(
            "{server}\n[fence_store]\npath = \"{}\"\n\n[backends.local]\nkind = \"fs\"\n",
            data.join("objects/fences").display()
        ));
        assert!(e.message.contains("the fence table"), "{e}");
        // Beside them is fine: the default root, one of its own in data_dir, one elsewhere.
        for text in [
            server.clone(),
            fs(&data.join("archive").display().to_string()),
            fs(&objects.display().to_string()),
        ] {
            parse(&text, "f.toml").unwrap_or_else(|e| panic!("{text}: {e}"));
        }
        // etcd keeps no table on disk.
        let etcd = format!(
            "{}\n[fence_store]\nkind = \"etcd\"\nendpoints = [\"http://127.0.0.1:2379\"]\npath = \"{}\"\n",
            fs(&objects.display().to_string()),
            objects.display()
        );
        if let Err(e) = parse(&etcd, "f.toml") {
            assert!(!e.message.contains("the fence table"), "{e}");
        }
    }

    #[test]
    fn the_data_dir_given_on_the_command_line_is_checked_too() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("objects");
        let config = parse(
            &format!(
                "[backends.local]\nkind = \"fs\"\nroot = \"{}\"\n",
                root.display()
            ),
            "f.toml",
        )
        .unwrap()
        .with_overrides(None, Some(root.clone()));
        let e = config.check_namespaces(&BTreeMap::new()).unwrap_err();
        assert!(e.message.contains("holds [server] data_dir"), "{e}");
    }
}
