#!/usr/bin/env python3
"""Registers a2 in a checkout of the Postgres job-queue harness
(hardbyte/postgresql-job-queue-benchmarking), whose adapters are listed in
`bench_harness/adapters.py`: appends (or replaces) a block that builds and
launches `a2-harness-adapter` from this repository.

usage: register.py HARNESS_DIR
"""
import sys
from pathlib import Path

BEGIN = "# --- a2: registered by a2's crates/a2-bench/harness/register.py ---"
END = "# --- end of a2 ---"

here = Path(__file__).resolve().parent
repo = here.parents[2]
block = f'''{BEGIN}
A2_REPO = Path({str(repo)!r})


def build_a2(skip: bool) -> None:
    if skip:
        return
    print("[harness] building a2-harness-adapter...", file=sys.stderr)
    subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "a2-bench", "--bin", "a2-harness-adapter"],
        cwd=str(A2_REPO),
        check=True,
    )


def launch_a2(manifest: AdapterManifest, overrides: dict[str, str]) -> LaunchSpec:
    return LaunchSpec(
        argv=[str(A2_REPO / "target" / "release" / "a2-harness-adapter")],
        env=_base_env(manifest, overrides),
    )


ADAPTERS["a2"] = AdapterEntry(
    bench_dir=A2_REPO / "crates" / "a2-bench" / "harness",
    builder=build_a2,
    launcher=launch_a2,
)
{END}
'''

if len(sys.argv) != 2:
    sys.exit(__doc__)
adapters = Path(sys.argv[1]) / "bench_harness" / "adapters.py"
if not adapters.is_file():
    sys.exit(f"{adapters}: not found (is {sys.argv[1]} a harness checkout?)")
text = adapters.read_text()
if BEGIN in text:
    start = text.index(BEGIN)
    end = text.index(END, start) + len(END) + 1
    text = text[:start] + text[end:]
for needed in ("ADAPTERS", "AdapterEntry", "LaunchSpec", "_base_env"):
    if needed not in text:
        sys.exit(f"{adapters}: has no {needed}; this harness version is not one register.py knows")
adapters.write_text(text.rstrip("\n") + "\n\n\n" + block)
print(f"a2 registered in {adapters}")
