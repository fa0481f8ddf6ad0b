//! The Dockerfile's image, as far as this machine allows: no Docker engine runs here, so the
//! test reads the Dockerfile, runs its build stage's command (the static build) in this
//! checkout, lays out the final stage's `COPY` lines in an empty directory, and runs its
//! `ENTRYPOINT` there with `chroot` in new mount and pid namespaces (a `/proc` of its own, as
//! a container has), against a redis-server on loopback. Slow (a release build): `--ignored`,
//! run in CI. Skipped with a reason where it cannot run (not root, no `unshare`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::*;

/// The `ENTRYPOINT` array's first element and the `COPY --from=build SRC DST` pairs of the
/// final stage; the build stage's command whose output names the binary.
struct Dockerfile {
    build_command: String,
    copies: Vec<(String, String)>,
    entrypoint: String,
}

fn read_dockerfile(root: &Path) -> Dockerfile {
    let text = fs::read_to_string(root.join("Dockerfile")).unwrap();
    let mut build_command = None;
    let mut copies = Vec::new();
    let mut entrypoint = None;
    let mut stage = 0;
    for line in text.lines().map(str::trim) {
        if line.starts_with("FROM ") {
            stage += 1;
        } else if let Some(run) = line.strip_prefix("RUN ") {
            // RUN cp "$(COMMAND)" /redlock-run: the command prints the binary's path.
            let inner = run
                .split_once("$(")
                .and_then(|(_, rest)| rest.rsplit_once(')'))
                .map(|(cmd, _)| cmd.to_owned());
            build_command = build_command.or(inner);
        } else if let Some(copy) = line.strip_prefix("COPY --from=build ")
            && stage == 2
        {
            let parts: Vec<&str> = copy.split_whitespace().collect();
            assert_eq!(parts.len(), 2, "COPY with one source: {line}");
            copies.push((parts[0].to_owned(), parts[1].to_owned()));
        } else if let Some(ep) = line.strip_prefix("ENTRYPOINT ") {
            let ep: Vec<String> = serde_json::from_str(ep).unwrap();
            entrypoint = ep.into_iter().next();
        }
    }
    assert_eq!(stage, 2, "a build stage and a final stage");
    Dockerfile {
        build_command: build_command.expect("the build stage's RUN $(...) command"),
        copies,
        entrypoint: entrypoint.expect("an ENTRYPOINT"),
    }
}

/// `name`'s full path in this process's PATH (the image's run has an empty environment).
fn in_path(name: &str) -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} is not in PATH"))
}

/// Why the image cannot be tried here, if it cannot.
fn cannot_run() -> Option<String> {
    // SAFETY: geteuid(2) takes nothing and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Some("chroot and new namespaces need root".into());
    }
    let unshare = Command::new("unshare").arg("--version").output();
    if !unshare.is_ok_and(|o| o.status.success()) {
        return Some("no unshare(1)".into());
    }
    None
}

#[test]
#[ignore = "slow: a static release build; run in CI"]
fn container_image_runs_a_command_under_the_lock() {
    if let Some(why) = cannot_run() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let docker = read_dockerfile(root);

    // The build stage, in this checkout.
    let out = Command::new("bash")
        .arg("-c")
        .arg(&docker.build_command)
        .current_dir(root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let built: PathBuf = root.join(String::from_utf8_lossy(&out.stdout).trim());
    assert!(built.is_file(), "{}", built.display());

    // The final stage: only what its COPY lines bring (the binary is /redlock-run there).
    let image = tempfile::tempdir().unwrap();
    for (src, dst) in &docker.copies {
        let from = if src == "/redlock-run" {
            built.clone()
        } else {
            PathBuf::from(src)
        };
        let to = image.path().join(dst.trim_start_matches('/'));
        fs::create_dir_all(to.parent().unwrap()).unwrap();
        fs::copy(&from, &to).unwrap_or_else(|e| panic!("{}: {e}", from.display()));
    }
    fs::create_dir(image.path().join("proc")).unwrap();
    let entry = &docker.entrypoint;
    assert!(
        image.path().join(entry.trim_start_matches('/')).is_file(),
        "the ENTRYPOINT {entry} is in the image"
    );

    // Run the image's entrypoint with a job that is the same binary asking for the lock's
    // status from inside: it runs with no shared library and no shell, and sees the lock held.
    let redis = RedisServer::start();
    let url = format!("redis://127.0.0.1:{}", redis.port());
    let proc_dir = image.path().join("proc");
    let out = Command::new("unshare")
        .args(["--mount", "--pid", "--fork"])
        .arg(format!("--mount-proc={}", proc_dir.display()))
        .arg(in_path("chroot"))
        .arg(image.path())
        .arg(entry)
        .args(["--redis", &url, "--key", "in-image", "--", entry])
        .args(["status", "--json", "--redis", &url, "--key", "in-image"])
        .env_clear()
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = parse_json(&stdout);
    assert_eq!(status["held"], true, "{stdout}");
    assert_eq!(status["key"], "redlock:in-image", "{stdout}");
    // Released on the way out.
    assert!(!redis.exists("redlock:in-image"), "the lock is released");
}
