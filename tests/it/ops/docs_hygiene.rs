//! The user docs stay sound beside running as written (readme.rs): every error code is in the
//! one error table, the README stays short, the docs hold no review history, and their links
//! and the sections they quote lead somewhere.

use super::readme::{read, user_docs, OTHER_DOCS, ROOT};

use std::path::{Path, PathBuf};

#[test]
fn the_readme_is_short_and_the_docs_hold_no_history() {
    let readme = read("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines: at most 300; move the rest to docs/"
    );
    let mut found = Vec::new();
    for doc in user_docs() {
        for (i, line) in read(&doc).lines().enumerate() {
            if let Some(phrase) = history_phrase(line) {
                found.push(format!("{doc}:{}: {phrase:?} in {line:?}", i + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "user docs state what holds now; history goes in docs/history.md:\n{}",
        found.join("\n")
    );
}

/// The history phrase in `line`, if any: "review round", "round N" / "rounds N",
/// "issue N", "an open item", "this release" (case aside; "around 5" is not one).
fn history_phrase(line: &str) -> Option<String> {
    let lower = line.to_lowercase();
    for phrase in [
        "review round",
        "an open item",
        "this release",
        "the review",
        "in review",
        "reviewed adversarially",
        "unreleased",
        "previously named",
        "fixed since",
        "was renamed",
        "were renamed",
    ] {
        if lower.contains(phrase) {
            return Some(phrase.to_string());
        }
    }
    for word in ["round", "issue", "review", "finding"] {
        for (at, _) in lower.match_indices(word) {
            let starts_word = lower[..at]
                .chars()
                .next_back()
                .is_none_or(|c| !c.is_alphanumeric());
            let rest = &lower[at + word.len()..];
            let rest = rest.strip_prefix('s').unwrap_or(rest);
            let numbered = rest
                .strip_prefix(' ')
                .and_then(|r| r.chars().next())
                .is_some_and(|c| c.is_ascii_digit());
            if starts_word && numbered {
                return Some(lower[at..].chars().take(word.len() + 4).collect());
            }
        }
    }
    None
}

#[test]
fn history_phrases_are_found() {
    assert!(history_phrase("Review round 12 found ways").is_some());
    assert!(history_phrase("(an open item: docs/threat-model.md, round 23, F2)").is_some());
    assert!(history_phrase("Rounds 13 to 18 of adversarial review").is_some());
    assert!(history_phrase("Two families were renamed in this release").is_some());
    assert!(history_phrase("as S3 does (issue 14)").is_some());
    assert!(history_phrase("Review 12 found this").is_some());
    assert!(history_phrase("fixed since 0.0.9 (finding F2)").is_some());
    assert!(history_phrase("the unreleased commits e75ecfb to fd078d4").is_some());
    assert!(history_phrase("The severity is the one the review gave it").is_some());
    // Negative controls: words that only contain the phrase.
    assert!(history_phrase("two or three etcd round trips").is_none());
    assert!(history_phrase("around 20 s, `RequestTimeout`").is_none());
    assert!(history_phrase("issues can point here").is_none());
}

/// Every relative link of a user doc (and of ARCHITECTURE.md, BENCHMARKS.md and
/// tests/README.md) leads to a file that exists, and a `#anchor` into a Markdown file to one of
/// its headings.
#[test]
fn the_docs_links_lead_somewhere() {
    let mut docs = user_docs();
    docs.extend(OTHER_DOCS.map(String::from));
    let mut broken = Vec::new();
    for doc in &docs {
        let text = read(doc);
        let dir = Path::new(doc).parent().unwrap_or(Path::new(""));
        for (n, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let path = if file.is_empty() {
                PathBuf::from(doc)
            } else {
                dir.join(file)
            };
            let full = Path::new(ROOT).join(&path);
            if !full.exists() {
                broken.push(format!("{doc}:{n}: {target} (no {})", path.display()));
                continue;
            }
            if let Some(anchor) = anchor {
                if full.extension().is_some_and(|e| e == "md") {
                    let target_text = std::fs::read_to_string(&full).unwrap();
                    let slugs: Vec<String> =
                        headings(&target_text).iter().map(|h| slug(h)).collect();
                    if !slugs.iter().any(|s| s == anchor) {
                        broken.push(format!("{doc}:{n}: {target} (no such heading)"));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// A Markdown file's headings (`#` to `######`, then a space), outside code blocks, where a
/// shell comment is not one.
fn headings(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        let level = line.chars().take_while(|c| *c == '#').count();
        if !in_code && (1..=6).contains(&level) && line[level..].starts_with(' ') {
            found.push(line[level..].trim().to_string());
        }
    }
    found
}

/// Every `FILE, "Section"` a doc, a configuration file, a script or a source comment sends
/// its reader to (`[design.md](design.md), "Bounded intents"`, `README, "Build"`) names a
/// heading that FILE has; comments wrapped over lines are joined first.
#[test]
fn quoted_sections_exist() {
    let mut files: Vec<String> = user_docs();
    // The history names sections as they were called then.
    files.extend(
        OTHER_DOCS
            .iter()
            .filter(|d| **d != "docs/history.md")
            .map(|d| d.to_string()),
    );
    for dir in ["config", "docker", "scripts", "src"] {
        let mut stack = vec![Path::new(ROOT).join(dir)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let path = e.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else {
                    files.push(path.strip_prefix(ROOT).unwrap().display().to_string());
                }
            }
        }
    }
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let Ok(text) = std::fs::read_to_string(Path::new(ROOT).join(file)) else {
            continue;
        };
        // Lines joined, their comment markers dropped, so a reference wrapped over two
        // comment lines reads as one.
        let joined: String = text
            .lines()
            .map(|l| {
                let t = l.trim_start();
                let t = ["//!", "///", "//"]
                    .iter()
                    .find_map(|m| t.strip_prefix(m))
                    .unwrap_or(t);
                let t = t.trim_start_matches('#').trim_start();
                t.to_string()
            })
            .collect::<Vec<_>>()
            .join(" ");
        let dir = Path::new(file).parent().unwrap_or(Path::new(""));
        for (at, _) in joined.match_indices(", \"") {
            let before = &joined[..at];
            let name = before
                .rsplit(|c: char| c.is_whitespace() || c == '(' || c == '[')
                .next()
                .unwrap_or("")
                .trim_end_matches(')')
                .trim_end_matches(']');
            // `[text](path.md)` keeps its path after `](`.
            let name = name.rsplit("](").next().unwrap_or(name);
            let target = if name == "README" || name == "README.md" {
                PathBuf::from("README.md")
            } else if name.ends_with(".md") {
                let in_dir = dir.join(name);
                if Path::new(ROOT).join(&in_dir).exists() {
                    in_dir
                } else {
                    PathBuf::from(name)
                }
            } else {
                continue;
            };
            let rest = &joined[at + 3..];
            let Some(end) = rest.find('"') else { continue };
            let section = rest[..end].trim();
            let Ok(target_text) = std::fs::read_to_string(Path::new(ROOT).join(&target)) else {
                broken.push(format!(
                    "{file}: {name}, \"{section}\" (no file {})",
                    target.display()
                ));
                continue;
            };
            let plain = |h: &str| h.replace('`', "").to_lowercase();
            checked += 1;
            if !headings(&target_text)
                .iter()
                .any(|h| plain(h).starts_with(&plain(section)))
            {
                broken.push(format!("{file}: {name}, \"{section}\" (no such heading)"));
            }
        }
    }
    assert!(checked > 20, "only {checked} section references found");
    assert!(
        broken.is_empty(),
        "references to sections that do not exist:\n{}",
        broken.join("\n")
    );
}

/// The `(target)` of every `[text](target)` outside code blocks, with its line number.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut in_code = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        for (at, _) in line.match_indices("](") {
            let rest = &line[at + 2..];
            if let Some(end) = rest.find(')') {
                let target = rest[..end].trim();
                if !target.is_empty() && !target.contains(' ') {
                    found.push((i + 1, target.to_string()));
                }
            }
        }
    }
    found
}

/// GitHub's anchor for a heading: lower case, spaces to hyphens, punctuation dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

#[test]
fn headings_make_githubs_anchors() {
    assert_eq!(
        slug(" (a) fencegate's own leases"),
        "a-fencegates-own-leases"
    );
    assert_eq!(
        slug(" Retries (`Idempotency-Key`)"),
        "retries-idempotency-key"
    );
    assert_eq!(slug(" Prerequisites and build"), "prerequisites-and-build");
}

/// The rows of the first `| case | status | code |` table in `doc`, if it has one.
fn error_table(doc: &str) -> Option<&str> {
    let start = doc.find("| case | status | code |")?;
    let end = doc[start..].find("\n\n").map_or(doc.len(), |e| start + e);
    Some(&doc[start..end])
}

/// The error codes the binary answers with: every literal in the `code()` function of every
/// error type in src/, and the code of every `error::plain(...)`.
fn codes_in_source() -> std::collections::BTreeSet<String> {
    let literals = |text: &str| -> Vec<String> {
        text.split('"')
            .skip(1)
            .step_by(2)
            .filter(|l| {
                l.len() > 3
                    && l.starts_with(|c: char| c.is_ascii_uppercase())
                    && l.chars().all(|c| c.is_ascii_alphanumeric())
            })
            .map(String::from)
            .collect()
    };
    let mut codes = std::collections::BTreeSet::new();
    let mut stack = vec![Path::new(ROOT).join("src")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(dir).unwrap().map(Result::unwrap) {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                // Every error type's `code()`: the literals of its body.
                for (start, _) in text.match_indices("fn code(&self)") {
                    let end = start + text[start..].find("\n    }\n").unwrap_or(0);
                    codes.extend(literals(&text[start..end]));
                }
                for call in text.split("error::plain(").skip(1) {
                    // The code is the call's first string literal.
                    if let Some(code) = literals(call.split(')').next().unwrap_or("")).first() {
                        codes.insert(code.clone());
                    }
                }
            }
        }
    }
    codes
}

/// The error table is kept once, in docs/reference.md: it lists every code the binary answers
/// with, and no other document holds a copy of it (nor of any of its rows).
#[test]
fn every_error_code_is_in_the_one_error_table() {
    let codes = codes_in_source();
    assert!(
        codes.len() > 30 && codes.contains("StaleFencingToken") && codes.contains("NoSuchRoute"),
        "the scan found {codes:?}"
    );
    let reference = read("docs/reference.md");
    let table = error_table(&reference).expect("docs/reference.md has the error table");
    // The scan of the source, and the binary's own list of its codes (the metrics' `code`
    // label), which holds the codes written by hand outside the error types too.
    let missing: Vec<_> = codes
        .iter()
        .map(String::as_str)
        .chain(fencegate::metrics::codes::FENCEGATE_CODES.iter().copied())
        .filter(|c| !table.contains(&format!("`{c}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/reference.md's error table lacks {missing:?}"
    );
    let rows: Vec<&str> = table.lines().skip(2).filter(|r| r.len() > 20).collect();
    assert!(rows.len() > 30, "the table's rows: {rows:?}");
    let mut others = user_docs();
    others.extend(OTHER_DOCS.map(String::from));
    for doc in others.iter().filter(|d| *d != "docs/reference.md") {
        let text = read(doc);
        assert!(
            error_table(&text).is_none(),
            "{doc} holds a copy of the error table: link docs/reference.md instead"
        );
        for row in &rows {
            assert!(
                !text.contains(row),
                "{doc} holds a row of the error table: link docs/reference.md instead:\n{row}"
            );
        }
    }
}
