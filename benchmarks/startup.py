"""Start-up cost of the command and of the light imports: wall time and peak memory, median of fresh processes.

Rows: ``bert4long --help``, ``bert4long pretrain --help``, ``import bert4long.tokenizers``, ``import
bert4long`` and the first TensorFlow start (``import bert4long.layers``). Each runs ``--repeats``
times in a fresh interpreter (``python -m bert4long.cli`` for the command); the table shows the median
wall time, the median peak resident memory (the child's ``ru_maxrss``) and the 1-minute load average at the
start, since on a shared machine the load moves the times.

    python -m benchmarks.startup               # 5 runs a row -> benchmarks/results/startup.json
    python -m benchmarks.startup --quick       # 1 run a row (CI smoke) -> startup_quick.json
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

from benchmarks.common import ROOT, machine_stamp, print_table, write_json

HERE = os.path.dirname(os.path.abspath(__file__))
ROWS = {
    "bert4long --help": ["-m", "bert4long.cli", "--help"],
    "bert4long pretrain --help": ["-m", "bert4long.cli", "pretrain", "--help"],
    "import bert4long.tokenizers": ["-c", "import bert4long.tokenizers"],
    "import bert4long": ["-c", "import bert4long"],
    "import bert4long.layers (TensorFlow starts)": ["-c", "import bert4long.layers"],
}


def one_run(args):
    """Wall seconds and peak RSS (MiB) of ``python ARGS`` in a fresh process."""
    start = time.perf_counter()
    child = subprocess.Popen([sys.executable, *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": ROOT})
    _, status, usage = os.wait4(child.pid, 0)   # this child's own peak memory (ru_maxrss, KiB)
    seconds = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"python {' '.join(args)} exited {child.returncode}")
    return seconds, usage.ru_maxrss / 1024


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="one run a row")
    parser.add_argument("--out", default=os.path.join(HERE, "results", "startup.json"))
    args = parser.parse_args(argv)
    repeats = 1 if args.quick else args.repeats
    rows = []
    for name, command in ROWS.items():
        load = os.getloadavg()[0]
        runs = [one_run(command) for _ in range(repeats)]
        rows.append({"what": name, "runs": repeats, "median_s": round(statistics.median(r[0] for r in runs), 3),
                     "peak_rss_mib": round(statistics.median(r[1] for r in runs)), "load_1min": round(load, 2)})
    print_table(rows, ["what", "runs", "median_s", "peak_rss_mib", "load_1min"])
    out = args.out.replace(".json", "_quick.json") if args.quick else args.out
    write_json(out, {"machine": machine_stamp(), "rows": rows})
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
