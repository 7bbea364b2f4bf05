#!/usr/bin/python3
"""Checks the memory planner against measured peak RSS (README.md, "Memory").

For each configuration it runs `gochat estimate CMD FLAGS --json`, then
`gochat CMD FLAGS` under /usr/bin/time -v, and prints one JSON line: the
estimated and measured device peak (the step logs kernels.MemStats), the
estimated peak and the measured maximum resident set size, and the error.

    /usr/bin/python3 scripts/measure_memory.py --gochat bin/gochat --models M --data D [NAME ...]

M holds random-init models from `gochat init --arch opt-125m|opt-350m|opt-1.3b
--output-dir M/ARCH --tokenizer ../shared/data/opt-tokenizer` and, for step 3's
critics and reward models, M/opt-125m-reward and M/opt-350m-reward from one step
of `gochat reward --model M/ARCH --data D --data-split 0,1,0 --max-steps 1
--output-dir M/ARCH-reward`; D is a folder
with train.jsonl (../shared/data/rm-static-sample/sample.jsonl) and test.jsonl
(its first 8 rows). --env GOGC=100,GOMEMLIMIT=off runs with Go's defaults
instead of the steps' own GC settings. Runs one configuration at a time: the
measurements need the machine to themselves.

    /usr/bin/python3 scripts/measure_memory.py --table RESULTS.jsonl ...

prints the README's table from such JSON lines (a later line of the same
configuration replaces an earlier one).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time


def configs(m, d):
    """The README's configurations: name -> (command, flags)."""
    def stage(model, split, *extra):
        return ["--model", os.path.join(m, model), "--data", d, "--data-split", split, *extra]

    def ppo(actor, critic, *extra):
        # The critic (and so the reward model, --reward's default) is a
        # step-2 output of the critic's architecture, as in DeepSpeed-Chat:
        # M/ARCH-reward (see the module doc).
        return ["--actor", os.path.join(m, actor), "--critic", os.path.join(m, critic + "-reward"), "--data", d, "--data-split", "0,0,1",
                "--max-prompt-seq-len", "128", "--max-answer-seq-len", "64", "--per-device-generation-batch-size", "4",
                "--num-warmup-steps", "0", *extra]
    seq = ["--max-seq-len", "256"]
    return {
        "sft-125m-fp32": ("sft", stage("opt-125m", "1,0,0", "--dtype", "fp32", *seq, "--per-device-train-batch-size", "4",
                                       "--per-device-eval-batch-size", "4", "--max-steps", "3")),
        "sft-125m-bf16-ckpt": ("sft", stage("opt-125m", "1,0,0", "--dtype", "bf16", *seq, "--per-device-train-batch-size", "4",
                                            "--per-device-eval-batch-size", "4", "--max-steps", "3", "--gradient-checkpointing")),
        "sft-350m-fp32-lora": ("sft", stage("opt-350m", "1,0,0", "--dtype", "fp32", *seq, "--per-device-train-batch-size", "4",
                                            "--per-device-eval-batch-size", "4", "--max-steps", "3", "--lora-dim", "64")),
        "reward-350m-fp32": ("reward", stage("opt-350m", "0,1,0", "--dtype", "fp32", *seq, "--per-device-train-batch-size", "2",
                                             "--per-device-eval-batch-size", "2", "--max-steps", "3")),
        "reward-350m-bf16-lora-ckpt": ("reward", stage("opt-350m", "0,1,0", "--dtype", "bf16", *seq, "--per-device-train-batch-size", "2",
                                                       "--per-device-eval-batch-size", "2", "--max-steps", "3", "--lora-dim", "128",
                                                       "--only-optimize-lora", "--gradient-checkpointing")),
        "sft-1.3b-fp32-lora-ckpt": ("sft", stage("opt-1.3b", "1,0,0", "--dtype", "fp32", *seq, "--per-device-train-batch-size", "2",
                                                 "--per-device-eval-batch-size", "2", "--max-steps", "2", "--lora-dim", "128",
                                                 "--only-optimize-lora", "--gradient-checkpointing")),
        "sft-1.3b-bf16-lora-ckpt": ("sft", stage("opt-1.3b", "1,0,0", "--dtype", "bf16", *seq, "--per-device-train-batch-size", "2",
                                                 "--per-device-eval-batch-size", "2", "--max-steps", "2", "--lora-dim", "128",
                                                 "--only-optimize-lora", "--gradient-checkpointing")),
        "ppo-125m-fp32": ("ppo", ppo("opt-125m", "opt-125m", "--dtype", "fp32", "--per-device-training-batch-size", "4",
                                     "--max-steps", "3")),
        "ppo-125m-fp32-lora-keep": ("ppo", ppo("opt-125m", "opt-125m", "--dtype", "fp32", "--per-device-training-batch-size", "2",
                                               "--max-steps", "3", "--actor-lora-dim", "32", "--critic-lora-dim", "32",
                                               "--keep-inference-cache", "--enable-ema")),
        "ppo-350m-bf16-ema": ("ppo", ppo("opt-350m", "opt-125m", "--dtype", "bf16", "--per-device-training-batch-size", "4",
                                         "--max-steps", "2", "--enable-ema")),
        "ppo-350m-bf16-ema-6": ("ppo", ppo("opt-350m", "opt-125m", "--dtype", "bf16", "--per-device-training-batch-size", "4",
                                           "--max-steps", "6", "--enable-ema")),
        "ppo-1.3b-350m-bf16-lora-ckpt": ("ppo", ppo("opt-1.3b", "opt-350m", "--dtype", "bf16", "--per-device-training-batch-size", "4",
                                                    "--max-steps", "2", "--actor-lora-dim", "128", "--only-optimize-lora",
                                                    "--actor-gradient-checkpointing", "--critic-gradient-checkpointing")),
    }


DESCRIPTIONS = {
    "sft-125m-fp32": "step 1, opt-125m, fp32",
    "sft-125m-bf16-ckpt": "step 1, opt-125m, bf16, checkpointing",
    "sft-350m-fp32-lora": "step 1, opt-350m, fp32, LoRA 64 on full training",
    "reward-350m-fp32": "step 2, opt-350m, fp32",
    "reward-350m-bf16-lora-ckpt": "step 2, opt-350m, bf16, LoRA 128 only, checkpointing",
    "sft-1.3b-fp32-lora-ckpt": "step 1, opt-1.3b, fp32, LoRA 128 only, checkpointing",
    "sft-1.3b-bf16-lora-ckpt": "step 1, opt-1.3b, bf16, LoRA 128 only, checkpointing",
    "ppo-125m-fp32": "step 3, opt-125m actor/critic/reward, fp32",
    "ppo-125m-fp32-lora-keep": "step 3, opt-125m, fp32, LoRA 32 on both (full training), EMA, --keep-inference-cache",
    "ppo-350m-bf16-ema": "step 3, opt-350m actor, opt-125m critic/reward, bf16, EMA, 2 rounds",
    "ppo-350m-bf16-ema-6": "the same, 6 rounds",
    "ppo-1.3b-350m-bf16-lora-ckpt": "step 3, opt-1.3b actor, opt-350m critic/reward, bf16, actor LoRA 128 only, checkpointing",
}


def table(paths):
    """Prints the README's markdown table from measure() records."""
    rows = {}
    for path in paths:
        for line in open(path):
            r = json.loads(line)
            rows[r["name"]] = r
    order = [n for n in DESCRIPTIONS if n in rows] + [n for n in rows if n not in DESCRIPTIONS]

    def flags(r):
        out, skip = [], False
        for f in r["flags"]:
            if skip:
                skip = False
                continue
            if f == "--data":
                skip = True
                continue
            if "/" in f and os.path.basename(f).startswith("opt-"):
                f = "M/" + os.path.basename(f)
            out.append(f)
        return " ".join(out)

    gb = lambda b: "%.2f GB" % (b / 1e9)
    print("| configuration | command (`gochat ...`) | device peak: estimated / measured | peak RSS: estimated / measured | error |")
    print("| --- | --- | --- | --- | --- |")
    for n in order:
        r = rows[n]
        dev = r.get("device_peak")
        print("| %s | `%s %s` | %s / %s | %s / %s | %+.1f%% |" % (
            DESCRIPTIONS.get(n, n), r["cmd"], flags(r), gb(r["est_device"]), gb(dev) if dev else "?",
            gb(r["est_peak"]), gb(r["rss"]), r["err_pct"]))


def measure(gochat, name, cmd, flags, env, out):
    p = subprocess.run([gochat, "estimate", cmd, *flags, "--json"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{name}: gochat estimate: {p.stderr}")
    est = json.loads(p.stdout)["steps"][0]["estimate"]
    shutil.rmtree(out, ignore_errors=True)
    start = time.time()
    p = subprocess.run(["/usr/bin/time", "-v", gochat, "--log-format", "json", cmd, *flags, "--output-dir", out,
                        "--data-cache", "off"], capture_output=True, text=True, env={**os.environ, **env})
    rec = {"name": name, "cmd": cmd, "flags": flags, "env": env, "rc": p.returncode, "seconds": round(time.time() - start, 1),
           "est_device": est["device_peak"], "est_peak": est["peak"]}
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    if m:
        rec["rss"] = int(m.group(1)) * 1024
        rec["err_pct"] = round(100 * (est["peak"] - rec["rss"]) / rec["rss"], 1)
    for line in p.stderr.splitlines():
        if '"device_peak_bytes"' in line:
            rec["device_peak"] = json.loads(line)["device_peak_bytes"]
    if p.returncode != 0:
        rec["stderr_tail"] = p.stderr[-2000:]
    shutil.rmtree(out, ignore_errors=True)  # checkpoints and models: gigabytes each
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gochat", default="bin/gochat")
    ap.add_argument("--models", help="folder of gochat init models: opt-125m, opt-350m, opt-1.3b")
    ap.add_argument("--data", help="folder with train.jsonl and test.jsonl")
    ap.add_argument("--env", default="", help="environment for the steps, e.g. GOGC=100,GOMEMLIMIT=off")
    ap.add_argument("--table", action="store_true", help="print the README table from the JSON lines files named")
    ap.add_argument("names", nargs="*", help="configurations (default: all), or with --table the files")
    a = ap.parse_args()
    if a.table:
        table(a.names)
        return
    if not a.models or not a.data:
        ap.error("--models and --data are required")
    env = dict(kv.split("=", 1) for kv in a.env.split(",") if kv)
    all_ = configs(a.models, a.data)
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.names or list(all_):
            cmd, flags = all_[name]
            print(json.dumps(measure(a.gochat, name, cmd, flags, env, os.path.join(tmp, name))), flush=True)


if __name__ == "__main__":
    main()
