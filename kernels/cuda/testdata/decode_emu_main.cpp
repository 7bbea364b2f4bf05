// Runs flash decoding under host_emu.h: k_kv_cache_write, k_flash_decode
// and, when nsplit > 1, k_flash_decode_combine, launched as
// kernels/cuda/ops.go's decode launches them. Reads from stdin
// b tn t0 tmax nh nkv hs headmajor nsplit chunk hasmask (int32), then
// qkv[B,tn,W], kcache and vcache (B·Tmax·NKV·HS each; float32) and the
// mask[B,Tmax] (int32); writes out[B,tn,NH·HS], kcache and vcache
// (float32) to stdout. headmajor selects the caches [B,NKV,Tmax,HS]
// (GQAAttentionDecode), else [B,Tmax,NKV·HS] (AttentionDecode's OPT
// layout, NKV = NH).
int main() {
	int hdr[11];
	if (fread(hdr, 4, 11, stdin) != 11) return 2;
	int b = hdr[0], tn = hdr[1], t0 = hdr[2], tmax = hdr[3], nh = hdr[4], nkv = hdr[5], hs = hdr[6];
	int headmajor = hdr[7], nsplit = hdr[8], chunk = hdr[9], hasmask = hdr[10];
	long w = (long)(nh + 2 * nkv) * hs, cq = (long)nh * hs, nc = (long)b * tmax * nkv * hs;
	std::vector<float> qkv(b * tn * w), kc(nc), vc(nc), out(b * tn * cq);
	std::vector<float> part(nsplit > 1 ? (long)nsplit * b * nh * tn * (hs + 2) : 0);
	std::vector<int> mask(b * tmax);
	if (fread(qkv.data(), 4, qkv.size(), stdin) != qkv.size()) return 2;
	if (fread(kc.data(), 4, kc.size(), stdin) != kc.size() || fread(vc.data(), 4, vc.size(), stdin) != vc.size()) return 2;
	if (hasmask && fread(mask.data(), 4, mask.size(), stdin) != mask.size()) return 2;
	const int* m = hasmask ? mask.data() : 0;
	for (auto& x : out) x = NAN_F;
	for (auto& x : part) x = NAN_F;
	float scale = (float)(1 / std::sqrt((double)hs));
	i64 cb, ch, cp;
	if (headmajor) {
		cb = (i64)nkv * tmax * hs, ch = (i64)tmax * hs, cp = hs;
	} else {
		cb = (i64)tmax * nkv * hs, ch = hs, cp = (i64)nkv * hs;
	}
	emu_launch(3, 1, 1, 64, [&] { k_kv_cache_write(kc.data(), vc.data(), qkv.data(), b, tn, t0, nh, nkv, hs, cb, ch, cp); });
	unsigned ntiles = (tn + DEC_TQ - 1) / DEC_TQ;
	emu_launch(ntiles * nsplit, nh, b, DEC_THREADS, [&] {
		k_flash_decode(out.data(), part.data(), qkv.data(), kc.data(), vc.data(), m, tn, t0, nh, nkv, hs,
			(i64)tn * w, (int)w, cb, ch, cp, (int)cq, tmax, nsplit, chunk, scale);
	});
	if (nsplit > 1)
		emu_launch(3, 1, 1, 64, [&] { k_flash_decode_combine(out.data(), part.data(), b, tn, nh, hs, (int)cq, nsplit); });
	fwrite(out.data(), 4, out.size(), stdout);
	fwrite(kc.data(), 4, kc.size(), stdout);
	fwrite(vc.data(), 4, vc.size(), stdout);
	return 0;
}
