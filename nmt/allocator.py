"""tcmalloc instead of glibc's malloc, when the system has it.

Why: training allocates tensors of a new size with every batch, and glibc's allocator fragments
under that: the bench model's process grew from 0.7 to 1.7 GB in 300 steps, and 15-minute runs
peaked at 2-4 GB, while under tcmalloc it peaks at 1.0-1.1 GB and steps 5-8% faster
(docs/notes/performance-history.md, section 10). An allocator must be in place before the process starts, so
`nmt` starts itself again once with tcmalloc in LD_PRELOAD, as torch's own launcher does
(`python -m torch.backends.xeon.run_cpu --enable-tcmalloc`). NMT_ALLOCATOR=system keeps glibc's.

No torch here: this runs before anything heavy is imported.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys

SWITCH = "NMT_ALLOCATOR"  # "system": never preload
LIBRARIES = ("tcmalloc_minimal", "tcmalloc")  # Debian/Ubuntu: libtcmalloc-minimal4; Fedora: gperftools-libs
INSTALL_HINT = "install libtcmalloc-minimal4 (Debian, Ubuntu) or gperftools-libs (Fedora) for flat memory"


def in_use() -> str:
    """`tcmalloc` when this process runs on it, else `system`."""
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            return "tcmalloc" if any("libtcmalloc" in line for line in maps) else "system"
    except OSError:
        return "system"


def describe() -> str:
    """One line for logs and `nmt env`: the allocator, and how to get tcmalloc if it is missing."""
    name = in_use()
    if name == "tcmalloc" or sys.platform != "linux":
        return name
    if os.environ.get(SWITCH) == "system":
        return f"system (glibc; {SWITCH}=system)"
    return f"system (glibc; {INSTALL_HINT})"


def tcmalloc_library() -> str | None:
    """The name of the system's tcmalloc to preload, or None where there is none."""
    return next(filter(None, map(ctypes.util.find_library, LIBRARIES)), None)


def restart_with_tcmalloc() -> None:
    """Replace this process by the same command with tcmalloc preloaded (same pid, arguments,
    standard streams and environment), once; a no-op where there is none to preload."""
    if sys.platform != "linux":
        return
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # one held over a restart lands now
    if (
        os.environ.get(SWITCH) == "system"
        or "libtcmalloc" in os.environ.get("LD_PRELOAD", "")
        or os.environ.get(f"{SWITCH}_TRIED")  # the preload did not take: do not loop
    ):
        return
    library = tcmalloc_library()
    if library is None:
        return
    preload = " ".join(filter(None, [library, os.environ.get("LD_PRELOAD")]))
    # tcmalloc's per-thread caches (32 MB by default) kept growing over a long decode: 4 MB
    env = {"TCMALLOC_MAX_TOTAL_THREAD_CACHE_BYTES": str(4 << 20), **os.environ}
    env |= {"LD_PRELOAD": preload, f"{SWITCH}_TRIED": "1"}
    sys.stdout.flush()
    sys.stderr.flush()
    # Ctrl-C is held (the mask survives exec) until the new process can end quietly (nmt/__main__.py):
    # the interpreter's start-up would print a traceback for it
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    except OSError:  # the interpreter could not be started again (E2BIG, ENOMEM): go on without
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


class FreePages:
    """tcmalloc's free pages, handed back to the system when too many pile up; a no-op on any
    other allocator.

    Why: tcmalloc keeps the pages of freed memory for the next requests, but a request that no
    free span fits makes the heap grow instead, and the free spans stay resident. Greedy
    decoding's pool changes width from step to step, so its tensors change size, and over a
    long file 20-50 MiB of free pages stayed resident (docs/notes/performance-history.md, 10.4). Released
    pages cost a page fault when used again, so they are released only past a limit well above
    what one step frees and takes back.
    """

    def __init__(self) -> None:
        self._bytes = ctypes.c_size_t()
        try:
            lib = ctypes.CDLL(None)
            self._read = lib.MallocExtension_GetNumericProperty
            self._release = lib.MallocExtension_ReleaseFreeMemory
        except (AttributeError, OSError):  # not running on tcmalloc
            self._read = None
            return
        self._read.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t)]
        self._read.restype = ctypes.c_int

    def free(self) -> int | None:
        """Bytes in free pages still resident (None when not on tcmalloc)."""
        if self._read is None or not self._read(b"tcmalloc.pageheap_free_bytes", ctypes.byref(self._bytes)):
            return None
        return self._bytes.value

    def trim(self, limit: int) -> bool:
        """Hand the free pages back if more than `limit` bytes of them are resident; whether it did."""
        free = self.free()
        if free is None or free <= limit:
            return False
        self._release()
        return True
