//! Standard output that never panics: everything a command prints goes
//! through [`emit`] (the `out!` / `outln!` macros). A closed stdout (`|
//! head`) ends the command quietly with exit 0 ([`ClosedStdout`]); any other
//! write failure (a full disk behind a redirect) is an error that names
//! stdout (exit 1), where `print!` would panic.

use std::io::Write;

/// The reader of stdout went away (a broken pipe): stop quietly.
#[derive(Debug, Clone, Copy)]
pub struct ClosedStdout;

impl std::fmt::Display for ClosedStdout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stdout was closed")
    }
}

impl std::error::Error for ClosedStdout {}

/// Writes `text` to stdout and flushes it.
pub fn emit(text: &str) -> anyhow::Result<()> {
    let mut o = std::io::stdout().lock();
    match o.write_all(text.as_bytes()).and_then(|_| o.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Err(ClosedStdout.into()),
        Err(e) => Err(anyhow::anyhow!("cannot write to stdout: {e}")),
    }
}

/// `print!` through [`emit`]; returns early with its error.
macro_rules! out {
    ($($t:tt)*) => {
        $crate::out::emit(&format!($($t)*))?
    };
}

/// `println!` through [`emit`]; returns early with its error.
macro_rules! outln {
    () => {
        $crate::out::emit("\n")?
    };
    ($($t:tt)*) => {
        $crate::out::emit(&format!("{}\n", format_args!($($t)*)))?
    };
}

/// Checks before any long work that `path` can be written as the `what`
/// output (`--csv`, `--out`, ...): its directory exists and accepts a new
/// file, and `path` is not a directory. Errors name the flag and the path.
pub fn check_writable(path: &std::path::Path, what: &str) -> anyhow::Result<()> {
    let bad = |why: String| -> anyhow::Result<()> {
        Err(crate::cli::UserError(format!("{}: cannot write {what}: {why}", path.display())).into())
    };
    if path.is_dir() {
        return bad("it is a directory".into());
    }
    let dir = match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(d) => d.to_path_buf(),
        None => std::path::PathBuf::from("."),
    };
    if !dir.is_dir() {
        return bad(format!("directory {} does not exist", dir.display()));
    }
    let probe = temp_beside(path);
    match std::fs::File::create(&probe) {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => bad(e.to_string()),
    }
}

/// A temporary name in `path`'s directory (same file system: the rename
/// that publishes it is atomic).
fn temp_beside(path: &std::path::Path) -> std::path::PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

/// Writes `text` to `path` atomically (a temporary file beside it, then a
/// rename): after a failure (a full disk) no partial `path` is left and an
/// existing one is untouched. `what` names the output in errors.
pub fn write_atomic(path: &std::path::Path, text: &str, what: &str) -> anyhow::Result<()> {
    let tmp = temp_beside(path);
    let result = (|| -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow::anyhow!("{}: cannot write {what}: {e}", path.display())
    })
}
