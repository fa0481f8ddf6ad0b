//! `--ping-output N`: the last N lines of the command's output, for the final ping.
//!
//! Only with that flag: the wrapper's own stdout and stderr become pipes just before the
//! command starts (it inherits them), and a thread per pipe copies everything to where the
//! output went before, keeping the last lines. The command then writes to a pipe, not a
//! terminal (as under runitor or `| tee`); the wrapper's own messages while it runs are among
//! the lines kept. Lines of the two streams are kept in the order they were read, which is
//! the order they were written only when they were not written at the same moment. After the command, the wrapper takes its stdout and stderr back and gives
//! the copying threads [`SETTLE`] to pass on what is left.

use std::collections::VecDeque;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;

/// How long the copying threads get to pass on what is left once the command ended.
const SETTLE: Duration = Duration::from_millis(200);

/// The longest line kept (longer ones are cut).
const LONGEST_LINE: usize = 1000;

/// The last lines of output.
struct Tail {
    lines: VecDeque<Vec<u8>>,
    /// The line being written, per stream (stdout, stderr).
    partial: [Vec<u8>; 2],
    most: usize,
}

impl Tail {
    fn push(&mut self, stream: usize, bytes: &[u8]) {
        for &b in bytes {
            if b == b'\n' {
                let line = std::mem::take(&mut self.partial[stream]);
                self.keep(line);
            } else if self.partial[stream].len() < LONGEST_LINE {
                self.partial[stream].push(b);
            }
        }
    }

    fn keep(&mut self, line: Vec<u8>) {
        self.lines.push_back(line);
        while self.lines.len() > self.most {
            self.lines.pop_front();
        }
    }

    fn text(&mut self, most_bytes: usize) -> String {
        for stream in 0..2 {
            let line = std::mem::take(&mut self.partial[stream]);
            if !line.is_empty() {
                self.keep(line);
            }
        }
        let mut out: Vec<u8> = Vec::new();
        for line in &self.lines {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
        // The end matters most: cut from the front.
        let cut = out.len().saturating_sub(most_bytes);
        String::from_utf8_lossy(&out[cut..]).into_owned()
    }
}

/// Output being copied and kept.
pub struct Capture {
    /// Where stdout and stderr went before (close-on-exec copies).
    saved: [OwnedFd; 2],
    tail: Arc<Mutex<Tail>>,
    copiers: Vec<JoinHandle<()>>,
}

impl Capture {
    /// Put pipes in place of the wrapper's stdout and stderr (the command inherits them).
    pub fn start(lines: u32) -> std::io::Result<Capture> {
        let tail = Arc::new(Mutex::new(Tail {
            lines: VecDeque::new(),
            partial: [Vec::new(), Vec::new()],
            most: lines as usize,
        }));
        let mut saved = Vec::new();
        let mut copiers = Vec::new();
        for (stream, fd) in [1 as RawFd, 2].into_iter().enumerate() {
            // SAFETY: fcntl on a descriptor number; no memory is passed.
            let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
            if copy < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: a descriptor just made by F_DUPFD_CLOEXEC, owned by nothing else.
            let copy = unsafe { OwnedFd::from_raw_fd(copy) };
            let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
            // dup2 clears close-on-exec on fd 1 or 2: the command inherits the pipe.
            dup2(write.as_raw_fd(), fd)?;
            drop(write);
            let out = copy.try_clone()?;
            let tail = Arc::clone(&tail);
            let copier = std::thread::Builder::new()
                .name("output".into())
                .spawn(move || copy_out(read, out, stream, &tail))?;
            saved.push(copy);
            copiers.push(copier);
        }
        let [out, err]: [OwnedFd; 2] = saved.try_into().expect("two streams");
        Ok(Capture {
            saved: [out, err],
            tail,
            copiers,
        })
    }

    /// Give stdout and stderr back, let the copiers finish (at most [`SETTLE`]), and return
    /// the last lines (at most `most_bytes`).
    pub fn finish(self, most_bytes: usize) -> String {
        for (fd, saved) in [1 as RawFd, 2].into_iter().zip(&self.saved) {
            let _ = dup2(saved.as_raw_fd(), fd);
        }
        // The pipes end when the last of the command's processes holding them is gone.
        let until = Instant::now() + SETTLE;
        for copier in self.copiers {
            while !copier.is_finished() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let mut tail = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        tail.text(most_bytes)
    }
}

/// dup2(2) onto stdout or stderr, which nix only offers for owned descriptors.
fn dup2(from: RawFd, to: RawFd) -> std::io::Result<()> {
    // SAFETY: dup2 on descriptor numbers; `to` is 1 or 2, which the process always has.
    if unsafe { libc::dup2(from, to) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn copy_out(read: OwnedFd, out: OwnedFd, stream: usize, tail: &Mutex<Tail>) {
    let mut read = std::fs::File::from(read);
    let mut out = std::fs::File::from(out);
    let mut buf = [0u8; 8192];
    loop {
        let n = match std::io::Read::read(&mut read, &mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        // Passed on first: the output's reader sees it as without the capture.
        let _ = out.write_all(&buf[..n]);
        tail.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(stream, &buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_last_lines_and_cuts_from_the_front() {
        let mut t = Tail {
            lines: VecDeque::new(),
            partial: [Vec::new(), Vec::new()],
            most: 2,
        };
        t.push(0, b"one\ntwo\nthr");
        t.push(1, b"err\n");
        t.push(0, b"ee\n");
        assert_eq!(t.text(100), "err\nthree\n");
        assert_eq!(t.text(4), "ree\n");
    }
}
