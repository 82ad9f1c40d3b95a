//! `sslmode=require`: convapi reaches PostgreSQL over TLS and verifies the server's certificate.
//! The test makes a CA and a server certificate for `localhost` with the `openssl` command, and
//! starts a cluster of its own (`scripts/postgres.sh` with TLS on and a TCP address on a free
//! port), so that nothing else listens there.

use std::path::Path;
use std::process::Command;

use crate::common::postgres::Cluster;

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("run");
    assert!(out.status.success(), "{cmd:?}: {out:?}");
}

/// A CA, and a key and certificate for `localhost` signed by it, in `dir`.
fn certificates(dir: &Path) {
    let f = |name: &str| dir.join(name).to_str().unwrap().to_owned();
    run(Command::new("openssl").args([
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=convapi test CA",
        "-keyout",
        &f("ca.key"),
        "-out",
        &f("ca.pem"),
    ]));
    run(Command::new("openssl").args([
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=localhost",
        "-keyout",
        &f("server.key"),
        "-out",
        &f("server.csr"),
    ]));
    std::fs::write(dir.join("san.ext"), "subjectAltName=DNS:localhost\n").unwrap();
    run(Command::new("openssl").args([
        "x509",
        "-req",
        "-in",
        &f("server.csr"),
        "-CA",
        &f("ca.pem"),
        "-CAkey",
        &f("ca.key"),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        &f("san.ext"),
        "-out",
        &f("server.pem"),
    ]));
    // Another CA, which did not sign the server's certificate.
    run(Command::new("openssl").args([
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=stranger",
        "-keyout",
        &f("other.key"),
        "-out",
        &f("other.pem"),
    ]));
}

#[test]
fn sslmode_require_connects_over_tls_and_refuses_a_certificate_it_cannot_verify() {
    use std::os::unix::fs::PermissionsExt;
    let cluster = Cluster::new();
    let certs = cluster.beside().join("certs");
    std::fs::create_dir(&certs).unwrap();
    std::fs::set_permissions(&certs, std::fs::Permissions::from_mode(0o755)).unwrap();
    certificates(&certs);
    // The server's key must belong to the user the server runs as, readable by it alone.
    let key = certs.join("server.key");
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } == 0 {
        run(Command::new("chown").args(["postgres:", key.to_str().unwrap()]));
    }
    for f in ["server.pem", "ca.pem", "other.pem"] {
        std::fs::set_permissions(certs.join(f), std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    cluster.start_with(&[
        ("PG_PORT", port.to_string()),
        (
            "PG_OPTS",
            format!(
                "-c listen_addresses=127.0.0.1 -c ssl=on -c ssl_cert_file={} -c ssl_key_file={}",
                certs.join("server.pem").display(),
                key.display()
            ),
        ),
    ]);
    let url = |root: &str| {
        format!(
            "postgresql://postgres@localhost:{port}/postgres?sslmode=require&sslrootcert={}",
            certs.join(root).display()
        )
    };

    // Verified against its CA: the session is encrypted.
    let conn =
        convapi::store::engine::postgres::open(&url("ca.pem")).expect("TLS with the right CA");
    let encrypted = convapi::store::engine::AsConn::conn(&conn)
        .query_opt(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
            |r| r.get::<bool>(0),
        )
        .unwrap();
    assert_eq!(encrypted, Some(true));
    // Every command runs on it: the CLI's tenant list, through the same URL.
    let run = crate::common::cli_run(Some(Path::new(&url("ca.pem"))), &["tenant", "list"]);
    assert_eq!(run.code, 0, "{run:?}");

    // A certificate the client cannot verify is refused, with the reason.
    let Err(e) = convapi::store::engine::postgres::open(&url("other.pem")) else {
        panic!("connected with a certificate signed by another CA");
    };
    let e = e.to_string();
    assert!(e.starts_with("cannot connect to PostgreSQL at "), "{e}");
    assert!(e.to_lowercase().contains("certificate"), "{e}");
    // And the public roots do not know a private CA either.
    let bare = format!("postgresql://postgres@localhost:{port}/postgres?sslmode=require");
    assert!(convapi::store::engine::postgres::open(&bare).is_err());
}
