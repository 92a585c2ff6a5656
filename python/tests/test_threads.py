"""The GIL is released during load and verify; progress and cancellation."""
import sys
import threading
import time

import numpy as np
import pytest

import ptd


class Ticker:
    """A thread that counts 1 ms sleeps. With a huge switch interval, Python
    never forces the main thread to give up the GIL: the ticker runs only
    while native code has released it (or the main thread sleeps)."""

    def __init__(self):
        self.ticks = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            time.sleep(0.001)
            self.ticks += 1

    def __enter__(self):
        self.old = sys.getswitchinterval()
        self.thread.start()
        time.sleep(0.05)
        sys.setswitchinterval(100.0)
        return self

    def __exit__(self, *exc):
        sys.setswitchinterval(self.old)
        self.stop.set()
        self.thread.join()


def during(fn):
    with Ticker() as t:
        start_ticks, t0 = t.ticks, time.perf_counter()
        result = fn()
        elapsed, ticks = time.perf_counter() - t0, t.ticks - start_ticks
    return result, elapsed, ticks


def test_second_thread_runs_during_load(big_file):
    p, m, weights = big_file
    loaded, elapsed, ticks = during(lambda: ptd.load(p, manifest=m, device="host", threads=1))
    assert loaded.stats["bytes"] == 64 << 20
    assert ticks > 0, f"no tick in a {elapsed * 1e3:.0f} ms load: the GIL was held"
    np.testing.assert_array_equal(np.from_dlpack(loaded["layers.3.w"]), weights["layers.3.w"])


def test_second_thread_runs_during_verify(big_file):
    p, m, _ = big_file
    report, elapsed, ticks = during(lambda: ptd.verify(p, manifest=m, digest=True))
    assert report.ok
    assert ticks > 0, f"no tick in a {elapsed * 1e3:.0f} ms verify: the GIL was held"


def test_progress_reaches_total(big_file):
    p, m, _ = big_file
    calls = []
    ptd.load(p, manifest=m, device="host", progress=lambda d, t: calls.append((d, t)))
    assert len(calls) > 1
    assert all(t == 64 << 20 for _, t in calls)
    done = [d for d, _ in calls]
    assert done == sorted(done) and done[-1] == 64 << 20


def test_progress_false_cancels(big_file):
    p, m, _ = big_file
    calls = []

    def stop(done, total):
        calls.append(done)
        return False

    with pytest.raises(ptd.CancelledError, match="progress callback"):
        ptd.load(p, manifest=m, device="host", threads=1, progress=stop)
    assert len(calls) == 1 and calls[0] < 64 << 20
    # Clean: the same load runs to the end afterwards.
    assert len(ptd.load(p, manifest=m, device="host")) == 16


def test_keyboard_interrupt_cancels(big_file):
    p, m, _ = big_file
    calls = []

    def interrupt(done, total):
        calls.append(done)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return None  # None (not False) goes on.

    with pytest.raises(KeyboardInterrupt):
        ptd.load(p, manifest=m, device="host", threads=1, progress=interrupt)
    assert len(calls) == 2


def test_progress_exception_propagates(big_file):
    p, m, _ = big_file

    def boom(done, total):
        raise ZeroDivisionError("from progress")

    with pytest.raises(ZeroDivisionError, match="from progress"):
        ptd.load(p, manifest=m, device="host", progress=boom)


def test_concurrent_loads(big_file):
    p, m, weights = big_file
    out = [None] * 3

    def work(i):
        out[i] = ptd.load(p, manifest=m, device="host", threads=2)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(3)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for w in out:
        np.testing.assert_array_equal(np.from_dlpack(w["layers.15.w"]), weights["layers.15.w"])
