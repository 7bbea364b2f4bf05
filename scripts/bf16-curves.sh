#!/usr/bin/env bash
# bf16 vs fp32 loss curves (issue 10): 200 steps of step 1 (SFT) and of step 2
# (reward model) on a random-init opt-125m with the shared rm-static sample,
# once per dtype, same seed and data order. Prints the loss of both runs every
# 20 steps and the largest gap between their 20-step running means, and draws
# both curves (OUT/sft-loss.png, OUT/reward-loss.png).
#
#   scripts/bf16-curves.sh [OUT]      (default /tmp/gochat-bf16-curves)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/gochat-bf16-curves}
bin=bin/gochat
CGO_ENABLED=0 go build -o "$bin" ./cmd/gochat
mkdir -p "$out"
[ -f "$out/base/config.json" ] || "$bin" init --arch opt-125m --tokenizer ../shared/data/opt-tokenizer --output-dir "$out/base" --seed 1
common=(--model "$out/base" --data ../shared/data/rm-static-sample/sample.jsonl --data-split 1,1,0 --max-seq-len 128
	--per-device-train-batch-size 4 --max-steps 200 --num-warmup-steps 10 --lr-scheduler-type cosine --seed 1234
	--data-cache off --overwrite --log-format json)
for dt in fp32 bf16; do
	"$bin" sft "${common[@]}" --learning-rate 1e-4 --dtype "$dt" --output-dir "$out/sft-$dt" 2>"$out/sft-$dt.log"
	"$bin" reward "${common[@]}" --learning-rate 2e-5 --dtype "$dt" --output-dir "$out/reward-$dt" 2>"$out/reward-$dt.log"
done
for step in sft reward; do
	"$bin" plot --key loss --output "$out/$step-loss.png" "fp32=$out/$step-fp32/metrics.jsonl" "bf16=$out/$step-bf16/metrics.jsonl"
done
