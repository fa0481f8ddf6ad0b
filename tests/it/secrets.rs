//! Passwords never reach a message: every URL shape (with or without a scheme, passwords
//! holding `/`, `#`, `?`, `@`, `:`) against every output path (usage error, unreachable
//! server, refused authentication, a run with `-v`), in text and in JSON.

use crate::common::*;

/// Passwords built from characters that appear in no message of the tool, so that any three
/// of them in a row in stderr can only come from the password.
const PASSWORDS: &[&str] = &[
    "Zq9Xw7Jm",
    "Zq9/Xw7J",
    "Zq9#Xw7J",
    "Zq9?Xw7J",
    "Zq:9Xw7J",
    "Zq@9/Xw#7?Jm@Pq",
];

fn leaks(stderr: &str, password: &str) -> Option<String> {
    let chars: Vec<char> = password.chars().collect();
    chars
        .windows(3)
        .map(|w| w.iter().collect::<String>())
        .find(|piece| stderr.contains(piece.as_str()))
}

#[test]
fn no_message_shows_any_part_of_a_password() {
    let redis = RedisServer::start_with(&["--requirepass", "the-real-one"]);
    let closed = free_port();
    let mut failures = Vec::new();
    for password in PASSWORDS {
        let urls = [
            // No scheme: a usage error that suggests redis://.
            format!("user:{password}@127.0.0.1:{}", redis.port()),
            // Nothing listening: unreachable (or, where the password breaks the URL, a
            // usage error).
            format!("redis://:{password}@127.0.0.1:{closed}"),
            format!("redis://user:{password}@127.0.0.1:{closed}/0"),
            // A live server with another password: refused authentication.
            format!("redis://:{password}@127.0.0.1:{}", redis.port()),
            format!("redis://default:{password}@127.0.0.1:{}", redis.port()),
            format!(
                "REDIS://:{password}@127.0.0.1:{}/0?protocol=resp2",
                redis.port()
            ),
        ];
        for url in &urls {
            for format in ["text", "json"] {
                let out = Wrapper::new()
                    .args(["--redis", url, "--key", "k", "-v", "--log-format", format])
                    .args(["--connect-timeout", "2s", "--", "true"])
                    .run();
                let mut why = Vec::new();
                if out.code() == Some(0) {
                    why.push("the run succeeded".to_owned());
                }
                if let Some(piece) = leaks(&out.stderr, password) {
                    why.push(format!("stderr shows {piece:?}"));
                }
                if !why.is_empty() {
                    failures.push(format!("[{url} {format}] {}\n{out}", why.join("; ")));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} runs leaked or misbehaved:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}
