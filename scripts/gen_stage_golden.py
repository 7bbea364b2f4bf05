#!/usr/bin/python3
"""Golden dumps for steps 1 and 2, computed with PyTorch (run by hand):
    /usr/bin/python3 scripts/gen_stage_golden.py

sft/testdata/<case>.safetensors: one optimizer step of DeepSpeed-Chat's SFT
(mean next-token loss, loss scaled by 1/gradient_accumulation_steps per
micro-batch, clip_grad_norm_(1.0), AdamW betas (0.9, 0.95) eps 1e-8 with
weight decay on all but biases and LayerNorm weights, LoRA weights at their
own learning rate) from the tiny OPTs of gen_model_golden.py. Cases: plain,
accum2 (two micro-batches), lora (rank 4 on every decoder-layer linear).
Stored: the micro-batches, the initial LoRA weights, and every weight after
the step.

reward/testdata/<model>.safetensors: REFERENCE.md §4's pairwise loss on a
value-head model: chosen/rejected ids and masks, values, scores, the loss and
every parameter gradient.
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_model_golden import POST, PRE, init_params, opt_forward, write_safetensors  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
NO_DECAY = ["bias", "layer_norm.weight", "layernorm.weight", "norm.weight", "ln_f.weight"]
LINEARS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj", "fc1", "fc2"]


def lora_forward_params(cfg, p, lora, scaling):
    """Returns params whose linear weights include the LoRA term, built so
    autograd reaches both the base weights and the adapters:
    x·Wᵀ + (x·right)·left·s == x·(W + s·(right·left)ᵀ)ᵀ."""
    q = dict(p)
    for l in range(cfg["num_hidden_layers"]):
        for n in LINEARS:
            k = f"layers.{l}.{n}"
            q[k + ".weight"] = p[k + ".weight"] + scaling * (lora[k + ".lora_right_weight"] @ lora[k + ".lora_left_weight"]).T
    return q


def batch(gen, V, B, T, prompt_lens):
    """Right-padded SFT micro-batch: ids, mask, HF labels (prompt masked for
    response-only loss), as DeepSpeed-Chat's collator makes them."""
    ids = torch.full((B, T), 1, dtype=torch.int64)
    mask = torch.zeros(B, T, dtype=torch.int64)
    labels = torch.full((B, T), -100, dtype=torch.int64)
    for b in range(B):
        n = T - b  # row b has b padding positions
        ids[b, :n] = torch.randint(3, V, (n,), generator=gen)
        ids[b, 0] = 2
        mask[b, :n] = 1
        labels[b, prompt_lens[b]:n] = ids[b, prompt_lens[b]:n]
    return ids, mask, labels


def lm_loss(cfg, p, ids, mask, labels):
    _, logits = opt_forward(cfg, p, ids, mask)
    V = logits.shape[-1]
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1), ignore_index=-100)


def sft_case(name, cfg, micro, use_lora, seed):
    gen = torch.Generator().manual_seed(seed)
    p32 = init_params(cfg, gen)
    lr, lora_lr, wd, r, scaling = 1e-3, 5e-3, 0.1, 4, 1.0 / 4
    lora32 = {}
    if use_lora:
        H, F = cfg["hidden_size"], cfg["ffn_dim"]
        io = {"self_attn.q_proj": (H, H), "self_attn.k_proj": (H, H), "self_attn.v_proj": (H, H),
              "self_attn.out_proj": (H, H), "fc1": (H, F), "fc2": (F, H)}
        for l in range(cfg["num_hidden_layers"]):
            for n in LINEARS:
                i, o = io[n]
                k = f"layers.{l}.{n}"
                lora32[k + ".lora_right_weight"] = ((torch.rand(i, r, generator=gen) * 2 - 1) / math.sqrt(r)).float()
                # Non-zero left weights, so the first step moves both matrices.
                lora32[k + ".lora_left_weight"] = (0.1 * torch.randn(r, o, generator=gen)).float()
    batches = [batch(gen, cfg["vocab_size"], 3, 8, [2, 3, 1]) for _ in range(micro)]

    p = {k: v.double().requires_grad_() for k, v in p32.items()}
    lo = {k: v.double().requires_grad_() for k, v in lora32.items()}
    for ids, mask, labels in batches:
        q = lora_forward_params(cfg, p, lo, scaling) if use_lora else p
        (lm_loss(cfg, q, ids, mask, labels) / micro).backward()
    params = list(p.values()) + list(lo.values())
    gnorm = float(torch.nn.utils.clip_grad_norm_(params, 1.0))  # the norm before clipping
    groups = [
        {"params": [v for k, v in p.items() if not any(n in k for n in NO_DECAY)], "weight_decay": wd, "lr": lr},
        {"params": [v for k, v in p.items() if any(n in k for n in NO_DECAY)], "weight_decay": 0.0, "lr": lr},
    ]
    if use_lora:
        groups.append({"params": list(lo.values()), "weight_decay": wd, "lr": lora_lr})
    opt = torch.optim.AdamW(groups, betas=(0.9, 0.95), eps=1e-8, foreach=False)
    opt.step()

    out = {}
    for i, (ids, mask, labels) in enumerate(batches):
        out[f"mb{i}.ids"], out[f"mb{i}.mask"], out[f"mb{i}.labels"] = ids, mask, labels
    for k, v in lora32.items():
        out["lora0." + k] = v
    for k, v in p.items():
        out["after." + k] = v.detach().float()
    for k, v in lo.items():
        out["after.lora." + k] = v.detach().float()
    out["grad_norm"] = torch.tensor([gnorm], dtype=torch.float32)
    model_dir = os.path.join(ROOT, "sft", "testdata", name)
    os.makedirs(model_dir, exist_ok=True)
    import json
    with open(os.path.join(model_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    write_safetensors(os.path.join(model_dir, "model.safetensors"), {"model.decoder." + k: v for k, v in p32.items()}, {"format": "pt"})
    write_safetensors(os.path.join(model_dir, "step.safetensors"), out)
    print("sft", name, "grad norm", gnorm)


def reward_case(name, cfg, seed):
    gen = torch.Generator().manual_seed(seed)
    p32 = init_params(cfg, gen, value_head=True)
    B, T, V = 4, 9, cfg["vocab_size"]
    cid = torch.full((B, T), 1, dtype=torch.int64)
    rid = torch.full((B, T), 1, dtype=torch.int64)
    cm = torch.zeros(B, T, dtype=torch.int64)
    rm = torch.zeros(B, T, dtype=torch.int64)
    # (prompt length, chosen length, rejected length); pair 3 is identical.
    shapes = [(3, 7, 5), (4, 6, 9), (2, 9, 9), (3, 6, 6)]
    for b, (pl, lc, lr_) in enumerate(shapes):
        prompt = torch.randint(3, V, (pl,), generator=gen)
        c = torch.cat([prompt, torch.randint(3, V, (lc - pl,), generator=gen)])
        r = torch.cat([prompt, torch.randint(3, V, (lr_ - pl,), generator=gen)])
        if b == 3:
            r = c.clone()
        cid[b, :lc], cm[b, :lc] = c, 1
        rid[b, :lr_], rm[b, :lr_] = r, 1
    p = {k: v.double().requires_grad_() for k, v in p32.items()}
    ids, mask = torch.cat([cid, rid]), torch.cat([cm, rm])
    y, _ = opt_forward(cfg, p, ids, mask)
    values = (y @ p["v_head.weight"].T)[..., 0]
    vc, vr = values[:B], values[B:]
    loss = 0
    cs, rs = [], []
    for b in range(B):
        ec, er = int(cm[b].sum()), int(rm[b].sum())
        end = max(ec, er)
        diff = (cid[b, :end] != rid[b, :end]).nonzero()
        div = int(diff[0]) if len(diff) else end - 1
        loss = loss - torch.nn.functional.logsigmoid(vc[b, div:end] - vr[b, div:end]).mean()
        cs.append(vc[b, ec - 1])
        rs.append(vr[b, er - 1])
    loss = loss / B
    loss.backward()
    out = {"chosen_ids": cid, "rejected_ids": rid, "chosen_mask": cm, "rejected_mask": rm,
           "values": values.detach().float(), "loss": loss.detach().float().reshape(1),
           "chosen_scores": torch.stack(cs).detach().float(), "rejected_scores": torch.stack(rs).detach().float()}
    for k, v in p.items():
        out["grad." + k] = v.grad.float()
    d = os.path.join(ROOT, "reward", "testdata", name)
    os.makedirs(d, exist_ok=True)
    import json
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    write_safetensors(os.path.join(d, "model.safetensors"),
                      {("model.decoder." + k if k != "v_head.weight" else k): v for k, v in p32.items()}, {"format": "pt"})
    write_safetensors(os.path.join(d, "pairs.safetensors"), out)
    print("reward", name, "loss", float(loss))


if __name__ == "__main__":
    sft_case("plain", PRE, 1, False, 11)
    sft_case("accum2", POST, 2, False, 12)
    sft_case("lora", PRE, 1, True, 13)
    reward_case("preln", PRE, 21)
    reward_case("postln", POST, 22)
