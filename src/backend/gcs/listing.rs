//! Listings through the JSON API (`GET /storage/v1/b/BUCKET/o`), whose items carry each
//! object's metadata and so the ETag its writer was answered (the XML API's do not). GCS lists
//! in byte order, as S3 does, and starts a listing at a name (`startOffset`, inclusive), so a
//! page goes on from its last key without a marker of the service's.

use super::client::Request;
use super::{meta, GcsBackend};
use crate::backend::{BackendError, ListPage};

impl GcsBackend {
    /// Objects whose store names start with `store_prefix`, after the store name
    /// `start_after`, at most `max`; names are as stored.
    pub(super) async fn list_objects(
        &self,
        store_prefix: &str,
        start_after: Option<&str>,
        max: usize,
    ) -> Result<ListPage, BackendError> {
        let max = max.max(1);
        let mut page = ListPage::default();
        let mut token: Option<String> = None;
        loop {
            // One more than wanted: `startOffset` includes the name it starts at.
            let want = (max - page.objects.len() + 1).min(1000);
            let req = || {
                let mut r = Request::json_list(&self.bucket)
                    .query("prefix", store_prefix)
                    .query("maxResults", want.to_string());
                if let Some(start) = start_after {
                    r = r.query("startOffset", start);
                }
                if let Some(t) = &token {
                    r = r.query("pageToken", t.clone());
                }
                r
            };
            let json: serde_json::Value = self
                .client
                .read("List Objects", req)
                .await
                .map_err(|f| f.into_backend("List Objects"))?
                .json()
                .await
                .map_err(|e| {
                    BackendError::Failing(format!(
                        "List Objects: the answer is not the JSON GCS sends: {e}"
                    ))
                })?;
            let items = json["items"].as_array().cloned().unwrap_or_default();
            let mut more = false;
            for item in &items {
                let Some(name) = item["name"].as_str() else {
                    continue;
                };
                if start_after.is_some_and(|after| name <= after) {
                    continue;
                }
                if page.objects.len() >= max {
                    more = true;
                    break;
                }
                page.objects.push(meta::listed(name, item));
            }
            token = json["nextPageToken"].as_str().map(str::to_string);
            if more || page.objects.len() >= max || token.is_none() {
                if more || token.is_some() {
                    page.next_start_after = page.objects.last().map(|o| o.key.clone());
                }
                return Ok(page);
            }
        }
    }

    /// Keys starting with `prefix`, after `start_after`, at most `max`.
    pub(super) async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        max: usize,
    ) -> Result<ListPage, BackendError> {
        let start = start_after.map(|k| self.object(k));
        let mut page = self
            .list_objects(&self.object(prefix), start.as_deref(), max)
            .await?;
        let strip = |name: &str| name.strip_prefix(&self.prefix).unwrap_or(name).to_string();
        for object in &mut page.objects {
            object.key = strip(&object.key);
        }
        page.next_start_after = page.next_start_after.as_deref().map(strip);
        Ok(page)
    }
}
