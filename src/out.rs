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
