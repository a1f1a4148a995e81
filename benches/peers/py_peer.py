#!/usr/bin/env python3
"""Peer driver for the dlock benchmark: redis-py ``Lock`` and ``python-redis-lock``.

    benches/peers/.venv/bin/python benches/peers/py_peer.py --lib redis-py --url redis://127.0.0.1:PORT \
        --scenario pair --iterations N
    benches/peers/.venv/bin/python benches/peers/py_peer.py --lib python-redis-lock --url ... \
        --scenario handoff --workers W --duration-ms D --hold-ms 1

Prints exactly one JSON line on stdout; logs go to stderr. See README.md in this folder.
"""
import argparse
import json
import os
import secrets
import sys
import threading
import time

WARMUP = 100
ABANDON_AFTER_S = 10.0  # a worker still busy this long after the deadline is abandoned

now_ns = time.perf_counter_ns


def log(msg):
    print(f"py_peer: {msg}", file=sys.stderr, flush=True)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", required=True, choices=["redis-py", "python-redis-lock"])
    p.add_argument("--url", required=True)
    p.add_argument("--scenario", required=True, choices=["pair", "handoff"])
    p.add_argument("--iterations", type=int, default=1000)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--duration-ms", type=int, default=3000)
    p.add_argument("--hold-ms", type=float, default=1.0)
    a = p.parse_args(argv)
    if a.iterations <= 0 or a.workers <= 0 or a.duration_ms <= 0 or a.hold_ms < 0:
        p.error("numeric arguments must be positive")
    return a


try:
    import redis
except ImportError as e:  # pragma: no cover - set-up problem
    log(f"cannot import redis ({e}); run: bash benches/peers/setup.sh and use benches/peers/.venv/bin/python")
    sys.exit(2)


class BlockingLockAdapter:
    """Both Python libraries acquire with a blocking `acquire()` and release with `release()`."""

    @staticmethod
    def acquire(lock):
        return lock.acquire()

    @staticmethod
    def release(lock):
        lock.release()


class RedisPy(BlockingLockAdapter):
    """redis-py ``Lock`` with its defaults: ``r.lock(name)`` = no timeout (no expiry), sleep=0.1 s
    between tries, blocking acquire with no blocking_timeout, thread-local token."""

    name = "redis-py"
    version = redis.__version__

    def __init__(self, url):
        self.client = redis.Redis.from_url(url)

    def new_lock(self, key):
        return self.client.lock(key)



class PythonRedisLock(BlockingLockAdapter):
    """python-redis-lock ``redis_lock.Lock(conn, name)`` with its defaults: expire=None (the key
    never expires; release works without it), no auto-renewal, blocking acquire that waits with
    BLPOP on a signal list (no timeout); release deletes the key and LPUSHes the signal."""

    name = "python-redis-lock"

    def __init__(self, url):
        import redis_lock

        self.mod = redis_lock
        self.version = redis_lock.__version__
        self.client = redis.Redis.from_url(url)

    def new_lock(self, key):
        return self.mod.Lock(self.client, key)



LIBS = {"redis-py": RedisPy, "python-redis-lock": PythonRedisLock}


def lock_name(lib):
    return f"dlock-bench:{lib}:{os.getpid()}:{secrets.token_hex(6)}"


def library_label(lib_cls, url):
    w = lib_cls(url)
    return w, f"{lib_cls.name} {w.version}"


def pair(a):
    lib_cls = LIBS[a.lib]
    w, label = library_label(lib_cls, a.url)
    w.client.ping()
    key = lock_name(a.lib)
    samples = []
    for i in range(WARMUP + a.iterations):
        lock = w.new_lock(key)  # constructing the lock object is local work, kept out of the timing
        t0 = now_ns()
        if not w.acquire(lock):
            raise RuntimeError("blocking acquire returned False")
        w.release(lock)
        t1 = now_ns()
        if i >= WARMUP:
            samples.append((t1 - t0) / 1000.0)
    w.client.close()
    return {"library": label, "scenario": "pair", "samples_us": samples}


class Shared:
    def __init__(self, workers):
        self.mu = threading.Lock()
        self.acquired = threading.Condition(self.mu)  # notified on every acquisition
        self.inside = 0
        self.violations = 0
        self.failures = 0
        self.errors = 0
        self.seq = 0
        self.last_holder = -1
        self.last_rel_ns = 0
        self.handoffs = []
        self.max_wait_ns = 0
        self.acquisitions = [0] * workers


def handoff(a):
    lib_cls = LIBS[a.lib]
    clients = [lib_cls(a.url) for _ in range(a.workers)]  # one client (own connection pool) per worker
    label = f"{lib_cls.name} {clients[0].version}"
    for w in clients:
        w.client.ping()  # fail fast (exit 1) when the server cannot be reached
    key = lock_name(a.lib)
    st = Shared(a.workers)
    hold_s = a.hold_ms / 1000.0
    finished = [False] * a.workers
    start = now_ns()
    deadline = start + a.duration_ms * 1_000_000

    def run(wid):
        w = clients[wid]
        while now_ns() < deadline:
            t_try = now_ns()
            while True:
                lock = w.new_lock(key)
                try:
                    ok = w.acquire(lock)
                except Exception as e:  # connection trouble: count it, back off a little, retry
                    log(f"worker {wid}: acquire error: {e!r}")
                    with st.mu:
                        st.errors += 1
                    time.sleep(0.01)
                    continue
                if ok:
                    break
                with st.mu:  # neither library gives up with these settings, but count it if one does
                    st.failures += 1
            t_acq = now_ns()
            with st.mu:
                st.inside += 1
                if st.inside > 1:
                    st.violations += 1
                st.max_wait_ns = max(st.max_wait_ns, t_acq - t_try)
                if st.last_holder not in (-1, wid):
                    st.handoffs.append((t_acq - st.last_rel_ns) / 1000.0)
                st.last_holder = wid
                st.acquisitions[wid] += 1
                st.seq += 1
                my_seq = st.seq
                st.acquired.notify_all()
            if hold_s > 0:
                time.sleep(hold_s)
            with st.mu:
                st.inside -= 1
                t_rel = now_ns()
                st.last_rel_ns = t_rel
            try:
                w.release(lock)
            except Exception as e:
                log(f"worker {wid}: release error: {e!r}")
            # Forced hand-off: wait outside until another worker has acquired.
            with st.mu:
                while st.seq <= my_seq:
                    left = (deadline - now_ns()) / 1e9
                    if left <= 0:
                        break
                    st.acquired.wait(timeout=left)
        finished[wid] = True

    threads = [threading.Thread(target=run, args=(i,), daemon=True, name=f"peer-{i}") for i in range(a.workers)]
    for t in threads:
        t.start()
    give_up = deadline + int(ABANDON_AFTER_S * 1e9)
    for t in threads:
        t.join(timeout=max(0.0, (give_up - now_ns()) / 1e9))
    end = now_ns()
    abandoned = sum(1 for f in finished if not f)
    if abandoned:
        log(f"{abandoned} worker(s) still busy {ABANDON_AFTER_S:.0f} s after the deadline: abandoned")
    with st.mu:
        return {
            "library": label,
            "scenario": "handoff",
            "workers": a.workers,
            "handoff_us": list(st.handoffs),
            "acquisitions": list(st.acquisitions),
            "max_wait_us": st.max_wait_ns / 1000.0,
            "failures": st.failures,
            "errors": st.errors,
            "violations": st.violations,
            "abandoned": abandoned,
            "elapsed_s": (end - start) / 1e9,
        }


def main(argv):
    a = parse_args(argv)
    try:
        out = pair(a) if a.scenario == "pair" else handoff(a)
    except Exception as e:
        log(f"failed: {e!r}")
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    # Abandoned daemon threads may sit in a blocking call: leave without waiting for them.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
