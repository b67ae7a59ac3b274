"""benchmarks/common.py: the shared helpers the benchmarks time and describe their runs with."""

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_process_start_is_the_moment_the_process_was_created():
    # A child reports its own creation time; it was created between the two readings of the parent's clock. The boot
    # time in /proc/stat is a whole second, so reading it instead would put the start up to 1 s early.
    before = time.time()
    out = subprocess.run([sys.executable, "-c", "import json, time\nfrom memrl_benchmarks.common import process_start\n"
                          "print(json.dumps([process_start(), time.time()]))"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    after = time.time()
    started, reported = json.loads(out)
    assert before - 0.02 <= started <= reported <= after  # one clock tick (10 ms) of rounding, and some slack
