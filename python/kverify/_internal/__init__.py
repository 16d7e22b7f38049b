"""Internal modules: the candidate worker process and its helpers. Not a public API."""


def cpu_seconds(children: bool = True) -> float:
    """CPU seconds (user + system) of this process (all its threads) and, with ``children``, of its
    waited-for descendants (workers, sanitizer runs, compilers), from getrusage."""
    import resource

    usages = [resource.getrusage(resource.RUSAGE_SELF)]
    if children:
        usages.append(resource.getrusage(resource.RUSAGE_CHILDREN))
    return round(sum(u.ru_utime + u.ru_stime for u in usages), 2)
