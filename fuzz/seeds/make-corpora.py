#!/usr/bin/env python3
"""Write the seed corpora fuzz/corpus/<target>/ from the sample bundles (run from fuzz/).

Small on purpose (a few KB per target): slices of sample traces around PSBs, the sample
bundle.toml files, and a 624-byte ELF (seeds/tiny.elf, from seeds/tiny.c with
`gcc -nostdlib -static -Os -fno-asynchronous-unwind-tables -Wl,--build-id=none -Wl,-n -s`).
"""
import os
import struct

S = "../datasets/samples"
PSB = bytes([0xC0] + [0] * 8)


def trace(name):
    return open(f"{S}/{name}/trace.rtit", "rb").read()


def psbs(d):
    out, i = [], 0
    while (j := d.find(PSB, i)) >= 0:
        out.append(j)
        i = j + 1
    return out


def put(target, name, data):
    os.makedirs(f"corpus/{target}", exist_ok=True)
    with open(f"corpus/{target}/{name}", "wb") as f:
        f.write(data)


# packets: raw slices, some starting at a PSB, some mid-stream.
for name, start, n in [
    ("jumptable", 4097, 512),
    ("recursion", 8192 - 40, 512),
    ("kernel-processes", 4096, 512),
    ("strings", 200, 400),
    ("busybox-sort", 4098, 384),
]:
    put("packets", f"{name}-{start}", trace(name)[start : start + n])
for name in ["scenario-table3", "scenario-figure6", "scenario-figure7"]:
    put("packets", name, trace(name))

# sync_ring: u16 ring offset, u16 window probe, then a dump whose PSB straddles the seam.
for name, k in [("jumptable", 3), ("busybox-gzip-ring", 2), ("synthetic", 5)]:
    d = trace(name)
    p = psbs(d)[k]
    lin = d[p - 200 : p + 300]
    cut = 204  # the PSB at 200..209 in time order crosses the end of the file
    dump = lin[cut:] + lin[:cut]
    put("sync_ring", name, struct.pack("<HH", len(dump) - cut, 198) + dump)
d = trace("busybox-gzip-ring")
put("sync_ring", "gzip-ring-head", struct.pack("<HH", 300, 290) + d[:600])

# walk and stitch_diff: [flags, ratio, ctl lo, ctl hi] + trace (the target puts a PSB in
# front). flags bit 0: image set (0 jumptable, 1 kernel-processes); bit 1: ratio given.
walk = [
    ("jumptable", 0, 0xEB0B, 2),
    ("synthetic", 0, 0xAF0B, 4),
    ("kernel-processes", 1, 0x2F1D, 6),
]
for name, sel, ctl, k in walk:
    d = trace(name)
    p = psbs(d)[k]
    head = bytes([sel | 2, 20]) + struct.pack("<H", ctl)
    put("walk", name, head + d[p + 9 : p + 9 + 1024])
    # Across a PSB: a stretch of one chunk, the PSB, the start of the next.
    q = psbs(d)[k + 1]
    put("stitch_diff", name, head + d[q - 300 : q + 700])
    put("stitch_diff", name + "-from-psb", head + d[p + 9 : p + 9 + 700])

# bundle_toml: sample manifests.
for name in ["jumptable", "kernel-processes", "busybox-gzip-ring", "strings", "scenario-table3"]:
    put("bundle_toml", name, open(f"{S}/{name}/bundle.toml", "rb").read())

# elf: a tiny static executable, and the same cut short.
elf = open("seeds/tiny.elf", "rb").read()
put("elf", "tiny", elf)
put("elf", "tiny-cut", elf[:200])

# stretch: [flags, ratio, ctl lo, ctl hi, prefix length] + prefix + unit; the target
# repeats the unit to 256 KiB between two copies of the prefix. The prefix: a stretch of
# real trace that ends inside a traced region (or with a FUP.PGD); the unit: a PSB and
# MTCs (each with its CYC when cycle-accurate), as a core sends while nothing branches.
MTC_UNIT = PSB + b"".join(bytes([0xC4, i]) for i in range(40))
MTC_CYC_UNIT = PSB + b"".join(bytes([0xC4, i, (10 << 2) | 1]) for i in range(40))
for name, sel, ctl, k, unit in [
    ("jumptable", 0, 0x2309, 2, MTC_UNIT),
    ("jumptable", 0, 0x230B, 3, MTC_CYC_UNIT),
    ("kernel-processes", 1, 0x2F1D, 6, MTC_CYC_UNIT),
]:
    d = trace(name)
    p = psbs(d)[k]
    prefix = d[p + 9 : p + 9 + 200]
    head = bytes([sel | 2, 20]) + struct.pack("<H", ctl) + bytes([len(prefix)])
    put("stretch", f"{name}-{ctl:x}", head + prefix + unit)
# A unit of real trace: TNT-rich code repeated (a loop that never ends).
d = trace("jumptable")
p = psbs(d)[2]
put("stretch", "jumptable-loop", bytes([2, 20]) + struct.pack("<H", 0xEB0B) + bytes([0]) + d[p : p + 300])
# The shape behind the 4.15 GB: a FUP.PGE then a FUP.PGD (zero-extended 4-byte IPs), whose
# look-ahead for a TIP meets nothing but PSBs and MTCs.
pge_pgd = bytes([0x85]) + struct.pack("<I", 0x401000) + bytes([0x8D]) + struct.pack("<I", 0x401000)
put("stretch", "pgd-then-idle", bytes([2, 20]) + struct.pack("<H", 0x2309) + bytes([len(pge_pgd)]) + pge_pgd + MTC_UNIT)
