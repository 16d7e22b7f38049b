"""Internal modules: the candidate worker process and its helpers. Not a public API."""

#: "0" in a worker's environment: PyTorch runs without cuDNN in that worker (torch.backends.cudnn
#: .enabled = False: its own convolution kernels instead). G11 sets it for its racecheck runs
#: (kverify.gates.g11_memory_safety.NO_CUDNN_TOOLS).
CUDNN_ENV = "KVERIFY_CUDNN"


def cpu_seconds(children: bool = True) -> float:
    """CPU seconds (user + system) of this process (all its threads) and, with ``children``, of its
    waited-for descendants (workers, sanitizer runs, compilers), from getrusage."""
    import resource

    usages = [resource.getrusage(resource.RUSAGE_SELF)]
    if children:
        usages.append(resource.getrusage(resource.RUSAGE_CHILDREN))
    return round(sum(u.ru_utime + u.ru_stime for u in usages), 2)
