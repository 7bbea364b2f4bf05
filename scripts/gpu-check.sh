#!/usr/bin/env bash
# gpu-check.sh: everything gochat checks on an NVIDIA GPU, in one run, on a
# machine that has a GPU, Python with torch and transformers, and neither
# Go nor network.
#
# The binaries are built on a machine with Go (cgo off: the CUDA libraries
# are loaded at run time) and carried in bin/ (ignored by git), with the
# OPT tokenizer and the rm-static sample of ../shared/data for the rlhf-run
# and offload rows. One command does it, where Go and ../shared are:
#
#   scripts/gpu-check.sh --build
#
# which runs
#
#   CGO_ENABLED=0 go build -ldflags="-s -w" -o bin/gochat ./cmd/gochat
#   CGO_ENABLED=0 go test -c -ldflags="-s -w" -o bin/cuda.test ./kernels/cuda
#   CGO_ENABLED=0 go test -c -ldflags="-s -w" -o bin/nccl.test ./dist/nccl
#   CGO_ENABLED=0 go test -c -ldflags="-s -w" -o bin/model.test ./model
#
# then gzips the four (bin/*.gz: about 15 + 7 + 2 + 2.5 MB; plain they are
# 45 + 15 + 4 + 6 MB, past the run tool's 64 MiB for carried paths) and
# copies ../shared/data/opt-tokenizer/{tokenizer.json,tokenizer_config.json}
# to bin/data/opt-tokenizer/, ../shared/data/rm-static-sample/sample.jsonl
# to bin/data/, and the Qwen3 (gzip'ed), Qwen2.5 and TinyLlama tokenizer
# files of scripts/hf-check.sh to bin/data/ (bin/ holds about 32 MB in all). A gzip'ed bin/NAME.gz is
# unpacked into $OUT/bin when the plain bin/NAME is missing.
#
# A session with the `run` tool (it copies the working tree, plus the
# ignored paths named in carry, to the GPU machine) then runs:
#
#   run(command="scripts/gpu-check.sh", carry=["bin"], timeout_s=600)
#
# and reads the summary table at the end (all logs are also written under
# $OUT, or /tmp/gochat-gpu-check without it; models, checkpoints and the
# Hugging Face cache of the runs go to $GPU_CHECK_WORK/gochat-gpu-work,
# default /tmp/gochat-gpu-work, not under $OUT, whose files come back). The exit
# status is 0 only when every check that ran passed. Rows can be chosen:
# `scripts/gpu-check.sh train-bench rlhf-run` runs those (and env) only,
# for a second run when the first ran out of time. The whole run keeps to
# GPU_CHECK_SECONDS (default 570, under the run tool's 600): each command
# is killed at its budget or at that deadline, a row that no longer has
# the time it needs is recorded as skipped with the command that runs it
# alone, and the rows recorded so far are in $OUT/rows.txt even when the
# run is killed. Budgets of the new rows in seconds: model-golden 180,
# train-bench 2 x (150 + 150), decode-bench 150 + 150, rlhf-run 420,
# offload 3 x 240. No row has been timed on a GPU yet (from their step
# counts the new rows should take about 5 minutes together on an H200).
#
# GPU_CHECK_DRY=1 runs the same commands on the CPU (--device cpu) with
# tiny sizes, where no GPU is: it checks the script, the flags and the
# parsing, not the GPU (its verdicts mean nothing).
#
# Checks:
#   env          bin/gochat env: driver, NVRTC, cuBLAS, GPUs, NCCL, MPI as found
#   smoke        bin/gochat --device cuda env --check: kernels compiled by NVRTC
#                (or taken from the cache), an Add and fp32/bf16 GEMMs exact
#   unit         the kernels/cuda host-side tests (fake GPU, discovery, ...)
#   conform      kerneltest conformance on CUDA (every op vs float64
#                references; fp32 at 1e-5, the bf16 tier, finite differences,
#                the LLaMA goldens) with GOCHAT_CUDA_REQUIRE=1 (no skipping)
#   cpu-parity   ops the backend promises bit for bit equal to kernels/cpu
#   oom          an allocation past the GPU's memory fails with the numbers
#   decommit     a ZeRO-3-style Decommit/Commit cycle returns device memory
#                (cuMemGetInfo before/after) through the driver's VMM
#   nccl-1rank   a one-rank NCCL communicator on cuda:0 (the real libnccl,
#                found as gochat finds it) passes disttest.Conformance (every
#                collective, F32/BF16/I32, views, every root), NCCL's in-place
#                reduce-scatter and all-gather, Barrier and Close
#   nccl-mpi     with mpirun and two or more GPUs: mpirun -np <GPUs> ranks,
#                each on cuda:LOCAL_RANK, NCCL bootstrapped over MPI, the same
#                suite on every rank (NCCL refuses two ranks on one GPU, so
#                with one GPU, or without mpirun, it is skipped and says why)
#   gemm         cuBLAS through the backend, 4096³ fp32 and bf16, TFLOP/s,
#                next to torch.matmul on the same GPU
#   hf-opt,      scripts/hf-check.sh on cuda: the demo recipe (--arch opt,
#   hf-llama,    --arch llama), and tiny random Qwen2, Qwen3 and Llama
#   hf-tiny      (llama3 rope scaling) models with their tokenizers and chat
#                templates, through steps 1-3 on cuda; transformers loads the
#                SFT and PPO actors (AutoModelForCausalLM: greedy tokens
#                equal, log-probs within 2e-3) and the reward model and critic
#                (AutoModelForSequenceClassification: the score of one
#                sequence); scripts/hf_check.py. The same script passes on
#                the CPU (README: Checks against transformers)
#   model-golden the model package's golden tests against PyTorch on cuda
#                (bin/model.test -test.run TestGoldenOnDevice with
#                GOCHAT_TEST_DEVICE=cuda): OPT pre-/post-LN and Llama, Qwen2,
#                Qwen3 in fp32 (logits, loss, values, every gradient with and
#                without checkpointing, ten AdamW steps; bounds 10x the CPU's:
#                1e-4, 1e-3, 1e-4) and in bf16 against torch autocast
#   train-bench  a bf16 training step (forward, backward, AdamW) of opt-125m
#                (16 x 512) and opt-1.3b (8 x 512), random weights: gochat
#                bench train against scripts/bench_torch_train.py (PyTorch
#                eager under autocast, explicit attention; SDPA shown too) on
#                the same GPU, tokens/s and MFU (6 x params x tokens/s over the
#                GPU's dense bf16 peak from NVIDIA's datasheets, H100/H200/A100
#                in scripts/gpu_check_rows.py; GPU_PEAK_TFLOPS overrides).
#                Passes when gochat >= eager for both models
#   decode-bench greedy decoding of opt-125m in bf16, prompt 128, 128 new tokens,
#                batch 1 and 16: gochat bench decode against
#                scripts/bench_hf_generate.py (transformers' generate,
#                use_cache, min_new_tokens = max_new_tokens), tokens/s end to
#                end (prefill included) for both. Passes when gochat >= HF
#   rlhf-run     random-init opt-1.3b and opt-350m placed in a Hugging Face
#                cache (scripts/hf-cache-place.sh, HF_HUB_OFFLINE=1), then
#                gochat train --actor opt-1.3b --reward opt-350m with the
#                opt-1.3b-single-gpu recipe cut to 2, 2 and 1 steps (its
#                batch sizes and lengths kept) on the rm-static sample
#                repeated 20 times: each step's seconds, device peak (live
#                buffers), the most the allocator held, and nvidia-smi's
#                largest memory.used during the step (sampled twice a second)
#   offload      ZeRO-Offload trains a model that does not fit without it: on
#                a GPU capped at 16 GiB (--gpu-memory-limit), gochat sft of the
#                random-init opt-1.3b in bf16 (batch 4 x 512, gradient
#                checkpointing, 2 steps) is refused by the pre-flight without
#                --offload, runs out of memory at the cap with
#                --skip-preflight, and completes with --offload
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

# Where Go is: build and gather what the GPU machine needs into bin/.
if [ "${1:-}" = --build ]; then
  set -e
  export CGO_ENABLED=0
  mkdir -p bin/data/opt-tokenizer
  go build -ldflags="-s -w" -o bin/gochat ./cmd/gochat
  go test -c -ldflags="-s -w" -o bin/cuda.test ./kernels/cuda
  go test -c -ldflags="-s -w" -o bin/nccl.test ./dist/nccl
  go test -c -ldflags="-s -w" -o bin/model.test ./model
  for b in gochat cuda.test nccl.test model.test; do
    gzip -9 -f "bin/$b"
  done
  shared=${GOCHAT_SHARED:-../shared}
  cp "$shared/data/opt-tokenizer/tokenizer.json" "$shared/data/opt-tokenizer/tokenizer_config.json" bin/data/opt-tokenizer/
  cp "$shared/data/rm-static-sample/sample.jsonl" bin/data/rm-static-sample.jsonl
  # The tokenizers of scripts/hf-check.sh's tiny cases, as in ../shared/data.
  mkdir -p bin/data/qwen3-tokenizer bin/data/qwen2.5-tokenizer bin/data/tinyllama-tokenizer
  gzip -9c "$shared/data/qwen3-tokenizer/tokenizer.json" >bin/data/qwen3-tokenizer/tokenizer.json.gz
  cp "$shared/data/qwen3-tokenizer/tokenizer_config.json" bin/data/qwen3-tokenizer/
  cp "$shared/data/qwen2.5-tokenizer/tokenizer_config.json" bin/data/qwen2.5-tokenizer/
  cp "$shared/data/tinyllama-tokenizer/"{tokenizer.json,tokenizer_config.json,special_tokens_map.json,generation_config.json} bin/data/tinyllama-tokenizer/
  du -ab bin | sort -n | tail -n 12
  echo "bin/ holds $(du -sb bin | cut -f1) bytes (the run tool carries at most 64 MiB = 67108864)"
  exit 0
fi

out=${OUT:-/tmp/gochat-gpu-check}
mkdir -p "$out"
py=${PYTHON:-python3}
work=${GPU_CHECK_WORK:-/tmp}/gochat-gpu-work
rm -rf "$work"
mkdir -p "$work"
dry=${GPU_CHECK_DRY:-}
dev=cuda
[ -n "$dry" ] && dev=cpu
t_all=$(date +%s)
limit=${GPU_CHECK_SECONDS:-570}
deadline=$((t_all + limit))
left() { echo $(( deadline - $(date +%s) )); }
# budget N: N seconds, or what is left before the deadline (less 15 s for
# the summary), at least 1.
budget() {
  local l=$(( $(left) - 15 ))
  (( l < 1 )) && l=1
  echo $(( $1 < l ? $1 : l ))
}

all_rows="env smoke unit conform cpu-parity oom decommit nccl-1rank nccl-mpi gemm hf-opt hf-llama hf-tiny model-golden train-bench decode-bench rlhf-run offload"
rows=("$@")
for r in ${rows[@]+"${rows[@]}"}; do
  case " $all_rows hf " in
    *" $r "*) ;;
    *) echo "gpu-check: unknown row $r (rows: $all_rows)" >&2; exit 2 ;;
  esac
done
# want NAME: whether row NAME runs (all rows when none are named; hf names
# hf-opt, hf-llama and hf-tiny).
want() {
  [ ${#rows[@]} -eq 0 ] && return 0
  local r
  for r in "${rows[@]}"; do
    [ "$r" = "$1" ] && return 0
    [ "$r" = hf ] && [ "${1#hf-}" != "$1" ] && return 0
  done
  return 1
}

declare -a names results details
: >"$out/rows.txt"
record() {
  names+=("$1"); results+=("$2"); details+=("$3")
  printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$out/rows.txt"
}
# start_row NAME SECONDS: whether row NAME runs: it is wanted and about
# SECONDS are left; otherwise it is recorded as skipped, with the command
# that runs it alone.
start_row() {
  want "$1" || return 1
  if (( $(left) < $2 )); then
    record "$1" skip "not run: about $2 s needed, $(left) s left of GPU_CHECK_SECONDS=$limit; run it alone: scripts/gpu-check.sh $1"
    return 1
  fi
}

# record_line NAME LINE SECONDS: records gpu_check_rows.py's
# "RESULT<TAB>detail" line.
record_line() {
  local name=$1 line=$2 secs=$3
  if [[ $line == PASS$'\t'* || $line == FAIL$'\t'* ]]; then
    record "$name" "${line%%$'\t'*}" "${line#*$'\t'} (${secs}s)"
  else
    record "$name" FAIL "gpu_check_rows.py gave no verdict: $(echo "$line" | tail -n 1 | cut -c1-200) (${secs}s)"
  fi
}

# The binaries: bin/NAME, or bin/NAME.gz unpacked into $OUT/bin.
binpath() {
  if [ -x "bin/$1" ]; then
    echo "$root/bin/$1"
  elif [ -f "bin/$1.gz" ]; then
    mkdir -p "$out/bin" && gzip -dc "bin/$1.gz" >"$out/bin/$1" && chmod +x "$out/bin/$1" && echo "$out/bin/$1"
  fi
}
gochat=$(binpath gochat)
cudatest=$(binpath cuda.test)
nccltest=$(binpath nccl.test)
modeltest=$(binpath model.test)
if [ -z "$gochat" ]; then
  echo "gpu-check: bin/gochat is missing; build it where Go is (scripts/gpu-check.sh --build) and carry bin/" >&2
  exit 2
fi
needs_cudatest=""
for r in unit conform cpu-parity oom decommit gemm; do want $r && needs_cudatest=1; done
if [ -n "$needs_cudatest" ] && [ -z "$cudatest" ]; then
  echo "gpu-check: bin/cuda.test is missing; build it where Go is (scripts/gpu-check.sh --build) and carry bin/" >&2
  exit 2
fi

section() { echo; echo "=== $1"; }

# 1. What is there (always: other rows read it).
section "gochat env"
"$gochat" env 2>&1 | tee "$out/env.txt"
if grep -q '^GPU 0:' "$out/env.txt"; then
  record env PASS "$(grep -m1 '^GPU 0:' "$out/env.txt" | sed 's/^GPU 0: *//')"
else
  record env FAIL "no GPU listed: $(grep -m1 -E '^(CUDA|NVRTC|cuBLAS|GPUs):' "$out/env.txt")"
fi
gpu_name=""
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv 2>&1 | tee "$out/nvidia-smi.txt"
  gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | head -n 1)
fi
[ -z "$gpu_name" ] && gpu_name=$(sed -n 's/^GPU 0: *\([^,]*\),.*/\1/p' "$out/env.txt" | head -n 1)

# 2. The device opens, the kernels build, a few ops are exact.
if want smoke; then
  section "gochat --device cuda env --check"
  start=$(date +%s)
  if timeout "$(budget 300)" "$gochat" --device cuda --log-format console env --check >"$out/smoke.txt" 2>&1; then
    record smoke PASS "$(grep -m1 '^check:' "$out/smoke.txt" | sed 's/^check: *//')"
  else
    record smoke FAIL "$( (grep -m1 '^gochat:' "$out/smoke.txt" || tail -n 1 "$out/smoke.txt") | cut -c1-300)"
  fi
  cat "$out/smoke.txt"
  echo "($(( $(date +%s) - start ))s)"
fi

# 3. A test binary runs in its package folder, as go test does.
# runbin NAME LOG DIR COMMAND...: records the test binary COMMAND runs.
runbin() {
  local name=$1 log=$2 dir=$3; shift 3
  local t0
  t0=$(date +%s)
  (cd "$dir" && GOCHAT_CUDA_REQUIRE=1 timeout "$(budget 1200)" "$@") >"$log" 2>&1
  local rc=$?
  local pass fail skip
  pass=$(grep -cE '^\s*--- PASS' "$log")
  fail=$(grep -cE '^\s*--- FAIL' "$log")
  skip=$(grep -cE '^\s*--- SKIP' "$log")
  local d="$pass passed, $fail failed, $skip skipped ($(( $(date +%s) - t0 ))s)"
  if [ $rc -eq 0 ]; then
    record "$name" PASS "$d${runbin_note:-}"
  else
    local first
    first=$(grep -E '^\s*--- FAIL' "$log" | sed 's/^ *--- FAIL: //; s/ (.*//' | head -n 8 | tr '\n' ' ')
    [ -z "$first" ] && first=$(grep -m1 -E 'panic|Error|error' "$log" | cut -c1-200)
    [ $rc -eq 124 ] && first="killed at its budget or the deadline (GPU_CHECK_SECONDS); $first"
    record "$name" FAIL "$d; first: $first"
  fi
}
runtest() { # name, log, args... (bin/cuda.test in kernels/cuda)
  local name=$1 log=$2; shift 2
  runbin "$name" "$log" "$root/kernels/cuda" "$cudatest" -test.timeout 20m "$@"
}

if want unit; then
  section "kernels/cuda unit tests (no GPU needed)"
  runtest unit "$out/unit.txt" -test.v -test.skip 'Conformance|GPU'
  tail -n 3 "$out/unit.txt"
fi

if want conform; then
  section "conformance (kerneltest.Run on cuda:0)"
  runtest conform "$out/conformance.txt" -test.v -test.run '^TestConformance$'
  grep -E '^\s*--- FAIL' "$out/conformance.txt" | head -n 40
  tail -n 3 "$out/conformance.txt"
fi

if want cpu-parity; then
  section "bitwise parity with kernels/cpu"
  runtest cpu-parity "$out/parity.txt" -test.v -test.run '^TestGPUMatchesCPUBitwise$'
  grep -E 'cuda|FAIL|ok' "$out/parity.txt" | head -n 20
fi

if want oom; then
  section "out of memory"
  runtest oom "$out/oom.txt" -test.v -test.run '^TestGPUOutOfMemory$'
  grep -E 'out of memory|FAIL|PASS' "$out/oom.txt" | head -n 5
fi

if want decommit; then
  section "decommit / commit (ZeRO-2/3, frozen-model offload)"
  runtest decommit "$out/decommit.txt" -test.v -test.run '^TestGPUDecommitReturnsMemory$'
  grep -E 'granularity|FAIL|PASS|virtual memory' "$out/decommit.txt" | head -n 5
fi

cd "$root/dist/nccl"
if want nccl-1rank; then
  section "NCCL: one rank on cuda:0"
  if [ -z "$nccltest" ]; then
    record nccl-1rank FAIL "bin/nccl.test is missing; build it where Go is (scripts/gpu-check.sh --build)"
  else
    t0=$(date +%s)
    GOCHAT_CUDA_REQUIRE=1 timeout "$(budget 600)" "$nccltest" -test.timeout 10m -test.v -test.run '^TestGPUOneRank$' >"$out/nccl-1rank.txt" 2>&1
    rc=$?
    lib=$(grep -m1 -o 'rank 0 of 1 on .*' "$out/nccl-1rank.txt" | sed 's/^rank 0 of 1 on //')
    if [ $rc -eq 0 ] && grep -q -- '--- PASS: TestGPUOneRank' "$out/nccl-1rank.txt"; then
      record nccl-1rank PASS "conformance, in-place, barrier, close ($(( $(date +%s) - t0 ))s): $lib"
    else
      record nccl-1rank FAIL "$( (grep -m3 -E -- '--- FAIL|_test.go:[0-9]+:|panic' "$out/nccl-1rank.txt" || tail -n 2 "$out/nccl-1rank.txt") | tr '\n' ' ' | cut -c1-300)"
    fi
    grep -E 'gpu_test.go|--- (PASS|FAIL|SKIP)' "$out/nccl-1rank.txt" | head -n 20
  fi
fi

if want nccl-mpi; then
  section "NCCL over MPI: one rank a GPU"
  ngpu=$(grep -c '^GPU [0-9]*:' "$out/env.txt")
  if [ -z "$nccltest" ]; then
    record nccl-mpi FAIL "bin/nccl.test is missing"
  elif ! command -v mpirun >/dev/null; then
    record nccl-mpi skip "no mpirun on this machine (apt-get install openmpi-bin); the NCCL job was not run"
  elif [ "$ngpu" -lt 2 ]; then
    record nccl-mpi skip "$ngpu GPU: NCCL needs one GPU a rank, so a multi-rank job needs two or more"
  else
    np=$(( ngpu > 8 ? 8 : ngpu ))
    flags=""
    mpirun --version 2>&1 | grep -q -E 'Open MPI|OpenRTE' && flags="--allow-run-as-root --oversubscribe --bind-to none"
    t0=$(date +%s)
    # shellcheck disable=SC2086
    timeout "$(budget 600)" mpirun $flags -np "$np" env GOCHAT_NCCL_MPI_WORKER=1 GOCHAT_CUDA_REQUIRE=1 \
      "$nccltest" -test.timeout 8m -test.v -test.run '^TestGPUMPIWorker$' >"$out/nccl-mpi.txt" 2>&1
    rc=$?
    passed=$(grep -c -- '--- PASS: TestGPUMPIWorker' "$out/nccl-mpi.txt")
    if [ $rc -eq 0 ] && [ "$passed" -eq "$np" ]; then
      record nccl-mpi PASS "mpirun -np $np: $passed ranks passed conformance over NCCL ($(( $(date +%s) - t0 ))s)"
    else
      record nccl-mpi FAIL "mpirun -np $np: rc $rc, $passed of $np ranks passed; $( (grep -m2 -E -- '_test.go:[0-9]+:|nccl rank' "$out/nccl-mpi.txt" || tail -n 2 "$out/nccl-mpi.txt") | tr '\n' ' ' | cut -c1-240)"
    fi
    grep -E 'gpu_test.go|--- (PASS|FAIL)' "$out/nccl-mpi.txt" | head -n 20
  fi
fi
cd "$root/kernels/cuda"

if want gemm; then
  section "GEMM 4096^3"
  timeout "$(budget 300)" "$cudatest" -test.run '^$' -test.bench '^BenchmarkGemm$' -test.benchtime 20x >"$out/gemm.txt" 2>&1
  cat "$out/gemm.txt"
  ours=$(awk '/BenchmarkGemm/ { for (i = 1; i <= NF; i++) if ($(i+1) == "TFLOP/s") printf "%s %s  ", $1, $i }' "$out/gemm.txt" | sed 's/BenchmarkGemm\///g')
  torch=$("$py" - <<'EOF' 2>&1
import torch, time
try:
    r = []
    for name, dt in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        torch.backends.cuda.matmul.allow_tf32 = False
        a = torch.randn(4096, 4096, device="cuda", dtype=dt)
        b = torch.randn(4096, 4096, device="cuda", dtype=dt)
        for _ in range(3):
            a @ b.t()
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(20):
            a @ b.t()
        torch.cuda.synchronize()
        r.append("%s %.1f" % (name, 2 * 4096**3 * 20 / (time.perf_counter() - t) / 1e12))
    print("  ".join(r))
except Exception as e:
    print("torch failed: %s" % e)
EOF
)
  if [ -n "$ours" ]; then
    record gemm PASS "gochat TFLOP/s: $ours| torch.matmul: $torch"
  else
    record gemm FAIL "$(tail -n 2 "$out/gemm.txt" | tr '\n' ' ' | cut -c1-200)"
  fi
fi
cd "$root"

# 4. Checkpoints trained on the GPU load in transformers and compute what
# gochat computed: scripts/hf-check.sh on cuda. hf-opt and hf-llama train
# the demo (--arch opt, --arch llama) through all three steps; hf-tiny takes
# tiny random Qwen2, Qwen3 and llama3-rope-scaled Llama models with their
# tokenizers and chat templates through a short gochat train. Then
# transformers (scripts/hf_check.py) continues a prompt greedily from the
# SFT and PPO actors (tokens equal, log-probs within 2e-3) and scores one
# sequence with the reward model and the critic.
for row in hf-opt hf-llama hf-tiny; do
  need=60 cases=${row#hf-}
  [ "$row" = hf-tiny ] && need=40 cases="qwen2 qwen3 llama3"
  start_row "$row" $need || continue
  section "$row: scripts/hf-check.sh --device $dev $cases"
  t0=$(date +%s)
  # shellcheck disable=SC2086
  scripts/hf-check.sh --device "$dev" --python "$py" --gochat "$gochat" --shared bin --out "$out/hf" \
    --timeout "$(budget 300)" $cases 2>&1 | tee "$out/$row.txt"
  rc=${PIPESTATUS[0]}
  summary=$(grep -E '^[a-z0-9]+ (PASS|FAIL) ' "$out/$row.txt" | sed 's/;$//' | tr '\n' ';' | cut -c1-400)
  if [ "$rc" -eq 0 ]; then
    record "$row" PASS "$summary ($(( $(date +%s) - t0 ))s)"
  else
    record "$row" FAIL "${summary:-no result} (see $out/$row.txt and $out/hf/)"
  fi
done

# 5. The model package's golden tests on the GPU (model/device_test.go:
# fp32 bounds 10x the CPU's, bf16 against torch autocast; the test binary
# runs in model/, where its testdata is).
if start_row model-golden 30; then
  section "model golden tests on $dev (GOCHAT_TEST_DEVICE=$dev)"
  if [ -z "$modeltest" ]; then
    record model-golden FAIL "bin/model.test is missing; build it where Go is (scripts/gpu-check.sh --build)"
  else
    runbin_note="; OPT pre/post-LN, Llama, Qwen2, Qwen3: fp32 logits, loss, grads, 10 AdamW steps; bf16 vs torch autocast"
    runbin model-golden "$out/model-golden.txt" "$root/model" env GOCHAT_TEST_DEVICE=$dev \
      timeout "$(budget 180)" "$modeltest" -test.timeout 3m -test.v -test.run '^TestGoldenOnDevice$'
    runbin_note=""
    grep -E -- '--- (FAIL|PASS): TestGoldenOnDevice|device_test.go|bf16_test.go:[0-9]+: max logit|_test.go:[0-9]+: .*(error|exceeds)' "$out/model-golden.txt" | head -n 30
  fi
fi

# Sizes of the benchmark rows (GPU_CHECK_DRY: tiny, on the CPU).
if [ -z "$dry" ]; then
  tb_specs="opt-125m:16:512 opt-1.3b:8:512" tb_steps=5 tb_attn=eager,sdpa
  db_model=opt-125m db_batches="1 16" db_prompt=128 db_new=128 db_runs=5
else
  tb_specs="opt-125m:1:16" tb_steps=1 tb_attn=eager
  db_model=opt-125m db_batches="1 2" db_prompt=8 db_new=4 db_runs=1
fi
tb_models=$(for s in $tb_specs; do printf '%s,' "${s%%:*}"; done)
tb_models=${tb_models%,}

# 6. A bf16 training step against PyTorch eager on the same GPU.
if start_row train-bench 120; then
  section "training step in bf16: gochat bench train vs PyTorch eager, $gpu_name"
  t0=$(date +%s)
  gf=() tf=()
  for spec in $tb_specs; do
    IFS=: read -r m b s <<<"$spec"
    echo "--- $m, batch $b x $s"
    timeout "$(budget 150)" "$gochat" --device $dev --log-format json bench train --model "$m" --batch "$b" --seq "$s" --steps $tb_steps \
      --dtype bf16 --json >"$out/train-bench-gochat-$m.json" 2>"$out/train-bench-gochat-$m.log" ||
      echo "gochat bench train $m: rc $?: $(tail -n 1 "$out/train-bench-gochat-$m.log" | cut -c1-300)"
    cat "$out/train-bench-gochat-$m.json"
    timeout "$(budget 150)" "$py" scripts/bench_torch_train.py --device $dev --dtype bf16 --model "$m" --batch "$b" --seq "$s" --steps $tb_steps \
      --dropout 0.1 --attn $tb_attn >"$out/train-bench-torch-$m.json" 2>"$out/train-bench-torch-$m.log" ||
      echo "bench_torch_train.py $m: rc $?: $(tail -n 1 "$out/train-bench-torch-$m.log" | cut -c1-300)"
    cat "$out/train-bench-torch-$m.json"
    gf+=("$out/train-bench-gochat-$m.json") tf+=("$out/train-bench-torch-$m.json")
  done
  line=$("$py" scripts/gpu_check_rows.py train-bench --gpu "$gpu_name" --models "$tb_models" --gochat "${gf[@]}" --torch "${tf[@]}")
  record_line train-bench "$line" $(( $(date +%s) - t0 ))
fi

# 7. Decoding against Hugging Face generate on the same GPU.
if start_row decode-bench 60; then
  section "decoding in bf16: gochat bench decode vs transformers generate, $gpu_name"
  t0=$(date +%s)
  gf=()
  for b in $db_batches; do
    timeout "$(budget 150)" "$gochat" --device $dev --log-format json bench decode --model $db_model --batch "$b" --prompt $db_prompt --new $db_new \
      --runs $db_runs --dtype bf16 --json >"$out/decode-bench-gochat-$b.json" 2>"$out/decode-bench-gochat-$b.log" ||
      echo "gochat bench decode batch $b: rc $?: $(tail -n 1 "$out/decode-bench-gochat-$b.log" | cut -c1-300)"
    cat "$out/decode-bench-gochat-$b.json"
    gf+=("$out/decode-bench-gochat-$b.json")
  done
  # shellcheck disable=SC2086
  timeout "$(budget 150)" "$py" scripts/bench_hf_generate.py --model $db_model --batch "$(echo $db_batches | tr ' ' ,)" --prompt $db_prompt --new $db_new \
    --runs $db_runs --device $dev --dtype bf16 >"$out/decode-bench-hf.json" 2>"$out/decode-bench-hf.log" ||
    echo "bench_hf_generate.py: rc $?: $(tail -n 1 "$out/decode-bench-hf.log" | cut -c1-300)"
  cat "$out/decode-bench-hf.json"
  # shellcheck disable=SC2086
  line=$("$py" scripts/gpu_check_rows.py decode-bench --batches "$(echo $db_batches | tr ' ' ,)" --gochat "${gf[@]}" --hf "$out/decode-bench-hf.json")
  record_line decode-bench "$line" $(( $(date +%s) - t0 ))
fi

# The OPT tokenizer and the rm-static sample (carried in bin/data by
# --build; ../shared/data where the checkout has it beside), and the
# random-init models of the last two rows.
tokdir="" sample=""
for d in bin/data/opt-tokenizer ../shared/data/opt-tokenizer shared/data/opt-tokenizer; do
  [ -f "$d/tokenizer.json" ] && { tokdir=$(cd "$d" && pwd); break; }
done
for f in bin/data/rm-static-sample.jsonl ../shared/data/rm-static-sample/sample.jsonl shared/data/rm-static-sample/sample.jsonl; do
  [ -f "$f" ] && { sample=$(cd "$(dirname "$f")" && pwd)/$(basename "$f"); break; }
done
data=$work/data/rm-static-sample-x20.jsonl
if [ -n "$sample" ]; then
  # 480 rows: the recipe's batches of 16 are full in every step's share
  # (data-split 2,4,4).
  mkdir -p "$work/data"
  for _ in $(seq 20); do cat "$sample"; done >"$data"
fi
if [ -z "$dry" ]; then
  actor_arch=opt-1.3b reward_arch=opt-350m
else
  actor_arch=$work/tiny-opt.json reward_arch=$work/tiny-opt.json
  cat >"$work/tiny-opt.json" <<'EOF'
{"architectures": ["OPTForCausalLM"], "model_type": "opt", "vocab_size": 50272, "hidden_size": 64, "ffn_dim": 128,
 "num_hidden_layers": 2, "num_attention_heads": 2, "max_position_embeddings": 2048, "word_embed_proj_dim": 64,
 "do_layer_norm_before": true, "activation_function": "relu", "dropout": 0.1, "attention_dropout": 0.0,
 "pad_token_id": 1, "bos_token_id": 2, "eos_token_id": 2, "enable_bias": true, "layer_norm_elementwise_affine": true}
EOF
fi
# init_model NAME ARCH: a random-init model directory $work/init/NAME with
# the OPT tokenizer (the CPU initialises; bf16 happens at load).
init_model() {
  [ -f "$work/init/$1/model.safetensors" ] && return 0
  "$gochat" --device cpu --log-format json init --arch "$2" --tokenizer "$tokdir" --output-dir "$work/init/$1" >>"$out/init.log" 2>&1
}

# 8. Three steps of gochat train with the single-GPU recipe, shortened.
if start_row rlhf-run 200; then
  section "gochat train --actor opt-1.3b --reward opt-350m, opt-1.3b-single-gpu recipe, short"
  t0=$(date +%s)
  if [ -z "$tokdir" ] || [ -z "$sample" ]; then
    record rlhf-run FAIL "no OPT tokenizer or rm-static sample in bin/data (scripts/gpu-check.sh --build copies them)"
  elif ! init_model opt-1.3b "$actor_arch" || ! init_model opt-350m "$reward_arch"; then
    record rlhf-run FAIL "gochat init: $(grep -m1 '^gochat:' "$out/init.log" | cut -c1-200)"
  else
    export HF_HUB_CACHE=$work/hf
    scripts/hf-cache-place.sh "$work/init/opt-1.3b" facebook/opt-1.3b
    scripts/hf-cache-place.sh "$work/init/opt-350m" facebook/opt-350m
    # The recipe's batch sizes, lengths, LoRA and precision, with a short
    # step count (PPO's max-steps counts generation batches).
    sets=(sft.max-steps=2 reward.max-steps=2 ppo.max-steps=1 'sft.data-cache="off"' 'reward.data-cache="off"' 'ppo.data-cache="off"')
    if [ -n "$dry" ]; then
      for s in sft reward; do
        sets+=("$s.max-seq-len=64" "$s.per-device-train-batch-size=2" "$s.per-device-eval-batch-size=2" "$s.gradient-accumulation-steps=1")
      done
      sets+=(sft.lora-dim=8 ppo.actor-lora-dim=8 ppo.max-prompt-seq-len=48 ppo.max-answer-seq-len=8
        ppo.per-device-generation-batch-size=2 ppo.per-device-training-batch-size=2)
    fi
    "$gochat" recipes show opt-1.3b-single-gpu | "$py" scripts/gpu_check_rows.py recipe "${sets[@]/#/--set=}" >"$work/rlhf-recipe.yaml"
    cp "$work/rlhf-recipe.yaml" "$out/rlhf-recipe.yaml"
    smi_pid=""
    if command -v nvidia-smi >/dev/null; then
      while :; do
        printf '%s %s\n' "$(date +%s.%N)" "$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null | head -n 1)"
        sleep 0.5
      done >"$out/rlhf-smi.txt" &
      smi_pid=$!
    fi
    HF_HUB_OFFLINE=1 timeout "$(budget 420)" "$gochat" --device $dev --log-format json train --actor opt-1.3b --reward opt-350m \
      --data "$data" --recipe "$work/rlhf-recipe.yaml" --output-dir "$work/rlhf" >"$out/rlhf-run.log" 2>&1
    rc=$?
    if [ -n "$smi_pid" ]; then
      kill "$smi_pid" 2>/dev/null
      wait "$smi_pid" 2>/dev/null
    fi
    unset HF_HUB_CACHE
    grep -E '"(step done|train done)"|memory: device peak|"level":"error"|^gochat:' "$out/rlhf-run.log" | cut -c1-300
    line=$("$py" scripts/gpu_check_rows.py rlhf-run --log "$out/rlhf-run.log" --smi "$out/rlhf-smi.txt" --rc $rc)
    record_line rlhf-run "$line" $(( $(date +%s) - t0 ))
    du -sh "$work/rlhf" 2>/dev/null
    rm -rf "$work/rlhf" "$work/hf"
  fi
fi

# 9. ZeRO-Offload trains a model that does not fit without it. The GPU is
# capped with --gpu-memory-limit (kernels/cuda's allocator refuses past
# the cap, and the pre-flight plans the GPU as that size). The cap comes
# from the planner: gochat estimate sft --model opt-1.3b --dtype bf16
# --per-device-train-batch-size 4 --per-device-eval-batch-size 4
# --max-seq-len 512 --gradient-checkpointing plans a GPU peak of 22.9 GiB
# (bf16 weights 2.45 + the fp32 masters' low halves 2.45 + fp32 gradients
# 4.90 + AdamW moments 9.80 + activations and logits, + 1 GiB reserve) and
# 10.6 GiB with --offload (the moments and master halves, 19.6 GiB with
# the host copies, live in host memory). 16 GiB, near the middle, is below
# what the parameters' state alone needs on the device without offload
# (19.6 GiB), so the run with --skip-preflight must run out of memory
# whatever the activations take, and leaves 5.4 GiB over the offloaded
# run's plan.
if start_row offload 120; then
  section "ZeRO-Offload: opt-1.3b sft on a GPU capped at 16 GiB"
  t0=$(date +%s)
  cap=16GiB cap_bytes=$((16 << 30))
  if [ -z "$tokdir" ] || [ -z "$sample" ]; then
    record offload FAIL "no OPT tokenizer or rm-static sample in bin/data (scripts/gpu-check.sh --build copies them)"
  elif ! init_model opt-1.3b "$actor_arch"; then
    record offload FAIL "gochat init: $(grep -m1 '^gochat:' "$out/init.log" | cut -c1-200)"
  else
    sizes=(--per-device-train-batch-size 4 --per-device-eval-batch-size 4 --max-seq-len 512)
    [ -n "$dry" ] && sizes=(--per-device-train-batch-size 2 --per-device-eval-batch-size 2 --max-seq-len 32)
    sft=(--device "$dev" --gpu-memory-limit "$cap" --log-format json sft --model "$work/init/opt-1.3b" --data "$data" --dtype bf16
      "${sizes[@]}" --gradient-checkpointing --max-steps 2 --learning-rate 1e-5 --data-cache off --overwrite)
    echo "--- without --offload"
    timeout "$(budget 240)" "$gochat" "${sft[@]}" --output-dir "$work/offload-refused" >"$out/offload-refused.log" 2>&1
    rc_refused=$?
    grep -E '^gochat:' "$out/offload-refused.log" | cut -c1-400
    echo "--- without --offload, --skip-preflight"
    timeout "$(budget 240)" "$gochat" "${sft[@]}" --skip-preflight --output-dir "$work/offload-oom" >"$out/offload-oom.log" 2>&1
    rc_oom=$?
    grep -E '^gochat:' "$out/offload-oom.log" | cut -c1-400
    echo "--- with --offload"
    timeout "$(budget 240)" "$gochat" "${sft[@]}" --offload --output-dir "$work/offload-ran" >"$out/offload-ran.log" 2>&1
    rc_ran=$?
    grep -E 'memory plan|"step":[0-9]|memory: device peak|^gochat:' "$out/offload-ran.log" | cut -c1-300
    line=$("$py" scripts/gpu_check_rows.py offload --limit $cap_bytes --refused "$out/offload-refused.log" --rc-refused $rc_refused \
      --oom "$out/offload-oom.log" --rc-oom $rc_oom --ran "$out/offload-ran.log" --rc-ran $rc_ran)
    record_line offload "$line" $(( $(date +%s) - t0 ))
    rm -rf "$work"/offload-*
  fi
fi
rm -rf "$work"

# 10. Summary.
section "summary ($(( $(date +%s) - t_all ))s${dry:+; GPU_CHECK_DRY: on the CPU, verdicts mean nothing})"
{
  printf '| %-12s | %-7s | %s\n' check result detail
  printf '|--------------|---------|--------\n'
  for i in "${!names[@]}"; do
    printf '| %-12s | %-7s | %s\n' "${names[$i]}" "${results[$i]}" "${details[$i]}"
  done
} | tee "$out/summary.txt"
for r in "${results[@]}"; do
  [ "$r" = FAIL ] && exit 1
done
exit 0
