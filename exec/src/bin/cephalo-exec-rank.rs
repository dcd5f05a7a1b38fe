//! One MPI rank of a cephalo training job: `mpirun -n N cephalo-exec-rank`
//! (started by `exec::launch`). Rank 0 reads the job on its standard input
//! and writes the report on its standard output; a failing rank aborts the
//! whole job. Arguments are ignored (a caller may tag its processes with
//! them).

use std::process::ExitCode;

fn main() -> ExitCode {
    match exec::rank_main() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cephalo-exec-rank: {e}");
            ExitCode::from(1)
        }
    }
}
