#!/usr/bin/env python3
"""Cut one `strace -f -r -T` log of `redlock-run --key K -- true` into phases.

The phases are found by the wrapper's own system calls (the first process in the log):
start-up until its first socket, connecting until the acquire is written, the acquire's round
trip until its reply is read, the spawn until the command's successful execve, the command
until its exit is seen, the release from there until the release reply is read, and the exit.
strace slows every system call down, so only the shares are meaningful, not the durations.
Prints a markdown table.
"""
import re
import sys

LINE = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(.*)$")


def main(path):
    events = []  # (pid, absolute seconds, text)
    now = 0.0
    for raw in open(path, encoding="utf-8", errors="replace"):
        m = LINE.match(raw)
        if not m:
            continue
        now += float(m.group(2))
        events.append((int(m.group(1)), now, m.group(3)))
    if not events:
        print("(no strace events)")
        return
    wrapper = events[0][0]

    def first(pred, after=0.0):
        for pid, at, text in events:
            if at >= after and pred(pid, text):
                return at
        return None

    own = lambda pattern: (lambda pid, text: pid == wrapper and re.search(pattern, text))
    marks = [("start", events[0][1])]
    socket = first(own(r"^socket\(AF_INET"))
    sent = first(own(r"^writev?\(\d+, .*EVALSHA"), socket or 0)
    # With -f a call may be split: "recvfrom(9,  <unfinished ...>" then
    # "<... recvfrom resumed>"*2..."; the reply is on the resumed line.
    reply = first(own(r"^(recvfrom\(\d+, |<\.\.\. recvfrom resumed>)\"\*"), sent or 0)
    exec_ok = first(
        lambda pid, text: pid != wrapper
        and (text.startswith("execve(") or text.startswith("<... execve resumed>"))
        and re.search(r"\) += 0 <", text),
        reply or 0,
    )
    ended = first(own(r"--- SIGCHLD"), exec_ok or 0)
    released = first(own(r"^writev?\(\d+, .*EVALSHA"), ended or 0)
    release_reply = first(own(r"^(recvfrom\(\d+, |<\.\.\. recvfrom resumed>)\":"), released or 0)
    marks += [
        ("connected, acquire written", sent),
        ("acquire reply read", reply),
        ("command exec'd", exec_ok),
        ("command's exit seen", ended),
        ("release written", released),
        ("release reply read", release_reply),
        ("wrapper exited", events[-1][1]),
    ]
    names = {
        "connected, acquire written": "start-up (loader, std, clap, runtime, signals), connect, acquire call built",
        "acquire reply read": "acquire round trip (the command's cgroup and guard are made meanwhile)",
        "command exec'd": "spawn: clone3 into the cgroup, the command's execve (PATH search)",
        "command's exit seen": "the command runs",
        "release written": "reaping, cgroup empty check",
        "release reply read": "release round trip (the cgroup is removed meanwhile)",
        "wrapper exited": "runtime shutdown, exit",
    }
    total = marks[-1][1] - marks[0][1]
    print("| phase | ms under strace | share |")
    print("|---|---|---|")
    prev = marks[0][1]
    for name, at in marks[1:]:
        if at is None:
            print(f"| {names[name]} | (not found) | |")
            continue
        d = at - prev
        print(f"| {names[name]} | {d * 1000:.2f} | {d / total * 100:.0f}% |")
        prev = at
    print(f"| total | {total * 1000:.2f} | 100% |")


if __name__ == "__main__":
    main(sys.argv[1])
