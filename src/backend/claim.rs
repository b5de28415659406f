//! The claim a fence table holds on a store place (`catalog::claim` checks it at start-up):
//! what it records, and what a store backend does to read and write it. Each store keeps it
//! as one object (or blob), `<prefix>.fencegate-probe/claim`, in the probes' reserved space.

/// The claim's name inside the reserved space; the sweep of left-over probe runs keeps it.
pub const CLAIM_NAME: &str = "claim";

/// What a claim object holds: the table's id, and for whoever reads it, where and when the
/// claim was made.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Claim {
    pub table_id: String,
    /// The fencegate bucket whose rows fence the place (empty in a claim that names none).
    #[serde(default)]
    pub bucket: String,
    #[serde(default)]
    pub host: String,
    /// RFC 3339, UTC.
    #[serde(default)]
    pub at: String,
}

impl Claim {
    /// A claim for bucket `bucket` of the table `table_id`, made here and now.
    pub fn new(table_id: &str, bucket: &str) -> Claim {
        Claim {
            table_id: table_id.to_string(),
            bucket: bucket.to_string(),
            host: host_name(),
            at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
        }
    }
}

/// This machine's name, for the humans reading a claim; never compared.
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "an unknown host".into())
}

/// A store place that holds a claim (the s3 and azure backends).
#[async_trait::async_trait]
pub trait ClaimStore: Send + Sync {
    /// The claim's key in the store.
    fn claim_key(&self) -> String;

    /// The store bucket (container) holding the place, for messages.
    fn store_bucket(&self) -> &str;

    /// The claim on this place, if any. Something there that is not a claim is an error: it
    /// was not written by fencegate, and nothing can be concluded from it.
    async fn read_claim(&self) -> Result<Option<Claim>, String>;

    /// Writes `claim` if the place has none, or over whatever is there when `replace`: false
    /// when the store says one is there already.
    async fn write_claim(&self, claim: &Claim, replace: bool) -> Result<bool, String>;
}
