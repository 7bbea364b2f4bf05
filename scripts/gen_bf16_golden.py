#!/usr/bin/python3
"""bf16 golden dumps for gochat's mixed-precision OPT, computed with PyTorch.

Run by hand (not by CI) with Debian's PyTorch:
    /usr/bin/python3 scripts/gen_bf16_golden.py

For the tiny pre-LN and post-LN OPTs of gen_model_golden.py (the same
weights: init_params from the same seed), it writes
model/testdata/golden/{preln,postln}/bf16.safetensors with a batch (ids, mask,
targets) and three answers:
  logits_bf16, loss_bf16   PyTorch's mixed precision: the weights rounded to
                           bf16 (what gochat's --dtype bf16 holds), the float32
                           forward under torch.autocast("cpu", torch.bfloat16):
                           matmul inputs in bf16 with fp32 accumulation,
                           LayerNorm, softmax and the loss in fp32
  logits_exact, loss_exact the same bf16-rounded weights in float64 (no
                           rounding of activations): the answer both
                           approximate, so a test can compare gochat's error
                           with PyTorch's own
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_model_golden as g  # noqa: E402


def case(name, cfg, value_head, seed):
    gen = torch.Generator().manual_seed(seed)
    params32 = g.init_params(cfg, gen, value_head)  # == golden/<name>/model.safetensors
    pb = {k: v.to(torch.bfloat16).float() for k, v in params32.items()}
    bgen = torch.Generator().manual_seed(1000 + seed)
    ids, mask, targets = g.make_batch(bgen, cfg["vocab_size"], 3, 8, "left", cfg["pad_token_id"])
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        y, logits = g.opt_forward(cfg, pb, ids, mask)
        logits = logits.float()
        loss = g.ce_loss(logits, targets)
    with torch.no_grad():
        _, exact = g.opt_forward(cfg, {k: v.double() for k, v in pb.items()}, ids, mask)
        loss_exact = g.ce_loss(exact, targets)
    out = {"ids": ids, "mask": mask, "targets": targets,
           "logits_bf16": logits.float(), "loss_bf16": loss.float().reshape(1),
           "logits_exact": exact.float(), "loss_exact": loss_exact.float().reshape(1)}
    # Gradients of the mean loss (plus values·dvalues with a value head),
    # under autocast and exactly.
    dvalues = torch.randn(ids.shape, generator=bgen, dtype=torch.float64) * mask
    if value_head:
        out["dvalues"] = dvalues.float()
    for kind in ("bf16", "exact"):
        if kind == "bf16":
            p = {k: v.clone().requires_grad_() for k, v in pb.items()}
            with torch.autocast("cpu", dtype=torch.bfloat16):
                y, lg = g.opt_forward(cfg, p, ids, mask)
                obj = g.ce_loss(lg.float(), targets)
                if value_head:
                    obj = obj + ((y @ p["v_head.weight"].T)[..., 0].float() * dvalues.float()).sum()
        else:
            p = {k: v.double().requires_grad_() for k, v in pb.items()}
            y, lg = g.opt_forward(cfg, p, ids, mask)
            obj = g.ce_loss(lg, targets)
            if value_head:
                obj = obj + ((y @ p["v_head.weight"].T)[..., 0] * dvalues).sum()
        obj.backward()
        for k, v in p.items():
            out[f"grad_{kind}." + k] = v.grad.float()
    g.write_safetensors(os.path.join(g.OUT, "golden", name, "bf16.safetensors"), out)
    err = (logits.double() - exact).abs().max().item()
    print(name, "loss bf16", loss.item(), "exact", loss_exact.item(), "max |logit err| of torch bf16", err)


if __name__ == "__main__":
    case("preln", g.PRE, False, 1)
    case("postln", g.POST, True, 2)
