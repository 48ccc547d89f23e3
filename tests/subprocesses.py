"""Child processes that a test starts side by side: never more at once than this process may use cores, so that a
suite run on a small machine does not overload it (each child is one TensorFlow process)."""
import concurrent.futures
import json
import os
import socket
import subprocess


def cores():
    """The cores this process may run on (its affinity where the platform tells it, else the machine's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def run_side_by_side(commands, **options):
    """``subprocess.run(argv, **options)`` for each ``{name: argv}`` of ``commands``, at most `cores()` at once, in
    the order given; ``{name: CompletedProcess}`` once all have ended."""
    with concurrent.futures.ThreadPoolExecutor(max(1, min(len(commands), cores()))) as pool:
        started = {name: pool.submit(subprocess.run, argv, **options) for name, argv in commands.items()}
        return {name: future.result() for name, future in started.items()}


def loopback_workers(count):
    """The ``TF_CONFIG`` of each of ``count`` worker processes of one `tf.distribute` job on free loopback ports."""
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    cluster = [f"127.0.0.1:{sock.getsockname()[1]}" for sock in sockets]
    for sock in sockets:
        sock.close()
    return [json.dumps({"cluster": {"worker": cluster}, "task": {"type": "worker", "index": index}})
            for index in range(count)]
