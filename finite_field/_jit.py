"""Numba kernels that compile (or load from numba's cache) on their first call, not at import.

``numba.njit(signature, cache=True)`` compiles at decoration time: importing a module of
kernels imports numba (about 0.25 s of CPU on a quiet machine), loads every kernel from
the cache, and the first load also starts numba's compiler (its typing and target
contexts, LLVM: about 0.4 s more). Every process that imports a kernel module paid that,
the party processes included, before they could join a session. :func:`kernel` takes the
same arguments and defers all of it, numba's import included, to the kernel's first call,
with the same explicit signature, so behaviour (argument conversion, layouts, the cache
files) is unchanged. A signature that needs numba's type objects (a read-only array) is
given as a function returning it, called then.

:func:`kernel` without a signature is ``numba.njit(**options)`` (typed by its arguments),
just as lazily: the functions that kernels call (``_mod_float``, ``_reduce``) are made so.
Before a kernel compiles, the lazy kernels it names are replaced in its module's
namespace by their numba dispatchers, so numba types them inside their callers.

A process that knows it will need its kernels soon but is waiting now (a party that sent
its hello and waits for the roster) calls :func:`warm_up` in a background thread: the
loads then overlap the wait instead of the next phase.

With ``NUMBA_DISABLE_JIT=1`` the first call finds the plain Python function (what
``numba.njit`` returns then), so the same source runs uncompiled.

>>> @kernel("int64(int64)", cache=False)
... def twice(x):
...     return 2 * x
>>> twice.compiled
False
>>> twice(21), twice.compiled
(42, True)
"""

from __future__ import annotations

import functools
import logging
import threading

__all__ = ["Warming", "kernel", "num_threads", "warm_up", "warm_up_in_background"]

logger = logging.getLogger(__name__)

_LOCK = threading.RLock()
#: Every kernel defined so far (in the modules imported so far), in definition order.
_REGISTRY: list = []


def num_threads() -> int:
    """``numba.get_num_threads()`` (numba imported on the first use)."""
    import numba

    return numba.get_num_threads()


class LazyKernel:
    """A numba kernel compiled on its first call (thread-safe: kernels run in several
    Python threads at once)."""

    def __init__(self, py_func, signature, options: dict) -> None:
        self._py_func, self._signature, self._options = py_func, signature, options
        self._dispatcher = None
        functools.update_wrapper(self, py_func)
        _REGISTRY.append(self)

    @property
    def compiled(self) -> bool:
        """Whether the first call (the compilation or the cache load) has happened."""
        return self._dispatcher is not None

    def dispatcher(self):
        """The numba dispatcher (or, with JIT disabled, the Python function)."""
        if self._dispatcher is None:
            with _LOCK:
                if self._dispatcher is None:
                    import numba

                    scope = self._py_func.__globals__
                    for name in self._py_func.__code__.co_names:  # callees first
                        if isinstance(scope.get(name), LazyKernel):
                            scope[name] = scope[name].dispatcher()
                    signature = self._signature
                    if callable(signature):
                        signature = signature()
                    jit = numba.njit(**self._options) if signature is None else \
                        numba.njit(signature, **self._options)
                    self._dispatcher = jit(self._py_func)
        return self._dispatcher

    def __call__(self, *args):
        dispatcher = self._dispatcher
        if dispatcher is None:
            dispatcher = self.dispatcher()
        return dispatcher(*args)

    def __getattr__(self, name):
        # what the dispatcher has (py_func, signatures, overloads, ...), after compiling
        # it; with JIT disabled the Python function has none of them
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.dispatcher(), name)

    def __repr__(self) -> str:
        return f"<kernel {self.__qualname__}{'' if self.compiled else ' (not compiled yet)'}>"


def kernel(signature=None, **options):
    """``numba.njit(signature, **options)`` compiled on the first call (see the module);
    ``signature`` is a string, a function returning numba types, or None (typed by the
    arguments)."""
    def wrap(py_func):
        return LazyKernel(py_func, signature, options)
    return wrap


def warm_up(stop: threading.Event | None = None) -> int:
    """Compile (load from the cache) every kernel of the modules imported so far that has
    not run yet; how many. Meant for a background thread (see :func:`warm_up_in_background`):
    a kernel that fails here fails again, with its error, where it is called. With
    ``stop`` it ends before the next kernel once ``stop`` is set."""
    done = 0
    for lazy in list(_REGISTRY):
        if stop is not None and stop.is_set():
            break
        if lazy.compiled:
            continue
        try:
            lazy.dispatcher()
        except Exception as error:  # pragma: no cover - reported again by the real call
            logger.debug("warming %s failed: %s", lazy.__qualname__, error)
            continue
        done += 1
    return done


class Warming:
    """:func:`warm_up` in a background thread, stopped by :meth:`stop`."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=warm_up, args=(self._stop,),
                                        name="omnifc-warm-up", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop before the next kernel and wait (at most ``timeout`` s) for the one
        loading; whether the thread has ended.

        A process must not exit while the thread is inside numba's compiler: the exit
        freezes it there, holding numba's lock, and whatever needs that lock during the
        exit waits forever.
        """
        self._stop.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            logger.warning("the kernel warm-up did not stop within %g s", timeout)
            return False
        return True


def warm_up_in_background() -> Warming:
    """Start :func:`warm_up` in a background thread; call ``stop()`` on the result before
    the process exits.

    >>> warming = warm_up_in_background()
    >>> warming.stop()
    True
    """
    return Warming()
