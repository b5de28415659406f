//! One page of an S3 listing (v1 and v2) out of the backend's key-ordered pages: keys under a
//! prefix after a marker, keys sharing the next delimited segment folded into one common
//! prefix, at most `max` entries. A page that ends on a common prefix resumes after every key
//! under it, so no prefix is listed twice.

use crate::backend::{ListPage, ObjectInfo};
use std::future::Future;

/// Sorts after every key under a prefix: U+10FFFF is the largest code point, and UTF-8's byte
/// order is code point order.
const PAST: char = '\u{10FFFF}';

/// How many keys one backend call fetches while a page is filled.
const FETCH: usize = 1000;

/// One page of keys and common prefixes, in key order.
#[derive(Debug, Default)]
pub struct Listing {
    pub objects: Vec<ObjectInfo>,
    pub prefixes: Vec<String>,
    /// The last key or prefix returned, when more follow: the next page's marker.
    pub next: Option<String>,
}

/// The common prefix `key` folds into, if any.
fn folded(key: &str, prefix: &str, delimiter: Option<&str>) -> Option<String> {
    let d = delimiter?;
    key.get(prefix.len()..)?
        .find(d)
        .map(|i| key[..prefix.len() + i + d.len()].to_string())
}

/// Lists like S3. `fetch(start_after, n)` answers up to `n` keys under `prefix` after
/// `start_after`, in key order. A marker that is itself a common prefix (as this page's
/// `next` is when it ends on one) starts after every key under it.
pub async fn page<E, F, Fut>(
    mut fetch: F,
    prefix: &str,
    delimiter: Option<&str>,
    after: Option<String>,
    max: usize,
) -> Result<Listing, E>
where
    F: FnMut(Option<String>, usize) -> Fut,
    Fut: Future<Output = Result<ListPage, E>>,
{
    let delimiter = delimiter.filter(|d| !d.is_empty());
    let mut out = Listing::default();
    let mut cursor = match &after {
        Some(a) if folded(a, prefix, delimiter).as_deref() == Some(a.as_str()) => {
            Some(format!("{a}{PAST}"))
        }
        other => other.clone(),
    };
    let mut last_entry: Option<String> = None;
    // The common prefix whose keys are being passed over, across fetches.
    let mut skipping: Option<String> = None;
    loop {
        let page = fetch(cursor.clone(), FETCH).await?;
        let more = page.next_start_after.is_some();
        for o in page.objects {
            if skipping.as_deref().is_some_and(|p| o.key.starts_with(p)) {
                continue;
            }
            let fold = folded(&o.key, prefix, delimiter);
            if fold.is_some() && fold == after {
                skipping = fold;
                continue;
            }
            if out.objects.len() + out.prefixes.len() == max {
                out.next = last_entry;
                return Ok(out);
            }
            last_entry = Some(fold.clone().unwrap_or_else(|| o.key.clone()));
            match fold {
                Some(p) => {
                    skipping = Some(p.clone());
                    out.prefixes.push(p);
                }
                None => out.objects.push(o),
            }
        }
        if !more {
            return Ok(out);
        }
        // Past the page's last key, or past the prefix it ended in, whichever is later.
        let past_prefix = skipping.as_ref().map(|p| format!("{p}{PAST}"));
        cursor = past_prefix.max(page.next_start_after);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    type Fetched = futures::future::Ready<Result<ListPage, ()>>;

    /// A backend's listing of `keys` (sorted) under `prefix`, `n` at a time (at most 3, so a
    /// page is filled from several fetches).
    fn store<'a>(
        keys: &'a [String],
        prefix: &'a str,
    ) -> impl FnMut(Option<String>, usize) -> Fetched + 'a {
        move |after, n| {
            let n = n.min(3);
            let rest: Vec<&String> = keys
                .iter()
                .filter(|k| k.starts_with(prefix))
                .filter(|k| after.as_ref().is_none_or(|a| k.as_str() > a.as_str()))
                .collect();
            let objects: Vec<ObjectInfo> = rest
                .iter()
                .take(n)
                .map(|k| ObjectInfo {
                    key: k.to_string(),
                    ..Default::default()
                })
                .collect();
            let next = (rest.len() > n).then(|| objects.last().unwrap().key.clone());
            futures::future::ready(Ok(ListPage {
                objects,
                next_start_after: next,
            }))
        }
    }

    fn entries(l: &Listing) -> Vec<String> {
        let mut all: Vec<String> = l.objects.iter().map(|o| o.key.clone()).collect();
        all.extend(l.prefixes.iter().cloned());
        all.sort();
        all
    }

    /// Every page of a listing, as a client walks it by `next`.
    async fn walk(
        keys: &[String],
        prefix: &str,
        delimiter: Option<&str>,
        max: usize,
    ) -> Vec<Listing> {
        let mut pages = Vec::new();
        let mut after = None;
        loop {
            let listing = page(store(keys, prefix), prefix, delimiter, after, max)
                .await
                .unwrap();
            after = listing.next.clone();
            pages.push(listing);
            if after.is_none() || pages.len() > keys.len() + 2 {
                return pages;
            }
        }
    }

    #[tokio::test]
    async fn a_page_ending_on_a_prefix_resumes_after_it() {
        let keys: Vec<String> = ["asdf", "boo/bar", "boo/baz/xyzzy", "cquux/a", "cquux/b"]
            .map(String::from)
            .to_vec();
        let pages = walk(&keys, "", Some("/"), 2).await;
        let shown: Vec<Vec<String>> = pages.iter().map(entries).collect();
        assert_eq!(shown, [vec!["asdf", "boo/"], vec!["cquux/"]]);
        assert_eq!(pages[0].next.as_deref(), Some("boo/"));
        assert!(pages[1].next.is_none(), "the last page is not truncated");
    }

    /// For random key sets, delimiters, prefixes and page sizes, the pages put together are the
    /// one-page listing, nothing repeats, and only the last page is not truncated.
    #[tokio::test]
    async fn pages_put_together_are_the_whole_listing() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(31);
        let alphabet = ['a', 'b', '/', '-', 'é', PAST];
        for _ in 0..400 {
            let mut keys: Vec<String> = (0..rng.random_range(0..30))
                .map(|_| {
                    (0..rng.random_range(1..7))
                        .map(|_| alphabet[rng.random_range(0..alphabet.len())])
                        .collect()
                })
                .collect();
            keys.sort();
            keys.dedup();
            let delimiter =
                [None, Some("/"), Some("a/"), Some("é"), Some("")][rng.random_range(0..5)];
            let prefix = ["", "a", "b/", "a/"][rng.random_range(0..4)];
            let max = rng.random_range(1..6);
            let whole = page(store(&keys, prefix), prefix, delimiter, None, usize::MAX)
                .await
                .unwrap();
            assert!(whole.next.is_none());
            let pages = walk(&keys, prefix, delimiter, max).await;
            let mut together = Vec::new();
            for (i, p) in pages.iter().enumerate() {
                let last = i + 1 == pages.len();
                assert_eq!(
                    p.next.is_none(),
                    last,
                    "{keys:?} {prefix:?} {delimiter:?} {max}"
                );
                assert!(entries(p).len() <= max);
                together.extend(entries(p));
            }
            let mut unique = together.clone();
            unique.dedup();
            assert_eq!(
                together, unique,
                "a repeat in {keys:?} {prefix:?} {delimiter:?} {max}"
            );
            assert_eq!(
                together,
                entries(&whole),
                "{keys:?} {prefix:?} {delimiter:?} {max}"
            );
        }
    }

    /// Keys that go on past U+10FFFF under a prefix are still under it: the prefix is listed
    /// once, within a page and across fetches.
    #[tokio::test]
    async fn keys_past_the_largest_code_point_stay_under_their_prefix() {
        let keys: Vec<String> = [
            "P/a/1",
            "P/a/\u{10FFFF}",
            "P/a/\u{10FFFF}x",
            "P/a/\u{10FFFF}y/z",
            "P/b",
        ]
        .map(String::from)
        .to_vec();
        let l = page(store(&keys, "P/"), "P/", Some("/"), None, 10)
            .await
            .unwrap();
        assert_eq!(entries(&l), ["P/a/", "P/b"]);
        let l = page(store(&keys, "P/"), "P/", Some("/"), None, 1)
            .await
            .unwrap();
        assert_eq!(
            (entries(&l), l.next.as_deref()),
            (vec!["P/a/".to_string()], Some("P/a/"))
        );
        let rest = page(store(&keys, "P/"), "P/", Some("/"), Some("P/a/".into()), 10)
            .await
            .unwrap();
        assert_eq!(entries(&rest), ["P/b"]);
    }

    #[tokio::test]
    async fn a_marker_inside_a_prefix_lists_the_rest_of_it() {
        let keys: Vec<String> = ["boo/bar", "boo/baz/xyzzy", "c"].map(String::from).to_vec();
        let l = page(store(&keys, ""), "", Some("/"), Some("boo/bar".into()), 10)
            .await
            .unwrap();
        assert_eq!(entries(&l), ["boo/", "c"]);
    }
}
