#!/usr/bin/python3
"""Generate the checkpoint fixtures for the Go package tensor/ (tensor/testdata/).

Run by hand, never by CI:

    /usr/bin/python3 scripts/gen_tensor_fixtures.py

It needs PyTorch (tested with 1.13, the Debian python3-torch package) and nothing else. The
`safetensors` Python package is not needed: the golden .safetensors files are laid out here by hand
exactly as the Hugging Face Rust library (safetensors/src/tensor.rs, `prepare`) writes them:

  * u64 little-endian header length N, then N bytes of header, then the data buffer;
  * the header is compact JSON (serde_json: no spaces, non-ASCII written raw as UTF-8, control
    characters escaped), `__metadata__` first, then one entry per tensor in data order, each entry
    with its fields in the order dtype, shape, data_offsets;
  * tensors sorted by dtype in descending Rust enum order (U64, I64, F64, F32, U32, I32, BF16, F16,
    U16, I16, F8_E4M3, F8_E5M2, I8, U8, BOOL), then by name, laid out contiguously;
  * the header padded with spaces to a multiple of 8 bytes, so the buffer is 8-byte aligned.

Everything it writes is small (KBs) and deterministic (fixed seeds), so re-running it only changes
files when this script or PyTorch changes -- except pt_legacy.bin, whose storage keys are Python
object ids and so differ from run to run (its values do not). Expected values go to testdata/expected.json as float32
bit patterns (uint32) or int64 numbers, so the Go tests compare exactly.
"""

import collections
import json
import os
import struct
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tensor", "testdata")

# Rust `Dtype` declaration order (increasing alignment); files sort by it descending.
ST_ORDER = ["BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32",
            "F32", "F64", "I64", "U64"]
ST_NAME = {
    torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
    torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8",
    torch.uint8: "U8", torch.bool: "BOOL",
}
FLOATS = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def raw_bytes(t):
    """Little-endian bytes of a tensor in row-major order (bf16 through int16 bits)."""
    t = t.contiguous()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    assert sys.byteorder == "little"
    return t.numpy().tobytes()


def safetensors_bytes(tensors, metadata):
    """The bytes HF safetensors would write for {name: tensor} and metadata (or None)."""
    items = sorted(tensors.items(), key=lambda kv: (-ST_ORDER.index(ST_NAME[kv[1].dtype]), kv[0]))
    header = collections.OrderedDict()
    if metadata is not None:
        header["__metadata__"] = metadata
    offset = 0
    blobs = []
    for name, t in items:
        b = raw_bytes(t)
        header[name] = collections.OrderedDict(
            [("dtype", ST_NAME[t.dtype]), ("shape", list(t.shape)),
             ("data_offsets", [offset, offset + len(b)])])
        offset += len(b)
        blobs.append(b)
    # ensure_ascii=False + default escapes match serde_json's string escaping.
    h = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def write(path, data):
    with open(os.path.join(OUT, path), "wb") as f:
        f.write(data)


def f32bits(t):
    """float32 bit patterns of a float tensor's values, row-major, as Python ints."""
    f = t.to(torch.float32).contiguous()
    return [int(x) & 0xFFFFFFFF for x in f.view(torch.int32).flatten().tolist()]


def expected_entry(t):
    e = {"dtype": ST_NAME[t.dtype], "shape": list(t.shape)}
    if t.dtype in FLOATS:
        e["f32"] = f32bits(t)
    else:
        e["i64"] = [int(x) for x in t.to(torch.int64).flatten().tolist()]
    return e


def special(dtype):
    """Values that stress the conversions: signed zeros, infinities, NaN, extremes, subnormals."""
    if dtype == torch.float16:
        vals = [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 65504.0, -65504.0,
                2.0 ** -24, -(2.0 ** -24), 2.0 ** -14, 1023 * 2.0 ** -24, 1 / 3, -2.5, 1e-5]
    elif dtype == torch.bfloat16:
        vals = [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 3.3895313892515355e38,
                -3.3895313892515355e38, 2.0 ** -133, 2.0 ** -126, 1 / 3, -2.5, 1e-5]
    else:
        vals = [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 3.4028234663852886e38,
                1.401298464324817e-45, 1.1754943508222875e-38, 1 / 3, -2.5, 1e-5]
    return torch.tensor(vals, dtype=torch.float32).to(dtype)


def state_dict(dtype, seed):
    """A small OPT-like state dict exercising every .bin feature the reader supports."""
    g = torch.Generator().manual_seed(seed)
    emb = torch.randn(6, 4, generator=g).to(dtype)
    base = (torch.arange(20, dtype=torch.float32) * 0.25 - 2.0).reshape(4, 5).to(dtype)
    sd = collections.OrderedDict()
    sd["model.decoder.embed_tokens.weight"] = emb
    sd["lm_head.weight"] = emb  # tied: same storage, same view
    sd["model.decoder.layers.0.fc1.weight"] = torch.randn(3, 4, generator=g).to(dtype)
    sd["model.decoder.layers.0.fc1.bias"] = torch.randn(3, generator=g).to(dtype)
    # Non-contiguous view with a storage offset: size (3,3), stride (1,5), offset 6.
    sd["view.transposed"] = base[1:, 1:4].t()
    # Contiguous slice of another storage with an offset.
    sd["view.slice"] = torch.randn(10, generator=g).to(dtype)[3:7]
    # Stride-0 broadcast.
    sd["view.expanded"] = (torch.arange(3, dtype=torch.float32) + 0.5).to(dtype).expand(2, 3)
    sd["scalar"] = torch.tensor(1.5, dtype=torch.float32).to(dtype)  # 0-d
    sd["special"] = special(dtype)
    sd["positions"] = torch.tensor([0, 1, -1, 2 ** 40, -(2 ** 63), 2 ** 63 - 1], dtype=torch.int64)
    sd["empty"] = torch.zeros(0, 3, dtype=dtype)
    return sd


def main():
    os.makedirs(OUT, exist_ok=True)
    expected = collections.OrderedDict()

    def record(fname, sd):
        expected[fname] = collections.OrderedDict((k, expected_entry(v)) for k, v in sd.items())

    # --- pytorch_model.bin (zip format) per float dtype, and the legacy format -----------------
    for fname, dtype, seed in [("pt_f32.bin", torch.float32, 1), ("pt_f16.bin", torch.float16, 2),
                               ("pt_bf16.bin", torch.bfloat16, 3)]:
        sd = state_dict(dtype, seed)
        if dtype == torch.float32:
            sd["double"] = torch.tensor([[1.0, -2.5e-300], [1e300, 0.1]], dtype=torch.float64)
            sd["int32"] = torch.tensor([7, -7], dtype=torch.int32)
            sd["mask"] = torch.tensor([True, False, True])
            sd["bytes"] = torch.tensor([0, 255], dtype=torch.uint8)
        torch.save(sd, os.path.join(OUT, fname))
        record(fname, sd)
    # A real nn.Module state dict, as save_pretrained writes it: it carries a _metadata attribute
    # (pickled with BUILD) besides the tensors.
    torch.manual_seed(8)
    module = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.LayerNorm(2)).half()
    sd = module.state_dict()
    torch.save(sd, os.path.join(OUT, "pt_module.bin"))
    record("pt_module.bin", sd)
    sd = state_dict(torch.float32, 4)
    torch.save(sd, os.path.join(OUT, "pt_legacy.bin"), _use_new_zipfile_serialization=False)
    record("pt_legacy.bin", sd)

    # --- safetensors golden files ---------------------------------------------------------------
    g = torch.Generator().manual_seed(5)
    x32 = torch.randn(2, 3, generator=g)
    x16 = torch.randn(5, generator=g) * 1000  # f32 values rounded by torch to f16 / bf16
    st = collections.OrderedDict()
    st["b.weight"] = x32
    st["a.half"] = x16.half()
    st["a.bf16"] = x16.bfloat16()
    st["c.half_special"] = special(torch.float16)
    st["z.scalar"] = torch.tensor(3.0)
    st["empty"] = torch.zeros(0)
    st["ünïcödé\tname"] = torch.tensor([1.0, 2.0]).half()
    write("golden.safetensors", safetensors_bytes(st, {"format": "pt"}))
    record("golden.safetensors", st)
    # The float32 source values the Go writer starts from (the golden has torch's roundings).
    expected["golden.safetensors.source"] = collections.OrderedDict(
        [("a.half", {"f32": f32bits(x16)}), ("a.bf16", {"f32": f32bits(x16)}),
         ("c.half_special", {"f32": f32bits(special(torch.float16).float())}),
         ("ünïcödé\tname", {"f32": f32bits(torch.tensor([1.0, 2.0]))})])

    ints = collections.OrderedDict()
    ints["i64"] = torch.tensor([1, -2, 2 ** 62], dtype=torch.int64)
    ints["i32"] = torch.tensor([[3, -4]], dtype=torch.int32)
    ints["i16"] = torch.tensor([-5, 6], dtype=torch.int16)
    ints["i8"] = torch.tensor([-128, 127], dtype=torch.int8)
    ints["u8"] = torch.tensor([0, 200], dtype=torch.uint8)
    ints["bool"] = torch.tensor([True, False])
    ints["f64"] = torch.tensor([0.1, -1e-310, 1e300], dtype=torch.float64)
    write("dtypes.safetensors", safetensors_bytes(ints, None))
    record("dtypes.safetensors", ints)

    # --- one model, unsharded and sharded, in both formats ---------------------------------------
    g = torch.Generator().manual_seed(6)
    model = collections.OrderedDict()
    for i in range(2):
        model[f"model.decoder.layers.{i}.fc1.weight"] = torch.randn(3, 2, generator=g).half()
        model[f"model.decoder.layers.{i}.fc1.bias"] = torch.randn(3, generator=g).half()
    model["model.decoder.embed_tokens.weight"] = torch.randn(4, 2, generator=g).half()
    names = list(model)
    shards = [names[:2], names[2:]]
    for kind in ("st", "bin"):
        d = os.path.join(OUT, f"model_{kind}")
        sd = os.path.join(OUT, f"sharded_{kind}")
        os.makedirs(d, exist_ok=True)
        os.makedirs(sd, exist_ok=True)
        weight_map = collections.OrderedDict()
        for i, part in enumerate(shards):
            sub = collections.OrderedDict((k, model[k]) for k in part)
            if kind == "st":
                shard = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
                with open(os.path.join(sd, shard), "wb") as f:
                    f.write(safetensors_bytes(sub, {"format": "pt"}))
            else:
                shard = f"pytorch_model-{i + 1:05d}-of-{len(shards):05d}.bin"
                torch.save(sub, os.path.join(sd, shard))
            for k in part:
                weight_map[k] = shard
        total = sum(t.numel() * t.element_size() for t in model.values())
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        iname = "model.safetensors.index.json" if kind == "st" else "pytorch_model.bin.index.json"
        with open(os.path.join(sd, iname), "w") as f:
            json.dump(index, f, indent=2)
            f.write("\n")
        if kind == "st":
            with open(os.path.join(d, "model.safetensors"), "wb") as f:
                f.write(safetensors_bytes(model, {"format": "pt"}))
        else:
            torch.save(model, os.path.join(d, "pytorch_model.bin"))
    record("model", model)

    # --- conversion vectors: torch's own fp32 -> fp16 / bf16 rounding ---------------------------
    g = torch.Generator().manual_seed(7)
    xs = [torch.randn(100, generator=g) * s for s in (1e-6, 1e-3, 1.0, 1e3, 6e4, 1e30)]
    # Exact ties and near-ties in fp16 and bf16, around overflow and in the subnormal range.
    ties = [1 + 2 ** -11, 1 + 3 * 2 ** -11, 65520.0, 65519.99, 2 ** -25, 3 * 2 ** -25, 2 ** -26,
            1 + 2 ** -8, 1 + 3 * 2 ** -8, 3.3961775292304086e38, 1e-45]
    xs.append(torch.tensor(ties + [-v for v in ties], dtype=torch.float32))
    x = torch.cat(xs)
    convert = {
        "f32": f32bits(x),
        "f16": [int(v) & 0xFFFF for v in x.half().view(torch.int16).tolist()],
        "bf16": [int(v) & 0xFFFF for v in x.bfloat16().view(torch.int16).tolist()],
    }
    expected["convert"] = convert

    # One line per tensor: small, and diffs stay readable.
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        f.write("{\n")
        for i, (fname, tensors) in enumerate(expected.items()):
            f.write(" %s: {\n" % json.dumps(fname))
            for j, (name, e) in enumerate(tensors.items()):
                f.write("  %s: %s%s\n" % (json.dumps(name, ensure_ascii=False),
                                          json.dumps(e, separators=(",", ":")),
                                          "," if j + 1 < len(tensors) else ""))
            f.write(" }%s\n" % ("," if i + 1 < len(expected) else ""))
        f.write("}\n")
    print("wrote fixtures to", os.path.normpath(OUT))


if __name__ == "__main__":
    main()
