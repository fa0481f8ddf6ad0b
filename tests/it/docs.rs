//! The committed completions and man page must match what the clap definition generates now.

#[path = "../../examples/gen-docs.rs"]
#[allow(dead_code)]
mod gen_docs;

use std::fs;
use std::path::Path;

const GENERATED: [&str; 4] = [
    "completions/redlock-run.bash",
    "completions/_redlock-run",
    "completions/redlock-run.fish",
    "man/redlock-run.1",
];

#[test]
fn completions_and_man_page_are_fresh() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    fs::copy(root.join("README.md"), tmp.path().join("README.md")).unwrap();
    gen_docs::generate(tmp.path()).unwrap();
    let stale: Vec<&str> = GENERATED
        .into_iter()
        .filter(|f| fs::read(root.join(f)).ok() != fs::read(tmp.path().join(f)).ok())
        .collect();
    assert!(
        stale.is_empty(),
        "stale generated files {stale:?}: run scripts/gen-docs and commit the result"
    );
}

#[test]
fn man_page_has_the_sections_an_operator_needs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = fs::read_to_string(root.join("man/redlock-run.1")).unwrap();
    for needle in [
        ".SH EXAMPLES",
        ".SH \"EXIT STATUS\"",
        ".SH ENVIRONMENT",
        ".SH \"GUARANTEES AND LIMITS\"",
        "REDLOCK_FENCE",
        "REDLOCK_TTL",
        "PR_SET_PDEATHSIG",
    ] {
        assert!(page.contains(needle), "man page lacks {needle:?}");
    }
}

/// `rust-version` in Cargo.toml must be true: no dependency built for Linux may need a newer
/// compiler (redis 1.8.1 needs 1.88, uuid 1.29 needs 1.89).
#[test]
fn rust_version_covers_every_dependency() {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .args(["--filter-platform", "x86_64-unknown-linux-gnu"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = String::from_utf8(out.stdout).unwrap();
    let ours = parse_version(env!("CARGO_PKG_RUST_VERSION"));
    let mut needs: Vec<((u32, u32, u32), String)> = Vec::new();
    // Each package object has "name" before "rust_version"; a plain scan is enough here.
    for part in json.split("\"name\":\"").skip(1) {
        let name = part.split('"').next().unwrap_or_default().to_owned();
        let Some(object) = part.split("\"name\":\"").next() else {
            continue;
        };
        if let Some(rest) = object.split("\"rust_version\":\"").nth(1) {
            let version = rest.split('"').next().unwrap_or_default();
            needs.push((parse_version(version), format!("{name} {version}")));
        }
    }
    assert!(
        needs.len() > 5,
        "found too few rust_version fields: {needs:?}"
    );
    let too_new: Vec<&String> = needs
        .iter()
        .filter(|(v, _)| *v > ours)
        .map(|(_, n)| n)
        .collect();
    assert!(
        too_new.is_empty(),
        "rust-version {} in Cargo.toml is older than these dependencies need: {too_new:?}",
        env!("CARGO_PKG_RUST_VERSION")
    );
}

fn parse_version(v: &str) -> (u32, u32, u32) {
    let mut parts = v.split('.').map(|p| p.parse().unwrap_or(0));
    (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}
