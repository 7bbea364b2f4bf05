#!/usr/bin/python3
"""The DDP golden of issue 11, computed with PyTorch (run by hand, from the
repository root; Debian's python3-torch, CPU, gloo; it also needs Go):

    /usr/bin/python3 scripts/gen_ddp_golden.py

It writes internal/cli/testdata/ddp_golden.safetensors, which TestDDPGolden
(internal/cli/ddp_golden_test.go) compares `mpirun -np 2 gochat sft` with:

    go test ./internal/cli -run '^TestDDPGolden$' -v

1. The inputs come from gochat itself: the script runs
       GOCHAT_DDP_INPUTS=DIR go test ./internal/cli -run '^TestDDPGoldenInputs$' -count=1
   which writes DIR/model/config.json (the tiny OPT), DIR/inputs.json: the
   settings (ddpSFTArgs, as `gochat sft` resolves them), the training
   examples as gochat tokenizes them (ids, prompt length) and, for each of the
   10 steps, the micro-batches (example indices) each rank computes, taken
   from gochat's training loop (batch j of the run goes to rank j mod 2, the
   order a seeded permutation per epoch). `--inputs DIR` reuses such a
   directory instead.
2. The initial weights are init_params(cfg, Generator().manual_seed(SEED))
   of gen_model_golden.py (random biases and LayerNorm weights).
3. Two processes (torch.multiprocessing, gloo, file:// rendezvous) wrap the
   pure-torch OPT of gen_model_golden.py, in float64, in
   DistributedDataParallel and train 10 optimizer steps as DeepSpeed-Chat's
   SFT does: each rank runs its own micro-batches (right-padded, loss the mean
   over the micro-batch's response tokens), the first under no_sync() and the
   last synchronised, each loss divided by gradient_accumulation_steps; DDP
   averages the gradients over the 2 ranks, so the step's gradient is the sum
   of the 4 micro-batch gradients / 4, which is gochat's rule (sum over ranks,
   divided by the round's batch count over all ranks). Then
   clip_grad_norm_(max_grad_norm), AdamW (betas, eps; weight decay on all but
   biases and LayerNorm weights) and transformers' cosine schedule with
   warm-up, stepped after each step. Dropout is off (gochat: --dropout 0).
   Every step's rounds are full (24 examples, global batch 8); a short round
   at an epoch's end (gochat divides by the batches it has) is refused here.

The golden holds init.<name> and final.<name> (float32, Hugging Face names)
for every weight, the per-step loss (mean of the micro-batch losses over both
ranks), grad_norm (before clipping) and lr, and in its metadata the
config.json, the inputs.json (verbatim) and how it was made.
"""
import argparse
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_model_golden import init_params, opt_forward, write_safetensors  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
OUT = os.path.join(ROOT, "internal", "cli", "testdata", "ddp_golden.safetensors")
SEED = 2024
NO_DECAY = ["bias", "layer_norm.weight", "layernorm.weight", "norm.weight", "ln_f.weight"]


class TinyOPT(torch.nn.Module):
    """gen_model_golden's OPT as a module (DDP needs one), float64."""

    def __init__(self, cfg, p32):
        super().__init__()
        self.cfg = cfg
        self.names = sorted(p32)
        self.weights = torch.nn.ParameterList([torch.nn.Parameter(p32[n].double().clone()) for n in self.names])

    def named(self):
        return dict(zip(self.names, self.weights))

    def forward(self, ids, mask):
        return opt_forward(self.cfg, self.named(), ids, mask)[1]


def lr_lambda(hp, s):
    """transformers' get_scheduler factor at step s (0-based)."""
    warmup, total = hp["num_warmup_steps"], hp["steps"]
    if s < warmup:
        return s / max(1, warmup)
    if hp["lr_scheduler_type"] == "cosine":
        progress = (s - warmup) / max(1, total - warmup)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * 0.5 * 2.0 * progress)))
    if hp["lr_scheduler_type"] == "linear":
        return max(0.0, (total - s) / max(1, total - warmup))
    raise ValueError("schedule %r not implemented here" % hp["lr_scheduler_type"])


def collate(exs, hp):
    """DeepSpeed-Chat's SFT batch: right padding to max_seq_len, labels the
    ids (from the prompt's end with loss_on response), -100 elsewhere."""
    B, T = len(exs), hp["max_seq_len"]
    ids = torch.full((B, T), hp["pad_token_id"], dtype=torch.int64)
    mask = torch.zeros(B, T, dtype=torch.int64)
    labels = torch.full((B, T), -100, dtype=torch.int64)
    for b, ex in enumerate(exs):
        x = ex["ids"]
        n = len(x)
        assert n <= T
        ids[b, :n] = torch.tensor(x, dtype=torch.int64)
        mask[b, :n] = 1
        start = min(ex["prompt_len"], n) if hp["loss_on"] == "response" else 0
        labels[b, start:n] = ids[b, start:n]
    return ids, mask, labels


def worker(rank, cfg, inputs, p32, rdzv, result):
    torch.set_num_threads(1)
    hp = inputs["hparams"]
    world = hp["ranks"]
    dist.init_process_group("gloo", init_method="file://" + rdzv, rank=rank, world_size=world)
    module = TinyOPT(cfg, p32)
    model = DDP(module)
    named = module.named()
    groups = [
        {"params": [p for n, p in named.items() if not any(x in n for x in NO_DECAY)], "weight_decay": hp["weight_decay"]},
        {"params": [p for n, p in named.items() if any(x in n for x in NO_DECAY)], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=hp["learning_rate"], betas=tuple(hp["betas"]), eps=hp["eps"], foreach=False)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_lambda(hp, s))
    accum, exs = hp["gradient_accumulation_steps"], inputs["examples"]
    losses, norms, lrs = [], [], []
    for step, per_rank in enumerate(inputs["steps"]):
        if len(per_rank) != world or any(len(b) != accum for b in per_rank):
            raise SystemExit("step %d is a short round (%s): not what this reference computes" % (step + 1, per_rank))
        opt.zero_grad(set_to_none=False)
        local = 0.0
        for i, idx in enumerate(per_rank[rank]):
            ids, mask, labels = collate([exs[j] for j in idx], hp)
            sync = i == len(per_rank[rank]) - 1
            with contextlib.nullcontext() if sync else model.no_sync():
                logits = model(ids, mask)
                V = logits.shape[-1]
                loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1), ignore_index=-100)
                (loss / accum).backward()
            local += loss.item()
        norm = float(torch.nn.utils.clip_grad_norm_(module.parameters(), hp["max_grad_norm"]))
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
        total = torch.tensor([local], dtype=torch.float64)
        dist.all_reduce(total)
        losses.append(float(total) / (accum * world))
        norms.append(norm)
        if rank == 0:
            print("step %d: loss %.6f grad_norm %.6f lr %.6g" % (step + 1, losses[-1], norm, lrs[-1]))
    # Every rank holds the same weights (DDP): check it.
    flat = torch.cat([p.detach().reshape(-1) for p in module.weights])
    other = flat.clone()
    dist.broadcast(other, 0)
    assert torch.equal(flat, other), "ranks disagree"
    if rank == 0:
        torch.save({"final": {n: p.detach().float() for n, p in named.items()}, "loss": losses, "grad_norm": norms, "lr": lrs}, result)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--inputs", help="a directory TestDDPGoldenInputs wrote (default: run it)")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="ddp-golden-")
    inputs_dir = args.inputs
    if inputs_dir is None:
        inputs_dir = os.path.join(tmp, "inputs")
        env = dict(os.environ, GOCHAT_DDP_INPUTS=inputs_dir)
        subprocess.run(["go", "test", "./internal/cli", "-run", "^TestDDPGoldenInputs$", "-count=1"], cwd=ROOT, env=env, check=True)
    with open(os.path.join(inputs_dir, "model", "config.json")) as f:
        config_text = f.read()
    with open(os.path.join(inputs_dir, "inputs.json")) as f:
        inputs_text = f.read()
    cfg, inputs = json.loads(config_text), json.loads(inputs_text)
    p32 = init_params(cfg, torch.Generator().manual_seed(SEED))

    result = os.path.join(tmp, "result.pt")
    mp.spawn(worker, args=(cfg, inputs, p32, os.path.join(tmp, "rdzv"), result), nprocs=inputs["hparams"]["ranks"], join=True)
    res = torch.load(result)

    out = {}
    for n, v in p32.items():
        out["init.model.decoder." + n] = v
        out["final.model.decoder." + n] = res["final"][n]
    for k in ("loss", "grad_norm", "lr"):
        out[k] = torch.tensor(res[k], dtype=torch.float32)
    meta = {
        "config": config_text,
        "inputs": inputs_text,
        "init": "init_params(config, torch.Generator().manual_seed(%d)) of scripts/gen_model_golden.py" % SEED,
        "reference": "torch %s DistributedDataParallel, gloo, %d processes, float64; scripts/gen_ddp_golden.py" % (torch.__version__, inputs["hparams"]["ranks"]),
        "regenerate": "/usr/bin/python3 scripts/gen_ddp_golden.py",
    }
    write_safetensors(args.out, out, meta)
    shutil.rmtree(tmp)
    print("wrote", args.out, os.path.getsize(args.out), "bytes")


if __name__ == "__main__":
    main()
