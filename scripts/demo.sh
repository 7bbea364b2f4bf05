#!/usr/bin/env bash
# The main job on the embedded demo data, until `gochat train --recipe demo`
# lands: build gochat, initialise a tiny OPT from scratch, run step 1 (SFT)
# and step 2 (reward model) on ../shared/data/rm-static-sample, and let the
# SFT model answer a prompt. Everything goes to out/demo. About a minute on
# 2 CPU cores.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
shared=${SHARED:-../shared/data}
out=out/demo
go build -o bin/gochat ./cmd/gochat
bin/gochat init --arch scripts/demo-opt-tiny.json --tokenizer "$shared/opt-tokenizer" --output-dir "$out/base"
common=(--data "$shared/rm-static-sample/sample.jsonl" --max-seq-len 96 --per-device-train-batch-size 8 --data-cache off --overwrite)
bin/gochat sft --model "$out/base" "${common[@]}" --data-split 1,0,0 --learning-rate 3e-3 --num-train-epochs 20 --output-dir "$out/sft"
bin/gochat reward --model "$out/sft" "${common[@]}" --data-split 0,1,0 --learning-rate 2e-3 --num-train-epochs 40 --output-dir "$out/reward"
bin/gochat generate --model "$out/sft" --prompt $'\n\nHuman: What is a good way to learn to cook?\n\nAssistant:' --max-new-tokens 24
echo "outputs, metrics and training curves: $out/sft, $out/reward"
