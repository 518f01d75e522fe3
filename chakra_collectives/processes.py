"""Other processes, as the writers of multi-file outputs need to know them.

>>> import os
>>> is_running(os.getpid())
True
>>> is_running(2**22 + 12345)     # above Linux's largest process id
False
"""

from __future__ import annotations

import os


def is_running(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (one we may not signal counts)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OverflowError:  # not a process id at all
        return False
    return True


__all__ = ["is_running"]
