// Package tensor reads and writes Hugging Face checkpoint files: safetensors files, PyTorch
// pytorch_model.bin files, and sharded sets of either described by a *.index.json file.
//
// # Formats
//
// A safetensors file is an unsigned 64-bit little-endian header length N, N bytes of UTF-8 JSON,
// then a data buffer. The JSON maps each tensor name to {"dtype", "shape", "data_offsets": [b, e]},
// where b and e are byte offsets relative to the start of the buffer; the optional key
// "__metadata__" maps strings to strings. Data is row-major and little-endian. The tensors must tile
// the buffer exactly: sorted by offset, each starts where the previous ends, and the last ends at
// the end of the file. Writers pad the header with spaces so the buffer starts at a multiple of 8.
//
// A pytorch_model.bin written by torch.save (torch>=1.6) is a zip archive of stored entries:
// <archive>/data.pkl is a pickle (protocol 2) of an OrderedDict from name to
// torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
// backward_hooks), where each storage is a persistent id ('storage', torch.HalfStorage (or Float,
// BFloat16, ...), key, location, numel) whose raw little-endian elements are the entry
// <archive>/data/<key>. Several tensors may share a storage (tied weights), and a tensor may be a
// strided view of it starting at an element offset. The legacy pre-zip torch.save format is also
// read. Pickles are decoded with github.com/nlpodyssey/gopickle under a restricted, non-executing
// class resolver, after a pass that checks every opcode and length against the input, so
// malformed files give errors, never panics or huge allocations. Any global other than torch's
// tensor-rebuilding functions and storage classes is inert: a pickle that calls or instantiates
// one (os.system, builtins.eval, ...) is refused with an error naming it ("refusing to execute
// os.system from the pickle").
//
// A sharded checkpoint is an index file, model.safetensors.index.json or
// pytorch_model.bin.index.json, {"metadata": {...}, "weight_map": {name: shard file}}, beside its
// shard files.
//
// # API
//
// Open opens one file or index, OpenDir a model directory. A Checkpoint parses and validates every
// header when opened but reads tensor data only on demand: ReadF32 reads one tensor's byte range
// straight from the file (in 1 MiB chunks, converting F16/BF16/F64 to float32 on the way), so a
// checkpoint is never held in memory, let alone twice. WriteSafetensors writes float32 data as
// F32, F16 or BF16, atomically and byte-identical to the Hugging Face writer. F16ToF32, F32ToF16,
// BF16ToF32 and F32ToBF16 convert single values exactly (round to nearest even) and have slice
// versions.
//
// Errors about file contents are *Error values naming the file and, where there is one, the
// tensor.
package tensor
