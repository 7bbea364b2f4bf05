// Runs the flash attention kernels under host_emu.h: reads
// b t nh nkv hs hasmask, then qkv, dout (float32) and the mask (int32) from
// stdin, writes out, lse and dqkv (float32) to stdout.
int main() {
	int hdr[6];
	if (fread(hdr, 4, 6, stdin) != 6) return 2;
	int b = hdr[0], t = hdr[1], nh = hdr[2], nkv = hdr[3], hs = hdr[4], hasmask = hdr[5];
	long w = (long)(nh + 2 * nkv) * hs, cq = (long)nh * hs;
	std::vector<float> qkv(b * t * w), dout(b * t * cq), out(b * t * cq), lse(b * nh * t), dqkv(b * t * w), dsum(b * nh * t);
	std::vector<int> mask(b * t);
	if (fread(qkv.data(), 4, qkv.size(), stdin) != qkv.size() || fread(dout.data(), 4, dout.size(), stdin) != dout.size()) return 2;
	if (hasmask && fread(mask.data(), 4, mask.size(), stdin) != mask.size()) return 2;
	const int* m = hasmask ? mask.data() : 0;
	float scale = (float)(1 / std::sqrt((double)hs));
	for (auto& x : out) x = NAN_F;
	for (auto& x : lse) x = NAN_F;
	for (auto& x : dqkv) x = NAN_F;
	unsigned nqt = (t + FLASH_TQ - 1) / FLASH_TQ, nkt = (t + FLASH_TK - 1) / FLASH_TK;
	emu_launch(nqt, nh, b, FLASH_THREADS, [&] { k_flash_fwd(out.data(), lse.data(), qkv.data(), m, t, nh, nkv, hs, scale); });
	emu_launch(nqt, nh, b, FLASH_THREADS, [&] { k_flash_bwd_dq(dqkv.data(), dsum.data(), dout.data(), qkv.data(), lse.data(), m, t, nh, nkv, hs, scale); });
	emu_launch(nkt, nkv, b, FLASH_THREADS, [&] { k_flash_bwd_dkdv(dqkv.data(), dout.data(), qkv.data(), lse.data(), dsum.data(), m, t, nh, nkv, hs, scale); });
	fwrite(out.data(), 4, out.size(), stdout);
	fwrite(lse.data(), 4, lse.size(), stdout);
	fwrite(dqkv.data(), 4, dqkv.size(), stdout);
	return 0;
}
