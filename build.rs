//! Puts the commit the binary is built from into `convapi --version` (`CONVAPI_COMMIT`):
//! `git rev-parse --short HEAD`, or `unknown` outside a git checkout (a source archive, a container
//! build without `.git`). Runs again when HEAD moves: a checkout, or a commit on the current branch.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `git ARGS` in the crate's directory, its output trimmed; None without git or a repository.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_owned())
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let commit = git(&dir, &["rev-parse", "--short", "HEAD"]);
    if commit.is_some() {
        // HEAD (which branch, or a detached commit) and the branch's ref (a new commit on it); in
        // a worktree HEAD is the worktree's own and the refs are shared. A ref may also live in
        // packed-refs only, after `git gc`.
        let path = |args: &[&str]| git(&dir, args).map(|p| dir.join(p));
        if let Some(git_dir) = path(&["rev-parse", "--git-dir"]) {
            println!("cargo:rerun-if-changed={}", git_dir.join("HEAD").display());
        }
        if let Some(common) = path(&["rev-parse", "--git-common-dir"]) {
            println!(
                "cargo:rerun-if-changed={}",
                common.join("packed-refs").display()
            );
            if let Some(branch) = git(&dir, &["symbolic-ref", "-q", "HEAD"]) {
                println!("cargo:rerun-if-changed={}", common.join(branch).display());
            }
        }
    }
    let commit = commit.unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=CONVAPI_COMMIT={commit}");
}
