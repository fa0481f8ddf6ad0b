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
