//! The command line through the front door: `convapi --db DB ...` as a child process, with its exit
//! code and output, and the setup commands [`TestApp`] starts with (tenant, site, key).

use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

use super::app::{scrub_env, secret_key_env, Key, Site, Tenant, TestApp, BIN};

/// One CLI run, finished.
#[derive(Debug)]
pub struct CliRun {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl CliRun {
    /// Asserts exit 0 and that stdout is exactly one JSON value (whitespace around it allowed).
    #[track_caller]
    pub fn json(&self) -> Value {
        assert_eq!(self.code, 0, "exit status; stderr: {}", self.stderr);
        let mut values = serde_json::Deserializer::from_str(&self.stdout).into_iter::<Value>();
        let first = values
            .next()
            .unwrap_or_else(|| panic!("no JSON on stdout: {:?}", self.stdout))
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {:?}", self.stdout));
        assert!(
            values.next().is_none(),
            "more than one JSON value on stdout: {:?}",
            self.stdout
        );
        first
    }
}

impl TestApp {
    /// Runs `convapi --db <this db> ARGS...` and returns its exit code and output.
    pub fn cli(&self, args: &[&str]) -> CliRun {
        cli_run(Some(&self.db), args)
    }

    /// Runs a CLI command that must succeed and print exactly one JSON value; returns it.
    #[track_caller]
    pub fn cli_json(&self, args: &[&str]) -> Value {
        let run = self.cli(args);
        assert_eq!(
            run.code, 0,
            "convapi {args:?} failed; stderr: {}",
            run.stderr
        );
        run.json()
    }

    /// A test key of the app's tenant (`key create --test`): `(id, key)`.
    pub fn create_test_key(&self) -> (String, String) {
        let v = self.cli_json(&[
            "key",
            "create",
            "--tenant",
            &self.tenant.id,
            "--test",
            "--json",
        ]);
        (
            v["id"].as_str().expect("id").to_owned(),
            v["key"].as_str().expect("key").to_owned(),
        )
    }

    pub fn create_tenant(&self, name: &str) -> Tenant {
        let v = self.cli_json(&["tenant", "create", name, "--json"]);
        Tenant {
            id: v["id"].as_str().expect("tenant id").to_owned(),
        }
    }

    /// `site create --tenant TENANT --name NAME EXTRA... --json`.
    pub fn create_site(&self, tenant: &str, name: &str, extra: &[&str]) -> Site {
        let mut args = vec!["site", "create", "--tenant", tenant, "--name", name];
        args.extend_from_slice(extra);
        args.push("--json");
        let v = self.cli_json(&args);
        Site {
            id: v["id"].as_str().expect("site id").to_owned(),
            tracker_id: v["trackerId"].as_str().expect("trackerId").to_owned(),
            json: v,
        }
    }

    pub fn create_key(&self, tenant: &str) -> Key {
        let v = self.cli_json(&["key", "create", "--tenant", tenant, "--json"]);
        Key {
            id: v["id"].as_str().expect("key id").to_owned(),
            key: v["key"].as_str().expect("key").to_owned(),
            prefix: v["prefix"].as_str().expect("prefix").to_owned(),
        }
    }

    pub fn revoke_key(&self, key_id: &str) -> Value {
        self.cli_json(&["key", "revoke", key_id, "--json"])
    }
}

/// Runs the binary with `--db DB` (when given) and `args`, with no `CONVAPI_*` environment.
pub fn cli_run(db: Option<&Path>, args: &[&str]) -> CliRun {
    cli_run_in(None, db, args)
}

/// [`cli_run`] in the working directory `cwd` (when given): relative paths resolve there.
pub fn cli_run_in(cwd: Option<&Path>, db: Option<&Path>, args: &[&str]) -> CliRun {
    let mut cmd = Command::new(BIN);
    if let Some(cwd) = cwd {
        cmd.current_dir(cwd);
    }
    scrub_env(&mut cmd);
    if let Some(db) = db {
        secret_key_env(&mut cmd, db);
        cmd.arg("--db").arg(db);
    }
    cmd.args(args).stdin(Stdio::null());
    let Output {
        status,
        stdout,
        stderr,
    } = cmd.output().expect("run convapi");
    CliRun {
        code: status.code().expect("exited, not killed"),
        stdout: String::from_utf8(stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

/// Runs `convapi --db DB ARGS...` with its stdout a pipe whose reader is gone before the command
/// writes (`convapi ... | head` once `head` has had enough): its exit code and stderr.
pub fn cli_run_reader_gone(db: &Path, args: &[&str]) -> (i32, String) {
    let mut cmd = Command::new(BIN);
    scrub_env(&mut cmd);
    secret_key_env(&mut cmd, db);
    cmd.arg("--db").arg(db).args(args);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run convapi");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait for convapi");
    (
        out.status.code().expect("exited, not killed"),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
