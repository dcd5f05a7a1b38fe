//! Everything the tool writes goes through here.
//!
//! Standard output never panics: everything a command prints goes through
//! [`emit`] (the `out!` / `outln!` macros). A closed stdout (`| head`) ends
//! the command quietly with exit 0 ([`ClosedStdout`]); any other write
//! failure (a full disk behind a redirect) is an error that names stdout
//! (exit 1), where `print!` would panic.
//!
//! Every output file (`--csv`, `--trace`, `plan --out`, `profile --out`,
//! `--save-profile`, `calibrate --out`, the files of `--report-dir` and of
//! experiment results, figures included) is written by [`write_file`] and
//! checked before the work by [`check_writable`]; output directories by
//! [`prepare_dir`]. An output path behaves as it does for Unix tools:
//!
//! * `-` is standard output;
//! * a character or block device, a FIFO or a socket is opened and written
//!   in place: never a temporary file, never a rename, so `/dev/null`,
//!   `/dev/full` or a named pipe stay what they are (a FIFO nobody reads is
//!   waited for up to [`FIFO_READER_WAIT`], then an error);
//! * a path naming an open descriptor (`/dev/stdout`, `/dev/stderr`,
//!   `/dev/fd/N`, `/proc/self/fd/N`) writes to that descriptor: to our own
//!   stdout or stderr when it is one of them, else opened in place and
//!   appended to;
//! * a symlink is followed: its final target is replaced atomically in the
//!   target's own directory and the link stays a link; a dangling link
//!   creates its target (as a shell's `>` does), in the directory the link
//!   points into, which must exist;
//! * a regular file is replaced atomically (a temporary beside it, then a
//!   rename): after a failure no partial file is left and the old one is
//!   untouched; the new file keeps the old one's permissions (and owner,
//!   where we may set it). A file we may not write is refused, not replaced
//!   behind its owner's back. (A hard link to the old file keeps the old
//!   contents, as after `sed -i`.)
//! * a directory is refused before any work.
//!
//! Problems found before the work (a directory, a missing or read-only
//! directory, a symlink loop) are user errors (exit 2); a write that fails
//! (`/dev/full`: no space left) is exit 1, naming the path and the OS error.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
    emit_bytes(text.as_bytes())
}

/// Writes `bytes` to stdout and flushes it ([`emit`] for any bytes).
fn emit_bytes(bytes: &[u8]) -> anyhow::Result<()> {
    let mut o = std::io::stdout().lock();
    match o.write_all(bytes).and_then(|_| o.flush()) {
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

/// How long a write to a FIFO waits for a process to open it for reading
/// (a reader started just after the tool, `cephalo ... --csv p & cat p`)
/// before it gives up: 10 s, so a FIFO nobody reads is an error, not a hang.
pub const FIFO_READER_WAIT: Duration = Duration::from_secs(10);

/// Most symlinks followed from one output path (Linux's own limit, ELOOP).
const MAX_LINKS: usize = 40;

/// Where an output path writes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Dest {
    /// This process's standard output (`-`, or a descriptor path that is it).
    Stdout,
    /// This process's standard error (a descriptor path that is it).
    Stderr,
    /// Opened and written in place: a device, a FIFO, or (with `append`) a
    /// regular file reached through a descriptor path.
    InPlace {
        /// The path as given (opening it follows its links).
        path: PathBuf,
        /// Append instead of writing from the start.
        append: bool,
        /// A FIFO: wait for its reader ([`FIFO_READER_WAIT`]).
        fifo: bool,
    },
    /// A Unix socket: connected to and written.
    Socket(PathBuf),
    /// A regular file (existing or new) replaced atomically: `target` is the
    /// final path, every symlink resolved.
    Replace {
        /// The file that is replaced or created.
        target: PathBuf,
    },
}

/// A user error about output `what` at `path` (exit 2).
fn refuse(path: &Path, what: &str, why: impl std::fmt::Display) -> anyhow::Error {
    crate::error::UserError(format!("{}: cannot write {what}: {why}", path.display())).into()
}

/// Whether `dir` is a process's descriptor directory (`/proc/<pid>/fd`,
/// which `/dev/fd` links to).
fn is_fd_dir(dir: &Path) -> bool {
    let Ok(real) = dir.canonicalize() else {
        return false;
    };
    let parts: Vec<_> = real.components().collect();
    parts.len() == 4
        && parts[1].as_os_str() == "proc"
        && parts[3].as_os_str() == "fd"
        && !parts[2].as_os_str().is_empty()
}

/// Where the link at `link` points (relative targets are relative to the
/// link's directory).
fn link_target(link: &Path) -> std::io::Result<PathBuf> {
    let t = std::fs::read_link(link)?;
    Ok(if t.is_absolute() {
        t
    } else {
        link.parent().unwrap_or(Path::new(".")).join(t)
    })
}

/// The symlink chain from `path`: `path`, then each link's target, up to
/// the first path that is not a symlink (or does not exist). Errors name
/// the output: a link that cannot be read, or more than [`MAX_LINKS`].
fn link_chain(path: &Path, what: &str) -> anyhow::Result<Vec<PathBuf>> {
    let mut chain = vec![path.to_path_buf()];
    while chain.len() <= MAX_LINKS {
        let p = chain.last().expect("the chain starts at path");
        match std::fs::symlink_metadata(p) {
            Ok(m) if m.file_type().is_symlink() => {
                let next = link_target(p).map_err(|e| refuse(path, what, e))?;
                chain.push(next);
            }
            Ok(_) => return Ok(chain),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(chain),
            Err(e) => return Err(refuse(path, what, e)),
        }
    }
    Err(refuse(
        path,
        what,
        format!("more than {MAX_LINKS} symlinks (a loop?)"),
    ))
}

/// Whether `path` or a link on its way names an open descriptor.
fn names_descriptor(path: &Path, what: &str) -> anyhow::Result<bool> {
    Ok(link_chain(path, what)?
        .iter()
        .any(|p| p.parent().is_some_and(is_fd_dir)))
}

/// Device and inode of one of our standard streams, if it is open.
#[allow(clippy::unnecessary_cast)] // `st_dev` / `st_ino` are not u64 on every target
fn stream_id(fd: impl rustix::fd::AsFd) -> Option<(u64, u64)> {
    rustix::fs::fstat(fd)
        .ok()
        .map(|s| (s.st_dev as u64, s.st_ino as u64))
}

/// Resolves an output path without writing anything.
fn resolve(path: &Path, what: &str) -> anyhow::Result<Dest> {
    if path.as_os_str() == "-" {
        return Ok(Dest::Stdout);
    }
    match std::fs::metadata(path) {
        Ok(md) => {
            let ft = md.file_type();
            if md.is_dir() {
                return Err(refuse(path, what, "it is a directory"));
            }
            let descriptor = names_descriptor(path, what)?;
            if descriptor {
                let id = (md.dev(), md.ino());
                if stream_id(std::io::stdout()) == Some(id) {
                    return Ok(Dest::Stdout);
                }
                if stream_id(std::io::stderr()) == Some(id) {
                    return Ok(Dest::Stderr);
                }
            }
            if ft.is_socket() {
                return Ok(Dest::Socket(path.to_path_buf()));
            }
            if ft.is_char_device() || ft.is_block_device() || ft.is_fifo() {
                return Ok(Dest::InPlace {
                    path: path.to_path_buf(),
                    append: false,
                    fifo: ft.is_fifo(),
                });
            }
            if descriptor {
                return Ok(Dest::InPlace {
                    path: path.to_path_buf(),
                    append: true,
                    fifo: false,
                });
            }
            let target = path.canonicalize().map_err(|e| refuse(path, what, e))?;
            Ok(Dest::Replace { target })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let link = std::fs::symlink_metadata(path)
                .map(|m| m.file_type().is_symlink())
                .unwrap_or(false);
            let target = if link {
                link_chain(path, what)?
                    .pop()
                    .expect("the chain starts at path")
            } else {
                path.to_path_buf()
            };
            Ok(Dest::Replace { target })
        }
        Err(e) if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) => {
            Err(refuse(path, what, "its symlinks form a loop"))
        }
        Err(e) => Err(refuse(path, what, e)),
    }
}

/// The directory a replaced file lives in.
fn dir_of(target: &Path) -> PathBuf {
    match target.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(d) => d.to_path_buf(),
        None => PathBuf::from("."),
    }
}

/// A fresh temporary name in `target`'s directory (same file system: the
/// rename that publishes it is atomic).
fn temp_beside(target: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "out".into());
    dir_of(target).join(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// Whether `dir` accepts a new file: a temporary one is created in it and
/// removed.
fn probe(dir: &Path) -> std::io::Result<()> {
    let p = temp_beside(&dir.join("probe"));
    OpenOptions::new().write(true).create_new(true).open(&p)?;
    let _ = std::fs::remove_file(&p);
    Ok(())
}

/// Checks before any long work that `path` can be written as the `what`
/// output (`--csv`, `--out`, ...), as [`write_file`] will write it: not a
/// directory, no symlink loop; a file to replace or create has an existing
/// directory that accepts a new file, and an existing file is one we may
/// write; a device or FIFO is one we may write. Writes nothing (a probe file
/// in the target's directory is created and removed). Errors name the
/// output and the path (exit 2).
pub fn check_writable(path: &Path, what: &str) -> anyhow::Result<()> {
    match resolve(path, what)? {
        Dest::Stdout | Dest::Stderr => Ok(()),
        Dest::InPlace { path: p, .. } | Dest::Socket(p) => {
            rustix::fs::access(&p, rustix::fs::Access::WRITE_OK)
                .map_err(|e| refuse(path, what, std::io::Error::from(e)))
        }
        Dest::Replace { target } => {
            let dir = dir_of(&target);
            if !dir.is_dir() {
                return Err(refuse(
                    path,
                    what,
                    format!("directory {} does not exist", dir.display()),
                ));
            }
            if target.exists() {
                rustix::fs::access(&target, rustix::fs::Access::WRITE_OK).map_err(|e| {
                    refuse(
                        path,
                        what,
                        format!(
                            "{} is not writable ({}); it is not replaced behind its owner's back",
                            target.display(),
                            std::io::Error::from(e)
                        ),
                    )
                })?;
            }
            probe(&dir).map_err(|e| {
                refuse(
                    path,
                    what,
                    format!("cannot create a file in {}: {e}", dir.display()),
                )
            })
        }
    }
}

/// Whether `path` is an existing regular file that writing it would
/// replace (`calibrate` asks for `--force` then): not `-`, a device, a FIFO,
/// a socket or a descriptor path.
pub fn replaces_existing_file(path: &Path, what: &str) -> anyhow::Result<bool> {
    Ok(match resolve(path, what)? {
        Dest::Replace { target } => target.is_file(),
        _ => false,
    })
}

/// Writes `bytes` to the output `path` as the module says (`-`, devices,
/// FIFOs and sockets in place; symlinks followed; regular files replaced
/// atomically). `what` names the output in errors: a path that cannot be
/// written at all is exit 2, a write that fails is exit 1 with the OS error.
pub fn write_file(path: &Path, bytes: &[u8], what: &str) -> anyhow::Result<()> {
    let io_err =
        |e: std::io::Error| anyhow::anyhow!("{}: cannot write {what}: {e}", path.display());
    match resolve(path, what)? {
        Dest::Stdout => emit_bytes(bytes),
        Dest::Stderr => {
            let mut e = std::io::stderr().lock();
            e.write_all(bytes).and_then(|_| e.flush()).map_err(io_err)
        }
        Dest::Socket(p) => {
            let mut s = std::os::unix::net::UnixStream::connect(&p).map_err(io_err)?;
            s.write_all(bytes).and_then(|_| s.flush()).map_err(io_err)
        }
        Dest::InPlace {
            path: p,
            append,
            fifo,
        } => {
            let mut f = if fifo {
                open_fifo(&p).map_err(|e| match e {
                    FifoError::NoReader => anyhow::anyhow!(
                        "{}: cannot write {what}: no process opened the FIFO for reading within {} s",
                        path.display(),
                        FIFO_READER_WAIT.as_secs()
                    ),
                    FifoError::Io(e) => io_err(e),
                })?
            } else {
                OpenOptions::new()
                    .write(true)
                    .append(append)
                    .open(&p)
                    .map_err(io_err)?
            };
            f.write_all(bytes).and_then(|_| f.flush()).map_err(io_err)
        }
        Dest::Replace { target } => replace(&target, bytes).map_err(io_err),
    }
}

/// [`write_file`] for text.
pub fn write_text(path: &Path, text: &str, what: &str) -> anyhow::Result<()> {
    write_file(path, text.as_bytes(), what)
}

/// Why a FIFO could not be opened for writing.
enum FifoError {
    /// Nobody opened it for reading within [`FIFO_READER_WAIT`].
    NoReader,
    /// Any other failure.
    Io(std::io::Error),
}

/// Opens a FIFO for writing, waiting up to [`FIFO_READER_WAIT`] for a
/// reader (a non-blocking open fails with ENXIO while there is none), then
/// makes it blocking again so a slow reader is waited for, as by any tool.
fn open_fifo(path: &Path) -> Result<File, FifoError> {
    let start = Instant::now();
    loop {
        match OpenOptions::new()
            .write(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(path)
        {
            Ok(f) => {
                let flags = rustix::fs::fcntl_getfl(&f).map_err(|e| FifoError::Io(e.into()))?;
                rustix::fs::fcntl_setfl(&f, flags - rustix::fs::OFlags::NONBLOCK)
                    .map_err(|e| FifoError::Io(e.into()))?;
                return Ok(f);
            }
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::NXIO.raw_os_error()) => {
                if start.elapsed() >= FIFO_READER_WAIT {
                    return Err(FifoError::NoReader);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(FifoError::Io(e)),
        }
    }
}

/// Replaces (or creates) the regular file `target` atomically: a temporary
/// beside it with the old file's permissions and owner, synced, renamed
/// over it. On failure the temporary is removed and `target` is untouched.
fn replace(target: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let old = std::fs::metadata(target).ok().filter(|m| m.is_file());
    let tmp = temp_beside(target);
    let result = (|| -> std::io::Result<()> {
        let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        if let Some(m) = &old {
            f.set_permissions(std::fs::Permissions::from_mode(m.mode() & 0o7777))?;
            // Only root may give a file away; anyone else keeps their own.
            let _ = std::os::unix::fs::fchown(&f, Some(m.uid()), Some(m.gid()));
        }
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, target)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Makes sure the output directory `dir` (experiment results, calibration
/// report) exists and accepts files, creating it when missing; `-` and a
/// path that is not a directory are refused (exit 2), naming the flag.
pub fn prepare_dir(dir: &Path, what: &str) -> anyhow::Result<()> {
    if dir.as_os_str() == "-" {
        return Err(refuse(
            dir,
            what,
            "it holds several files, so `-` (standard output) cannot stand for it; give a directory",
        ));
    }
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(refuse(dir, what, "it exists and is not a directory")),
        Err(_) => std::fs::create_dir_all(dir)
            .map_err(|e| refuse(dir, what, format!("cannot create the directory: {e}")))?,
    }
    probe(dir).map_err(|e| refuse(dir, what, format!("cannot create a file in it: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mkfifo(path: &Path) {
        rustix::fs::mknodat(
            rustix::fs::CWD,
            path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
    }

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("cephalo-out-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn resolution_by_kind() {
        let d = tmp("resolve");
        assert_eq!(resolve(Path::new("-"), "x").unwrap(), Dest::Stdout);
        assert!(resolve(&d, "x").is_err());
        let f = d.join("f.csv");
        std::fs::write(&f, "a").unwrap();
        let real = f.canonicalize().unwrap();
        assert_eq!(
            resolve(&f, "x").unwrap(),
            Dest::Replace {
                target: real.clone()
            }
        );
        let l = d.join("l.csv");
        std::os::unix::fs::symlink("f.csv", &l).unwrap();
        assert_eq!(resolve(&l, "x").unwrap(), Dest::Replace { target: real });
        let dl = d.join("dangling.csv");
        std::os::unix::fs::symlink("sub/../new.csv", &dl).unwrap();
        assert_eq!(
            resolve(&dl, "x").unwrap(),
            Dest::Replace {
                target: d.join("sub/../new.csv")
            }
        );
        let (a, b) = (d.join("a"), d.join("b"));
        std::os::unix::fs::symlink(&b, &a).unwrap();
        std::os::unix::fs::symlink(&a, &b).unwrap();
        let e = resolve(&a, "x").unwrap_err().to_string();
        assert!(e.contains("loop") || e.contains("symlinks"), "{e}");
        let fifo = d.join("p");
        mkfifo(&fifo);
        assert!(matches!(
            resolve(&fifo, "x").unwrap(),
            Dest::InPlace { fifo: true, .. }
        ));
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn replacing_keeps_permissions_and_leaves_no_temporary() {
        let d = tmp("perm");
        let f = d.join("keep.csv");
        std::fs::write(&f, "old").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_text(&f, "new", "x").unwrap();
        assert_eq!(std::fs::read_to_string(&f).unwrap(), "new");
        assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o777, 0o640);
        let left: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_fifo_nobody_reads_is_not_opened_blocking() {
        // The non-blocking open fails at once without a reader (what the
        // bounded wait relies on), and succeeds with one.
        let d = tmp("fifo");
        let fifo = d.join("p");
        mkfifo(&fifo);
        let e = OpenOptions::new()
            .write(true)
            .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
            .open(&fifo)
            .unwrap_err();
        assert_eq!(
            e.raw_os_error(),
            Some(rustix::io::Errno::NXIO.raw_os_error())
        );
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
        };
        write_text(&fifo, "through the pipe", "x").unwrap();
        assert_eq!(reader.join().unwrap(), "through the pipe");
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
        let _ = std::fs::remove_dir_all(&d);
    }
}
