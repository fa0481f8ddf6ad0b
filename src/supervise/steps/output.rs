//! The hold as `acquire` hands it on: shell assignments on stdout (safe to `eval`),
//! `$GITHUB_OUTPUT` and `$GITHUB_ENV` lines (`--github`), a dotenv file (`--dotenv`).

use std::io::Write;
use std::path::Path;

/// What a later step needs to release the hold, and the fence for its writes.
pub(super) struct HoldOut {
    pub(super) token: String,
    pub(super) fence: u64,
    /// The full key, prefix included, as a run's command sees it in `REDLOCK_KEY`.
    pub(super) key: String,
}

impl HoldOut {
    fn pairs(&self) -> [(&'static str, &'static str, String); 3] {
        [
            ("REDLOCK_TOKEN", "token", self.token.clone()),
            ("REDLOCK_FENCE", "fence", self.fence.to_string()),
            ("REDLOCK_KEY", "key", self.key.clone()),
        ]
    }

    /// `export NAME='value'` lines: exported, so that a `redlock-run release` run later in
    /// the same shell finds REDLOCK_TOKEN; single-quoted, so that nothing in a value (a key
    /// may hold any character) is expanded by `eval`.
    pub(super) fn shell(&self) -> String {
        self.pairs()
            .iter()
            .map(|(name, _, value)| format!("export {name}={}\n", shell_quote(value)))
            .collect()
    }

    /// Appended to `$GITHUB_OUTPUT` (`token`, `fence`, `key`) and `$GITHUB_ENV` (the
    /// variables). A value with a line break uses the file format's delimiter form.
    pub(super) fn github(&self, output: &Path, env: &Path) -> std::io::Result<()> {
        let outputs: Vec<(&str, String)> = self.pairs().map(|(_, o, v)| (o, v)).to_vec();
        let envs: Vec<(&str, String)> = self.pairs().map(|(n, _, v)| (n, v)).to_vec();
        append(output, &github_lines(&outputs))?;
        append(env, &github_lines(&envs))
    }

    /// `NAME=value` lines for GitLab's `artifacts:reports:dotenv` (no quoting: GitLab takes
    /// the rest of the line as it is, so a value may not hold a line break).
    pub(super) fn dotenv(&self, path: &Path) -> std::io::Result<()> {
        let mut text = String::new();
        for (name, _, value) in self.pairs() {
            if value.contains(['\n', '\r']) {
                return Err(std::io::Error::other(format!(
                    "{name} holds a line break, which a dotenv file cannot carry"
                )));
            }
            text.push_str(&format!("{name}={value}\n"));
        }
        std::fs::write(path, text)
    }
}

fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

fn github_lines(pairs: &[(&str, String)]) -> String {
    let mut text = String::new();
    for (name, value) in pairs {
        if value.contains(['\n', '\r']) {
            // A delimiter that the value cannot hold.
            let delimiter = format!("REDLOCK_EOF_{}", crate::lock::Token::new().as_str());
            text.push_str(&format!("{name}<<{delimiter}\n{value}\n{delimiter}\n"));
        } else {
            text.push_str(&format!("{name}={value}\n"));
        }
    }
    text
}

fn append(path: &Path, text: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)?;
    file.write_all(text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_output_quotes_every_value() {
        let out = HoldOut {
            token: "abc".into(),
            fence: 7,
            key: "redlock:it's $(x)".into(),
        };
        assert_eq!(
            out.shell(),
            "export REDLOCK_TOKEN='abc'\nexport REDLOCK_FENCE='7'\n\
             export REDLOCK_KEY='redlock:it'\\''s $(x)'\n"
        );
        assert_eq!(github_lines(&[("a", "1".into())]), "a=1\n".to_owned());
        assert!(github_lines(&[("a", "x\ny".into())]).starts_with("a<<REDLOCK_EOF_"));
    }
}
