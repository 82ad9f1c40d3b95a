//! `convapi backup FILE`: a consistent copy of the database, safe to take while `serve` runs (the
//! copy itself is `store::export::backup`). Owns what happens around it: refusing to overwrite,
//! writing beside FILE first so that FILE is either absent, the old file, or the whole new copy,
//! and that file readable by its owner only (mode 0600: it holds the personal data and the sealed
//! credentials), made so before SQLite writes a byte into it.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::{open, print, CliError, CliResult};
use crate::store;
use crate::store::engine::Location;

#[derive(clap::Args)]
pub(super) struct BackupArgs {
    /// Where to write the copy; must not exist unless --force.
    file: PathBuf,
    /// Replace FILE if it exists.
    #[arg(long)]
    force: bool,
    /// Print {file, pages, pageSize, bytes, restarts} as JSON.
    #[arg(long)]
    json: bool,
}

/// `backup` copies a SQLite file; PostgreSQL has tools of its own.
fn on_postgres(db: &Location) -> CliError {
    format!(
        "backup copies a SQLite file, and {} is PostgreSQL: back it up with PostgreSQL's own \
         tools, e.g. pg_dump --format=custom --file=convapi.dump followed by the same URL (or \
         your provider's snapshots)",
        db.display()
    )
    .into()
}

pub(super) fn backup(db: &Location, a: BackupArgs) -> CliResult {
    let Location::File(path) = db else {
        return Err(on_postgres(db));
    };
    let dest = a.file;
    if same_file(path, &dest) {
        return Err(format!(
            "{} is the database itself; back up to another file",
            dest.display()
        )
        .into());
    }
    if !a.force && dest.exists() {
        return Err(format!("{} exists; use --force to replace it", dest.display()).into());
    }
    let store::engine::DbConn::Sqlite(src) = open(db)? else {
        return Err(on_postgres(db));
    };
    let mut partial = dest.clone().into_os_string();
    partial.push(format!(".partial-{}", std::process::id()));
    let partial = PathBuf::from(partial);
    // A leftover of an earlier run killed half-way would make the copy fail to open.
    let _ = std::fs::remove_file(&partial);
    // SQLite would make the file with the umask's mode; an empty file is an empty database to it.
    super::private_file(&partial)
        .map_err(|e| format!("backup to {}: {}: {e}", dest.display(), partial.display()))?;
    let done = match store::export::backup(&src, &partial) {
        Ok(done) => done,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(format!("backup to {}: {e}", dest.display()).into());
        }
    };
    drop(src);
    if let Err(e) = put_in_place(&partial, &dest, a.force) {
        let _ = std::fs::remove_file(&partial);
        return Err(e);
    }
    print(
        a.json,
        &json!({
            "file": dest.display().to_string(),
            "pages": done.pages,
            "pageSize": done.page_size,
            "bytes": done.bytes,
            "restarts": done.restarts,
        }),
        || {
            let mut text = format!(
                "wrote {}: {} of {} bytes, {} bytes",
                dest.display(),
                super::count(done.pages as usize, "page", "pages"),
                done.page_size,
                done.bytes
            );
            // The copy's destination credentials open only with the key beside the database.
            let key = PathBuf::from(format!("{}.key", path.display()));
            if key.exists() {
                text.push_str(&format!(
                    "\nits destination credentials are sealed with the key in {}: back that file up too, apart from the copy",
                    key.display()
                ));
            }
            text
        },
    )
}

/// Moves the finished copy to `dest`. Without `force` through a hard link, which fails if `dest`
/// appeared meanwhile instead of replacing it.
fn put_in_place(partial: &Path, dest: &Path, force: bool) -> CliResult {
    let fail = |e: std::io::Error| format!("{}: {e}", dest.display());
    if force {
        std::fs::rename(partial, dest).map_err(fail)?;
    } else {
        match std::fs::hard_link(partial, dest) {
            Ok(()) => std::fs::remove_file(partial).map_err(fail)?,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                return Err(format!("{} exists; use --force to replace it", dest.display()).into())
            }
            // A file system without hard links: the check before the copy has to do.
            Err(_) if !dest.exists() => std::fs::rename(partial, dest).map_err(fail)?,
            Err(e) => return Err(fail(e).into()),
        }
    }
    // The new name must survive a crash as well as the bytes (which SQLite synced).
    if let Some(dir) = dest.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// Whether both paths name one existing file.
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}
