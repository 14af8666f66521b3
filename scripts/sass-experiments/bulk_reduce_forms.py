#!/usr/bin/env python3
"""The SASS cost of issuing one `cp.reduce.async.bulk` per row of a warp, in three forms
(docs/perf.md, "SM100 item 7's last two gaps", 2026-12-07).

Writes a small sm_100a kernel per form, assembles it with ptxas and disassembles it with
nvdisasm (both on PATH: scripts/install-cuda-tools.sh), and prints the `UBLKRED` count and
the SASS lines between consecutive `UBLKRED`s (per row) or, for the per-thread form, the
lines of the loop ptxas wraps around its one `UBLKRED`.

  thread  each thread issues its own row (GEMM2's epilogue today)
  shfl    one elected lane issues all 32 rows, destinations by shfl.sync.idx
  smem    the destinations staged in shared memory, read back at one address by all
          lanes, issued under elect.sync (unrolled)
"""
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HEAD = """.version 8.8
.target sm_100a
.address_size 64
.extern .shared .align 1024 .b8 smem[];
.visible .entry k(.param .u64 out, .param .u64 idx, .param .u32 bytes)
{
.reg .b32 %r<300>; .reg .b64 %rd<200>; .reg .pred %p<80>;
ld.param.u64 %rd1, [out]; ld.param.u64 %rd2, [idx]; ld.param.u32 %r1, [bytes];
mov.u32 %r2, %tid.x; and.b32 %r3, %r2, 31; shr.u32 %r4, %r2, 5;
mul.wide.u32 %rd3, %r2, 4; add.s64 %rd4, %rd2, %rd3; ld.global.u32 %r5, [%rd4];
setp.lt.s32 %p1, %r5, 0;
mul.wide.s32 %rd5, %r5, 14336; add.s64 %rd6, %rd1, %rd5;
mov.u32 %r6, smem; mad.lo.u32 %r7, %r2, 272, %r6;
mul.lo.u32 %r12, %r4, 8704; add.u32 %r13, %r6, %r12;
add.u32 %r9, %r6, 40000; mad.lo.u32 %r9, %r4, 256, %r9; mad.lo.u32 %r16, %r3, 8, %r9;
elect.sync %r11|%p2, -1;
mov.u32 %r8, 0;
$LOOP:
st.shared.v4.b32 [%r7], {%r8,%r8,%r8,%r8};
"""
TAIL = """add.u32 %r8, %r8, 1; setp.lt.u32 %p3, %r8, 10; @%p3 bra $LOOP;
cp.async.bulk.wait_group 0;
ret;
}
"""
RED = "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.noftz.bf16"


def body(form: str) -> str:
    if form == "thread":
        return (f"fence.proxy.async.shared::cta;\n@!%p1 {RED} [%rd6], [%r7], %r1;\n"
                "cp.async.bulk.commit_group;\n")
    out = ["fence.proxy.async.shared::cta;"]
    if form == "shfl":
        out += ["bar.warp.sync -1;", "vote.sync.ballot.b32 %r10, %p1, -1;",
                "mov.b64 {%r14,%r15}, %rd6;"]
        for i in range(32):
            out += [f"shfl.sync.idx.b32 %r{20 + 2 * i}, %r14, {i}, 31, -1;",
                    f"shfl.sync.idx.b32 %r{21 + 2 * i}, %r15, {i}, 31, -1;",
                    f"mov.b64 %rd{20 + i}, {{%r{20 + 2 * i},%r{21 + 2 * i}}};",
                    f"and.b32 %r{100 + i}, %r10, {1 << i};",
                    f"setp.eq.and.u32 %p{10 + i}, %r{100 + i}, 0, %p2;",
                    f"@%p{10 + i} {RED} [%rd{20 + i}], [%r13+{i * 272}], %r1;"]
    else:
        out += ["selp.b64 %rd7, 0, %rd6, %p1;", "st.shared.u64 [%r16], %rd7;",
                "bar.warp.sync -1;"]
        for i in range(32):
            out += [f"ld.shared.u64 %rd{20 + i}, [%r9+{8 * i}];",
                    f"setp.ne.and.b64 %p{10 + i}, %rd{20 + i}, 0, %p2;",
                    f"@%p{10 + i} {RED} [%rd{20 + i}], [%r13+{i * 272}], %r1;"]
    out.append("@%p2 cp.async.bulk.commit_group;")
    return "\n".join(out) + "\n"


def sass(ptx: str, work: Path) -> list[str]:
    (work / "k.ptx").write_text(ptx)
    subprocess.run(["ptxas", "-arch=sm_100a", "-o", str(work / "k.cubin"), str(work / "k.ptx")],
                   check=True)
    text = subprocess.run(["nvdisasm", "-c", str(work / "k.cubin")], check=True,
                          capture_output=True, text=True).stdout
    return [l for l in text.splitlines() if re.search(r"/\*[0-9a-f]{4}\*/", l)]


def main() -> int:
    with tempfile.TemporaryDirectory() as d:
        for form in ("thread", "shfl", "smem"):
            lines = sass(HEAD + body(form) + TAIL, Path(d))
            at = [i for i, l in enumerate(lines) if "UBLKRED" in l]
            if form == "thread":
                # The lane loop: from its ELECT to its backward BRA.U.ANY.
                start = max(i for i in range(at[0]) if "ELECT" in lines[i])
                end = next(i for i in range(at[0], len(lines)) if "BRA.U.ANY" in lines[i])
                per_row = end - start + 1
            else:
                per_row = (at[-1] - at[0]) / (len(at) - 1)
            print(f"{form:6} UBLKRED {len(at):2}  SASS per row {per_row:g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
