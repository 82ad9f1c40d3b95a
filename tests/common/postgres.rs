//! PostgreSQL for the tests: a database of its own for each test, on the throwaway cluster that
//! `scripts/test.sh` starts (`scripts/postgres.sh`) and names in `CONVAPI_TEST_POSTGRES`, the URL
//! of its superuser. Without that variable a PostgreSQL test fails, saying how to get a cluster.

/// The variable that names the test cluster.
pub const CLUSTER_VAR: &str = "CONVAPI_TEST_POSTGRES";

/// The cluster's superuser URL, or a failure that says how to get one.
pub fn cluster_url() -> String {
    std::env::var(CLUSTER_VAR).unwrap_or_else(|_| {
        panic!(
            "{CLUSTER_VAR} is not set: the PostgreSQL tests need a throwaway cluster. Run \
             scripts/test.sh (it starts one), or start one with `scripts/postgres.sh start DIR` \
             and set {CLUSTER_VAR} to the URL it prints"
        )
    })
}

/// A new, empty database on the test cluster: its URL. Each test makes its own, so tests share
/// the cluster, not state; the cluster is thrown away with everything in it.
pub fn fresh_database() -> String {
    let cluster = cluster_url();
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    let mut admin = ::postgres::Client::connect(&cluster, ::postgres::NoTls)
        .unwrap_or_else(|e| panic!("cannot connect to the test cluster at {cluster}: {e}"));
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap_or_else(|e| panic!("cannot create database {name}: {e}"));
    database_url(&cluster, &name)
}

/// Drops the database `url` names (made by [`fresh_database`]), closing what is still connected to
/// it; a failure only warns, as the cluster is thrown away with whatever it still holds.
pub fn drop_database(url: &str) {
    let name = database_name(url);
    let cluster = cluster_url();
    let dropped = ::postgres::Client::connect(&cluster, ::postgres::NoTls).and_then(|mut admin| {
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
    });
    if let Err(e) = dropped {
        eprintln!("could not drop database {name}: {e}");
    }
}

/// The database `url` names.
fn database_name(url: &str) -> &str {
    let base = url.split_once('?').map_or(url, |(base, _)| base);
    &base[base.rfind('/').expect("a postgresql:// URL has a path") + 1..]
}

/// `cluster` with its database replaced by `name`.
fn database_url(cluster: &str, name: &str) -> String {
    let (base, query) = cluster.split_once('?').unwrap_or((cluster, ""));
    let slash = base.rfind('/').expect("a postgresql:// URL has a path");
    let mut url = format!("{}/{name}", &base[..slash]);
    if !query.is_empty() {
        url.push('?');
        url.push_str(query);
    }
    url
}

/// A new login role that is no superuser (it may only log in) and a new, empty database it owns:
/// the URL that connects to it as that role. For what must work for an ordinary owner of the
/// database, not only for the cluster's superuser.
pub fn fresh_owned_database() -> String {
    let cluster = cluster_url();
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let (role, name) = (format!("r_{suffix}"), format!("t_{suffix}"));
    let mut admin = ::postgres::Client::connect(&cluster, ::postgres::NoTls)
        .unwrap_or_else(|e| panic!("cannot connect to the test cluster at {cluster}: {e}"));
    // Two statements: CREATE DATABASE cannot run inside the transaction a batch is.
    for sql in [
        format!("CREATE ROLE {role} LOGIN"),
        format!("CREATE DATABASE {name} OWNER {role}"),
    ] {
        admin
            .batch_execute(&sql)
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }
    as_role(&database_url(&cluster, &name), &role)
}

/// `url` connecting as `role` (no password: the test cluster trusts its socket).
pub fn as_role(url: &str, role: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a postgresql:// URL");
    let rest = rest.split_once('@').map_or(rest, |(_, host)| host);
    format!("{scheme}://{role}@{rest}")
}

/// A PostgreSQL cluster of the test's own (`scripts/postgres.sh`), for a test that stops and
/// starts its server, or starts it with settings of its own, which would disturb every other test
/// on the shared one; stopped and removed when dropped.
pub struct Cluster {
    dir: std::path::PathBuf,
    parent: tempfile::TempDir,
}

impl Cluster {
    /// Starts one with the script's defaults: the cluster and its superuser's URL.
    pub fn start() -> (Cluster, String) {
        let cluster = Cluster::new();
        let url = cluster.start_with(&[]);
        (cluster, url)
    }

    /// A directory for a cluster, not started yet ([`Cluster::start_with`]).
    pub fn new() -> Cluster {
        use std::os::unix::fs::PermissionsExt;
        let parent = tempfile::tempdir().unwrap();
        // As root the cluster belongs to the `postgres` user, who must reach its directory.
        std::fs::set_permissions(parent.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        Cluster {
            dir: parent.path().join("pg"),
            parent,
        }
    }

    /// A directory beside the cluster's that its server can read (for its certificates, say),
    /// removed with it.
    pub fn beside(&self) -> &std::path::Path {
        self.parent.path()
    }

    /// Starts the server with `env` for the script (`PG_PORT`, `PG_OPTS`): its superuser's URL.
    pub fn start_with(&self, env: &[(&str, String)]) -> String {
        self.script("start", env).trim().to_owned()
    }

    /// `scripts/postgres.sh CMD DIR` on it (`pause`, `resume`): what it printed.
    pub fn run(&self, cmd: &str) -> String {
        self.script(cmd, &[])
    }

    fn script(&self, cmd: &str, env: &[(&str, String)]) -> String {
        let out = self
            .command(cmd)
            .envs(env.iter().cloned())
            .output()
            .unwrap();
        assert!(out.status.success(), "postgres.sh {cmd}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    fn command(&self, cmd: &str) -> std::process::Command {
        let mut c = std::process::Command::new("bash");
        c.arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/postgres.sh"))
            .args([cmd, self.dir.to_str().unwrap()]);
        c
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.command("stop").output();
    }
}
