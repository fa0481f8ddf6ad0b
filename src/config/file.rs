//! The config file: which file, whether it may be trusted, and what it says.
//!
//! The file is TOML. Its names are the long options (`ttl`, `redis`, `min-replicas`, ...):
//! defaults at the top level, and `[lock."NAME"]` sections for one lock name (as `--key` gives
//! it, before the prefix). This module knows nothing of what the options mean: it is handed
//! the kind of each name (a switch, one value, a list) and returns the values as text, each
//! with its line, for the command line's own parsers to check (`layers.rs`).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use toml::Spanned;
use toml::de::{DeTable, DeValue};

use super::UsageError;
use crate::lock::target;

/// Read when neither `--config` nor `REDLOCK_CONFIG` names a file, if it exists.
pub const SYSTEM_FILE: &str = "/etc/redlock-run.toml";

/// The largest config file read: a few hundred sections of a few lines each.
const LARGEST_FILE: u64 = 1 << 20;

/// What an option takes, as far as the file is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `true` or `false` (`--json`, `--verbose`).
    Switch,
    /// One value: a string, or a number written as TOML (`ttl = 30` is 30 seconds, as
    /// `--ttl 30`).
    One,
    /// An option given several times on the command line (`--redis` for Redlock): a string or
    /// an array of strings.
    Many,
}

/// One `name = value` of the file.
#[derive(Debug, Clone)]
pub struct Setting {
    /// The long option's name, without `--`.
    pub name: String,
    /// Where it is written: 1-based.
    pub line: usize,
    /// The values as a flag would give them (`true`/`false` for a switch).
    pub values: Vec<String>,
}

/// The whole file, checked for names, types and secrets.
#[derive(Debug)]
pub struct ConfigFile {
    pub path: PathBuf,
    /// The top level: defaults for every lock.
    pub defaults: Vec<Setting>,
    /// `[lock."NAME"]`: settings for the lock NAME.
    pub sections: BTreeMap<String, Vec<Setting>>,
}

impl ConfigFile {
    /// What applies to the lock `name` (None: a subcommand or run without `--key`): its
    /// section's settings, and the defaults its section does not set.
    pub fn settings_for(&self, name: Option<&str>) -> Vec<&Setting> {
        let section: &[Setting] = name
            .and_then(|n| self.sections.get(n))
            .map_or(&[], Vec::as_slice);
        let mut chosen: Vec<&Setting> = section.iter().collect();
        chosen.extend(
            self.defaults
                .iter()
                .filter(|d| !section.iter().any(|s| s.name == d.name)),
        );
        chosen
    }

    /// Every setting of the file, in every section: all are checked on every use, so a
    /// mistake shows the first time the file is used, not when its lock first runs.
    pub fn all(&self) -> impl Iterator<Item = &Setting> {
        self.defaults.iter().chain(self.sections.values().flatten())
    }

    /// `FILE:LINE: ` for a message about `setting`.
    pub fn at(&self, setting: &Setting) -> String {
        format!("{}:{}", self.path.display(), setting.line)
    }
}

/// Which file to read: `given` (from `--config` or `REDLOCK_CONFIG`; empty: none), else the
/// system file. The flag says whether the file was named, and so must exist.
pub fn locate(given: Option<&OsStr>) -> Option<(PathBuf, bool)> {
    match given {
        Some(path) if path.is_empty() => None,
        Some(path) => Some((PathBuf::from(path), true)),
        None => Some((PathBuf::from(SYSTEM_FILE), false)),
    }
}

/// The file's text, or None for an absent system file. A file that anyone could have written
/// (or replaced) is refused: it chooses which Redis a lock lives on and which password file
/// is sent there.
pub fn read(path: &Path, named: bool) -> Result<Option<String>, UsageError> {
    let shown = path.display();
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !named => return Ok(None),
        Err(e) => {
            return Err(UsageError(format!(
                "cannot read the config file {shown}: {e}{}",
                if named {
                    " (an empty --config or REDLOCK_CONFIG reads no file)"
                } else {
                    ""
                }
            )));
        }
    };
    if !meta.is_file() {
        return Err(UsageError(format!(
            "the config file {shown} is not a regular file"
        )));
    }
    let mode = meta.permissions().mode();
    if mode & 0o002 != 0 {
        return Err(UsageError(format!(
            "the config file {shown} is writable by every user (mode {:o}): refused, as anyone \
             could choose the Redis and password file of its locks (chmod o-w {shown})",
            mode & 0o7777
        )));
    }
    // Every directory above the file, on the path as given and on the one its links lead to:
    // one that every user may write to could have the file (or a directory on the way to it)
    // replaced. The sticky bit (/tmp) stops others from replacing what they do not own.
    let given = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| given.clone());
    for dir in given.ancestors().skip(1).chain(real.ancestors().skip(1)) {
        let Ok(dir_meta) = std::fs::metadata(dir) else {
            continue;
        };
        let dir_mode = dir_meta.permissions().mode();
        if dir_mode & 0o002 != 0 && dir_mode & 0o1000 == 0 {
            return Err(UsageError(format!(
                "the config file {shown} is under {}, a directory every user may write to \
                 (mode {:o}): refused, as anyone could replace the file",
                dir.display(),
                dir_mode & 0o7777
            )));
        }
    }
    if meta.len() > LARGEST_FILE {
        return Err(UsageError(format!(
            "the config file {shown} is larger than 1 MiB"
        )));
    }
    std::fs::read_to_string(path)
        .map(Some)
        .map_err(|e| UsageError(format!("cannot read the config file {shown}: {e}")))
}

/// Parse `text` (the contents of `path`), knowing each option's kind from `kind_of` (None: not
/// an option the file may set).
pub fn parse(
    path: &Path,
    text: &str,
    kind_of: impl Fn(&str) -> Option<Kind>,
) -> Result<ConfigFile, UsageError> {
    let shown = path.display();
    let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
    let doc = DeTable::parse(text).map_err(|e| {
        let line = e
            .span()
            .map_or(String::new(), |s| format!(":{}", line_of(s.start)));
        let what = e.message().lines().next().unwrap_or("invalid TOML").trim();
        UsageError(format!("{shown}{line}: not valid TOML: {what}"))
    })?;
    let mut file = ConfigFile {
        path: path.to_owned(),
        defaults: Vec::new(),
        sections: BTreeMap::new(),
    };
    let reader = Reader {
        shown: shown.to_string(),
        line_of: &line_of,
        kind_of: &kind_of,
    };
    for (name, value) in doc.get_ref().iter() {
        if name.get_ref() == "lock" {
            let DeValue::Table(sections) = value.get_ref() else {
                return Err(reader.error(
                    value,
                    "lock",
                    "expected sections such as [lock.\"NAME\"]",
                ));
            };
            for (lock, settings) in sections.iter() {
                let DeValue::Table(settings) = settings.get_ref() else {
                    return Err(reader.error(
                        settings,
                        &format!("lock.{}", lock.get_ref()),
                        "expected a section: [lock.\"NAME\"] and its settings below it",
                    ));
                };
                let read = reader.settings(settings, &format!("[lock.{:?}] ", lock.get_ref()))?;
                file.sections.insert(lock.get_ref().to_string(), read);
            }
        } else {
            file.defaults.push(reader.setting(name, value, "")?);
        }
    }
    Ok(file)
}

/// What the parser of one file needs at hand.
struct Reader<'a> {
    shown: String,
    line_of: &'a dyn Fn(usize) -> usize,
    kind_of: &'a dyn Fn(&str) -> Option<Kind>,
}

impl Reader<'_> {
    fn error<T>(&self, at: &Spanned<T>, name: &str, what: &str) -> UsageError {
        UsageError(format!(
            "{}:{}: {name}: {what}",
            self.shown,
            (self.line_of)(at.span().start)
        ))
    }

    fn settings(&self, table: &DeTable<'_>, within: &str) -> Result<Vec<Setting>, UsageError> {
        table
            .iter()
            .map(|(name, value)| self.setting(name, value, within))
            .collect()
    }

    fn setting(
        &self,
        name: &Spanned<std::borrow::Cow<'_, str>>,
        value: &Spanned<DeValue<'_>>,
        within: &str,
    ) -> Result<Setting, UsageError> {
        let key = name.get_ref().as_ref();
        let kind = match key {
            "password" => {
                return Err(self.error(
                    name,
                    key,
                    "a password is not written in the config file; put it in a file only its \
                     user can read and name that file with password-file",
                ));
            }
            "key" | "config" | "command" | "yes" | "holder" | "host" | "token" => {
                return Err(self.error(
                    name,
                    key,
                    &format!(
                        "cannot be set in the config file (give --{key} on the command line{})",
                        match key {
                            "key" => "; a lock's own settings go in a [lock.\"NAME\"] section",
                            // A standing answer or target would take a lock away, or release
                            // one, without anyone naming it at the time.
                            "yes" | "holder" | "host" | "token" => {
                                ": it names what one break or release acts on, never a default"
                            }
                            _ => "",
                        }
                    ),
                ));
            }
            _ => (self.kind_of)(key).ok_or_else(|| {
                let hint = match (self.kind_of)(&key.replace('_', "-")) {
                    Some(_) => format!("; did you mean {}?", key.replace('_', "-")),
                    None => String::new(),
                };
                self.error(
                    name,
                    key,
                    &format!(
                        "unknown name {within}(the names are the long options, such as ttl, \
                         wait, redis{hint})"
                    ),
                )
            })?,
        };
        let values = match (kind, value.get_ref()) {
            (Kind::Switch, DeValue::Boolean(b)) => vec![b.to_string()],
            (Kind::Switch, _) => {
                return Err(self.error(value, key, &self.found("true or false", value)));
            }
            (Kind::One | Kind::Many, v) if scalar(v).is_some() => {
                vec![scalar(v).unwrap_or_default()]
            }
            (Kind::Many, DeValue::Array(items)) if !items.is_empty() => items
                .iter()
                .map(|item| {
                    scalar(item.get_ref()).ok_or_else(|| {
                        self.error(item, key, &self.found("strings in the array", item))
                    })
                })
                .collect::<Result<_, _>>()?,
            (Kind::Many, _) => {
                return Err(self.error(
                    value,
                    key,
                    &self.found("a string or a non-empty array of strings", value),
                ));
            }
            (Kind::One, _) => {
                return Err(self.error(value, key, &self.found("a string or a number", value)));
            }
        };
        if key == "redis"
            && let Some(url) = values.iter().find(|url| carries_password(url))
        {
            return Err(self.error(
                value,
                key,
                &format!(
                    "{} carries a password: a password is not written in the config file; \
                     put it in a file only its user can read and name that file with \
                     password-file",
                    target::redact(url)
                ),
            ));
        }
        Ok(Setting {
            name: key.to_owned(),
            line: (self.line_of)(name.span().start),
            values,
        })
    }

    fn found(&self, expected: &str, value: &Spanned<DeValue<'_>>) -> String {
        let found = match value.get_ref() {
            DeValue::String(_) => "a string",
            DeValue::Integer(_) => "an integer",
            DeValue::Float(_) => "a number",
            DeValue::Boolean(_) => "a boolean",
            DeValue::Datetime(_) => "a date",
            DeValue::Array(_) => "an array",
            DeValue::Table(_) => "a table",
        };
        format!("expected {expected}, found {found}")
    }
}

/// A string, integer or float as the text a flag would carry (`30`, `1.5`, `0x10` as `16`).
fn scalar(value: &DeValue<'_>) -> Option<String> {
    match value {
        DeValue::String(s) => Some(s.to_string()),
        DeValue::Integer(i) => {
            let digits = i.as_str().replace('_', "");
            let digits = digits
                .trim_start_matches('+')
                .trim_start_matches("0x")
                .trim_start_matches("0o")
                .trim_start_matches("0b");
            Some(match i64::from_str_radix(digits, i.radix()) {
                Ok(n) if i.radix() != 10 => n.to_string(),
                _ => i.as_str().replace('_', ""),
            })
        }
        DeValue::Float(f) => Some(f.as_str().replace('_', "")),
        _ => None,
    }
}

/// Whether a `--redis` URL holds a secret (a password in the user part, or a query parameter
/// that may be one). `sentinel_password_file=PATH` names a file, which is what is asked for.
fn carries_password(url: &str) -> bool {
    let without_files: String = match url.split_once('?') {
        Some((base, query)) => {
            let kept: Vec<&str> = query
                .split('&')
                .filter(|p| !p.starts_with("sentinel_password_file="))
                .collect();
            if kept.is_empty() {
                base.to_owned()
            } else {
                format!("{base}?{}", kept.join("&"))
            }
        }
        None => url.to_owned(),
    };
    target::redact(&without_files) != without_files
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(name: &str) -> Option<Kind> {
        match name {
            "ttl" | "wait" | "prefix" => Some(Kind::One),
            "redis" => Some(Kind::Many),
            "json" => Some(Kind::Switch),
            _ => None,
        }
    }

    fn parse_str(text: &str) -> Result<ConfigFile, String> {
        parse(Path::new("f.toml"), text, kinds).map_err(|e| e.0)
    }

    #[test]
    fn sections_override_the_defaults() {
        let file = parse_str(
            "ttl = \"1m\"\nwait = 5\n\n[lock.\"settle:monthly\"]\nttl = \"2h\"\nredis = [\"redis://a\", \"redis://b\"]\n",
        )
        .unwrap();
        let chosen = file.settings_for(Some("settle:monthly"));
        let get = |n: &str| {
            chosen
                .iter()
                .find(|s| s.name == n)
                .map(|s| (s.values.clone(), s.line))
        };
        assert_eq!(get("ttl"), Some((vec!["2h".to_owned()], 5)));
        assert_eq!(get("wait"), Some((vec!["5".to_owned()], 2)));
        assert_eq!(
            get("redis").unwrap().0,
            vec!["redis://a".to_owned(), "redis://b".to_owned()]
        );
        let other = file.settings_for(Some("other"));
        assert_eq!(other.len(), 2);
        assert_eq!(file.all().count(), 4);
    }

    #[test]
    fn errors_name_the_file_line_and_name() {
        let err = parse_str("ttl = \"1m\"\nttll = 3\n").unwrap_err();
        assert!(err.starts_with("f.toml:2: ttll: unknown name"), "{err}");
        let err = parse_str("\n[lock.\"a\"]\nwait = true\n").unwrap_err();
        assert!(
            err.starts_with("f.toml:3: wait: expected a string or a number, found a boolean"),
            "{err}"
        );
        let err = parse_str("json = \"yes\"\n").unwrap_err();
        assert!(
            err.starts_with("f.toml:1: json: expected true or false"),
            "{err}"
        );
        let err = parse_str("ttl = \n").unwrap_err();
        assert!(err.starts_with("f.toml:1: not valid TOML"), "{err}");
        let err = parse_str("min_replicas = 1\n").unwrap_err();
        assert!(err.contains("unknown name"), "{err}");
    }

    #[test]
    fn passwords_are_refused() {
        let err = parse_str("password = \"hunter2\"\n").unwrap_err();
        assert!(err.contains("password-file"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        let err = parse_str("redis = [\"redis://a\", \"redis://u:hunter2@b\"]\n").unwrap_err();
        assert!(err.contains("password-file"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        assert!(
            parse_str("redis = \"redis+sentinel://s1/m?sentinel_password_file=/etc/pw\"\n").is_ok()
        );
    }

    #[test]
    fn numbers_read_as_a_flag_would() {
        assert_eq!(
            scalar(DeValue::parse("1_000").unwrap().get_ref()).as_deref(),
            Some("1000")
        );
        assert_eq!(
            scalar(DeValue::parse("0x10").unwrap().get_ref()).as_deref(),
            Some("16")
        );
        assert_eq!(
            scalar(DeValue::parse("1.5").unwrap().get_ref()).as_deref(),
            Some("1.5")
        );
    }

    #[test]
    fn an_empty_name_means_no_file() {
        assert!(locate(Some(OsStr::new(""))).is_none());
        assert_eq!(locate(None), Some((PathBuf::from(SYSTEM_FILE), false)));
        assert_eq!(
            locate(Some(OsStr::new("x.toml"))),
            Some((PathBuf::from("x.toml"), true))
        );
    }
}
