"""Leak checks for the Python module's calls: peak RSS over one block of calls against the next.

A warm call that frees what it allocates leaves the peak where it was, so the second block of
`calls` grows it by nothing (a page or two of allocator noise); a leak of 100 bytes a call grows
it by ~1 MiB per 10,000 calls, in every block.
"""
import resource

BLOCK = 10000
MAX_GROWTH_KIB = 256  # a quarter of what a 100-byte-per-call leak adds in one block


def peak_kib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def growth_kib(call, block=BLOCK):
    """The peak RSS growth (KiB) over calls block+1 .. 2*block, after `block` warm-up calls."""
    for _ in range(block):
        call()
    before = peak_kib()
    for _ in range(block):
        call()
    return peak_kib() - before
