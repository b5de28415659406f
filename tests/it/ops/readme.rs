//! The README and the docs with examples, run as written: each document's shell and Python
//! blocks run in order against a fencegate of its own, and the output each block shows
//! (`#   ...` lines under a command) must be what the command prints, so the docs cannot drift
//! from the binary. The checks of the docs that run nothing (the error table, the README's
//! length, history phrases, links) are in docs_hygiene.rs.
//!
//! Directives are HTML comments, invisible on GitHub, each on a line of its own:
//! - `<!-- readme-test: serve ARGS -->` (re)starts `fencegate serve ARGS` in the document's work
//!   directory, as a reader following it would at that point;
//! - `<!-- readme-test: file NAME -->` before a block writes the block to NAME;
//! - `<!-- readme-test: skip REASON -->` before a block leaves it out, and says why.
//!
//! Every `sh` and `python` block without `skip` runs; a directive that matches no block fails
//! the test. Each document runs in a fresh temporary directory of its own (also `TMPDIR`, so a
//! block's `cd "$(mktemp -d)"` stays inside it) where `config/`, `scripts/`, `examples/` and
//! `.venv/` of the checkout are linked, with the binary and the test venv (`.venv`, with the
//! aws cli and boto3) on PATH, and `127.0.0.1:8080` / `localhost:8080` replaced by the running
//! instance's address (`FENCEGATE_URL` points there too). A document whose Python needs other
//! libraries names the venv of the checkout that has them in `VENVS`: its `bin` then goes on
//! PATH before `.venv/bin`, so `python3` is that venv's.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

pub(super) const ROOT: &str = env!("CARGO_MANIFEST_DIR");

#[derive(Debug)]
enum Step {
    Serve {
        args: Vec<String>,
    },
    File {
        name: String,
        body: String,
    },
    Run {
        lang: String,
        body: String,
        line: usize,
    },
}

/// The documents whose examples run, each in a fresh directory with its own `serve`.
const RUN: &[&str] = &[
    "README.md",
    "docs/native-api.md",
    "docs/s3.md",
    "docs/operations.md",
    "docs/configuration.md",
    "docs/locks-and-tokens.md",
    "docs/data-systems.md",
];

/// Documents whose blocks run with another venv of the checkout first on PATH (its `python3`):
/// (document, venv, what installs it).
const VENVS: &[(&str, &str, &str)] = &[(
    "docs/data-systems.md",
    ".venv-tables",
    "run scripts/test, which installs .venv-tables (the table formats, pinned)",
)];

/// Documents beside the user docs that link and could hold a copy of the error table.
pub(super) const OTHER_DOCS: [&str; 4] = [
    "docs/history.md",
    "ARCHITECTURE.md",
    "BENCHMARKS.md",
    "tests/README.md",
];

/// User docs whose blocks do not run yet (every user doc with examples runs; the lock-service
/// recipes' blocks that need outside services are skipped, and tests/e2e/recipes.sh runs them).
const NOT_RUN: &[&str] = &[];

pub(super) fn read(doc: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(doc)).unwrap_or_else(|e| panic!("{doc}: {e}"))
}

/// The user docs: README.md and every docs/*.md but the history, which is history on purpose.
pub(super) fn user_docs() -> Vec<String> {
    let mut docs = vec!["README.md".to_string()];
    let mut found: Vec<String> = std::fs::read_dir(Path::new(ROOT).join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md") && n != "history.md")
        .map(|n| format!("docs/{n}"))
        .collect();
    found.sort();
    docs.extend(found);
    docs
}

/// A document's steps, in order. Panics on a directive that matches nothing.
fn steps(doc: &str, text: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut pending: Option<(String, usize)> = None;
    let mut lines = text.lines().enumerate();
    while let Some((i, line)) = lines.next() {
        let n = i + 1;
        if let Some(directive) = line
            .trim()
            .strip_prefix("<!-- readme-test:")
            .and_then(|d| d.strip_suffix("-->"))
        {
            let directive = directive.trim().to_string();
            if let Some(args) = directive.strip_prefix("serve") {
                steps.push(Step::Serve {
                    args: args.split_whitespace().map(String::from).collect(),
                });
            } else {
                assert!(pending.is_none(), "{doc}:{n}: two directives for one block");
                pending = Some((directive, n));
            }
            continue;
        }
        let Some(lang) = line.strip_prefix("```") else {
            continue;
        };
        let lang = lang.trim().to_string();
        let mut body = String::new();
        for (_, inner) in lines.by_ref() {
            if inner.starts_with("```") {
                break;
            }
            body.push_str(inner);
            body.push('\n');
        }
        match pending.take() {
            Some((d, _)) if d.starts_with("skip") => {
                assert!(d.len() > "skip ".len() + 5, "{doc}:{n}: a skip says why");
            }
            Some((d, _)) if d.starts_with("file ") => {
                steps.push(Step::File {
                    name: d["file ".len()..].trim().to_string(),
                    body,
                });
            }
            Some((d, at)) => panic!("{doc}:{at}: unknown directive {d:?}"),
            None if lang == "sh" || lang == "python" => steps.push(Step::Run {
                lang,
                body,
                line: n,
            }),
            None => {}
        }
    }
    assert!(
        pending.is_none(),
        "{doc}: a directive at its end matches no block"
    );
    steps
}

/// One command of a shell block and the output the document shows under it.
#[derive(Debug)]
struct Cmd {
    text: String,
    expect: Vec<String>,
    line: usize,
}

/// Splits a shell block into commands (a line and its `\` continuations) and their shown
/// output (`#` then three or more spaces); other comments are prose.
fn commands(doc: &str, body: &str, first_line: usize) -> Vec<Cmd> {
    let mut cmds: Vec<Cmd> = Vec::new();
    let mut continued = false;
    for (i, line) in body.lines().enumerate() {
        let n = first_line + 1 + i;
        if let Some(rest) = line.trim_start().strip_prefix('#') {
            if rest.starts_with("   ") {
                let last = cmds
                    .last_mut()
                    .unwrap_or_else(|| panic!("{doc}:{n}: shown output before any command"));
                push_shown(&mut last.expect, rest);
            }
            continue;
        }
        if line.trim().is_empty() {
            continue;
        }
        if continued {
            let last = cmds.last_mut().unwrap();
            last.text.push('\n');
            last.text.push_str(line);
        } else {
            cmds.push(Cmd {
                text: line.to_string(),
                expect: Vec::new(),
                line: n,
            });
        }
        continued = line.trim_end().ends_with('\\');
    }
    cmds
}

/// Adds one shown line (what follows its `#`): indented one more space than the line above,
/// it continues that line (a long line wrapped); else it is a line of its own.
fn push_shown(shown: &mut Vec<String>, rest: &str) {
    match shown.last_mut() {
        Some(last) if rest.starts_with("    ") => {
            last.push(' ');
            last.push_str(rest.trim());
        }
        _ => shown.push(rest.trim().to_string()),
    }
}

/// Whether `output` shows what the document shows: each shown line, split at `...`, has every
/// part found in order (lines may have others between them), whitespace runs counting as one
/// space.
fn shows(output: &str, expect: &[String]) -> bool {
    let squeeze = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let output = squeeze(output);
    let mut at = 0;
    for line in expect {
        let line = squeeze(line);
        for part in line.split("...").map(str::trim).filter(|p| !p.is_empty()) {
            match output[at..].find(part) {
                Some(i) => at += i + part.len(),
                None => return false,
            }
        }
    }
    true
}

/// A fencegate started as the document says (`fencegate serve ARGS` in the work directory).
fn serve(work: &Path, args: &[String]) -> common::Server {
    let mut cmd = Command::new(common::binary());
    cmd.arg("serve")
        .args(args)
        .args(["--listen", "127.0.0.1:0"])
        .current_dir(work)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null());
    common::Server::spawn(cmd, &work.join("data"))
}

/// SIGTERM, as a reader's Ctrl-C, and wait for the exit.
fn stop(mut server: common::Server) {
    unsafe { libc::kill(server.pid() as i32, libc::SIGTERM) };
    server.wait_exit(Duration::from_secs(60));
}

fn with_addr(text: &str, addr: &str) -> String {
    text.replace("127.0.0.1:8080", addr)
        .replace("localhost:8080", addr)
}

/// The `bin` directories of the venvs `doc` runs with, first on PATH first: its own (`VENVS`),
/// if it has one, then `.venv`. Panics, saying what installs it, when its own is missing.
fn venv_bins(doc: &str) -> Vec<PathBuf> {
    let mut bins = Vec::new();
    if let Some((_, venv, install)) = VENVS.iter().find(|(d, ..)| *d == doc) {
        let bin = Path::new(ROOT).join(venv).join("bin");
        assert!(
            bin.join("python3").exists(),
            "{doc} runs with {venv}, which is missing: {install}"
        );
        bins.push(bin);
    }
    bins.push(Path::new(ROOT).join(".venv/bin"));
    bins
}

/// Runs `script` with bash (or python) in `work`, the venvs' `bins` first on PATH after the
/// binary's directory; returns (exit code, stdout and stderr).
fn run(work: &Path, lang: &str, script: &str, addr: &str, bins: &[PathBuf]) -> (i32, String) {
    let path = work.join(format!(".readme-step.{lang}"));
    std::fs::write(&path, script).unwrap();
    let bin_dir = common::binary().parent().unwrap().to_path_buf();
    let mut dirs = vec![bin_dir];
    dirs.extend(bins.iter().cloned());
    let path_var = std::env::join_paths(dirs.into_iter().chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
    let interpreter = if lang == "python" { "python3" } else { "bash" };
    let out = Command::new("timeout")
        .arg("300")
        .arg(interpreter)
        .arg(&path)
        .current_dir(work)
        .env("PATH", path_var)
        .env("FENCEGATE_URL", format!("http://{addr}"))
        .env("HOME", work)
        .env("TMPDIR", work)
        .env_remove("AWS_PROFILE")
        .output()
        .expect("bash and python3 run");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

/// A shell block, one command at a time, each command's output captured on its own; variables
/// and exports carry from one command to the next as in a terminal.
fn run_shell(doc: &str, work: &Path, body: &str, line: usize, addr: &str, bins: &[PathBuf]) {
    let cmds = commands(doc, body, line);
    let outs = work.join(".readme-out");
    let _ = std::fs::remove_dir_all(&outs);
    std::fs::create_dir_all(&outs).unwrap();
    // A curl whose request fails (a 4xx or 5xx) exits non-zero, so a command that shows no
    // output is still checked against what the server answered; where the document shows the
    // output, the output decides.
    let mut script = String::from("curl() { command curl --fail-with-body \"$@\"; }\n");
    for (i, cmd) in cmds.iter().enumerate() {
        script.push_str(&format!(
            "{{\n{}\n}} >{dir}/{i} 2>&1 </dev/null; echo $? >{dir}/{i}.rc\n",
            with_addr(&cmd.text, addr),
            dir = outs.display()
        ));
    }
    let (code, text) = run(work, "sh", &script, addr, bins);
    assert_eq!(code, 0, "{doc}:{line}: the block's shell failed: {text}");
    for (i, cmd) in cmds.iter().enumerate() {
        let out = std::fs::read_to_string(outs.join(i.to_string())).unwrap_or_default();
        let rc: i32 = std::fs::read_to_string(outs.join(format!("{i}.rc")))
            .unwrap_or_else(|_| {
                panic!(
                    "{doc}:{}: never ran (an earlier command exited the shell)",
                    cmd.line
                )
            })
            .trim()
            .parse()
            .unwrap();
        if cmd.expect.is_empty() {
            assert_eq!(
                rc, 0,
                "{doc}:{}: `{}` exited {rc}:\n{out}",
                cmd.line, cmd.text
            );
        } else {
            // A command that shows its output may fail on purpose (a refused zombie): the
            // output decides.
            assert!(
                shows(&out, &cmd.expect),
                "{doc}:{}: `{}` (exit {rc}) printed\n{out}\nbut the document shows\n{}",
                cmd.line,
                cmd.text,
                cmd.expect.join("\n")
            );
        }
    }
}

/// Runs `doc` as written, in a fresh directory of its own; returns how many blocks ran.
fn run_doc(doc: &str) -> usize {
    let steps = steps(doc, &read(doc));
    let bins = venv_bins(doc);
    let tmp = tempfile::tempdir().unwrap();
    let work: PathBuf = tmp.path().to_path_buf();
    assert!(
        Path::new(ROOT).join(".venv/bin/aws").exists(),
        "the aws cli is not in .venv: run scripts/test, which installs awscli and boto3 there"
    );
    // The venv too, so that sourcing scripts/env.sh finds it and the README's PATH line works.
    for dir in ["config", "scripts", "examples", ".venv"] {
        std::os::unix::fs::symlink(Path::new(ROOT).join(dir), work.join(dir)).unwrap();
    }
    let mut instance: Option<common::Server> = None;
    let mut ran = 0;
    for step in &steps {
        match step {
            Step::Serve { args } => {
                if let Some(old) = instance.take() {
                    stop(old);
                }
                instance = Some(serve(&work, args));
            }
            Step::File { name, body } => std::fs::write(work.join(name), body).unwrap(),
            Step::Run { lang, body, line } => {
                // Before the first `serve`, blocks (setting up a shell) talk to nothing.
                let addr = instance
                    .as_ref()
                    .map_or_else(|| "127.0.0.1:8080".to_string(), |i| i.addr.to_string());
                if lang == "python" {
                    let (code, text) = run(&work, "python", &with_addr(body, &addr), &addr, &bins);
                    assert_eq!(code, 0, "{doc}:{line}: the Python block failed:\n{text}");
                    // The block's shown output, anywhere in it, is what the whole block prints.
                    let mut expect = Vec::new();
                    body.lines()
                        .filter_map(|l| l.trim_start().strip_prefix('#'))
                        .filter(|rest| rest.starts_with("   "))
                        .for_each(|rest| push_shown(&mut expect, rest));
                    assert!(
                        shows(&text, &expect),
                        "{doc}:{line}: the Python block printed\n{text}\nbut the document shows\n{}",
                        expect.join("\n")
                    );
                } else {
                    run_shell(doc, &work, body, *line, &addr, &bins);
                }
                ran += 1;
            }
        }
    }
    if let Some(last) = instance {
        stop(last);
    }
    ran
}

#[test]
fn the_readme_runs_as_written() {
    let ran = run_doc("README.md");
    assert!(ran >= 3, "only {ran} README.md blocks ran");
}

#[test]
fn the_native_api_doc_runs_as_written() {
    let ran = run_doc("docs/native-api.md");
    assert!(ran >= 3, "only {ran} docs/native-api.md blocks ran");
}

#[test]
fn the_s3_doc_runs_as_written() {
    let ran = run_doc("docs/s3.md");
    assert!(ran >= 3, "only {ran} docs/s3.md blocks ran");
}

#[test]
fn the_operations_doc_runs_as_written() {
    let ran = run_doc("docs/operations.md");
    assert!(ran >= 3, "only {ran} docs/operations.md blocks ran");
}

#[test]
fn the_configuration_doc_runs_as_written() {
    let ran = run_doc("docs/configuration.md");
    assert!(ran >= 1, "only {ran} docs/configuration.md blocks ran");
}

#[test]
fn the_locks_doc_runs_as_written() {
    let ran = run_doc("docs/locks-and-tokens.md");
    assert!(ran >= 3, "only {ran} docs/locks-and-tokens.md blocks ran");
}

#[test]
fn the_data_systems_doc_runs_as_written() {
    let ran = run_doc("docs/data-systems.md");
    assert!(ran >= 10, "only {ran} docs/data-systems.md blocks ran");
}

/// Every runnable document makes a fresh directory before its first server (or its first
/// block, if it starts none) and says to stop the server before it before each `serve`; no
/// other user doc has a block that would run.
#[test]
fn every_example_runs_in_a_fresh_directory() {
    for (doc, venv, _) in VENVS {
        assert!(
            RUN.contains(doc),
            "{doc} runs with {venv}, but is not in RUN"
        );
    }
    for doc in RUN {
        assert!(
            run_doc_list_is_complete(doc),
            "{doc} is listed in RUN but has no #[test] of its own"
        );
        let text = read(doc);
        let steps = steps(doc, &text);
        let first_serve = text.find("<!-- readme-test: serve");
        let before = match first_serve {
            Some(at) => &text[..at],
            None => {
                let first_run = steps
                    .iter()
                    .find_map(|s| match s {
                        Step::Run { line, body, .. } => Some((*line, body.clone())),
                        _ => None,
                    })
                    .unwrap_or_else(|| panic!("{doc} has no block that runs"));
                assert!(
                    first_run.1.contains("cd \"$(mktemp -d)\""),
                    "{doc}:{}: its first block does not make a fresh directory",
                    first_run.0
                );
                continue;
            }
        };
        assert!(
            before.contains("cd \"$(mktemp -d)\""),
            "{doc}: no `cd \"$(mktemp -d)\"` before the first server starts"
        );
        // Before each server, the reader is told to stop the one before (Ctrl-C).
        let mut from = 0;
        for (at, _) in text.match_indices("<!-- readme-test: serve") {
            let n = text[..at].lines().count() + 1;
            assert!(
                text[from..at].contains("Ctrl-C"),
                "{doc}:{n}: a server starts, but the text before it does not say to stop the one before (Ctrl-C)"
            );
            from = at + 1;
        }
    }
    for doc in user_docs() {
        if RUN.contains(&doc.as_str()) || NOT_RUN.contains(&doc.as_str()) {
            continue;
        }
        let steps = steps(&doc, &read(&doc));
        for step in &steps {
            match step {
                Step::Run { line, .. } => panic!(
                    "{doc}:{line}: a block that would run, in a document that is not run: add the document to RUN (and a test), or mark the block skip with why"
                ),
                Step::Serve { .. } => panic!("{doc}: a serve directive, in a document that is not run"),
                Step::File { .. } => {}
            }
        }
    }
}

/// Whether `doc` has a `*_runs_as_written` test above (kept in step with RUN by hand).
fn run_doc_list_is_complete(doc: &str) -> bool {
    let source = read("tests/it/ops/readme.rs");
    source.contains(&format!("run_doc(\"{doc}\")"))
}

#[test]
fn shown_output_is_matched_in_parts() {
    let out = "HTTP/1.1 409 Conflict\r\nfencing-token-highest: 34\r\n\r\n{\"error\":\"StaleFencingToken\"}";
    assert!(shows(
        out,
        &[
            "HTTP/1.1 409 Conflict".into(),
            "fencing-token-highest: 34".into()
        ]
    ));
    assert!(shows(out, &["409 ... StaleFencingToken".into()]));
    assert!(shows(
        out,
        &["HTTP/1.1 409".into(), "StaleFencingToken".into()]
    ));
    // Order matters, and a missing part fails: the negative controls of the matcher.
    assert!(!shows(out, &["StaleFencingToken ... 409".into()]));
    assert!(!shows(out, &["HTTP/1.1 200 OK".into()]));
}

#[test]
fn blocks_split_into_commands_and_shown_output() {
    let body = "# prose\ncurl -s a \\\n  b\n#   shown\n#    more\n#   next\nx=$(y)\n";
    let cmds = commands("test.md", body, 10);
    assert_eq!(cmds.len(), 2);
    assert_eq!(cmds[0].text, "curl -s a \\\n  b");
    assert_eq!(cmds[0].expect, ["shown more", "next"]);
    assert_eq!(cmds[0].line, 12);
    assert!(cmds[1].expect.is_empty());
}
