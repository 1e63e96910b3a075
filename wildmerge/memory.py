"""Peak resident memory of the current process, for benchmarks and diagnostics (one definition, VmHWM)."""

import resource


def peak_rss_mib() -> float:
    """This process's own peak RSS (VmHWM). ``ru_maxrss`` is not used: Linux carries the parent's high-water mark
    into a child across fork + exec, so a child of a big parent would report the parent's peak."""
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
