//! The errors of real execution, one enum every module of `exec` reports
//! through.

/// Errors of real execution.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// The binary was built without the features real execution needs.
    #[error("real execution is not compiled in: rebuild with `--features exec` (see README)")]
    NotCompiled,
    /// A job or profile request is malformed (rejected before any work).
    #[error("invalid job: {field}: {message}")]
    InvalidJob {
        /// Field path, e.g. `plan[2].state_fraction`.
        field: String,
        /// What was expected and what was found.
        message: String,
    },
    /// libtorch reported an error.
    #[error("libtorch: {0}")]
    Torch(String),
    /// A collective failed or was called with inconsistent buffers.
    #[error("collective: {0}")]
    Comm(String),
    /// The requested device is not available.
    #[error("device: {0}")]
    NoDevice(String),
    /// Reading or writing a job/report file failed.
    #[error("i/o: {0}")]
    Io(String),
    /// `mpirun` could not be started.
    #[error("launch: {0}")]
    Launch(String),
    /// A rank died or failed; the whole job was ended.
    #[error(
        "a rank failed (mpirun exit status {status} after {secs:.1} s): {cause}\nlast output:\n{detail}"
    )]
    RankFailed {
        /// mpirun's exit status.
        status: i32,
        /// The most telling line of the ranks' output (a rank's error, a
        /// panic, or mpirun's note of a rank's exit or signal).
        cause: String,
        /// Seconds from launch to the end of the job.
        secs: f64,
        /// Tail of the ranks' output.
        detail: String,
    },
    /// The job ran past its wall-clock limit and was killed.
    #[error("the job ran past its {secs:.0} s limit and was killed; last output:\n{detail}")]
    Timeout {
        /// The limit (s).
        secs: f64,
        /// Tail of the ranks' output.
        detail: String,
    },
}
