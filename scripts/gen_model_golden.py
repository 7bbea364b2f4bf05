#!/usr/bin/python3
"""Golden dumps for gochat's OPT model tests, computed with PyTorch.

Run by hand (not by CI) with Debian's PyTorch:
    apt-get install -y python3-torch && /usr/bin/python3 scripts/gen_model_golden.py

It writes, under model/testdata/:
  golden/{preln,postln}/config.json, model.safetensors   tiny OPTs (F32 weights)
  golden/{preln,postln}/{left,right}.safetensors         inputs and expected outputs
  formats/*/                                             one tiny model in every file
                                                          layout gochat must read
  formats/expected.safetensors                           its inputs and logits

The OPT forward below follows transformers' modeling_opt.py (eager attention)
line by line (see the note on masked scores in opt_forward): positions from the attention mask with offset 2, the additive
mask with the dtype's most negative finite value, q scaled after the bias,
pre-LN and post-LN layer orders, project_in/project_out, tied lm_head.
Everything is computed in float64 from float32 weights, so the dumps are the
exact answer that gochat's float32 arithmetic approximates.
"""
import json
import os
import struct

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model", "testdata")

# --------------------------------------------------------------------------
# safetensors writer (the file format spec: u64 header length, JSON header
# padded with spaces to a multiple of 8, then the tensors back to back).

DT = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
      torch.int64: "I64", torch.int32: "I32", torch.float64: "F64"}


def tensor_bytes(t):
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().tobytes()
    return t.numpy().tobytes()


def write_safetensors(path, tensors, metadata=None):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        b = tensor_bytes(t)
        header[name] = {"dtype": DT[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


# --------------------------------------------------------------------------
# OPT, as transformers computes it.

def param_shapes(cfg, value_head=False):
    H, F, P, V = cfg["hidden_size"], cfg["ffn_dim"], cfg["word_embed_proj_dim"], cfg["vocab_size"]
    s = {"embed_tokens.weight": (V, P), "embed_positions.weight": (cfg["max_position_embeddings"] + 2, H)}
    if P != H:
        s["project_in.weight"] = (H, P)
        s["project_out.weight"] = (P, H)
    if cfg["do_layer_norm_before"] and not cfg.get("_remove_final_layer_norm", False):
        s["final_layer_norm.weight"] = (H,)
        s["final_layer_norm.bias"] = (H,)
    for l in range(cfg["num_hidden_layers"]):
        p = f"layers.{l}."
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            s[p + f"self_attn.{n}.weight"] = (H, H)
            s[p + f"self_attn.{n}.bias"] = (H,)
        for n in ("self_attn_layer_norm", "final_layer_norm"):
            s[p + n + ".weight"] = (H,)
            s[p + n + ".bias"] = (H,)
        s[p + "fc1.weight"] = (F, H)
        s[p + "fc1.bias"] = (F,)
        s[p + "fc2.weight"] = (H, F)
        s[p + "fc2.bias"] = (H,)
    if value_head:
        s["v_head.weight"] = (1, P)
    return s


def init_params(cfg, gen, value_head=False):
    ps = {}
    for name, shape in param_shapes(cfg, value_head).items():
        if "layer_norm" in name and name.endswith(".weight"):
            t = 1 + 0.2 * torch.randn(shape, generator=gen)
        elif name.endswith(".bias"):
            t = 0.1 * torch.randn(shape, generator=gen)
        elif "embed" in name:
            t = 0.5 * torch.randn(shape, generator=gen)
        else:
            t = torch.randn(shape, generator=gen) / shape[-1] ** 0.5
        ps[name] = t.float()
    return ps


def layer_norm(x, w, b):
    return torch.nn.functional.layer_norm(x, x.shape[-1:], w, b, eps=1e-5)


def opt_forward(cfg, p, ids, mask):
    """Returns (hidden states after project_out [B,T,P], logits [B,T,V])."""
    H, NH, P = cfg["hidden_size"], cfg["num_attention_heads"], cfg["word_embed_proj_dim"]
    HS = H // NH
    B, T = ids.shape
    dt = p["embed_tokens.weight"].dtype
    x = p["embed_tokens.weight"][ids]
    if P != H:
        x = x @ p["project_in.weight"].T
    pos = (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() - 1
    h = x + p["embed_positions.weight"][pos + 2]

    minv = torch.finfo(dt).min
    causal = torch.full((T, T), minv, dtype=dt)
    cond = torch.arange(T)
    causal.masked_fill_(cond < (cond + 1).view(T, 1), 0)
    causal = causal[None, None].expand(B, 1, T, T)
    expanded = mask[:, None, None, :].expand(B, 1, T, T).to(dt)
    inverted = 1.0 - expanded
    inverted = inverted.masked_fill(inverted.to(torch.bool), minv)
    mask4 = causal.masked_fill(inverted.bool(), minv)

    pre = cfg["do_layer_norm_before"]
    act = torch.relu if cfg["activation_function"] == "relu" else torch.nn.functional.gelu
    for l in range(cfg["num_hidden_layers"]):
        q_ = lambda n: p[f"layers.{l}.{n}"]
        r = h
        if pre:
            h = layer_norm(h, q_("self_attn_layer_norm.weight"), q_("self_attn_layer_norm.bias"))
        q = (h @ q_("self_attn.q_proj.weight").T + q_("self_attn.q_proj.bias")) * HS ** -0.5
        k = h @ q_("self_attn.k_proj.weight").T + q_("self_attn.k_proj.bias")
        v = h @ q_("self_attn.v_proj.weight").T + q_("self_attn.v_proj.bias")
        sh = lambda t: t.view(B, T, NH, HS).transpose(1, 2)
        w = (sh(q) @ sh(k).transpose(-1, -2)).to(dt)  # bf16 under autocast; the mask is added in dt
        # transformers adds mask4 and clamps at minv; every masked score then
        # equals minv exactly (the score is absorbed). Writing minv in place
        # of masked scores computes the same values and gives them the
        # derivative of that computed function, zero, instead of an
        # artefact of autograd through the absorbed addition (which differs
        # between transformers versions: full, or halved by the clamp's tie).
        # It matters only for a loss read at a left-padding position.
        w = torch.where(mask4 < 0, torch.full_like(w, minv), w)
        w = torch.softmax(w, dim=-1)
        o = (w @ sh(v)).transpose(1, 2).reshape(B, T, H)
        o = o @ q_("self_attn.out_proj.weight").T + q_("self_attn.out_proj.bias")
        h = r + o
        if not pre:
            h = layer_norm(h, q_("self_attn_layer_norm.weight"), q_("self_attn_layer_norm.bias"))
        r = h
        if pre:
            h = layer_norm(h, q_("final_layer_norm.weight"), q_("final_layer_norm.bias"))
        h = act(h @ q_("fc1.weight").T + q_("fc1.bias"))
        h = h @ q_("fc2.weight").T + q_("fc2.bias")
        h = r + h
        if not pre:
            h = layer_norm(h, q_("final_layer_norm.weight"), q_("final_layer_norm.bias"))
    if "final_layer_norm.weight" in p:
        h = layer_norm(h, p["final_layer_norm.weight"], p["final_layer_norm.bias"])
    if P != H:
        h = h @ p["project_out.weight"].T
    return h, h @ p["embed_tokens.weight"].T


def ce_loss(logits, targets):
    V = logits.shape[-1]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-100)


# --------------------------------------------------------------------------

def make_batch(gen, V, B, T, side, pad_id):
    lens = [T, T - 3, T - 1][:B]
    ids = torch.randint(3, V, (B, T), generator=gen)
    mask = torch.zeros(B, T, dtype=torch.int64)
    for b, n in enumerate(lens):
        if side == "left":
            mask[b, T - n:] = 1
        else:
            mask[b, :n] = 1
    ids = torch.where(mask.bool(), ids, torch.full_like(ids, pad_id))
    labels = torch.where(mask.bool(), ids, torch.full_like(ids, -100))
    targets = torch.full_like(labels, -100)
    targets[:, :-1] = labels[:, 1:]
    return ids, mask, targets


def golden_case(name, cfg, value_head, seed):
    gen = torch.Generator().manual_seed(seed)
    params32 = init_params(cfg, gen, value_head)
    d = os.path.join(OUT, "golden", name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
    write_safetensors(os.path.join(d, "model.safetensors"),
                      {("model.decoder." + k if not k.startswith("v_head") else k): v for k, v in params32.items()},
                      {"format": "pt"})
    for side in ("left", "right"):
        ids, mask, targets = make_batch(gen, cfg["vocab_size"], 3, 8, side, cfg["pad_token_id"])
        p = {k: v.double().requires_grad_() for k, v in params32.items()}
        y, logits = opt_forward(cfg, p, ids, mask)
        loss = ce_loss(logits, targets)
        obj = loss
        out = {"ids": ids, "mask": mask, "targets": targets,
               "logits": logits.detach().float(), "loss": loss.detach().float().reshape(1)}
        if value_head:
            values = (y @ p["v_head.weight"].T)[..., 0]
            dvalues = torch.randn(values.shape, generator=gen, dtype=torch.float64) * mask
            obj = loss + (values * dvalues).sum()
            out["values"] = values.detach().float()
            out["dvalues"] = dvalues.float()
        obj.backward()
        for k, v in p.items():
            out["grad." + k] = v.grad.float()
        # Ten AdamW steps on the mean loss, from the same float32 weights.
        p = {k: v.double().requires_grad_() for k, v in params32.items()}
        opt = torch.optim.AdamW(list(p.values()), lr=1e-3, betas=(0.9, 0.95), eps=1e-8,
                                weight_decay=0.01, foreach=False)
        losses = []
        for _ in range(10):
            opt.zero_grad()
            _, logits = opt_forward(cfg, p, ids, mask)
            loss = ce_loss(logits, targets)
            losses.append(loss.item())
            loss.backward()
            opt.step()
        out["adamw_losses"] = torch.tensor(losses, dtype=torch.float32)
        write_safetensors(os.path.join(d, side + ".safetensors"), out)
        print(name, side, "loss", out["loss"].item(), "adamw", losses[0], "->", losses[-1])


def round_to_bf16_and_fp16(t):
    t = t.to(torch.bfloat16).float()
    return torch.where(t.abs() < 2 ** -14, torch.zeros_like(t), t)


def formats():
    """One tiny pre-LN OPT written in every layout the loader must read."""
    cfg = dict(PRE)
    gen = torch.Generator().manual_seed(7)
    ps = {k: round_to_bf16_and_fp16(v) for k, v in init_params(cfg, gen).items()}
    assert all(torch.equal(v.half().float(), v) for v in ps.values())
    root = os.path.join(OUT, "formats")

    def put(sub, cfg_=cfg):
        d = os.path.join(root, sub)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg_, f, indent=2, sort_keys=True)
        return d

    full = {"model.decoder." + k: v for k, v in ps.items()}
    write_safetensors(os.path.join(put("safetensors"), "model.safetensors"), full, {"format": "pt"})

    # fp16 .bin, lm_head tied: both names share one storage (state_dict of a tied model).
    sd = {k: v.half() for k, v in full.items()}
    sd["lm_head.weight"] = sd["model.decoder.embed_tokens.weight"]
    torch.save(sd, os.path.join(put("bin_fp16_tied"), "pytorch_model.bin"))

    # bf16 .bin, lm_head stored a second time as its own copy.
    sd = {k: v.bfloat16() for k, v in full.items()}
    sd["lm_head.weight"] = sd["model.decoder.embed_tokens.weight"].clone()
    torch.save(sd, os.path.join(put("bin_bf16_copy"), "pytorch_model.bin"))

    # fp32 .bin of the base model (OPTModel names "decoder.*"), one weight a
    # transposed view with a storage offset to exercise strides.
    sd = {"decoder." + k: v.clone() for k, v in ps.items()}
    big = torch.zeros(5, *reversed(ps["layers.0.fc1.weight"].shape))
    big[2] = ps["layers.0.fc1.weight"].T
    sd["decoder.layers.0.fc1.weight"] = big[2].T
    assert not sd["decoder.layers.0.fc1.weight"].is_contiguous()
    torch.save(sd, os.path.join(put("bin_base_strided"), "pytorch_model.bin"))

    # Sharded safetensors: two shards and an index.
    d = put("sharded")
    names = sorted(full)
    half = len(names) // 2
    shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    wm = {}
    for fn, ns in shards.items():
        write_safetensors(os.path.join(d, fn), {n: full[n].half() for n in ns}, {"format": "pt"})
        wm.update({n: fn for n in ns})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(v.numel() * 2 for v in full.values())}, "weight_map": wm}, f, indent=2)

    # DeepSpeed-Chat reward-model names: rwtransformer.decoder.* + v_head.weight.
    vh = round_to_bf16_and_fp16(torch.randn(1, cfg["word_embed_proj_dim"], generator=gen))
    rw = {"rwtransformer.decoder." + k: v for k, v in ps.items()}
    rw["v_head.weight"] = vh
    write_safetensors(os.path.join(put("rw_valuehead"), "model.safetensors"), rw)

    ids, mask, _ = make_batch(gen, cfg["vocab_size"], 3, 8, "left", cfg["pad_token_id"])
    p = {k: v.double() for k, v in ps.items()}
    y, logits = opt_forward(cfg, p, ids, mask)
    write_safetensors(os.path.join(root, "expected.safetensors"),
                      {"ids": ids, "mask": mask, "logits": logits.float(),
                       "values": (y @ vh.double().T)[..., 0].float()})
    print("formats: written")


BASE = {"model_type": "opt", "architectures": ["OPTForCausalLM"], "vocab_size": 96, "max_position_embeddings": 16,
        "num_attention_heads": 4, "ffn_dim": 48, "num_hidden_layers": 2, "activation_function": "relu",
        "dropout": 0.1, "attention_dropout": 0.0, "bos_token_id": 2, "eos_token_id": 2, "pad_token_id": 1,
        "enable_bias": True, "layer_norm_elementwise_affine": True, "torch_dtype": "float32"}
PRE = dict(BASE, hidden_size=32, word_embed_proj_dim=32, do_layer_norm_before=True, _remove_final_layer_norm=False)
POST = dict(BASE, hidden_size=32, word_embed_proj_dim=16, do_layer_norm_before=False, _remove_final_layer_norm=False)

if __name__ == "__main__":
    torch.manual_seed(0)
    golden_case("preln", PRE, False, 1)
    golden_case("postln", POST, True, 2)
    formats()
