//! Where each configuration value comes from: the TOML file (or the embedded default, an empty
//! text) with `FENCEGATE_SECTION__FIELD` environment variables layered over it, merged and
//! deserialized by figment. Every message about a value names its place: `line:column` in the
//! file, or the variable that set it.
//!
//! Only variables whose name has a double underscore after `FENCEGATE_` are fields: every field
//! lives in a table, so `FENCEGATE_CONFIG` (the `--config` flag), `FENCEGATE_ADMIN_TOKEN` and
//! the other single-underscore names that `*_env` settings point at are never read as fields.
//! Values are kept as the strings they are (a secret `0123` stays `0123`); numbers, booleans,
//! durations and sizes parse from strings (`units.rs`). A value starting with `[` or `{` is a
//! TOML array or inline table, for the few fields that are lists or maps.

use figment::value::{Dict, Map, Value};
use figment::{Figment, Profile, Provider};
use std::collections::BTreeMap;

/// The prefix of every configuration variable.
pub const PREFIX: &str = "FENCEGATE_";

/// The configuration variables, as figment's `Env` provider found them.
#[derive(Debug, Clone, Default)]
pub struct EnvLayer {
    /// Dotted key path (`server.listen`) to the variable that set it.
    vars: BTreeMap<String, String>,
    data: Dict,
}

/// A variable that cannot be used: its name and the problem (never its value).
pub type EnvProblem = (String, String);

impl EnvLayer {
    /// No variables: the file alone.
    pub fn none() -> EnvLayer {
        EnvLayer::default()
    }

    /// The process's `FENCEGATE_*__*` variables.
    pub fn from_process() -> Result<EnvLayer, EnvProblem> {
        let env = figment::providers::Env::prefixed(PREFIX)
            .filter(|k| k.as_str().contains("__"))
            .split("__");
        EnvLayer::from_keys(env.iter().map(|(k, v)| (k.as_str().to_string(), v)))
    }

    /// Variables given as `(name, value)`, as if they were the process's (tests).
    pub fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<EnvLayer, EnvProblem> {
        let keys = pairs.into_iter().filter_map(|(name, value)| {
            let rest = name.get(PREFIX.len()..)?;
            (name[..PREFIX.len()].eq_ignore_ascii_case(PREFIX) && rest.contains("__")).then(|| {
                (
                    rest.to_ascii_lowercase().replace("__", "."),
                    value.to_string(),
                )
            })
        });
        EnvLayer::from_keys(keys)
    }

    fn from_keys(keys: impl Iterator<Item = (String, String)>) -> Result<EnvLayer, EnvProblem> {
        let mut layer = EnvLayer::default();
        for (key, value) in keys {
            if key.split('.').any(str::is_empty) {
                continue;
            }
            let var = variable_name(&key);
            let value = structured(&value).map_err(|problem| (var.clone(), problem))?;
            if let Value::Dict(_, nested) = figment::util::nest(&key, value) {
                merge(&mut layer.data, nested);
            }
            layer.vars.insert(key, var);
        }
        Ok(layer)
    }

    /// The variable that set the value at `path`, or one of its parents.
    pub fn variable(&self, path: &[&str]) -> Option<&str> {
        (1..=path.len())
            .rev()
            .find_map(|n| self.vars.get(&path[..n].join(".")))
            .map(String::as_str)
    }

    /// A variable that set something below `path` (a table the file does not have).
    fn below(&self, path: &[&str]) -> Option<&str> {
        let prefix = format!("{}.", path.join("."));
        self.vars
            .iter()
            .find(|(k, _)| path.is_empty() || k.starts_with(&prefix))
            .map(|(_, v)| v.as_str())
    }

    /// Whether any configuration variable is set.
    pub fn is_empty(&self) -> bool {
        self.vars.is_empty()
    }

    /// The variables' names, for `check-config` and the start-up log (never their values).
    pub fn names(&self) -> Vec<&str> {
        self.vars.values().map(String::as_str).collect()
    }
}

/// `server.listen` -> `FENCEGATE_SERVER__LISTEN`.
fn variable_name(key: &str) -> String {
    format!("{PREFIX}{}", key.replace('.', "__").to_ascii_uppercase())
}

/// A variable's value: a string, or a TOML array / inline table when it starts like one.
fn structured(raw: &str) -> Result<Value, String> {
    let trimmed = raw.trim_start();
    if !(trimmed.starts_with('[') || trimmed.starts_with('{')) {
        return Ok(Value::from(raw.to_string()));
    }
    #[derive(serde::Deserialize)]
    struct Wrapped {
        v: Value,
    }
    toml::from_str::<Wrapped>(&format!("v = {trimmed}"))
        .map(|w| w.v)
        .map_err(|e| {
            format!(
                "starts with `{}` but is not a TOML {} ({})",
                &trimmed[..1],
                if trimmed.starts_with('[') {
                    "array"
                } else {
                    "inline table"
                },
                e.message()
            )
        })
}

/// `over` merged into `into`, tables key by key.
fn merge(into: &mut Dict, over: Dict) {
    for (k, v) in over {
        match (into.get_mut(&k), v) {
            (Some(Value::Dict(_, existing)), Value::Dict(_, new)) => merge(existing, new),
            (_, v) => {
                into.insert(k, v);
            }
        }
    }
}

impl Provider for EnvLayer {
    fn metadata(&self) -> figment::Metadata {
        figment::Metadata::named("environment variable(s)")
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(Map::from([(Profile::Default, self.data.clone())]))
    }
}

/// The file's text with the variables over it, ready to extract.
pub fn figment(text: &str, env: &EnvLayer) -> Figment {
    use figment::providers::Format;
    Figment::from(figment::providers::Toml::string(text)).merge(env.clone())
}

/// Where a value is, for a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// 1-based line and column in the file.
    File(usize, usize),
    /// The environment variable that set it.
    Variable(String),
    Nowhere,
}

/// Finds the place of a key path: the variables first (they win over the file), then the
/// file's spans.
pub struct Origins<'a> {
    text: &'a str,
    doc: Option<toml_edit::ImDocument<&'a str>>,
    env: &'a EnvLayer,
}

impl<'a> Origins<'a> {
    pub fn new(text: &'a str, env: &'a EnvLayer) -> Origins<'a> {
        Origins {
            text,
            doc: toml_edit::ImDocument::parse(text).ok(),
            env,
        }
    }

    /// The place of the value at `path` (or of its key, with `key`), else of the nearest
    /// parent table the file has.
    pub fn place(&self, path: &[&str], key: bool) -> Place {
        if let Some(var) = self.env.variable(path) {
            return Place::Variable(var.to_string());
        }
        let (span, whole) = self.in_file(path, key);
        if !whole {
            // Not in the file: a variable may have set the table it is about.
            if let Some(var) = self.env.below(path) {
                return Place::Variable(var.to_string());
            }
        }
        span.map_or(Place::Nowhere, |span| {
            let (line, col) = line_col(self.text, span.start);
            Place::File(line, col)
        })
    }

    /// The span of `path` in the file, or of the nearest parent it has, and whether the whole
    /// path was found.
    fn in_file(&self, path: &[&str], key: bool) -> (Option<std::ops::Range<usize>>, bool) {
        let Some(doc) = &self.doc else {
            return (None, false);
        };
        let mut item = doc.as_item();
        let mut best = None;
        for (i, segment) in path.iter().enumerate() {
            let Some((k, child)) = item.as_table_like().and_then(|t| t.get_key_value(segment))
            else {
                return (best, false);
            };
            let last = i + 1 == path.len();
            best = match (last && key, child.span(), k.span()) {
                (true, _, Some(ks)) => Some(ks),
                (_, Some(vs), _) => Some(vs),
                (_, None, ks) => ks.or(best),
            };
            item = child;
        }
        (best, true)
    }
}

pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// Fields whose values are never repeated in a message: secrets, passwords and bearer tokens
/// (`max_token_jump` and `tokens` are numbers, and shown).
pub fn is_secret(field: &str) -> bool {
    field.contains("secret") || field.contains("password") || field.ends_with("token")
}

/// "did you mean `listen`?" for a misspelt field, when one of `expected` is close to it. A
/// secret's field (`bearer_token`, `password`) is pointed at where a secret goes: a file, or a
/// variable's *name*, lest the secret be written where a name belongs.
fn did_you_mean(field: &str, expected: &[&str]) -> String {
    let Some(best) = expected
        .iter()
        .map(|e| (strsim::jaro_winkler(field, e), *e))
        .filter(|(score, _)| *score >= 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, e)| e)
    else {
        return String::new();
    };
    let stem = best
        .strip_suffix("_env")
        .or_else(|| best.strip_suffix("_file"))
        .filter(|stem| expected.contains(&format!("{stem}_file").as_str()));
    match stem {
        Some(stem) => format!(
            "; did you mean `{stem}_file` (a file holding the secret) or `{stem}_env` (the name of a variable holding it)?"
        ),
        None => format!("; did you mean `{best}`?"),
    }
}

/// A variable's name as a message may show it: a value that is no variable name is more likely
/// the secret itself, written where its variable's name belongs, and is not shown.
pub fn shown_var(var: &str) -> String {
    let name = !var.is_empty()
        && var.len() <= 128
        && !var.starts_with(|c: char| c.is_ascii_digit())
        && var.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if name {
        format!("{var:?}")
    } else {
        "a value that is not a variable name (not shown: it may be the secret itself)".into()
    }
}

/// A figment extraction error: its key path (with `key` when the key itself is wrong) and a
/// message that never repeats a secret's value. `figment` is the one extracted from, where
/// the secrets' values are looked for.
pub fn figment_problem(e: figment::Error, figment: &Figment) -> (Vec<String>, bool, String) {
    use figment::error::Kind;
    // An error iterates over itself and the errors chained to it: the first is the one.
    let Some(e) = e.into_iter().next() else {
        return (Vec::new(), false, "the configuration cannot be read".into());
    };
    let mut path = e.path.clone();
    // figment's path of a wrong key ends with the key itself (or, in some of serde's paths,
    // with its table only).
    let key = match &e.kind {
        Kind::UnknownField(field, _) => Some(field.clone()),
        Kind::DuplicateField(field) => Some(field.to_string()),
        _ => None,
    };
    if let Some(field) = &key {
        if path.last() != Some(field) {
            path.push(field.clone());
        }
    }
    let key = key.is_some();
    let mut secret = !key && path.last().is_some_and(|f| is_secret(f));
    // A wrong key's message names fields, never a value: only a value's error can repeat one.
    if !secret && !key {
        // serde reads a table tagged by a field (`[backends.NAME]`, by `kind`) whole, so an
        // error in one of its fields carries the table's path, not the field's: the field-name
        // test cannot see a secret there, and the message may repeat its value.
        if let Some(field) = secret_repeated(figment, &path, &e.kind) {
            path = field;
            secret = true;
        }
    }
    let message = match &e.kind {
        Kind::InvalidType(_, expected) | Kind::InvalidValue(_, expected) if secret => {
            format!("invalid value (not shown: it is a secret); expected {expected}")
        }
        _ if secret => "invalid value (not shown: it is a secret)".to_string(),
        Kind::UnknownField(field, expected) => {
            format!("{}{}", e.kind, did_you_mean(field, expected))
        }
        kind => kind.to_string(),
    };
    (path, key, message)
}

/// The path of a secret under `path` whose value the error `kind` repeats: the value it
/// reports found, or, in a message of other words, any part of it.
fn secret_repeated(
    figment: &Figment,
    path: &[String],
    kind: &figment::error::Kind,
) -> Option<Vec<String>> {
    use figment::error::{Actual, Kind};
    let repeats: Box<dyn Fn(&str) -> bool> = match kind {
        Kind::InvalidType(actual, _) | Kind::InvalidValue(actual, _) => match actual {
            Actual::Str(s) | Actual::Other(s) => {
                let s = s.clone();
                Box::new(move |text| text == s)
            }
            Actual::Unsigned(_) | Actual::Signed(_) | Actual::Float(_) | Actual::Char(_) => {
                let s = scalar_text(actual)?;
                Box::new(move |text| text == s)
            }
            // A kind of value (a list, a table, a bool), never its content.
            _ => return None,
        },
        kind => {
            let message = kind.to_string();
            Box::new(move |text| message.contains(text))
        }
    };
    let value = if path.is_empty() {
        figment.extract::<Value>().ok()?
    } else {
        figment.find_value(&path.join(".")).ok()?
    };
    if !matches!(value, Value::Dict(..)) && secret_table(path) {
        // A value where a table of secrets belongs (`FENCEGATE_KEYS__ETL=...` for
        // `FENCEGATE_KEYS__ETL__SECRET_ACCESS_KEY`) is most likely the secret itself.
        return Some(path.to_vec());
    }
    let mut found = None;
    let mut at = path.to_vec();
    secrets_in(&value, false, &mut at, &mut |field, text| {
        if found.is_none() && !text.is_empty() && repeats(text) {
            found = Some(field.to_vec());
        }
    });
    found
}

/// Whether `path` names a table that holds secrets, or the section of such tables (not a
/// field in one: `[backends.NAME] bucket = 5` is a bucket name, shown).
fn secret_table(path: &[String]) -> bool {
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    matches!(
        path.as_slice(),
        ["keys" | "backends"]
            | ["keys" | "backends", _]
            | ["admin" | "fence_store"]
            | ["s3", "keys"]
            | ["s3", "keys", _]
    )
}

/// Calls `each` with the path and text of every scalar under a secret-named field of `value`.
fn secrets_in(
    value: &Value,
    under_secret: bool,
    at: &mut Vec<String>,
    each: &mut dyn FnMut(&[String], &str),
) {
    let field = |name: &str| is_secret(name) && !name.ends_with("_file") && !name.ends_with("_env");
    match value {
        Value::Dict(_, dict) => {
            for (name, child) in dict {
                at.push(name.clone());
                secrets_in(child, under_secret || field(name), at, each);
                at.pop();
            }
        }
        Value::Array(_, items) => {
            for item in items {
                secrets_in(item, under_secret, at, each);
            }
        }
        _ if !under_secret => {}
        Value::String(_, s) => each(at, s),
        Value::Char(_, c) => each(at, &c.to_string()),
        Value::Num(_, n) => {
            if let Some(text) = scalar_text(&n.to_actual()) {
                each(at, &text)
            }
        }
        Value::Bool(..) | Value::Empty(..) => {}
    }
}

/// A number's or a character's text, as a message would show it.
fn scalar_text(actual: &figment::error::Actual) -> Option<String> {
    use figment::error::Actual;
    Some(match actual {
        Actual::Unsigned(v) => v.to_string(),
        Actual::Signed(v) => v.to_string(),
        Actual::Float(v) => v.to_string(),
        Actual::Char(c) => c.to_string(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_double_underscore_names_are_fields_and_values_stay_strings() {
        let env = EnvLayer::from_pairs([
            ("FENCEGATE_CONFIG", "/etc/x.toml"),
            ("FENCEGATE_ADMIN_TOKEN", "t"),
            ("FENCEGATE_SERVER__LISTEN", "0.0.0.0:1"),
            ("FENCEGATE_KEYS__ETL__SECRET_ACCESS_KEY", "0123"),
            ("FENCEGATE_FENCE_STORE__ENDPOINTS", "[\"http://a:2379\"]"),
            ("OTHER__X", "1"),
        ])
        .unwrap();
        assert_eq!(
            env.variable(&["server", "listen"]),
            Some("FENCEGATE_SERVER__LISTEN")
        );
        assert_eq!(env.variable(&["config"]), None);
        assert_eq!(env.names().len(), 3);
        let secret = &env.data["keys"].as_dict().unwrap()["etl"]
            .as_dict()
            .unwrap()["secret_access_key"];
        assert_eq!(secret.as_str(), Some("0123"));
        assert!(env.data["fence_store"].as_dict().unwrap()["endpoints"]
            .as_array()
            .is_some());
        let (var, problem) =
            EnvLayer::from_pairs([("FENCEGATE_KEYS__A__BUCKETS", "{ broken")]).unwrap_err();
        assert_eq!(var, "FENCEGATE_KEYS__A__BUCKETS");
        assert!(problem.contains("inline table"), "{problem}");
    }

    #[test]
    fn places_come_from_the_file_or_the_variable() {
        let text = "[server]\nlisten = \"x\"\n\n[buckets.logs]\nfencing = \"off\"\n";
        let env = EnvLayer::from_pairs([("FENCEGATE_S3__MAX_PARTS", "0")]).unwrap();
        let o = Origins::new(text, &env);
        assert_eq!(o.place(&["server", "listen"], false), Place::File(2, 10));
        assert_eq!(o.place(&["server", "listen"], true), Place::File(2, 1));
        assert_eq!(
            o.place(&["buckets", "logs", "fencing"], false),
            Place::File(5, 11)
        );
        // An absent field: its table.
        assert_eq!(
            o.place(&["buckets", "logs", "backend"], false),
            Place::File(4, 1)
        );
        assert_eq!(
            o.place(&["s3", "max_parts"], false),
            Place::Variable("FENCEGATE_S3__MAX_PARTS".into())
        );
        assert_eq!(o.place(&["leases", "x"], false), Place::Nowhere);
    }
}
