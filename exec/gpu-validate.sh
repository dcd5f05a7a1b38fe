#!/usr/bin/env bash
# Prepared GPU check (one run on a CUDA machine, e.g. an H200 with PyTorch
# 2.11 preinstalled and no network): build with the `cuda` feature against
# the preinstalled libtorch, profile GPT and LLaMA blocks (fp16 and bf16,
# seq 512 and 1024, micro-batch 1..16) into $OUT (default
# profiles/measured/), and validate a single-rank plan with gradient
# accumulation, then validate every data-parallel strategy on 2 ranks, then
# tensor and pipeline parallelism (TP 2, PP 2 under GPipe, 1F1B and
# interleaved 1F1B, TP 2 with sequence parallelism) on 2 ranks and, with 4
# or more GPUs, TP 2 x PP 2; then (issue 42) the eager block at 512-8192
# tokens against the performance model's parts. The JSON of every validation goes to
# $OUT/validate/gpu-*.json, beside the CPU runs the validation study reads.
# Prints one summary line per step; everything else goes to
# $OUT/gpu-validate.log. Not run by CI (no GPU there).
#
#     bash exec/gpu-validate.sh            # from the repository root
#
# Environment: OUT (output folder), MODELS (default "gpt-2.7b llama-3b"),
# SEQS (default "512 1024"), DTYPES (default "bf16 fp16"), TARGET_DIR,
# GPU_NAME (the catalog entry of the device, default h100-sxm).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-profiles/measured}"
MODELS="${MODELS:-gpt-2.7b llama-3b}"
SEQS="${SEQS:-512 1024}"
DTYPES="${DTYPES:-bf16 fp16}"
export CARGO_TARGET_DIR="${TARGET_DIR:-target}"
mkdir -p "$OUT" "$OUT/validate"
LOG="$OUT/gpu-validate.log"
: >"$LOG"

. scripts/exec-env.sh >>"$LOG" 2>&1 || { echo "exec-env failed (see $LOG)"; exit 1; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee -a "$LOG"
if ! cargo build --release --features cuda >>"$LOG" 2>&1; then
    echo "build with --features cuda failed (see $LOG)"; exit 1
fi
C="$CARGO_TARGET_DIR/release/cephalo"
GPU="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
echo "device: $GPU" | tee -a "$LOG"

for m in $MODELS; do
    for s in $SEQS; do
        for d in $DTYPES; do
            f="$OUT/$(echo "$GPU" | tr 'A-Z ' 'a-z-')-$m-seq$s-$d.json"
            t0=$(date +%s)
            if $C profile --model "$m" --seq-len "$s" --dtype "$d" --device cuda \
                --batch-sizes 1,2,3,4,5,6,7,8,10,12,14,16 --warmup 2 --repetitions 5 \
                --out "$f" >>"$LOG" 2>&1; then
                echo "profile $m seq $s $d: $f ($(( $(date +%s) - t0 )) s)"
            else
                echo "profile $m seq $s $d: FAILED (see $LOG)"
            fi
        done
    done
done

# Single-rank validation with gradient accumulation (4 micro-batches of 4),
# from the first profile measured above.
m="${MODELS%% *}"; s="${SEQS%% *}"; d="${DTYPES%% *}"
f="$OUT/$(echo "$GPU" | tr 'A-Z ' 'a-z-')-$m-seq$s-$d.json"
$C validate --model "$m" --seq-len "$s" --dtype "$d" --device cuda --ranks 1 \
    --global-batch 16 --batch 16 --microbatches 4 --iterations 5 --warmup 2 \
    --profile "$f" --format json >"$OUT/validate/gpu-1rank-$m-seq$s-$d.json" 2>>"$LOG" \
    && python3 - "$OUT/validate/gpu-1rank-$m-seq$s-$d.json" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))
r = o["ranks"][0]
print("validate %s seq %s %s (1 rank, 4 x 4): predicted %.1f ms, measured %.1f ms, error %+.1f%%; peak GiB predicted %.2f measured %s"
      % (o["model"], o["seq_len"], o["dtype"], o["predicted_iteration_ms"], o["measured_iteration_ms"],
         100 * o["iteration_error_rel"], r["peak_mem_gib"]["predicted"], r["peak_mem_gib"]["measured"]))
PY

# Every data-parallel strategy on CUDA in one go: 2 ranks (sharing the GPU
# when there is one: completion and per-rank numbers, not a timing claim),
# 8 samples as 3 + 5 in 1 + 2 micro-batches, the same profile.
for strat in \
    "layered-full|--accumulation layered --checkpointing full" \
    "no-sync-none|--accumulation no-sync --checkpointing none" \
    "sync-full|--accumulation sync --checkpointing full" \
    "grad-op|--sharding grad-op" \
    "ddp|--sharding none" \
    "hybrid|--sharding hybrid --shard-group 1" \
    "every-2|--checkpointing every:2" \
    "offload-optimizer|--offload optimizer" \
    "bf16-gathers|--param-dtype bf16"; do
    name="${strat%%|*}"; flags="${strat#*|}"
    o="$OUT/validate/gpu-strategy-$name.json"
    # shellcheck disable=SC2086
    if $C validate --model "$m" --seq-len "$s" --dtype "$d" --device cuda --ranks 2 \
        --global-batch 8 --iterations 3 --warmup 1 --profile "$f" $flags \
        --format json >"$o" 2>>"$LOG"; then
        python3 - "$o" "$name" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))
print("strategy %s: predicted %.1f ms, measured %.1f ms, error %+.1f%%"
      % (sys.argv[2], o["predicted_iteration_ms"], o["measured_iteration_ms"], 100 * o["iteration_error_rel"]))
PY
    else
        echo "strategy $name: FAILED (see $LOG)"
    fi
done

# Tensor and pipeline parallelism on CUDA ranks (the same trainer and MPI
# collectives as on the CPU; 2 ranks share one GPU when there is only
# one): completion, per-group numbers and the prediction's error. The
# global batch gives every schedule 4 micro-batches per replica.
NGPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
shapes=(
    "tp2|2|--tp 2"
    "tp2-sp|2|--tp 2 --sequence-parallel"
    "pp2-gpipe|2|--pp 2 --pp-schedule gpipe --microbatch-size 2"
    "pp2-1f1b|2|--pp 2 --pp-schedule 1f1b --microbatch-size 2"
    "pp2-interleaved|2|--pp 2 --pp-schedule interleaved --virtual-stages 2 --microbatch-size 2"
)
if [ "$NGPU" -ge 4 ]; then
    shapes+=("tp2-pp2|4|--tp 2 --pp 2 --pp-schedule 1f1b --microbatch-size 2")
fi
for shape in "${shapes[@]}"; do
    name="${shape%%|*}"; rest="${shape#*|}"; ranks="${rest%%|*}"; flags="${rest#*|}"
    o="$OUT/validate/gpu-$name.json"
    # shellcheck disable=SC2086
    if $C validate --model "$m" --seq-len "$s" --dtype "$d" --device cuda --ranks "$ranks" \
        --global-batch 8 --iterations 3 --warmup 1 --profile "$f" $flags \
        --format json >"$o" 2>>"$LOG"; then
        python3 - "$o" "$name" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))
groups = "; ".join(
    "s%d r%d compute %.1f/%.1f bubble %.1f/%.1f" % (
        g["stage"], g["replica"], g["compute_ms"]["predicted"], g["compute_ms"]["measured"],
        g["bubble_ms"]["predicted"], g["bubble_ms"]["measured"])
    for g in o.get("groups", []))
print("3d %s: predicted %.1f ms, measured %.1f ms, error %+.1f%% (predicted/measured per group: %s)"
      % (sys.argv[2], o["predicted_iteration_ms"], o["measured_iteration_ms"],
         100 * o["iteration_error_rel"], groups))
PY
    else
        echo "3d $name: FAILED (see $LOG)"
    fi
done

# Issue 42, items 1-3: the block's kernels against the model, eager
# attention at 512-8192 tokens (the score chain grows as s^2 and nothing
# else does), one GEMM-dominated size per model. `cephalo profile` measures
# the PyTorch eager block (the stack the reference profiles ran);
# `cephalo predict --source analytic --breakdown` prints the model's
# GEMM / attention / element-wise / per-parameter / launch parts of the
# same block on this GPU's catalog entry (GPU_NAME, default h100-sxm), and
# the line says the measured over the predicted forward and backward.
GPU_NAME="${GPU_NAME:-h100-sxm}"
for m in $MODELS; do
    for s in 512 1024 2048 4096 8192; do
        f="$OUT/issue42-$m-seq$s.json"
        if $C profile --model "$m" --seq-len "$s" --dtype bf16 --device cuda \
            --batch-sizes 1,2 --warmup 2 --repetitions 5 --out "$f" >>"$LOG" 2>&1; then
            $C predict --gpu "$GPU_NAME" --model "$m" --seq-len "$s" --dtype bf16 \
                --batch-sizes 1,2 --source analytic --stack pytorch --attention eager \
                --format json >"$f.pred" 2>>"$LOG"
            python3 - "$f" "$f.pred" "$m" "$s" <<'PY'
import json, sys
prof = json.load(open(sys.argv[1]))
pred = json.load(open(sys.argv[2]))
pred = pred["rows"] if isinstance(pred, dict) else pred
blk = prof["blocks"][0] if "blocks" in prof else prof
sizes = blk.get("batch_sizes", [1, 2])
for i, r in enumerate(pred):
    fm, bm = blk["fwd_ms"][i], blk["bwd_ms"][i]
    print("block %s seq %s m%d: measured fwd %.3f bwd %.3f ms; model fwd %.3f (gemm %.3f attn %.3f elem %.3f) bwd %.3f; ratio %.2f / %.2f"
          % (sys.argv[3], sys.argv[4], sizes[i], fm, bm, r["fwd_ms"], r["fwd_gemm_ms"], r["fwd_attention_ms"],
             r["fwd_elementwise_ms"], r["bwd_ms"], fm / r["fwd_ms"], bm / r["bwd_ms"]))
PY
        else
            echo "issue42 profile $m seq $s: FAILED (see $LOG)"
        fi
    done
done
