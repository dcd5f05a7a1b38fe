//! The binary's errors: [`UserError`] (bad input, an infeasible workload),
//! the library's field errors named by the flags that set the fields
//! ([`with_flags`]), and the exit code every error maps to. Every module of the binary
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

/// The flag that sets a field the library names (`seq_len` ->
/// `--seq-len`; the cluster's size, `nodes`, -> `--cluster`).
fn flag_of(field: &str) -> String {
    match field {
        "nodes" => "--cluster".into(),
        f => format!("--{}", f.replace('_', "-")),
    }
}

/// `e` with a library error about a workload or strategy field (origin
/// [`sim::error::WORKLOAD`] or [`sim::error::STRATEGY`]) given the flag
/// that set the field as its origin; any other error as it is.
pub fn with_flags(e: anyhow::Error) -> anyhow::Error {
    use sim::error::{PlanError, SpecError, STRATEGY, WORKLOAD};
    if e.chain().count() != 1 {
        return e;
    }
    let renamed = |s: &SpecError| match s {
        SpecError::Invalid {
            origin,
            field,
            message,
        } if origin == WORKLOAD || origin == STRATEGY => {
            Some(SpecError::invalid(flag_of(field), field, message))
        }
        _ => None,
    };
    if let Some(s) = e.downcast_ref::<SpecError>().and_then(renamed) {
        return s.into();
    }
    match e.downcast_ref::<PlanError>() {
        Some(PlanError::Spec(s)) => match renamed(s) {
            Some(s) => PlanError::Spec(s).into(),
            None => e,
        },
        Some(PlanError::Invalid {
            origin,
            field,
            message,
        }) if origin == WORKLOAD || origin == STRATEGY => {
            PlanError::invalid(flag_of(field), field, message).into()
        }
        _ => e,
    }
}
