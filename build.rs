//! Links libgcc's unwinder into the binary (what `gcc -static-libgcc` does for a C++ program)
//! on Linux with glibc, instead of loading `libgcc_s.so.1` at every start.
//!
//! Every run of the wrapper pays for each shared library it loads: the loader opens, maps and
//! relocates it, and libgcc_s's constructor (`__cpu_indicator_init`) executes CPUID several
//! times, which on a virtual machine traps to the hypervisor each time (12 µs each on the
//! benchmark machine). Rust's standard library asks for `-lgcc_s` by name; a linker script
//! of that name in this build's own search path, found before the system's, hands the linker
//! the static `libgcc_eh.a` instead. Nothing else changes: glibc stays dynamic (name
//! resolution, locales), and the unwinder is the same code (backtraces, `panic = "unwind"`
//! in tests). `bench/run` measures the effect (see the README, Performance).
//!
//! Skipped, leaving the usual dynamic libgcc_s, when cross-compiling, for other targets and
//! C libraries, for `crt-static` builds (already static), when the C compiler has no
//! `libgcc_eh.a`, or when `REDLOCK_DYNAMIC_LIBGCC` is set.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=REDLOCK_DYNAMIC_LIBGCC");
    println!("cargo:rerun-if-env-changed=CC");
    if let Some(dir) = static_libgcc_dir() {
        println!("cargo:rustc-link-search=native={}", dir.display());
    }
}

/// A directory holding a `libgcc_s.so` linker script that names the static unwinder, or
/// `None` to link as usual.
fn static_libgcc_dir() -> Option<PathBuf> {
    let var = |name: &str| env::var(name).unwrap_or_default();
    let crt_static = var("CARGO_CFG_TARGET_FEATURE")
        .split(',')
        .any(|f| f == "crt-static");
    if var("CARGO_CFG_TARGET_OS") != "linux"
        || var("CARGO_CFG_TARGET_ENV") != "gnu"
        || crt_static
        || var("TARGET") != var("HOST")
        || env::var_os("REDLOCK_DYNAMIC_LIBGCC").is_some()
        // A linker of the user's choosing may not read the script or find libgcc_eh.
        || env::var_os("RUSTC_LINKER").is_some()
    {
        return None;
    }
    // The linker Rust uses on this target by default is the C compiler driver `cc`.
    let cc = env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let out = Command::new(cc)
        .arg("-print-file-name=libgcc_eh.a")
        .output()
        .ok()?;
    let found = String::from_utf8(out.stdout).ok()?;
    let found = Path::new(found.trim());
    // Without the file, the compiler prints the bare name back.
    if !out.status.success() || !found.is_absolute() || !found.is_file() {
        return None;
    }
    let dir = PathBuf::from(env::var_os("OUT_DIR")?).join("static-libgcc");
    fs::create_dir_all(&dir).ok()?;
    // `-lgcc_eh` then finds the same libgcc_eh.a the compiler found; `-lgcc` (the rest of
    // libgcc) is on the driver's link line anyway.
    fs::write(
        dir.join("libgcc_s.so"),
        "/* redlock-run's build.rs: the static unwinder instead of libgcc_s.so.1 */\nINPUT ( -lgcc_eh )\n",
    )
    .ok()?;
    Some(dir)
}
