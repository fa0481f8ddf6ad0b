//! Runs the fault proxy's self-tests (tests/common/proxy_selftest_body.rs) against real
//! redis-server processes. Temporary: the body is meant to move next to the harness.

mod common;

#[path = "common/proxy.rs"]
mod proxy;

mod selftest {
    use crate::common;
    use crate::proxy::*;

    include!("common/proxy_selftest_body.rs");
}
