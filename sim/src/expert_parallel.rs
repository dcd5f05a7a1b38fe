//! Expert parallelism (EP) as Megatron-Core runs it
//! (`megatron/core/parallel_state.py`, `transformer/moe/token_dispatcher.py`;
//! REAL-SYSTEMS-3 sections 1.4 and 1.7), on a stage of `d` data-parallel
//! replicas of TP degree `t`:
//!
//! * **Groups.** The routed experts of every MoE block are split over `e`
//!   consecutive replicas (EP inside the data-parallel dimension, after TP:
//!   Megatron's `tp-cp-ep-dp-pp` order), each holding `E / e` experts,
//!   each expert split over its TP group (expert-tensor parallelism = TP,
//!   Megatron's default), or whole on each GPU (expert-TP 1,
//!   `--expert-tensor-parallel-size 1`, Megatron's advice for fine-grained
//!   experts: the EP groups then take TP ranks too, MoE Parallel Folding).
//!   The expert grid orders a stage's GPUs expert-TP fastest, then EP,
//!   then expert data parallelism ([`ep_indices`]): under expert-TP = TP,
//!   TP rank `i` of replica `j` exchanges tokens with TP rank `i` of the
//!   other replicas of its block of `e`; the expert gradients are reduced
//!   over the GPUs holding the same expert slice (the expert-data-parallel
//!   group, strided by `t_e e`: [`edp_indices`]), the dense ones over all
//!   `d` replicas.
//! * **Token dispatch** (the `alltoall` dispatcher): per MoE block and
//!   micro-batch, the forward permutes each token's `k` copies by
//!   destination, sends them by all-to-all over the EP group (with the
//!   routing probabilities, `k` fp32 values per token), gathers the
//!   received copies over the expert-TP group (all-gather, none with whole
//!   experts), runs the local
//!   experts, reduce-scatters over expert-TP, and combines by the reverse
//!   all-to-all; the backward runs the transposes (two all-to-alls, an
//!   all-gather and a reduce-scatter). Each rank sends `k T_r` copies of
//!   `h` elements, `T_r` its tokens (`T / t` with sequence parallelism,
//!   which Megatron asserts with EP and TP): [`block_collectives`]. Every
//!   exchange is on the critical path (Megatron's default: no
//!   `--overlap-moe-expert-parallel-comm`, no shared-expert overlap).
//! * **Routing is balanced**: every rank receives `k T_r` copies (the
//!   expected load under uniform routing; an imbalanced router makes the
//!   busiest rank set the pace, not modelled here), and the replicas of an
//!   EP group wait for the slowest at every exchange.
//! * **Compute**: each rank runs `E / e` expert GEMMs of `k T e t_e / (E
//!   t)` rows (`T` its replica's tokens), `1 / t_e` of each expert's
//!   columns: the same FLOPs as without EP, in fewer, taller GEMMs
//!   ([`crate::perfmodel::work`]).
//! * **Memory**: `E / e` experts per rank (each over `t_e`), their state
//!   sharded over the expert-data-parallel group
//!   ([`crate::plan::pipeline::expert_width`]).
//!
//! Supported: the data-parallel reductions after the last backward
//! (replicas or the distributed optimizer, `none` / `grad-op`, no
//! `--overlap-grad-reduce`), the rest refused by [`check`].

use crate::comm::CollectiveKind;
use crate::error::PlanError;
use crate::experts::Dispatcher;
use crate::model::ModelSpec;
use crate::plan::pipeline::{Pipeline, Stage};
use crate::precision::NumFormat;
use crate::strategy::{Sharding, Strategy};
use crate::tensor::{Pass, TensorParallel};

/// Which group an EP collective runs over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    /// The dispatch group ([`dispatch_group`]): the EP group for the
    /// all-to-alls, expert-TP x EP for the all-gather dispatcher.
    Experts,
    /// The expert-TP group (the replica's TP group): the gather of the
    /// received copies and its reduce-scatter.
    Tensor,
}

/// One EP collective of a MoE block on a micro-batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpCollective {
    /// Its pass.
    pub pass: Pass,
    /// Its kind.
    pub kind: CollectiveKind,
    /// Each rank's piece, bytes (an all-to-all's send buffer, an
    /// all-gather's contribution).
    pub piece_bytes: f64,
    /// The group it runs over.
    pub over: Over,
}

/// Megatron-Core's expert grid over a stage of `n` GPUs (stage index `q`,
/// TP fastest, then the replicas): expert-TP fastest (`q mod t_e`), then
/// EP (`(q / t_e) mod e`), then expert data parallelism (`q / (t_e e)`)
/// (`parallel_state.py`'s `tp-ep-dp` expert order).
///
/// The stage indices of `q`'s EP group: its expert-TP and
/// expert-data-parallel positions, every EP position, in order.
pub fn ep_indices(n: usize, te: u32, e: u32, q: usize) -> Vec<usize> {
    let (te, e) = (te.max(1) as usize, e.max(1) as usize);
    let base = q / (te * e) * te * e + q % te;
    (0..e).map(|x| base + x * te).filter(|&i| i < n).collect()
}

/// The stage indices of every expert-data-parallel group of a stage of `n`
/// GPUs: per expert-TP and EP position, the GPUs holding the same expert
/// slice (strided by `t_e e`), which reduce its gradients.
pub fn edp_indices(n: usize, te: u32, e: u32) -> Vec<Vec<usize>> {
    let (te, e) = (te.max(1) as usize, e.max(1) as usize);
    let stride = te * e;
    (0..stride.min(n))
        .map(|x| (x..n).step_by(stride).collect())
        .collect()
}

/// The EP group of TP rank `i` of replica `j` of `st` under `tp` (ranks).
pub fn ep_group(st: &Stage, tp: &TensorParallel, j: usize, i: usize) -> Vec<usize> {
    let t = st.tp.max(1) as usize;
    ep_indices(st.gpus.len(), tp.expert_tensor, tp.experts, j * t + i)
        .into_iter()
        .map(|q| st.gpus[q] as usize)
        .collect()
}

/// The stage indices (of a stage of `n` GPUs) of the group stage index `q`
/// dispatches its tokens over under `tp`: its EP group ([`ep_indices`])
/// for all-to-all, the run of `t_e e` GPUs its expert-TP x EP group spans
/// for the all-gather dispatcher (Megatron's `tp_ep_group`).
pub fn dispatch_indices(n: usize, tp: &TensorParallel, q: usize) -> Vec<usize> {
    match tp.dispatcher {
        Dispatcher::AllToAll => ep_indices(n, tp.expert_tensor, tp.experts, q),
        Dispatcher::AllGather => {
            let span = (tp.expert_tensor.max(1) * tp.experts.max(1)) as usize;
            let start = q / span * span;
            (start..(start + span).min(n)).collect()
        }
    }
}

/// The group replica `j` of `st` dispatches over under `tp`, from its
/// first TP rank ([`dispatch_indices`]; ranks).
pub fn dispatch_group(st: &Stage, tp: &TensorParallel, j: usize) -> Vec<usize> {
    dispatch_indices(st.gpus.len(), tp, j * st.tp.max(1) as usize)
        .into_iter()
        .map(|q| st.gpus[q] as usize)
        .collect()
}

/// The expert-data-parallel groups of `st` under `tp` (ranks).
pub fn edp_groups(st: &Stage, tp: &TensorParallel) -> Vec<Vec<usize>> {
    edp_indices(st.gpus.len(), tp.expert_tensor, tp.experts)
        .into_iter()
        .map(|g| g.into_iter().map(|q| st.gpus[q] as usize).collect())
        .collect()
}

/// The EP collectives of one MoE block on a replica's micro-batch slice of
/// `tokens` tokens in `dtype` (module docs); empty without EP or without
/// experts in every block. Forward: dispatch all-to-all (the copies and
/// their fp32 probabilities), with expert-TP the gather and the
/// reduce-scatter of the received copies, combine all-to-all; backward:
/// their transposes.
pub fn block_collectives(
    tp: &TensorParallel,
    model: &ModelSpec,
    tokens: f64,
    dtype: NumFormat,
) -> Vec<EpCollective> {
    let Some(moe) = model.uniform_moe().filter(|_| tp.experts > 1) else {
        return Vec::new();
    };
    let t = tp.degree.max(1) as f64;
    let own = if tp.sequence_parallel {
        tokens / t
    } else {
        tokens
    };
    let te = tp.priced_expert_tensor();
    // The busiest rank of the group receives (and returns) `load` times the
    // mean, and every exchange waits for it.
    let load = tp.expert_load(model, tokens);
    let copies = moe.top_k as f64 * load * own;
    let h = model.hidden as f64 * dtype.bytes();
    let c = |pass, kind, piece_bytes, over| EpCollective {
        pass,
        kind,
        piece_bytes,
        over,
    };
    use CollectiveKind::*;
    let mut v = Vec::new();
    if tp.dispatcher == Dispatcher::AllGather {
        // Megatron's all-gather dispatcher (REAL-SYSTEMS-3 §1.4's table):
        // every token of the expert-TP x EP group gathered with its
        // probabilities and routing map over the `E` experts (fp32 and
        // bool: 5 bytes per expert), the outputs reduce-scattered back;
        // the backward transposes both. Volume independent of `k` and of
        // the routing.
        let map = moe.experts as f64 * 5.0;
        for pass in [Pass::Forward, Pass::Backward] {
            let (first, second) = match pass {
                Pass::Forward => (AllGather, ReduceScatter),
                Pass::Backward => (ReduceScatter, AllGather),
            };
            let gather = if pass == Pass::Forward {
                own * (h + map)
            } else {
                own * h
            };
            v.push(c(pass, first, gather, Over::Experts));
            v.push(c(pass, second, own * h, Over::Experts));
        }
        return v;
    }
    for pass in [Pass::Forward, Pass::Backward] {
        v.push(c(pass, AllToAll, copies * (h + 4.0), Over::Experts));
        if te > 1 {
            let (first, second) = match pass {
                Pass::Forward => (AllGather, ReduceScatter),
                Pass::Backward => (ReduceScatter, AllGather),
            };
            v.push(c(pass, first, copies * h, Over::Tensor));
            v.push(c(pass, second, copies * h, Over::Tensor));
        }
        v.push(c(pass, AllToAll, copies * h, Over::Experts));
    }
    v
}

/// Time of `collectives` in `pass`, ms, each priced by `price` (kind,
/// piece bytes, group) and all on the critical path.
pub fn pass_ms(
    collectives: &[EpCollective],
    pass: Pass,
    mut price: impl FnMut(CollectiveKind, f64, Over) -> f64,
) -> f64 {
    collectives
        .iter()
        .filter(|c| c.pass == pass)
        .map(|c| price(c.kind, c.piece_bytes, c.over))
        .sum()
}

/// Whether `model` takes expert parallelism `e`: 1 always; above 1 a model
/// with experts in every block whose expert count `e` divides (the message
/// says why not).
pub fn check_degree(model: &ModelSpec, e: u32) -> Result<(), String> {
    if e <= 1 {
        return Ok(());
    }
    let Some(moe) = model.uniform_moe() else {
        return Err(format!(
            "{} has no experts in every block: expert parallelism (EP {e}) needs a mixture-of-experts model whose every block has experts; use --ep 1",
            model.name
        ));
    };
    if !moe.experts.is_multiple_of(e) {
        return Err(format!(
            "EP {e} does not divide the {} experts of {}: every rank holds an equal number of experts",
            moe.experts, model.name
        ));
    }
    Ok(())
}

/// Checks a pipeline's expert parallelism against the model and the
/// strategy (origin `origin`, field `pipeline.expert_parallel`): `e` at
/// least 1; above 1 only for a model with experts in every block, `e`
/// dividing the experts and every stage's replicas, sequence parallelism
/// wherever TP splits a stage (Megatron asserts it), and the reductions
/// the module supports.
pub fn check(
    pipe: &Pipeline,
    model: &ModelSpec,
    strategy: &Strategy,
    origin: &str,
) -> Result<(), PlanError> {
    let e = pipe.expert_parallel;
    let bad = |msg: String| Err(PlanError::invalid(origin, "pipeline.expert_parallel", msg));
    if e == 0 {
        return bad("expected an expert-parallel degree of at least 1, got 0".into());
    }
    if e == 1 && !pipe.moe_dispatcher.is_default() {
        return Err(PlanError::invalid(
            origin,
            "pipeline.moe_dispatcher",
            format!(
                "the {} dispatcher without expert parallelism: every GPU holds every expert and no token is dispatched; set an EP degree (--ep) or leave the dispatcher out",
                pipe.moe_dispatcher.name()
            ),
        ));
    }
    if e == 1 {
        return match pipe.expert_tensor_parallel {
            Some(te) if pipe.stages.iter().any(|st| st.tp != te) => Err(PlanError::invalid(
                origin,
                "pipeline.expert_tensor_parallel",
                format!("expert-TP {te} without expert parallelism: every GPU would hold whole experts its TP group splits; set an EP degree (--ep) or leave expert-TP at the TP degree"),
            )),
            _ => Ok(()),
        };
    }
    if let Err(msg) = check_degree(model, e) {
        return bad(msg);
    }
    for (s, st) in pipe.stages.iter().enumerate() {
        let te = pipe.expert_tensor_parallel.unwrap_or(st.tp);
        if te != 1 && te != st.tp {
            return Err(PlanError::invalid(
                origin,
                "pipeline.expert_tensor_parallel",
                format!(
                    "expected expert-TP 1 (whole experts) or stage {s}'s TP degree {}, got {te}",
                    st.tp
                ),
            ));
        }
        let n = st.gpus.len();
        if !n.is_multiple_of((te * e) as usize) {
            return bad(format!(
                "EP {e} x expert-TP {te} does not divide the {n} GPUs of stage {s} ({} replicas of TP {}): the EP groups are runs of {e} expert-TP groups",
                st.dp(),
                st.tp
            ));
        }
        if st.tp > 1 && !pipe.sequence_parallel {
            return bad(format!(
                "stage {s} has TP {} without sequence parallelism: Megatron-Core requires sequence parallelism with expert and tensor parallelism together (add --sequence-parallel)",
                st.tp
            ));
        }
    }
    match strategy.sharding {
        Sharding::NoShard | Sharding::GradOp => {}
        other => {
            return bad(format!(
                "EP {e} with sharding `{}`: expert parallelism is modelled with replicas (`none`) or the distributed optimizer (`grad-op`); FSDP's per-unit gathers of expert shards are not",
                other.name()
            ))
        }
    }
    if pipe.overlap_grad_reduce || pipe.overlap_param_gather {
        return bad(format!(
            "EP {e} with --overlap-grad-reduce / --overlap-param-gather: the bucketed reductions of expert gradients over the expert-data-parallel group are not modelled; leave them off"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::pipeline::expert_width;

    fn stage(replicas: usize, t: u32) -> Stage {
        let mut st = Stage::new(1, (0..replicas as u32 * t).collect());
        st.tp = t;
        st
    }

    #[test]
    fn groups_are_megatrons_ep_inside_dp_after_tp() {
        // 8 replicas of TP 2 (ranks 0..16), EP 4: TP rank 1 of replica 5
        // trades with TP rank 1 of replicas 4..8; its experts' gradients
        // reduce with replica 1 (5 mod 4).
        let st = stage(8, 2);
        let tp = TensorParallel::new(2, true).with_experts(4);
        assert_eq!(ep_group(&st, &tp, 5, 1), vec![9, 11, 13, 15]);
        let edp = edp_groups(&st, &tp);
        assert_eq!(edp.len(), 8, "one per TP rank and EP position");
        assert_eq!(edp[3], vec![3, 11], "TP rank 1, EP position 1");
        // Every rank sits in exactly one EDP group.
        let mut all: Vec<usize> = edp.concat();
        all.sort_unstable();
        assert_eq!(all, (0..16).collect::<Vec<_>>());
        // Whole experts (expert-TP 1): EP 4 over consecutive GPUs, TP
        // ranks included; the EDP groups strided by 4.
        let whole = tp.with_expert_tensor(1);
        assert_eq!(ep_group(&st, &whole, 5, 1), vec![8, 9, 10, 11]);
        let edp = edp_groups(&st, &whole);
        assert_eq!(edp.len(), 4);
        assert_eq!(edp[1], vec![1, 5, 9, 13]);
        assert_eq!(expert_width(Sharding::GradOp, 8, 4, 1), 2);
        assert_eq!(expert_width(Sharding::GradOp, 8, 4, 2), 4);
        assert_eq!(expert_width(Sharding::NoShard, 1, 4, 2), 1);
    }

    /// Megatron's all-gather dispatcher: the expert-TP x EP group's tokens
    /// with probabilities and routing map (5 bytes per expert) gathered,
    /// the outputs reduce-scattered, the backward transposed; the volume
    /// does not depend on `k` or the routing; the group is the run of
    /// `t_e e` GPUs.
    #[test]
    fn the_all_gather_dispatcher_gathers_every_token_of_its_group() {
        use crate::experts::Dispatcher;
        let m = crate::model::ModelCatalog::builtin()
            .lookup("mixtral-8x7b", "test")
            .unwrap();
        let tokens = 4096.0;
        let h2 = m.hidden as f64 * 2.0;
        let tp = TensorParallel::new(2, true)
            .with_experts(4)
            .with_dispatcher(Dispatcher::AllGather);
        let own = tokens / 2.0;
        let v = block_collectives(&tp, m, tokens, NumFormat::Bf16);
        let want = [
            (
                Pass::Forward,
                CollectiveKind::AllGather,
                own * (h2 + 5.0 * 8.0),
            ),
            (Pass::Forward, CollectiveKind::ReduceScatter, own * h2),
            (Pass::Backward, CollectiveKind::ReduceScatter, own * h2),
            (Pass::Backward, CollectiveKind::AllGather, own * h2),
        ];
        assert_eq!(v.len(), 4);
        for (c, (pass, kind, bytes)) in v.iter().zip(want) {
            assert_eq!(
                (c.pass, c.kind, c.piece_bytes, c.over),
                (pass, kind, bytes, Over::Experts)
            );
        }
        let skewed = m.clone().with_routing_imbalance(2.0).unwrap();
        assert_eq!(block_collectives(&tp, &skewed, tokens, NumFormat::Bf16), v);
        // Its group: the 2 x 4 GPUs of a run of 4 TP-2 replicas.
        assert_eq!(dispatch_indices(16, &tp, 10), (8..16).collect::<Vec<_>>());
        let a2a = tp.with_dispatcher(Dispatcher::AllToAll);
        assert_eq!(dispatch_indices(16, &a2a, 10), vec![8, 10, 12, 14]);
    }

    #[test]
    fn dispatch_volumes_are_k_copies_of_each_rank_tokens() {
        let catalog = crate::model::ModelCatalog::builtin();
        let routed = catalog.lookup("mixtral-8x7b", "test").unwrap();
        // Balanced to the copy (the statistical excess is checked below).
        let balanced = routed.clone().with_routing_imbalance(1.0).unwrap();
        let m = &balanced;
        let moe = m.uniform_moe().unwrap().clone();
        let tokens = 2.0 * 4096.0;
        let h2 = m.hidden as f64 * 2.0;
        // EP 8, TP 2 with SP: each rank sends k T / t copies.
        let tp = TensorParallel::new(2, true).with_experts(8);
        let v = block_collectives(&tp, m, tokens, NumFormat::Bf16);
        let copies = moe.top_k as f64 * tokens / 2.0;
        let a2a: Vec<f64> = v
            .iter()
            .filter(|c| c.kind == CollectiveKind::AllToAll)
            .map(|c| c.piece_bytes)
            .collect();
        assert_eq!(a2a.len(), 4, "dispatch and combine, each way");
        assert_eq!(a2a[0], copies * (h2 + 4.0));
        assert_eq!(a2a[1], copies * h2);
        // By default the busiest rank's share: a percent or so more.
        let load = tp.expert_load(routed, tokens);
        assert!(load > 1.0 && load < 1.05, "{load}");
        let busiest = block_collectives(&tp, routed, tokens, NumFormat::Bf16);
        assert!((busiest[0].piece_bytes / a2a[0] - load).abs() < 1e-12);
        let etp = v.iter().filter(|c| c.over == Over::Tensor).count();
        assert_eq!(etp, 4, "gather and reduce-scatter over expert-TP, each way");
        // Without EP, or on a dense model: nothing.
        assert!(
            block_collectives(&TensorParallel::new(2, true), m, tokens, NumFormat::Bf16).is_empty()
        );
        let dense = crate::model::ModelCatalog::builtin()
            .lookup("llama3-8b", "test")
            .unwrap();
        assert!(block_collectives(&tp, dense, tokens, NumFormat::Bf16).is_empty());
        // TP 1: the all-to-alls only, on every token of the replica.
        let ep = TensorParallel::NONE.with_experts(8);
        let v = block_collectives(&ep, m, tokens, NumFormat::Bf16);
        assert_eq!(v.len(), 4);
        assert_eq!(v[1].piece_bytes, moe.top_k as f64 * tokens * h2);
    }
}
