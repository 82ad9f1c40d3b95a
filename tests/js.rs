//! The pixel's own tests (docs/decisions.md §4), run by `cargo test`: `node --test tests/js/`
//! covers the queue and batching semantics of `assets/pixel.js` in a fake browser, and its size.
//! Without Node this test fails loudly; it never passes without having run them.

use std::path::Path;
use std::process::Command;

#[test]
fn pixel_node_tests_pass() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let node = std::env::var_os("CONVAPI_NODE").unwrap_or_else(|| "node".into());
    let out = match Command::new(&node)
        .args(["--test", "--test-reporter=tap", "tests/js/"])
        .current_dir(root)
        .output()
    {
        Ok(out) => out,
        Err(e) => panic!(
            "\n\n********************************************************************\n\
             tests/js.rs needs Node.js (18 or later) to run the pixel's tests in tests/js/,\n\
             and starting {node:?} failed: {e}.\n\
             Install it:    apt-get install -y nodejs   (or set CONVAPI_NODE)\n\
             ********************************************************************\n"
        ),
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "node --test tests/js/ failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    // A run that found no test files also exits 0: insist the suites really ran.
    let count = |key: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|n| n.trim().parse::<u32>().ok())
            .unwrap_or_else(|| panic!("no {key:?} line in node's output:\n{stdout}\n{stderr}"))
    };
    let (tests, pass) = (count("# tests "), count("# pass "));
    assert!(tests >= 2, "node ran only {tests} tests:\n{stdout}");
    assert_eq!(pass, tests, "not every test passed:\n{stdout}");
}
