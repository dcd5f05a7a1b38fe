//! One MPI rank of a cephalo training job: `mpirun -n N cephalo-exec-rank
//! --job JOB.json --report REPORT.json` (started by `exec::launch`).
//! Rank 0 writes the report; a failing rank aborts the whole job.

use std::process::ExitCode;

fn main() -> ExitCode {
    let (job, report) = match exec::launch::parse_rank_args(std::env::args().skip(1)) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match exec::rank_main(&job, &report) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cephalo-exec-rank: {e}");
            ExitCode::from(1)
        }
    }
}
