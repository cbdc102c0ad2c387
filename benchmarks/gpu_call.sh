#!/usr/bin/env bash
# One call on a lent GPU (benchmarks/README.md, "Training the shipped model on a GPU"): BERT-Small trained from
# scratch on corpus $CORPUS (v5 unless set; v4 for calls 1 and 2) for MINUTES, its checkpoint sent back in parts
# ($OUT/run), then its training step alone, eager and compiled, for the run's shape and batch, to set beside the run's
# own speed (issue 49's target: the run at >= 80% of the step alone) and to decide --compile for the next call.
# Prepared here with
#     python benchmarks/gpu_pretrain.py pack --corpus v5 --vocab-size 16384
# and run there with carry ["gpu-carry"] and timeout_s 600:
#     bash benchmarks/gpu_call.sh
# A later call goes on from what came back: pack with --continue runs/<name>, then RESUME=1 bash
# benchmarks/gpu_call.sh (with STEPS, the run's last step, for a schedule that spans several calls), on $CORPUS as a
# new run is. EXTRA adds flags of bert_demo train (later flags win), BENCH=0 leaves out the step alone; PIPELINE=1
# adds, last, bench_pipeline.py's run beside its step alone in one process, at batch 256 and then 512, with a profile
# of 20 of the first's steps (PIPELINE_ARGS: its arguments), in the time left of CALL_SECONDS (what this script may
# take in all: the call's 600 s, less what runs before it in the same command). Every run, new or resumed, draws its
# random B from A's source (RANDOM_B: the setting --random-b; a checkpoint trained before the setting existed would
# resume with the paper's draw). The proof at small scale on a CPU is
#     OUT=/tmp/out MINUTES=10 BENCH=0 EXTRA="--preset tiny --batch-size 8 --device cpu --eval-every 200" \
#         bash benchmarks/gpu_call.sh
set -uo pipefail
export PYTHONUNBUFFERED=1
MINUTES=${MINUTES:-6.5}
CORPUS=${CORPUS:-v5}
CALL_SECONDS=${CALL_SECONDS:-540}
SHAPE=(--preset small --vocab-size 16384 --batch-size 256 --seq-len 128)
RECIPE=(--corpus "$CORPUS" --lr 7e-4 --warmup-steps 1000 --eval-every 2000 --log-every 50 --save-every 1000000)
DRAW=(--random-b "${RANDOM_B:-same-source}")
if [ "${RESUME:-0}" = 1 ]; then
  ARGS=(--resume gpu-carry/start --corpus "$CORPUS" "${DRAW[@]}" ${STEPS:+--steps "$STEPS"} ${EXTRA:-})
else
  ARGS=("${SHAPE[@]}" "${RECIPE[@]}" "${DRAW[@]}" ${STEPS:+--steps "$STEPS"} ${EXTRA:-})
fi
PIPELINE_ARGS=${PIPELINE_ARGS:---preset small --vocab 16384 --batch 256,512 --corpus $CORPUS --steps 200 --workers 8 --profile}
CACHE=$(mktemp -d /tmp/bert-demo-cache-XXXX)
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python benchmarks/gpu_pretrain.py train --minutes "$MINUTES" --out "$OUT/run" --cache "$CACHE" -- "${ARGS[@]}" 2>&1 \
  | tee "$OUT/log"
trained=${PIPESTATUS[0]}
if [ "${BENCH:-1}" != 0 ]; then
  echo "== the step alone, eager, then compiled (small, V=16,384, 256 x 128, bf16)" | tee -a "$OUT/log"
  timeout 90 python benchmarks/bench_train.py --preset small --vocab 16384 --batch 256 --seq 128 --steps 20 \
    --warmup 5 2>&1 | tail -6 | tee -a "$OUT/log"
  timeout 120 python benchmarks/bench_train.py --preset small --vocab 16384 --batch 256 --seq 128 --steps 20 \
    --warmup 8 --compile 2>&1 | tail -6 | tee -a "$OUT/log"
fi
left=$((CALL_SECONDS - SECONDS))
if [ "${PIPELINE:-0}" = 1 ] && [ "$left" -gt 30 ]; then
  echo "== the run beside its step alone, and where its time goes, in ${left} s: bench_pipeline.py $PIPELINE_ARGS" \
    | tee -a "$OUT/log"
  # shellcheck disable=SC2086  # the arguments are words
  BERT_DEMO_CACHE="$CACHE" timeout "$left" python benchmarks/bench_pipeline.py $PIPELINE_ARGS 2>&1 | tail -50 \
    | tee -a "$OUT/log"
elif [ "${PIPELINE:-0}" = 1 ]; then
  echo "== no time left for bench_pipeline.py (${left} s of CALL_SECONDS=${CALL_SECONDS})" | tee -a "$OUT/log"
fi
grep -h "^run: \|^a step takes\|^profiled steps\|^the step alone\|^the run at batch" "$OUT/log"
exit "$trained"
