//! The binary's errors: [`UserError`] (bad input, an infeasible workload)
//! and the exit code every error maps to. Every module of the binary
//! reports user errors through it, so it sits below them all.

/// An error the user caused (bad input, infeasible workload): exit code 2.
#[derive(Debug)]
pub struct UserError(pub String);

impl std::fmt::Display for UserError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UserError {}

/// Exit code for an error: 2 for input / plan / infeasibility errors, else 1.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    let user = e.chain().any(|c| {
        c.is::<UserError>()
            || c.is::<sim::error::SpecError>()
            || c.is::<sim::error::PlanError>()
            || c.is::<clap::Error>()
    });
    if user {
        2
    } else {
        1
    }
}
