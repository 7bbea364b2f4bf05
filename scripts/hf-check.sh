#!/usr/bin/env bash
# hf-check.sh: models gochat trains load in Hugging Face transformers and
# compute what gochat computed. Needs a gochat binary and a Python with
# torch and transformers; the device is the CPU or a GPU.
#
#   scripts/hf-check.sh [--device cpu|cuda] [--python PY] [--gochat BIN]
#                       [--shared DIR] [--out DIR] [--timeout S] [--tol T]
#                       [CASE ...]
#
# Cases (default: all), each trained through steps 1-3 by gochat train:
#   opt      the demo recipe, --arch opt (OPT, pre-LN)
#   llama    the demo recipe, --arch llama (GQA, untied)
#   qwen2    qwen2-tiny (q/k/v biases, tied) with Qwen2.5's tokenizer,
#            chat template and EOS list, a short recipe on the rm-static sample
#   qwen3    a tiny Qwen3 (q/k RMSNorm, head_dim 32 ≠ hidden/heads, tied)
#            with Qwen3's tokenizer and chat template, the same recipe
#   llama3   a tiny Llama with llama3 rope scaling (untied, GQA) and
#            TinyLlama's tokenizer and chat template, the same recipe
#
# For each case the SFT and PPO actors are continued greedily from a prompt
# (the chat template's rendering of one user turn where the tokenizer has a
# template) by gochat generate and by transformers' AutoModelForCausalLM:
# the tokens must be equal and each token's log-probability within --tol
# (default 1e-4 on the CPU, 2e-3 on a GPU); the reward model and the PPO
# critic score one answer with gochat score and with
# AutoModelForSequenceClassification on the same ids (within --tol
# relative). scripts/hf_check.py does the transformers side and only it.
#
# Prints one line per check and a last line per case, "CASE PASS|FAIL
# SECONDS ...", and exits 0 only when every check passed. Logs go to --out
# (default /tmp/gochat-hf-check), models to --out/work.
#
# On a machine without transformers, Debian's (sid) python3-transformers
# in a debootstrap'ed folder does it; scripts/hf-check.sh's README section
# (Checks against transformers) gives the commands.
set -uo pipefail
cd "$(dirname "$0")/.."

dev=cpu py=${PYTHON:-python3} gochat=bin/gochat shared=${GOCHAT_SHARED:-../shared} out=/tmp/gochat-hf-check tmo=900 tol=
cases=()
while [ $# -gt 0 ]; do
  case "$1" in
    --device) dev=$2; shift 2 ;;
    --python) py=$2; shift 2 ;;
    --gochat) gochat=$2; shift 2 ;;
    --shared) shared=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --timeout) tmo=$2; shift 2 ;;
    --tol) tol=$2; shift 2 ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "hf-check.sh: unknown flag $1" >&2; exit 2 ;;
    *) cases+=("$1"); shift ;;
  esac
done
[ ${#cases[@]} -eq 0 ] && cases=(opt llama qwen2 qwen3 llama3)
# Both sides compute in fp32: on the CPU they agree to about 2e-6; a GPU's
# GEMMs and reductions order sums differently.
[ -n "$tol" ] || { [ "$dev" = cpu ] && tol=1e-4 || tol=2e-3; }
mkdir -p "$out/work"
# $py may be a command with arguments (a wrapper that enters a chroot).
read -r -a pycmd <<<"$py"
g() { "$gochat" --device "$dev" --log-format json "$@"; }
fail=0

# data: the rm-static sample (gpu-check.sh --build puts it in bin/data).
data=$shared/data/rm-static-sample/sample.jsonl
[ -f "$data" ] || data=$shared/data/rm-static-sample.jsonl

# put FILE DIR: copies FILE, or unpacks FILE.gz (gpu-check.sh --build
# carries the large tokenizer.json gzip'ed), into DIR.
put() {
  if [ -f "$1" ]; then cp "$1" "$2/"; else gzip -dc "$1.gz" >"$2/$(basename "$1")"; fi
}

# tokdir CASE DIR: the tokenizer files of a case's model.
tokdir() {
  local d=$2 s=$shared/data f
  mkdir -p "$d"
  case $1 in
    qwen2) put "$s/qwen3-tokenizer/tokenizer.json" "$d" && put "$s/qwen2.5-tokenizer/tokenizer_config.json" "$d" &&
           # Qwen2.5-Instruct's generation config: either id ends a turn.
           echo '{"eos_token_id": [151645, 151643], "pad_token_id": 151643}' >"$d/generation_config.json" ;;
    qwen3) put "$s/qwen3-tokenizer/tokenizer.json" "$d" && put "$s/qwen3-tokenizer/tokenizer_config.json" "$d" ;;
    llama3) for f in tokenizer.json tokenizer_config.json special_tokens_map.json generation_config.json; do
              put "$s/tinyllama-tokenizer/$f" "$d" || return 1
            done ;;
  esac
}

# config CASE: the config.json of a tiny model of a case, from a preset.
config() {
  case $1 in
    qwen2) echo qwen2-tiny ;;
    qwen3)
      g init --arch qwen2-tiny --output-dir "$w/preset" >/dev/null 2>&1 || return 1
      "${pycmd[@]}" -c 'import json,sys
c = json.load(sys.stdin)
c.update(model_type="qwen3", architectures=["Qwen3ForCausalLM"], head_dim=32, attention_bias=False, max_position_embeddings=40960)
print(json.dumps(c, indent=2))' <"$w/preset/config.json" >"$w/config.json" || return 1
      echo "$w/config.json" ;;
    llama3)
      g init --arch llama-tiny --output-dir "$w/preset" >/dev/null 2>&1 || return 1
      "${pycmd[@]}" -c 'import json,sys
c = json.load(sys.stdin)
c.update(rope_theta=500000.0, max_position_embeddings=131072, rope_scaling={"rope_type": "llama3", "factor": 32.0,
         "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
print(json.dumps(c, indent=2))' <"$w/preset/config.json" >"$w/config.json" || return 1
      echo "$w/config.json" ;;
  esac
}

prompt=$'\n\nHuman: What is 3+4?\n\nAssistant:'
for c in "${cases[@]}"; do
  w=$out/work/$c
  rm -rf "$w"
  mkdir -p "$w"
  log=$out/$c.log
  : >"$log"
  t0=$(date +%s)
  case $c in
    opt|llama)
      timeout "$tmo" "$gochat" --device "$dev" --log-format json train --recipe demo --arch "$c" --output-dir "$w/run" >>"$log" 2>&1 ;;
    qwen2|qwen3|llama3)
      tokdir "$c" "$w/tok" >>"$log" 2>&1 &&
        arch=$(config "$c") &&
        g init --arch "$arch" --output-dir "$w/base" --tokenizer "$w/tok" --init-std 0.1 >>"$log" 2>&1 &&
        cat >"$w/recipe.yaml" <<'EOF' &&
description: a tiny model through the three steps, for the transformers checks
steps:
  sft: {data-split: "2,4,4", max-seq-len: 128, per-device-train-batch-size: 4, max-steps: 3, data-cache: "off"}
  reward: {data-split: "2,4,4", max-seq-len: 128, per-device-train-batch-size: 2, max-steps: 3, data-cache: "off"}
  ppo: {data-split: "2,4,4", max-prompt-seq-len: 96, max-answer-seq-len: 8, per-device-generation-batch-size: 2,
        per-device-training-batch-size: 2, max-steps: 2, num-warmup-steps: 0, data-cache: "off"}
EOF
        timeout "$tmo" "$gochat" --device "$dev" --log-format json train --actor "$w/base" --reward "$w/base" --data "$data" \
          --recipe "$w/recipe.yaml" --output-dir "$w/run" >>"$log" 2>&1 ;;
    *) echo "hf-check.sh: unknown case $c (opt, llama, qwen2, qwen3, llama3)" >&2; exit 2 ;;
  esac
  rc=$?
  secs=$(( $(date +%s) - t0 ))
  if [ $rc -ne 0 ]; then
    echo "$c FAIL ${secs}s: training: $(grep -m1 '^gochat:' "$log" | cut -c1-200) (rc $rc, see $log)"
    fail=1
    continue
  fi
  d=$w/run
  # The prompt: one user turn rendered by the chat template where there is one.
  text=$(echo '{"messages": [{"role": "user", "content": "What is 3+4?"}], "add_generation_prompt": true}' |
    "$gochat" chat-template --tokenizer "$d/actor" 2>/dev/null | "${pycmd[@]}" -c 'import json,sys
d = sys.stdin.read().strip()
print(json.loads(d).get("text", "") if d else "", end="")')
  [ -n "$text" ] || text=$prompt
  ids=$("$gochat" tokenize --tokenizer "$d/actor" --text "$text")
  fails=0 lines=""
  for m in actor ppo/actor; do
    g generate --model "$d/$m" --prompt-ids "$ids" --max-new-tokens 6 --dtype fp32 --json >"$w/gen.json" 2>>"$log"
    line=$("${pycmd[@]}" scripts/hf_check.py causal "$d/$m" "$w/gen.json" --device "$dev" --tol "$tol" 2>>"$log") || fails=$((fails + 1))
    echo "${line:-FAIL causal $d/$m: hf_check.py printed nothing (see $log)}"
    lines="$lines $m ${line%% *};"
  done
  for m in reward ppo/critic; do
    g score --model "$d/$m" --prompt "$prompt" --answer " 7" --dtype fp32 --json >"$w/score.json" 2>>"$log"
    read -r rids score < <("${pycmd[@]}" -c 'import json,sys
s = json.load(sys.stdin)
print(",".join(map(str, s["ids"][0])), s["scores"][0])' <"$w/score.json")
    line=$("${pycmd[@]}" scripts/hf_check.py reward "$d/$m" "${rids:-0}" "${score:-nan}" --device "$dev" --tol "$tol" 2>>"$log") || fails=$((fails + 1))
    echo "${line:-FAIL reward $d/$m: hf_check.py printed nothing (see $log)}"
    lines="$lines $m ${line%% *};"
  done
  if [ $fails -eq 0 ]; then
    echo "$c PASS ${secs}s:$lines"
  else
    echo "$c FAIL ${secs}s:$lines (see $log)"
    fail=1
  fi
done
exit $fail
