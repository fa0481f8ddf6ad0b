#!/usr/bin/env python3
"""Summarise folded perf stacks (inferno-collapse-perf --all) of redlock-run runs.

Prints two markdown tables: the samples by process, and the wrapper's own samples (process
`redlock-run`) by what they were doing, each stack counted once under the first rule that
matches it, from the root down. Kernel frames carry inferno's `_[k]` mark.
usage: fold_summary.py FOLDED
"""
import collections
import re
import sys

# (label, pattern matched against a whole stack), first match wins.
RULES = [
    # glibc's cache and feature set-up, libgcc_s's constructor (__cpu_indicator_init, seen as
    # bare [libgcc_s.so.1] frames: nothing else of it runs at start) and Rust's std_detect
    # (memchr's first call) all execute CPUID.
    ("CPU feature detection (CPUID, a VM exit each on a VM): glibc, libgcc_s, std_detect",
     r"intel_check_word|handle_intel|get_common_indices|init_cpu_features|init_cacheinfo|"
     r"update_active|get_common_cache_info|cpu_indicator_init|\[libgcc_s\.so\.1\]|std_detect"),
    ("exec of the wrapper (kernel)", r"__x64_sys_execve|bprm_execve"),
    ("dynamic loader: mapping, relocation, symbol lookup", r"_dl_start|dl_main|_dl_relocate|"
     r"_dl_lookup|do_lookup_x|check_match|_dl_map_object|_dl_init|_dl_sysdep_start|ld-linux"),
    ("fork of the guard and clone3 of the command (kernel)",
     r"__do_sys_clone|__x64_sys_clone|kernel_clone|copy_process"),
    ("process exit (kernel)", r"do_exit|do_group_exit|__x64_sys_exit_group|exit_mmap"),
    ("page faults (kernel)", r"asm_exc_page_fault|exc_page_fault|handle_mm_fault"),
    ("TCP, epoll and the Redis round trips (kernel)",
     r"tcp_|inet_|sock_write_iter|sock_read_iter|__sys_connect|__sys_sendto|__sys_recvfrom|"
     r"__sys_socket|do_epoll|ep_poll|sock_sendmsg|sock_recvmsg|__sys_setsockopt|eventfd"),
    ("files, /proc and the cgroup file system (kernel)",
     r"do_sys_openat|do_filp_open|ksys_read|vfs_read|ksys_write|vfs_write|ksys_pread|do_mkdirat|"
     r"do_rmdir|iterate_dir|vfs_statx|vfs_fstatat|close_range|__x64_sys_close|do_pipe|"
     r"__x64_sys_(openat|read|pread64|mkdir|rmdir|getdents64|close|statx|newfstatat|pipe2)_\[k\]"),
    ("memory mapping (kernel)", r"vm_mmap_pgoff|do_mmap|__do_sys_brk|do_vmi|mprotect|munmap"),
    ("signals and wait (kernel)", r"kernel_wait4|do_wait|rt_sigaction|sigprocmask|sigaltstack|"
     r"kill_pid|do_send_sig|get_signal|arch_do_signal"),
    ("scheduler: preempted or woken (kernel)", r"schedule_\[k\]|__schedule"),
    ("other kernel", r"_\[k\]"),
    ("clap: building and parsing the command line", r"clap_builder|clap::|redlock_run::cli"),
    ("tokio runtime and signal set-up", r"tokio::"),
    ("redis client (connection, encoding, parsing) and script hashing",
     r"redis::|combine::|sha1_smol"),
    ("allocator (malloc, free)", r"malloc|_int_free|cfree|_int_malloc|realloc"),
    ("redlock-run's own code", r"redlock_run::"),
    ("other user space (libc, std)", r"."),
]


def main(path):
    by_comm = collections.Counter()
    wrapper = collections.Counter()
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        if not line:
            continue
        stack, _, count = line.rpartition(" ")
        n = int(count)
        comm = stack.split(";", 1)[0]
        by_comm[comm] += n
        if comm != "redlock-run":
            continue
        for label, pattern in RULES:
            if re.search(pattern, stack):
                wrapper[label] += n
                break
    total = sum(by_comm.values())
    print("| process | share of all samples |")
    print("|---|---|")
    for comm, n in by_comm.most_common():
        if n / total >= 0.005:
            print(f"| {comm} | {n / total * 100:.1f}% |")
    own = sum(wrapper.values())
    print()
    print("| the wrapper (`redlock-run`) was ... | share of its samples |")
    print("|---|---|")
    for label, _ in RULES:
        if wrapper[label]:
            print(f"| {label} | {wrapper[label] / own * 100:.1f}% |")


if __name__ == "__main__":
    main(sys.argv[1])
