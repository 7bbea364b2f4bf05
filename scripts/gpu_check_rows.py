#!/usr/bin/env python3
"""Helpers of scripts/gpu-check.sh: the shortened recipe of the rlhf-run row,
and the verdict of the rows that compare or parse (train-bench,
decode-bench, rlhf-run, offload). Standard library only: it runs with
whatever Python the GPU machine has.

    gpu_check_rows.py recipe --set sft.max-steps=2 ... < RECIPE.yaml > SHORT.yaml
    gpu_check_rows.py train-bench --gpu NAME --gochat F... --torch F...
    gpu_check_rows.py decode-bench --gochat F... --hf F
    gpu_check_rows.py rlhf-run --log F --smi F --rc N
    gpu_check_rows.py offload --limit BYTES --refused F --rc-refused N --oom F --rc-oom N --ran F --rc-ran N

Each verdict prints a table of the figures on stderr and one line on stdout,
"PASS<TAB>detail" or "FAIL<TAB>detail", which gpu-check.sh records. Tested on
made-up logs by scripts/gpu_check_rows_test.py.
"""
import argparse
import datetime
import json
import os
import re
import sys

# Peak dense bf16 tensor-core throughput in TFLOP/s (no sparsity), from
# NVIDIA's datasheets, keyed by a substring of the GPU's name as the driver
# reports it ("NVIDIA H100 80GB HBM3" is the SXM part); the first match
# wins. GPU_PEAK_TFLOPS overrides; another GPU gets no MFU.
PEAK_BF16_TFLOPS = [
    ("H200 NVL", 835.0),
    ("H200", 989.0),
    ("H100 NVL", 835.0),
    ("H100 PCIe", 756.0),
    ("H100", 989.0),
    ("A100", 312.0),
]


def peak_tflops(gpu):
    env = os.environ.get("GPU_PEAK_TFLOPS")
    if env:
        return float(env), "GPU_PEAK_TFLOPS"
    for key, v in PEAK_BF16_TFLOPS:
        if key.lower() in (gpu or "").lower():
            return v, "datasheet, %s" % key
    return None, "no peak known for %r (set GPU_PEAK_TFLOPS)" % gpu


def json_lines(path):
    """The JSON objects of a file, one a line; other lines are skipped."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
    except OSError:
        pass
    return out


def gib(b):
    return "%.1f GiB" % (b / 2**30) if b is not None else "?"


def verdict(ok, detail):
    print("%s\t%s" % ("PASS" if ok else "FAIL", detail))
    return 0


def table(rows):
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)), file=sys.stderr)


# recipe: a built-in recipe with some flags of its steps replaced.
STEP = re.compile(r"^  (sft|reward|ppo):\s*$")
KEY = re.compile(r"^    ([A-Za-z0-9-]+):")


def shorten_recipe(text, sets):
    """Sets step flags (sets: {step: {flag: value}}) in a recipe whose steps
    are block mappings ("  sft:" then "    flag: value" lines): a flag the
    step has is replaced, one it lacks added at the end of its block."""
    out, cur = [], None

    def close():
        for k, v in sets.get(cur, {}).items():
            out.append("    %s: %s" % (k, v))

    for line in text.splitlines():
        if cur is not None:
            m = KEY.match(line)
            if m and m.group(1) in sets.get(cur, {}):
                continue
            if line.strip() and not line.startswith("    "):
                close()
                cur = None
        m = STEP.match(line)
        if m:
            cur = m.group(1)
        out.append(line)
    if cur is not None:
        close()
    missing = set(sets) - set(STEP.match(l).group(1) for l in text.splitlines() if STEP.match(l))
    if missing:
        raise SystemExit("recipe: no block for step(s) %s" % ", ".join(sorted(missing)))
    return "\n".join(out) + "\n"


def cmd_recipe(a):
    sets = {}
    for s in a.set:
        k, _, v = s.partition("=")
        step, _, flag = k.partition(".")
        if not flag or not v:
            raise SystemExit("--set %r: want STEP.FLAG=VALUE" % s)
        sets.setdefault(step, {})[flag] = v
    sys.stdout.write(shorten_recipe(sys.stdin.read(), sets))
    return 0


def cmd_train_bench(a):
    peak, src = peak_tflops(a.gpu)
    ours = {}
    for f in a.gochat:
        for r in json_lines(f):
            ours[r["model"]] = r
    theirs = {}
    for f in a.torch:
        for r in json_lines(f):
            theirs.setdefault(r["model"], {})[r["attn"]] = r

    def mfu(r):
        if not r or peak is None:
            return "-"
        return "%.1f%%" % (100 * 6 * r["params"] * r["tokens_per_sec"] / (peak * 1e12))

    rows = [("model", "BxT", "gochat tok/s", "MFU", "peak mem", "torch eager", "MFU", "peak mem", "torch sdpa", "MFU")]
    ok, parts = True, []
    for model in a.models.split(","):
        g, t = ours.get(model), theirs.get(model, {})
        e, s = t.get("eager"), t.get("sdpa")
        shape = "%dx%d" % (g["batch"], g["seq"]) if g else "?"
        rows.append((model, shape, g["tokens_per_sec"] if g else "-", mfu(g), gib(g["device_peak_bytes"]) if g else "-",
                     e["tokens_per_sec"] if e else "-", mfu(e), gib(e.get("device_peak_bytes")) if e else "-",
                     s["tokens_per_sec"] if s else "-", mfu(s)))
        if not g or not e:
            ok = False
            parts.append("%s: %s missing" % (model, "gochat" if not g else "torch eager"))
            continue
        ratio = g["tokens_per_sec"] / e["tokens_per_sec"]
        ok = ok and ratio >= 1
        p = "%s %s: gochat %.0f tok/s (MFU %s) vs eager %.0f (%s) %.2fx" % (
            model, shape, g["tokens_per_sec"], mfu(g), e["tokens_per_sec"], mfu(e), ratio)
        if s:
            p += ", sdpa %.0f" % s["tokens_per_sec"]
        parts.append(p)
    table(rows)
    print("MFU = 6 x params x tokens/s / %s TFLOP/s (%s); attention FLOPs not counted" % (peak, src), file=sys.stderr)
    return verdict(ok, "; ".join(parts) + "; MFU vs %s TFLOP/s (%s)" % (peak, src) if peak else "; ".join(parts) + "; " + src)


def cmd_decode_bench(a):
    ours = {}
    for f in a.gochat:
        for r in json_lines(f):
            ours[r["batch"]] = r
    hf = {r["batch"]: r for r in json_lines(a.hf)}
    rows = [("batch", "gochat tok/s", "(decode only)", "HF generate tok/s", "attn", "ratio")]
    ok, parts = True, []
    for b in (int(x) for x in a.batches.split(",")):
        g, h = ours.get(b), hf.get(b)
        if not g or not h:
            ok = False
            parts.append("batch %d: %s missing" % (b, "gochat" if not g else "HF generate"))
            rows.append((b, g["tokens_per_sec"] if g else "-", g["decode_tokens_per_sec"] if g else "-", h["tokens_per_sec"] if h else "-", h["attn"] if h else "-", "-"))
            continue
        ratio = g["tokens_per_sec"] / h["tokens_per_sec"]
        ok = ok and ratio >= 1
        rows.append((b, g["tokens_per_sec"], g["decode_tokens_per_sec"], h["tokens_per_sec"], h["attn"], "%.2fx" % ratio))
        parts.append("batch %d: gochat %.0f tok/s vs generate %.0f (%.2fx)" % (b, g["tokens_per_sec"], h["tokens_per_sec"], ratio))
    table(rows)
    any_r = next(iter(ours.values()), None)
    shape = " (%s, prompt %s, %s new, %s)" % (any_r["model"], any_r["prompt"], any_r["new"], any_r["dtype"]) if any_r else ""
    return verdict(ok, "; ".join(parts) + shape)


def parse_time(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def cmd_rlhf_run(a):
    recs = json_lines(a.log)
    start = None
    done, mem = {}, {}
    names = {"step 1 (sft)": 1, "step 2 (reward)": 2, "step 3 (ppo)": 3}
    for r in recs:
        t = parse_time(r["time"]) if "time" in r else None
        if start is None and t is not None:
            start = t
        msg = r.get("message", "")
        if msg == "step done":
            done[int(r["step"])] = (r.get("elapsed_seconds"), t)
        elif msg.startswith("memory: device peak") and r.get("step") in names:
            mem[names[r["step"]]] = r
    samples = []
    try:
        with open(a.smi) as f:
            for line in f:
                p = line.split()
                if len(p) == 2:
                    try:
                        samples.append((float(p[0]), float(p[1]) * 2**20))
                    except ValueError:
                        pass
    except OSError:
        pass
    rows = [("step", "seconds", "device peak (live)", "allocator held", "nvidia-smi max used")]
    parts = []
    prev = start
    for n in (1, 2, 3):
        secs, end = done.get(n, (None, None))
        m = mem.get(n, {})
        used = None
        if end is not None and prev is not None:
            # The log's times have whole seconds: a sample within a second
            # of the step's ends counts.
            inside = [b for t, b in samples if prev - 1 <= t <= end + 1]
            used = max(inside) if inside else None
        if end is not None:
            prev = end
        rows.append((n, secs if secs is not None else "-", gib(m.get("device_peak_bytes")),
                     gib(m.get("device_reserved_peak_bytes")), gib(used) if used is not None else "-"))
        if secs is not None:
            held = m.get("device_reserved_peak_bytes")
            note = ""
            if used is not None and held is not None and used - held > 2 * 2**30:
                # A CUDA context, cuBLAS's workspace and the kernels take
                # well under 2 GiB: more is memory this step's device does
                # not account for (an earlier step's, another process's).
                note = " [nvidia-smi %s over the allocator]" % gib(used - held)
            parts.append("step %d %.0fs, peak %s (held %s%s)%s" % (n, secs, gib(m.get("device_peak_bytes")),
                         gib(held), ", nvidia-smi %s" % gib(used) if used is not None else "", note))
    table(rows)
    ok = a.rc == 0 and all(n in done for n in (1, 2, 3)) and all(n in mem for n in (1, 2, 3))
    if not ok:
        last = next((r.get("error") or r.get("message") for r in reversed(recs) if r.get("level") in ("error", "fatal")), "")
        parts.append("rc %d, steps done %s%s" % (a.rc, sorted(done), ": " + last[:200] if last else ""))
    return verdict(ok, "; ".join(parts))


def lines_of(path):
    try:
        with open(path) as f:
            return [l.rstrip("\n") for l in f]
    except OSError:
        return []


def first_error(path, rc=None):
    """gochat's error line ("gochat: ...") in a log, or what the exit
    status says."""
    try:
        with open(path) as f:
            lines = [l.rstrip("\n") for l in f]
    except OSError:
        lines = []
    for l in reversed(lines):
        if l.startswith("gochat: "):
            return l[len("gochat: "):]
    if rc == 0:
        return "it ran to the end"
    if rc in (124, 137):
        return "timed out"
    return lines[-1][:200] if lines else "no output"


def cmd_offload(a):
    refused_msg, oom_msg = first_error(a.refused, a.rc_refused), first_error(a.oom, a.rc_oom)
    refused = a.rc_refused == 2 and "does not fit in GPU" in refused_msg
    # The allocator's error, wherever it surfaced (gochat's error line, or
    # a panic's message).
    oom_line = next((l for l in lines_of(a.oom) if "out of memory" in l and "limit" in l), "")
    oom = a.rc_oom != 0 and oom_line != ""
    if oom:
        oom_msg = oom_line
    ran = json_lines(a.ran)
    plan = {}
    for name, path in (("without", a.refused), ("with", a.ran)):
        for r in json_lines(path):
            if r.get("message", "").startswith("memory plan:"):
                plan[name] = r
    mem = next((r for r in ran if r.get("message", "").startswith("memory: device peak")), None)
    steps = max((r.get("step", 0) for r in ran if isinstance(r.get("step"), int) and "loss" in r), default=0)
    peak = mem.get("device_peak_bytes") if mem else None
    completed = a.rc_ran == 0 and mem is not None and peak is not None and peak <= a.limit
    rows = [("run", "exit", "planned GPU peak", "result")]
    rows.append(("without --offload", a.rc_refused, gib(plan.get("without", {}).get("estimated_peak_bytes")),
                 "refused by the pre-flight" if refused else refused_msg[:120]))
    rows.append(("without, --skip-preflight", a.rc_oom, "", "out of memory at the cap" if oom else oom_msg[:120]))
    rows.append(("with --offload", a.rc_ran, gib(plan.get("with", {}).get("estimated_peak_bytes")),
                 "%d steps, device peak %s, host state %s" % (steps, gib(peak), gib(plan.get("with", {}).get("host_state_bytes"))) if completed
                 else first_error(a.ran, a.rc_ran)[:120]))
    table(rows)
    detail = "cap %s: without --offload %s, %s; with --offload %s" % (
        gib(a.limit),
        "refused by the pre-flight (planned %s)" % gib(plan.get("without", {}).get("estimated_peak_bytes")) if refused else "NOT refused (rc %d: %s)" % (a.rc_refused, refused_msg[:100]),
        "and out of memory at the cap with --skip-preflight" if oom else "NOT out of memory with --skip-preflight (rc %d: %s)" % (a.rc_oom, oom_msg[:100]),
        "%d steps, device peak %s (planned %s), %s of optimizer state on the host" % (
            steps, gib(peak), gib(plan.get("with", {}).get("estimated_peak_bytes")), gib(plan.get("with", {}).get("host_state_bytes")))
        if completed else "FAILED (rc %d: %s)" % (a.rc_ran, first_error(a.ran, a.rc_ran)[:160]))
    return verdict(refused and oom and completed, detail)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("recipe")
    p.add_argument("--set", action="append", default=[], help="STEP.FLAG=VALUE")
    p.set_defaults(f=cmd_recipe)
    p = sub.add_parser("train-bench")
    p.add_argument("--gpu", default="")
    p.add_argument("--models", default="opt-125m,opt-1.3b")
    p.add_argument("--gochat", nargs="+", default=[])
    p.add_argument("--torch", nargs="+", default=[])
    p.set_defaults(f=cmd_train_bench)
    p = sub.add_parser("decode-bench")
    p.add_argument("--batches", default="1,16")
    p.add_argument("--gochat", nargs="+", default=[])
    p.add_argument("--hf", default="")
    p.set_defaults(f=cmd_decode_bench)
    p = sub.add_parser("rlhf-run")
    p.add_argument("--log", required=True)
    p.add_argument("--smi", default="")
    p.add_argument("--rc", type=int, required=True)
    p.set_defaults(f=cmd_rlhf_run)
    p = sub.add_parser("offload")
    p.add_argument("--limit", type=int, required=True)
    for n in ("refused", "oom", "ran"):
        p.add_argument("--" + n, required=True)
        p.add_argument("--rc-" + n, type=int, required=True)
    p.set_defaults(f=cmd_offload)
    a = ap.parse_args()
    return a.f(a)


if __name__ == "__main__":
    sys.exit(main())
