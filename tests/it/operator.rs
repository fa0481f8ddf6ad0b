//! The operator's commands: `break` (take a lock from the holder named, atomically; the old
//! holder stops with 74 and says who broke it; the fence is raised; the record says broken),
//! `pause`/`resume` (new runs busy with the reason, waiters keep their places and go in
//! order, a pause expires by itself) and `--note` on the holder record. On one server, a
//! Cluster and a Redlock quorum.

use std::path::Path;

use crate::common::cluster::Cluster;
use crate::common::quorum::Nodes;
use crate::common::*;

fn hostname() -> String {
    nix::unistd::gethostname()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// `redlock-run SUB ARGS` with the connection options `conn`.
fn op(conn: &[String], sub: &str, args: &[&str]) -> Outcome {
    Wrapper::new().arg(sub).args(conn).args(args).run()
}

fn single(redis: &RedisServer, key: &str) -> Vec<String> {
    vec!["--redis".into(), redis.url(), "--key".into(), key.into()]
}

fn status_json(conn: &[String]) -> serde_json::Value {
    let out = op(conn, "status", &["--json"]);
    out.expect_code(0);
    parse_json(&out.stdout)
}

/// A holder that writes its fence and pid into `dir`, renews every 300 ms and sleeps long.
fn holder(w: Wrapper, dir: &Path) -> Running {
    w.args(["--ttl", "5s", "--heartbeat", "300ms", "--grace", "1s"])
        .sh("echo $REDLOCK_FENCE > fence; echo $$ > started; exec sleep 120")
        .current_dir(dir)
        .spawn()
}

/// Break a running holder by its token on `conn`: it stops with 74 naming this host; the
/// fence printed is below the next holder's; the record says broken.
fn break_a_running_holder(conn: &[String], w: impl Fn() -> Wrapper) {
    let dir = scratch();
    let mut running = holder(w(), dir.path());
    running.child_pid(&dir.path().join("started"), secs(20));
    let old_fence: u64 = read_trimmed(&dir.path().join("fence")).parse().unwrap();
    let json = status_json(conn);
    let token = json["token"]
        .as_str()
        .expect("status shows the token")
        .to_owned();

    let broke = op(conn, "break", &["--holder", &token]);
    broke.expect_code(0);
    let said = broke.stderr.clone();
    let printed: u64 = said
        .split("fence raised to ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no fence in {broke}"));
    assert!(printed > old_fence, "fence {printed} not above {old_fence}");

    // Stopped at its next renewal: within a heartbeat plus the grace, waited on generously.
    let out = running.wait(secs(30));
    out.expect_code(74);
    assert!(
        out.stderr.contains(&format!("broken by {}", hostname())),
        "the message names the breaker: {out}"
    );

    let after = status_json(conn);
    assert_eq!(after["held"], false, "{after}");
    assert_eq!(after["last_run"]["outcome"], "broken", "{after}");
    assert_eq!(
        after["last_run"]["broken_by"],
        hostname().as_str(),
        "{after}"
    );
    assert_eq!(after["last_run"]["fence"], old_fence, "{after}");
    let text = op(conn, "status", &[]);
    assert!(text.stdout.contains("last run: broken"), "{text}");

    let next = w().sh("echo $REDLOCK_FENCE").run();
    next.expect_code(0);
    let fence: u64 = next.stdout.trim().parse().unwrap();
    assert!(
        fence > printed,
        "next fence {fence} not above the printed {printed}"
    );
    // The next run's record names no breaker (the broken run's field is not left over).
    let later = status_json(conn);
    assert_eq!(later["last_run"]["outcome"], "succeeded", "{later}");
    assert!(later["last_run"]["broken_by"].is_null(), "{later}");
}

#[test]
fn break_stops_a_running_holder_with_74_and_raises_the_fence() {
    let redis = RedisServer::start();
    let conn = single(&redis, "brk");
    break_a_running_holder(&conn, || Wrapper::on(&redis, "brk"));
}

#[test]
fn break_of_a_free_lock_exits_3() {
    let redis = RedisServer::start();
    let conn = single(&redis, "free");
    let out = op(&conn, "break", &["--yes"]);
    out.expect_code(3);
    assert!(out.stderr.contains("is free"), "{out}");
}

#[test]
fn break_of_another_holder_exits_4_and_changes_nothing() {
    let redis = RedisServer::start();
    let conn = single(&redis, "other");
    let dir = scratch();
    let mut running = holder(Wrapper::on(&redis, "other"), dir.path());
    running.child_pid(&dir.path().join("started"), secs(20));
    let token = redis.get("redlock:other").unwrap();

    let out = op(&conn, "break", &["--holder", "not-the-token"]);
    out.expect_code(4);
    assert!(out.stderr.contains("nothing changed"), "{out}");
    let out = op(&conn, "break", &["--host", "no-such-host.invalid"]);
    out.expect_code(4);

    assert_eq!(redis.get("redlock:other").as_deref(), Some(token.as_str()));
    // Still held and renewed past its first ttl.
    std::thread::sleep(secs(6));
    assert!(running.is_running(), "{}", running.describe());
    assert_eq!(redis.get("redlock:other").as_deref(), Some(token.as_str()));
    running.signal(nix::sys::signal::Signal::SIGTERM);
    running.wait(secs(20));
}

/// A lock taken by another client (a raw `SET NX`) is broken by its value, and only by it.
#[test]
fn break_of_a_foreign_lock_names_its_value() {
    let redis = RedisServer::start();
    let conn = single(&redis, "raw");
    redis.cli(&["SET", "redlock:raw", "their-token", "PX", "60000"]);
    op(&conn, "break", &["--host", "anyhost"]).expect_code(4);
    op(&conn, "break", &["--holder", "other"]).expect_code(4);
    assert_eq!(redis.get("redlock:raw").as_deref(), Some("their-token"));
    op(&conn, "break", &["--holder", "their-token"]).expect_code(0);
    assert!(!redis.exists("redlock:raw"));
}

#[test]
fn break_without_a_holder_named_needs_yes_without_a_terminal() {
    let redis = RedisServer::start();
    let conn = single(&redis, "ask");
    let dir = scratch();
    let mut running = holder(Wrapper::on(&redis, "ask"), dir.path());
    running.child_pid(&dir.path().join("started"), secs(20));

    let out = op(&conn, "break", &[]);
    out.expect_code(2);
    assert!(out.stderr.contains("--yes"), "{out}");
    assert!(redis.exists("redlock:ask"));

    op(&conn, "break", &["--yes"]).expect_code(0);
    running.wait(secs(30)).expect_code(74);
}

#[test]
fn break_takes_one_permit_of_a_limit_lock() {
    let redis = RedisServer::start();
    let conn = single(&redis, "sem");
    let (a, b) = (scratch(), scratch());
    let lim = || Wrapper::on(&redis, "sem").args(["--limit", "2"]);
    let mut first = holder(lim(), a.path());
    first.child_pid(&a.path().join("started"), secs(20));
    let mut second = holder(lim(), b.path());
    second.child_pid(&b.path().join("started"), secs(20));

    // Both on this host: --host names two, so it refuses and lists them.
    let out = op(&conn, "break", &["--host", &hostname()]);
    out.expect_code(2);
    assert!(out.stderr.contains("2 holders"), "{out}");

    let json = status_json(&conn);
    let holders = json["holders"].as_array().expect("holders");
    let token = holders
        .iter()
        .find(|h| h["pid"] == first.pid)
        .and_then(|h| h["token"].as_str())
        .unwrap_or_else(|| panic!("first holder in {json}"))
        .to_owned();
    op(&conn, "break", &["--holder", &token]).expect_code(0);

    let out = first.wait(secs(30));
    out.expect_code(74);
    assert!(out.stderr.contains("broken by"), "{out}");
    assert!(second.is_running(), "{}", second.describe());
    let json = status_json(&conn);
    assert_eq!(json["holders"].as_array().map(Vec::len), Some(1), "{json}");
    assert_eq!(json["last_run"]["outcome"], "broken", "{json}");
    second.signal(nix::sys::signal::Signal::SIGTERM);
    second.wait(secs(20));
}

/// A `--shared` holder that writes its fence and pid into `dir`, renews every 300 ms and runs
/// until the file `go` appears in `dir` (at most 120 s: a test that forgot it must not hang).
fn shared_holder(redis: &RedisServer, key: &str, dir: &Path) -> Running {
    Wrapper::on(redis, key)
        .args([
            "--shared",
            "--ttl",
            "5s",
            "--heartbeat",
            "300ms",
            "--grace",
            "1s",
        ])
        .sh(
            "echo $REDLOCK_FENCE > fence; echo $$ > started; i=0; while [ ! -e go ]; do \
             i=$((i+1)); [ $i -gt 2400 ] && exit 9; sleep 0.05; done",
        )
        .current_dir(dir)
        .spawn()
}

/// The token `status` shows for the shared holder whose wrapper is `pid`.
fn shared_token(json: &serde_json::Value, pid: i32) -> String {
    json["shared_holders"]
        .as_array()
        .and_then(|hs| hs.iter().find(|h| h["pid"] == pid))
        .and_then(|h| h["token"].as_str())
        .unwrap_or_else(|| panic!("shared holder pid {pid} in {json}"))
        .to_owned()
}

/// The fence `break` printed.
fn printed_fence(broke: &Outcome) -> u64 {
    broke
        .stderr
        .split("fence raised to ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no fence in {broke}"))
}

/// `break` on a lock held `--shared` breaks one shared holder, chosen as a `--limit` permit
/// is: that run stops with 74 naming the breaker, the others keep their shares and end with
/// 0, the fence printed is above every grant's, the record says broken.
#[test]
fn break_takes_one_shared_holder() {
    let redis = RedisServer::start();
    let conn = single(&redis, "sh");
    let dirs = [scratch(), scratch(), scratch()];
    let mut runs: Vec<Running> = dirs
        .iter()
        .map(|d| shared_holder(&redis, "sh", d.path()))
        .collect();
    for (run, dir) in runs.iter_mut().zip(&dirs) {
        run.child_pid(&dir.path().join("started"), secs(20));
    }
    let fences: Vec<u64> = dirs
        .iter()
        .map(|d| read_trimmed(&d.path().join("fence")).parse().unwrap())
        .collect();
    let json = status_json(&conn);
    assert_eq!(
        json["shared_holders"].as_array().map(Vec::len),
        Some(3),
        "{json}"
    );
    let tokens: Vec<String> = runs.iter().map(|r| shared_token(&json, r.pid)).collect();

    // Three holders on this host: neither --host nor --yes names one; each refusal lists them.
    for args in [vec!["--host", hostname().as_str()], vec!["--yes"]] {
        let out = op(&conn, "break", &args);
        out.expect_code(2);
        assert!(
            out.stderr.contains("3 holders") && out.stderr.contains(&tokens[0]),
            "{out}"
        );
    }
    let shared_key = "{redlock:sh}:shared";
    assert_eq!(redis.cli_int(&["ZCARD", shared_key]), 3);

    let broke = op(&conn, "break", &["--holder", &tokens[0]]);
    broke.expect_code(0);
    assert!(broke.stderr.contains("held shared by"), "{broke}");
    let printed = printed_fence(&broke);
    for f in &fences {
        assert!(printed > *f, "fence {printed} not above a grant's {f}");
    }

    let mut runs = runs.into_iter();
    let first = runs.next().unwrap();
    let out = first.wait(secs(30));
    out.expect_code(74);
    assert!(
        out.stderr.contains(&format!("broken by {}", hostname())),
        "the message names the breaker: {out}"
    );
    let mut others: Vec<Running> = runs.collect();
    for other in &mut others {
        assert!(other.is_running(), "{}", other.describe());
    }
    let after = status_json(&conn);
    let left: Vec<&str> = after["shared_holders"]
        .as_array()
        .expect("shared holders")
        .iter()
        .filter_map(|h| h["token"].as_str())
        .collect();
    assert_eq!(left.len(), 2, "{after}");
    assert!(!left.contains(&tokens[0].as_str()), "{after}");
    assert_eq!(after["last_run"]["outcome"], "broken", "{after}");
    assert_eq!(
        after["last_run"]["broken_by"],
        hostname().as_str(),
        "{after}"
    );
    assert_eq!(after["last_run"]["fence"], fences[0], "{after}");
    // The broken mark is the broken holder's alone.
    let marks = redis.cli(&["HKEYS", "{redlock:sh}:broken"]);
    assert_eq!(marks.trim(), tokens[0], "{marks}");
    let text = op(&conn, "status", &[]);
    assert!(text.stdout.contains("held shared by 2"), "{text}");

    for (other, dir) in others.into_iter().zip(&dirs[1..]) {
        std::fs::write(dir.path().join("go"), "").unwrap();
        other.wait(secs(30)).expect_code(0);
    }
    let next = Wrapper::on(&redis, "sh").sh("echo $REDLOCK_FENCE").run();
    next.expect_code(0);
    let fence: u64 = next.stdout.trim().parse().unwrap();
    assert!(fence > printed, "next fence {fence} not above {printed}");
}

/// A `--holder` that is none of the shared holders: 4, the holders named, nothing changed.
#[test]
fn break_of_another_shared_holder_exits_4_and_changes_nothing() {
    let redis = RedisServer::start();
    let conn = single(&redis, "sho");
    let dir = scratch();
    let mut running = shared_holder(&redis, "sho", dir.path());
    running.child_pid(&dir.path().join("started"), secs(20));
    let shared_key = "{redlock:sho}:shared";
    let members = redis.cli(&["ZRANGE", shared_key, "0", "-1"]);
    let fence = redis.get("{redlock:sho}:fence");

    let out = op(&conn, "break", &["--holder", "not-the-token"]);
    out.expect_code(4);
    assert!(
        out.stderr.contains("nothing changed")
            && out.stderr.contains(&format!(
                "held shared by {} pid {}",
                hostname(),
                running.pid
            )),
        "{out}"
    );
    op(&conn, "break", &["--host", "no-such-host.invalid"]).expect_code(4);

    assert_eq!(redis.cli(&["ZRANGE", shared_key, "0", "-1"]), members);
    assert_eq!(redis.get("{redlock:sho}:fence"), fence);
    assert!(!redis.exists("{redlock:sho}:broken"));
    assert!(!redis.exists("{redlock:sho}:last-run"));
    std::fs::write(dir.path().join("go"), "").unwrap();
    let out = running.wait(secs(30));
    out.expect_code(0);
    assert!(!out.stderr.contains("lost"), "{out}");
}

/// An exclusive waiter queued behind one shared holder gets the lock once `break` took that
/// share: the break announces it to the waiter at the head of the queue, as the last shared
/// holder's release does.
#[test]
fn break_of_the_last_shared_holder_lets_the_exclusive_waiter_in() {
    let redis = RedisServer::start();
    let conn = single(&redis, "shw");
    let dir = scratch();
    let mut reader = shared_holder(&redis, "shw", dir.path());
    reader.child_pid(&dir.path().join("started"), secs(20));
    let mut writer = Wrapper::on(&redis, "shw")
        .args(["--wait", "2m"])
        .sh(
            "echo $REDLOCK_FENCE > writer; i=0; while [ ! -e go-writer ]; do i=$((i+1)); \
             [ $i -gt 1200 ] && exit 9; sleep 0.05; done",
        )
        .current_dir(dir.path())
        .spawn();
    wait_until(secs(20), "the exclusive run queues", || {
        status_json(&conn)["queued"] == 1
    });

    let channel = "{redlock:shw}:released";
    let heard = dir.path().join("heard");
    let mut listener = std::process::Command::new(redis_cli_bin())
        .args(["-p", &redis.port().to_string(), "subscribe", channel])
        .stdout(std::fs::File::create(&heard).unwrap())
        .spawn()
        .unwrap();
    let _listener_guard = PidGuard::new(listener.id() as i32);
    wait_until(secs(5), "the test's subscriber", || {
        std::fs::read_to_string(&heard).is_ok_and(|s| s.contains(channel))
    });

    let broke = op(&conn, "break", &["--yes"]);
    broke.expect_code(0);
    let printed = printed_fence(&broke);
    // The announcement names the waiter (its id ends with its pid), which still holds the
    // lock when it is checked: nothing else can have sent it.
    wait_until(secs(10), "the break's announcement to the waiter", || {
        std::fs::read_to_string(&heard)
            .is_ok_and(|s| s.lines().any(|l| l.ends_with(&format!(" {}", writer.pid))))
    });
    let _ = listener.kill();
    let _ = listener.wait();

    writer.wait_for_file(&dir.path().join("writer"), secs(30));
    std::fs::write(dir.path().join("go-writer"), "").unwrap();
    writer.wait(secs(30)).expect_code(0);
    let fence: u64 = read_trimmed(&dir.path().join("writer")).parse().unwrap();
    assert!(
        fence > printed,
        "writer's fence {fence} not above {printed}"
    );
    reader.wait(secs(30)).expect_code(74);
}

/// Pause on `conn`: a run is busy with the reason; a holder keeps running; waiters keep their
/// order and go after `resume`.
fn pause_holds_off_runs_and_resume_lets_waiters_go_in_order(
    conn: &[String],
    w: impl Fn() -> Wrapper,
    queues: bool,
) {
    let dir = scratch();
    let mut running = holder(w(), dir.path());
    running.child_pid(&dir.path().join("started"), secs(20));

    op(conn, "pause", &["--for", "5m", "--reason", "deploy freeze"]).expect_code(0);
    let busy = w().arg("--").arg("true").run();
    busy.expect_code(75);
    assert!(
        busy.stderr.contains("deploy freeze") && busy.stderr.contains(&hostname()),
        "the busy message names the reason and who paused: {busy}"
    );
    let json = status_json(conn);
    assert_eq!(json["paused"]["reason"], "deploy freeze", "{json}");
    let text = op(conn, "status", &[]);
    assert!(text.stdout.contains("paused by"), "{text}");

    // The holder is not touched: still running after more than its ttl.
    std::thread::sleep(secs(6));
    assert!(running.is_running(), "{}", running.describe());

    let order = dir.path().join("order");
    let waiter = |name: &str| {
        w().args(["--wait", "2m"])
            .sh(&format!("echo {name} >> order; sleep 0.3"))
            .current_dir(dir.path())
            .spawn()
    };
    let mut w1 = waiter("w1");
    if queues {
        wait_until(secs(20), "w1 queued", || status_json(conn)["queued"] == 1);
    } else {
        std::thread::sleep(secs(2));
    }
    let mut w2 = waiter("w2");
    if queues {
        wait_until(secs(20), "w2 queued", || status_json(conn)["queued"] == 2);
    }
    running.signal(nix::sys::signal::Signal::SIGTERM);
    running.wait(secs(20));
    // Free but paused: nobody goes.
    std::thread::sleep(secs(2));
    assert!(!order.exists(), "a waiter ran while paused");
    assert!(w1.is_running() && w2.is_running());

    op(conn, "resume", &[]).expect_code(0);
    w1.wait(secs(60)).expect_code(0);
    w2.wait(secs(60)).expect_code(0);
    if queues {
        assert_eq!(read_trimmed(&order), "w1\nw2");
    }
    op(conn, "resume", &[]).expect_code(3);
}

#[test]
fn pause_holds_off_new_runs_and_resume_lets_waiters_go_in_order() {
    let redis = RedisServer::start();
    let conn = single(&redis, "p");
    pause_holds_off_runs_and_resume_lets_waiters_go_in_order(
        &conn,
        || Wrapper::on(&redis, "p"),
        true,
    );
}

#[test]
fn a_pause_expires_by_itself() {
    let redis = RedisServer::start();
    let conn = single(&redis, "exp");
    op(&conn, "pause", &["--for", "3s", "--reason", "short"]).expect_code(0);
    assert!(redis.pttl("{redlock:exp}:pause") > 0, "the pause has a TTL");
    let busy = Wrapper::on(&redis, "exp")
        .args(["--log-format", "json", "--", "true"])
        .run();
    busy.expect_code(75);
    let line = parse_json(busy.stderr.lines().last().unwrap_or_default());
    assert_eq!(line["event"], "busy", "{busy}");
    assert_eq!(line["paused_reason"], "short", "{busy}");
    assert_eq!(line["paused_by"], hostname().as_str(), "{busy}");
    assert!(line["paused_until"].is_string(), "{busy}");
    // A waiter gets the lock once the pause has expired, without a resume.
    let out = Wrapper::on(&redis, "exp")
        .args(["--wait", "1m", "--", "true"])
        .run();
    out.expect_code(0);
    assert!(status_json(&conn)["paused"].is_null());
}

#[test]
fn pause_needs_for_and_a_one_line_reason() {
    let redis = RedisServer::start();
    let conn = single(&redis, "bad");
    op(&conn, "pause", &["--reason", "x"]).expect_code(2);
    op(&conn, "pause", &["--for", "1m"]).expect_code(2);
    let out = op(&conn, "pause", &["--for", "1m", "--reason", "a\nb"]);
    out.expect_code(2);
    assert!(out.stderr.contains("--reason"), "{out}");
    assert!(!redis.exists("{redlock:bad}:pause"));
}

#[test]
fn the_note_is_shown_by_status_in_text_and_json() {
    let redis = RedisServer::start();
    let conn = single(&redis, "n");
    let dir = scratch();
    let mut running = holder(
        Wrapper::on(&redis, "n").env("REDLOCK_NOTE", "OPS-42 https://ci.example/run/7"),
        dir.path(),
    );
    running.child_pid(&dir.path().join("started"), secs(20));
    let json = status_json(&conn);
    assert_eq!(json["note"], "OPS-42 https://ci.example/run/7", "{json}");
    let text = op(&conn, "status", &[]);
    assert!(
        text.stdout
            .contains("note: OPS-42 https://ci.example/run/7"),
        "{text}"
    );
    running.signal(nix::sys::signal::Signal::SIGTERM);
    running.wait(secs(20));

    // A --limit permit keeps its own note.
    let other = scratch();
    let mut permit = holder(
        Wrapper::on(&redis, "n").args(["--limit", "2", "--note", "permit note"]),
        other.path(),
    );
    permit.child_pid(&other.path().join("started"), secs(20));
    let json = status_json(&conn);
    let holders = json["holders"].as_array().expect("holders");
    assert_eq!(holders[0]["note"], "permit note", "{json}");
    assert!(
        holders[0]["command"]
            .as_str()
            .is_some_and(|c| c.starts_with("sh")),
        "the command keeps its place: {json}"
    );
    let text = op(&conn, "status", &[]);
    assert!(text.stdout.contains("note: permit note"), "{text}");
    permit.signal(nix::sys::signal::Signal::SIGTERM);
    permit.wait(secs(20));

    let long = "x".repeat(201);
    let out = Wrapper::on(&redis, "n")
        .args(["--note", &long, "--", "true"])
        .run();
    out.expect_code(2);
    assert!(out.stderr.contains("--note"), "{out}");
    // Nor a character that reorders or hides what status shows (RLO, a line separator, a
    // zero-width space).
    for odd in ["evil\u{202E}txt.exe", "one\u{2028}two", "zero\u{200B}width"] {
        let out = Wrapper::on(&redis, "n")
            .args(["--note", odd, "--", "true"])
            .run();
        out.expect_code(2);
        assert!(out.stderr.contains("plain text"), "{out}");
    }
}

#[test]
fn cluster_break_and_pause() {
    let cluster = Cluster::start(3, 0);
    let conn = vec![
        "--redis".to_owned(),
        cluster.url(),
        "--key".to_owned(),
        "cb".to_owned(),
    ];
    break_a_running_holder(&conn, || cluster.wrapper("cb"));
    let conn = vec![
        "--redis".to_owned(),
        cluster.url(),
        "--key".to_owned(),
        "cp".to_owned(),
    ];
    pause_holds_off_runs_and_resume_lets_waiters_go_in_order(&conn, || cluster.wrapper("cp"), true);
}

#[test]
fn redlock_break_and_pause() {
    let nodes = Nodes::start(3);
    let conn = |key: &str| {
        let mut c = nodes.redis_args();
        c.extend(["--key".to_owned(), key.to_owned()]);
        c
    };
    break_a_running_holder(&conn("qb"), || nodes.wrapper("qb"));
    assert_eq!(nodes.holding("redlock:qb"), 0);
    // Redlock keeps no queue: waiters poll, and their order is not promised.
    pause_holds_off_runs_and_resume_lets_waiters_go_in_order(
        &conn("qp"),
        || nodes.wrapper("qp"),
        false,
    );
}

#[test]
fn sentinel_break_and_pause() {
    let set = crate::common::sentinel::SentinelSet::start(1);
    let conn = |key: &str| {
        vec![
            "--redis".to_owned(),
            set.url(),
            "--key".to_owned(),
            key.to_owned(),
        ]
    };
    break_a_running_holder(&conn("sb"), || set.wrapper("sb"));
    pause_holds_off_runs_and_resume_lets_waiters_go_in_order(
        &conn("sp"),
        || set.wrapper("sp"),
        true,
    );
}

/// `redlock-run ARGS` on a pseudo-terminal (script(1)) with `input` typed: its exit code and
/// what the terminal showed.
fn on_terminal(args: &str, input: &str) -> (Option<i32>, String) {
    use std::io::Write as _;
    use std::process::Stdio;
    let cmdline = format!("{} {args}", wrapper_bin());
    let mut child = script_command()
        .args(["-qefc", &cmdline, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("script(1) from util-linux");
    let _guard = PidGuard::new(child.id() as i32);
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let ended = poll_until(secs(30), || child.try_wait().unwrap().is_some());
    if !ended {
        let _ = child.kill();
    }
    let out = child.wait_with_output().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        ended,
        "{cmdline} on a terminal did not finish; it showed:\n{shown}"
    );
    (out.status.code(), shown)
}

#[test]
fn break_at_a_terminal_shows_the_holder_and_asks() {
    let redis = RedisServer::start();
    let dir = scratch();
    let mut running = holder(Wrapper::on(&redis, "tty"), dir.path());
    running.child_pid(&dir.path().join("started"), secs(20));
    let args = format!("break --redis {} --key tty", redis.url());

    let (code, shown) = on_terminal(&args, "n\n");
    assert_eq!(code, Some(2), "{shown}");
    assert!(
        shown.contains(&format!("held by {} pid {}", hostname(), running.pid)),
        "the question shows the holder: {shown}"
    );
    assert!(
        redis.exists("redlock:tty"),
        "not confirmed: nothing changed"
    );

    let (code, shown) = on_terminal(&args, "y\n");
    assert_eq!(code, Some(0), "{shown}");
    running.wait(secs(30)).expect_code(74);
}

/// `--shared` runs are held off by a pause too (no new share while paused; shares held go
/// on), say why, and a shared waiter goes in after `resume`; the note is on the share.
#[test]
fn pause_holds_off_shared_runs_and_the_note_is_on_the_share() {
    let redis = RedisServer::start();
    let conn = single(&redis, "sp");
    let dir = scratch();
    let mut reader = Wrapper::on(&redis, "sp")
        .args(["--shared", "--note", "report job 7"])
        .args(["--ttl", "5s", "--heartbeat", "300ms", "--grace", "1s"])
        .sh("echo $$ > started; exec sleep 120")
        .current_dir(dir.path())
        .spawn();
    reader.child_pid(&dir.path().join("started"), secs(20));
    let json = status_json(&conn);
    assert_eq!(json["shared_holders"][0]["note"], "report job 7", "{json}");

    op(&conn, "pause", &["--for", "5m", "--reason", "reindex"]).expect_code(0);
    let busy = Wrapper::on(&redis, "sp")
        .args(["--shared", "--", "true"])
        .run();
    busy.expect_code(75);
    assert!(
        busy.stderr.contains("reindex"),
        "the reason is told: {busy}"
    );

    // A shared waiter stays out while paused, and goes in after resume.
    let waiter = Wrapper::on(&redis, "sp")
        .args(["--shared", "--wait", "2m"])
        .sh("touch went")
        .current_dir(dir.path())
        .spawn();
    wait_until(secs(20), "the shared waiter queued", || {
        status_json(&conn)["queued"] == 1
    });
    std::thread::sleep(secs(2));
    assert!(
        !dir.path().join("went").exists(),
        "a share was granted while paused"
    );
    assert!(
        reader.is_running(),
        "the share held goes on: {}",
        reader.describe()
    );
    op(&conn, "resume", &[]).expect_code(0);
    waiter.wait(secs(60)).expect_code(0);
    assert!(dir.path().join("went").exists());
    reader.signal(nix::sys::signal::Signal::SIGTERM);
    reader.wait(secs(20));
}

/// A lock kept by `--hold-at-least` after its command finished can be broken; the run's own
/// record (it succeeded, written by its release) is left as it is, not made "broken".
#[test]
fn break_of_a_lock_kept_by_hold_at_least_keeps_the_runs_record() {
    let redis = RedisServer::start();
    let conn = single(&redis, "kept");
    Wrapper::on(&redis, "kept")
        .args(["--hold-at-least", "5m", "--", "true"])
        .run()
        .expect_code(0);
    assert!(redis.exists("redlock:kept"), "kept by --hold-at-least");
    op(&conn, "break", &["--yes"]).expect_code(0);
    assert!(!redis.exists("redlock:kept"));
    let json = status_json(&conn);
    assert_eq!(json["last_run"]["outcome"], "succeeded", "{json}");
    assert!(json["last_run"]["broken_by"].is_null(), "{json}");
}

/// At a terminal, `break` of a lock held by one shared holder shows it and asks, as for the
/// mutex's holder.
#[test]
fn break_at_a_terminal_shows_the_shared_holder_and_asks() {
    let redis = RedisServer::start();
    let dir = scratch();
    let mut running = shared_holder(&redis, "ttys", dir.path());
    running.child_pid(&dir.path().join("started"), secs(20));
    let args = format!("break --redis {} --key ttys", redis.url());

    let (code, shown) = on_terminal(&args, "n\n");
    assert_eq!(code, Some(2), "{shown}");
    assert!(
        shown.contains(&format!(
            "held shared by {} pid {}",
            hostname(),
            running.pid
        )),
        "the question shows the holder: {shown}"
    );
    assert_eq!(redis.cli_int(&["ZCARD", "{redlock:ttys}:shared"]), 1);

    let (code, shown) = on_terminal(&args, "y\n");
    assert_eq!(code, Some(0), "{shown}");
    running.wait(secs(30)).expect_code(74);
}
