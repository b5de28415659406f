//! List Blobs answers (`restype=container&comp=list`), read into fencegate's listing pages. A
//! blob's stored metadata (`include=metadata`) gives the ETag its writer was answered.

use super::client::Request;
use super::meta::{decode, md5_etag};
use super::AzureBackend;
use crate::backend::{BackendError, ListPage, ObjectInfo};
use quick_xml::events::Event;

/// Cached listing markers kept at most; past it the cache starts again.
const MARKERS: usize = 10_000;

impl AzureBackend {
    /// One page of List Blobs under the store prefix `prefix`, with each blob's metadata;
    /// `uncommitted`: blobs that hold only uncommitted blocks too (a staging blob mid-way).
    pub(super) async fn list_blobs(
        &self,
        prefix: &str,
        marker: Option<&str>,
        max: usize,
        uncommitted: bool,
    ) -> Result<BlobPage, BackendError> {
        let include = match uncommitted {
            true => "metadata,uncommittedblobs",
            false => "metadata",
        };
        let req = || {
            let r = Request::new(reqwest::Method::GET, &self.container, "")
                .query("restype", "container")
                .query("comp", "list")
                .query("prefix", prefix)
                .query("include", include)
                .query("maxresults", max.to_string());
            match marker {
                Some(m) => r.query("marker", m),
                None => r,
            }
        };
        let text = self
            .client
            .read("List Blobs", req)
            .await
            .map_err(|f| f.into_backend("List Blobs"))?
            .text()
            .await
            .map_err(|e| BackendError::Failing(format!("List Blobs: {e}")))?;
        parse(&text)
    }

    /// Keys starting with `prefix`, after `start_after`, at most `max`. The service goes on by
    /// its own marker: fencegate keeps the marker of each page it answered, by that page's
    /// last key, and without one (a client's own StartAfter) skips to the key.
    pub(super) async fn list_page(
        &self,
        prefix: &str,
        start_after: Option<&str>,
        max: usize,
    ) -> Result<ListPage, BackendError> {
        let store_prefix = self.blob(prefix);
        let mut marker = start_after.and_then(|k| {
            self.markers
                .lock()
                .remove(&(prefix.to_string(), k.to_string()))
        });
        let skip_to = match marker {
            Some(_) => None,
            None => start_after.map(|k| self.blob(k)),
        };
        let mut page = ListPage::default();
        let max = max.max(1);
        loop {
            let want = (max - page.objects.len()).min(5000);
            let got = self
                .list_blobs(&store_prefix, marker.as_deref(), want, false)
                .await?;
            for mut blob in got.blobs {
                if skip_to.as_ref().is_some_and(|after| blob.key <= *after) {
                    continue;
                }
                let Some(key) = blob.key.strip_prefix(&self.prefix) else {
                    continue;
                };
                blob.key = key.to_string();
                page.objects.push(blob);
            }
            marker = got.next_marker;
            if marker.is_none() || page.objects.len() >= max {
                break;
            }
        }
        if let (Some(marker), Some(last)) = (marker, page.objects.last()) {
            let mut markers = self.markers.lock();
            if markers.len() >= MARKERS {
                markers.clear();
            }
            markers.insert((prefix.to_string(), last.key.clone()), marker);
            page.next_start_after = Some(last.key.clone());
        }
        Ok(page)
    }
}

/// One page of the service's listing.
#[derive(Debug, Default)]
pub struct BlobPage {
    pub blobs: Vec<ObjectInfo>,
    /// Where the service goes on; `None` on the last page.
    pub next_marker: Option<String>,
}

/// Reads a List Blobs answer. Names are as stored (the caller strips its prefix).
pub fn parse(xml: &str) -> Result<BlobPage, BackendError> {
    let bad = |e: String| {
        BackendError::Failing(format!(
            "List Blobs: the answer is not the XML Azure sends: {e}"
        ))
    };
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut path: Vec<String> = Vec::new();
    let mut page = BlobPage::default();
    let mut blob: Option<ObjectInfo> = None;
    let mut md5 = None;
    // An element's text arrives in pieces, split at each entity (`&amp;`).
    let mut text = String::new();
    loop {
        match reader.read_event().map_err(|e| bad(e.to_string()))? {
            Event::Start(e) => {
                let name = String::from_utf8_lossy(e.name().as_ref()).to_string();
                if name == "Blob" && path.last().map(String::as_str) == Some("Blobs") {
                    blob = Some(ObjectInfo::default());
                    md5 = None;
                }
                path.push(name);
                text.clear();
            }
            Event::Text(t) => text += &t.decode().map_err(|e| bad(e.to_string()))?,
            Event::GeneralRef(r) => {
                let c = match r.resolve_char_ref().map_err(|e| bad(e.to_string()))? {
                    Some(c) => c,
                    None => match r.decode().map_err(|e| bad(e.to_string()))?.as_ref() {
                        "amp" => '&',
                        "lt" => '<',
                        "gt" => '>',
                        "quot" => '"',
                        "apos" => '\'',
                        other => return Err(bad(format!("unknown entity &{other};"))),
                    },
                };
                text.push(c);
            }
            Event::End(_) => {
                let at: Vec<&str> = path.iter().map(String::as_str).collect();
                let value = std::mem::take(&mut text);
                match (at.as_slice(), blob.as_mut()) {
                    ([.., "EnumerationResults", "NextMarker"], _) if !value.is_empty() => {
                        page.next_marker = Some(value)
                    }
                    ([.., "Blob", "Name"], Some(b)) => b.key = value,
                    ([.., "Properties", "Etag"], Some(b)) => {
                        // Quoted in headers, bare in listings.
                        b.version = match value.starts_with('"') {
                            true => value,
                            false => format!("\"{value}\""),
                        }
                    }
                    ([.., "Properties", "Content-Length"], Some(b)) => {
                        b.size = value.parse().unwrap_or(0)
                    }
                    ([.., "Properties", "Content-MD5"], Some(_)) => md5 = md5_etag(&value),
                    ([.., "Properties", "Last-Modified"], Some(b)) => {
                        b.last_modified_ms = httpdate::parse_http_date(&value)
                            .ok()
                            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                            .map_or(0, |d| d.as_millis() as u64)
                    }
                    ([.., "Metadata", name], Some(b)) if name.eq_ignore_ascii_case("fencegate") => {
                        if let Some(stored) = decode(&value) {
                            b.etag = stored.etag;
                        }
                    }
                    ([.., "Blobs", "Blob"], Some(_)) => {
                        let mut b = blob.take().expect("matched Some");
                        if b.etag.is_empty() {
                            b.etag = md5.take().unwrap_or_else(|| b.version.clone());
                        }
                        page.blobs.push(b);
                    }
                    _ => {}
                }
                path.pop();
            }
            Event::Eof => break,
            _ => {}
        }
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_gives_names_versions_sizes_and_the_next_marker() {
        let xml = r#"<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="http://x/" ContainerName="c"><Prefix>p/</Prefix><MaxResults>2</MaxResults><Blobs><Blob><Name>p/a &amp; b</Name><Properties><Last-Modified>Sun, 06 Dec 2026 16:00:00 GMT</Last-Modified><Etag>0x8D1</Etag><Content-Length>5</Content-Length><Content-MD5>nhB9nTcrtoJr2B01QqQZ1g==</Content-MD5></Properties><Metadata/></Blob><Blob><Name>p/c</Name><Properties><Etag>"0x8D2"</Etag><Content-Length>0</Content-Length></Properties></Blob></Blobs><NextMarker>2!abc</NextMarker></EnumerationResults>"#;
        let page = parse(xml).unwrap();
        assert_eq!(page.blobs.len(), 2);
        assert_eq!(page.blobs[0].key, "p/a & b");
        assert_eq!(page.blobs[0].version, "\"0x8D1\"");
        assert_eq!(page.blobs[0].etag, "\"9e107d9d372bb6826bd81d3542a419d6\"");
        assert_eq!(page.blobs[0].size, 5);
        assert!(page.blobs[0].last_modified_ms > 0);
        assert_eq!(page.blobs[1].version, "\"0x8D2\"");
        assert_eq!(page.blobs[1].etag, "\"0x8D2\"");
        assert_eq!(page.next_marker.as_deref(), Some("2!abc"));
    }
}
