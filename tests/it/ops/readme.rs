//! The README, run as written (issue 15): its shell and Python blocks run in order against
//! fresh fencegate instances, and the output each block shows (`#   ...` lines under a command)
//! must be what the command prints, so the README cannot drift from the binary.
//!
//! Directives are HTML comments, invisible on GitHub, each on a line of its own:
//! - `<!-- readme-test: serve ARGS -->` (re)starts `fencegate serve ARGS` in the work directory,
//!   as a reader following the README would at that point;
//! - `<!-- readme-test: file NAME -->` before a block writes the block to NAME;
//! - `<!-- readme-test: skip REASON -->` before a block leaves it out, and says why.
//!
//! Every `sh` and `python` block without `skip` runs; a directive that matches no block fails
//! the test. Commands run in one temporary directory where `config/`, `scripts/` and
//! `examples/` of the checkout are linked, with the binary and the test venv (`.venv`, with
//! the aws cli and boto3) on PATH, and `127.0.0.1:8080` / `localhost:8080` replaced by the
//! running instance's address (`FENCEGATE_URL` points there too).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

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

/// The README's steps, in order. Panics on a directive that matches nothing.
fn steps(readme: &str) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut pending: Option<(String, usize)> = None;
    let mut lines = readme.lines().enumerate();
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
                assert!(
                    pending.is_none(),
                    "README.md:{n}: two directives for one block"
                );
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
                assert!(
                    d.len() > "skip ".len() + 5,
                    "README.md:{n}: a skip says why"
                );
            }
            Some((d, at)) if d.starts_with("file ") => {
                steps.push(Step::File {
                    name: d["file ".len()..].trim().to_string(),
                    body,
                });
                let _ = at;
            }
            Some((d, at)) => panic!("README.md:{at}: unknown directive {d:?}"),
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
        "README.md: a directive at its end matches no block"
    );
    steps
}

/// One command of a shell block and the output the README shows under it.
#[derive(Debug)]
struct Cmd {
    text: String,
    expect: Vec<String>,
    line: usize,
}

/// Splits a shell block into commands (a line and its `\` continuations) and their shown
/// output (`#` then three or more spaces); other comments are prose.
fn commands(body: &str, first_line: usize) -> Vec<Cmd> {
    let mut cmds: Vec<Cmd> = Vec::new();
    let mut continued = false;
    for (i, line) in body.lines().enumerate() {
        let n = first_line + 1 + i;
        if let Some(rest) = line.trim_start().strip_prefix('#') {
            if rest.starts_with("   ") {
                let last = cmds
                    .last_mut()
                    .unwrap_or_else(|| panic!("README.md:{n}: shown output before any command"));
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

/// Whether `output` shows what the README shows: each shown line, split at `...`, has every
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

/// A fencegate started as the README says (`fencegate serve ARGS` in the work directory).
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

/// Runs `script` with bash (or python) in `work`; returns (exit code, stdout and stderr).
fn run(work: &Path, lang: &str, script: &str, addr: &str) -> (i32, String) {
    let path = work.join(format!(".readme-step.{lang}"));
    std::fs::write(&path, script).unwrap();
    let venv = Path::new(ROOT).join(".venv/bin");
    let bin_dir = common::binary().parent().unwrap().to_path_buf();
    let path_var = format!(
        "{}:{}:{}",
        bin_dir.display(),
        venv.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let interpreter = if lang == "python" { "python3" } else { "bash" };
    let out = Command::new("timeout")
        .arg("300")
        .arg(interpreter)
        .arg(&path)
        .current_dir(work)
        .env("PATH", path_var)
        .env("FENCEGATE_URL", format!("http://{addr}"))
        .env("HOME", work)
        .env_remove("AWS_PROFILE")
        .output()
        .expect("bash and python3 run");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

/// A shell block, one command at a time, each command's output captured on its own; variables
/// and exports carry from one command to the next as in a terminal.
fn run_shell(work: &Path, body: &str, line: usize, addr: &str) {
    let cmds = commands(body, line);
    let outs = work.join(".readme-out");
    let _ = std::fs::remove_dir_all(&outs);
    std::fs::create_dir_all(&outs).unwrap();
    let mut script = String::new();
    for (i, cmd) in cmds.iter().enumerate() {
        script.push_str(&format!(
            "{{\n{}\n}} >{dir}/{i} 2>&1 </dev/null; echo $? >{dir}/{i}.rc\n",
            with_addr(&cmd.text, addr),
            dir = outs.display()
        ));
    }
    let (code, text) = run(work, "sh", &script, addr);
    assert_eq!(
        code, 0,
        "README.md:{line}: the block's shell failed: {text}"
    );
    for (i, cmd) in cmds.iter().enumerate() {
        let out = std::fs::read_to_string(outs.join(i.to_string())).unwrap_or_default();
        let rc: i32 = std::fs::read_to_string(outs.join(format!("{i}.rc")))
            .unwrap_or_else(|_| {
                panic!(
                    "README.md:{}: never ran (an earlier command exited the shell)",
                    cmd.line
                )
            })
            .trim()
            .parse()
            .unwrap();
        if cmd.expect.is_empty() {
            assert_eq!(
                rc, 0,
                "README.md:{}: `{}` exited {rc}:\n{out}",
                cmd.line, cmd.text
            );
        } else {
            // A command that shows its output may fail on purpose (a refused zombie): the
            // output decides.
            assert!(
                shows(&out, &cmd.expect),
                "README.md:{}: `{}` (exit {rc}) printed\n{out}\nbut the README shows\n{}",
                cmd.line,
                cmd.text,
                cmd.expect.join("\n")
            );
        }
    }
}

#[test]
fn the_readme_runs_as_written() {
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    let steps = steps(&readme);
    let tmp = tempfile::tempdir().unwrap();
    let work: PathBuf = tmp.path().to_path_buf();
    for dir in ["config", "scripts", "examples"] {
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
                    let (code, text) = run(&work, "python", &with_addr(body, &addr), &addr);
                    assert_eq!(
                        code, 0,
                        "README.md:{line}: the Python block failed:\n{text}"
                    );
                    // The block's shown output, anywhere in it, is what the whole block prints.
                    let mut expect = Vec::new();
                    body.lines()
                        .filter_map(|l| l.trim_start().strip_prefix('#'))
                        .filter(|rest| rest.starts_with("   "))
                        .for_each(|rest| push_shown(&mut expect, rest));
                    assert!(
                        shows(&text, &expect),
                        "README.md:{line}: the Python block printed\n{text}\nbut the README shows\n{}",
                        expect.join("\n")
                    );
                } else {
                    run_shell(&work, body, *line, &addr);
                }
                ran += 1;
            }
        }
    }
    assert!(ran >= 8, "only {ran} README blocks ran");
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
    let cmds = commands(body, 10);
    assert_eq!(cmds.len(), 2);
    assert_eq!(cmds[0].text, "curl -s a \\\n  b");
    assert_eq!(cmds[0].expect, ["shown more", "next"]);
    assert_eq!(cmds[0].line, 12);
    assert!(cmds[1].expect.is_empty());
}

/// The rows of the first `| case | status | code |` table in `doc`.
fn error_table(doc: &str) -> &str {
    let start = doc
        .find("| case | status | code |")
        .expect("an error table");
    let end = doc[start..].find("\n\n").map_or(doc.len(), |e| start + e);
    &doc[start..end]
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

#[test]
fn every_error_code_is_in_both_error_tables() {
    let codes = codes_in_source();
    assert!(
        codes.len() > 30 && codes.contains("StaleFencingToken") && codes.contains("NoSuchRoute"),
        "the scan found {codes:?}"
    );
    for doc in ["README.md", "docs/design.md"] {
        let text = std::fs::read_to_string(Path::new(ROOT).join(doc)).unwrap();
        let table = error_table(&text);
        let missing: Vec<_> = codes
            .iter()
            .filter(|c| !table.contains(&format!("`{c}`")))
            .collect();
        assert!(missing.is_empty(), "{doc}'s error table lacks {missing:?}");
    }
    // The two tables are one table.
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    let design = std::fs::read_to_string(Path::new(ROOT).join("docs/design.md")).unwrap();
    assert_eq!(error_table(&readme), error_table(&design));
}
