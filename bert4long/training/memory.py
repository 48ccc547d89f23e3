"""How much memory a training step needs, and how much this machine has: the estimate `bert4long info` prints
by length and `finetune` checks before its first step. The attention kernels give their own score tensors'
share (``AttentionKernel.training_memory_bytes``); this module adds the weights, optimizer slots and activations.
"""
import os


def available_memory_bytes():
    """This machine's memory: MemAvailable from /proc/meminfo, else the physical memory."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")



def other_training_runs():
    """The process ids of the other ``bert4long pretrain`` and ``finetune`` commands running on this machine (read
    from /proc; this process and those that started it excluded; empty without /proc)."""
    def parent(pid):
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])

    mine, pid = set(), os.getpid()
    while pid > 1 and pid not in mine:
        mine.add(pid)
        try:
            pid = parent(pid)
        except (OSError, ValueError, IndexError):
            break
    found = []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:   # (not a process, or gone meanwhile)
            continue
        if entry.isdigit() and int(entry) not in mine and any(
                os.path.basename(a) in (b"bert4long", b"bert4long.cli") and b in (b"pretrain", b"finetune")
                for a, b in zip(argv, argv[1:])):
            found.append(int(entry))
    return sorted(found)



def training_step_bytes(config, parameters, kernel, length, batch=1):
    """Rough float32 bytes of one training step of ``batch`` rows of ``length`` tokens inside ``tf.function``: 1 GiB
    for the TensorFlow runtime, weights, gradients and AdamW's two slots (16 bytes a parameter), activations per layer and
    token (36 hidden-size and 6 intermediate-size floats) and the score tensors of ``kernel`` (an
    `AttentionKernel`: its `training_memory_bytes`). The activation
    factor is fitted to peaks measured on all-MiniLM-L6-v2 with chunked attention (1.8 / 2.4 / 3.6 / 5.0 GB
    at 1,024 / 2,048 / 4,096 / 8,192 tokens; this gives 1.9 / 2.6 / 3.9 / 6.3)."""
    hidden, layers, heads = config["hidden_size"], config["num_hidden_layers"], config["num_attention_heads"]
    intermediate = config.get("intermediate_size", 4 * hidden)
    activations = batch * layers * length * (36 * hidden + 6 * intermediate)
    scores = kernel.training_memory_bytes(batch=batch, heads=heads, length=length, layers=layers)
    return 2**30 + 16 * parameters + 4 * activations + scores
