#!/usr/bin/env node
// Peer driver for the dlock benchmark: Node `redlock` (with an `ioredis` client).
//
//   node benches/peers/node_peer.js --lib redlock --url redis://127.0.0.1:PORT --scenario pair --iterations N
//   node benches/peers/node_peer.js --lib redlock --url ... --scenario handoff --workers W --duration-ms D --hold-ms 1
//
// Prints exactly one JSON line on stdout; everything else goes to stderr.
// See README.md in this folder for what is measured.
"use strict";

const fs = require("fs");
const path = require("path");
const crypto = require("crypto");

const WARMUP = 100;
const TTL_MS = 10000; // lock TTL passed to acquire(); not a redlock default (it has none)
const ABANDON_AFTER_MS = 10000; // a worker still busy this long after the deadline is abandoned

function log(...a) {
  process.stderr.write("node_peer: " + a.join(" ") + "\n");
}

function die(msg) {
  log(msg);
  process.exit(2);
}

function parseArgs(argv) {
  const o = { lib: "redlock", scenario: null, url: null, iterations: 1000, workers: 2, durationMs: 3000, holdMs: 1 };
  for (let i = 0; i < argv.length; i++) {
    const k = argv[i];
    const v = argv[i + 1];
    const need = () => {
      if (v === undefined) die(`missing value for ${k}`);
      i++;
      return v;
    };
    switch (k) {
      case "--lib": o.lib = need(); break;
      case "--url": o.url = need(); break;
      case "--scenario": o.scenario = need(); break;
      case "--iterations": o.iterations = parseInt(need(), 10); break;
      case "--workers": o.workers = parseInt(need(), 10); break;
      case "--duration-ms": o.durationMs = parseInt(need(), 10); break;
      case "--hold-ms": o.holdMs = parseFloat(need()); break;
      case "-h": case "--help":
        process.stderr.write("usage: node_peer.js --lib redlock --url redis://HOST:PORT --scenario pair|handoff " +
          "[--iterations N] [--workers W --duration-ms D --hold-ms H]\n");
        process.exit(0);
        break;
      default: die(`unknown argument ${k}`);
    }
  }
  if (o.lib !== "redlock") die(`unsupported --lib ${o.lib} (only redlock)`);
  if (!o.url) die("--url is required");
  if (o.scenario !== "pair" && o.scenario !== "handoff") die("--scenario must be pair or handoff");
  if (!(o.iterations > 0) || !(o.workers > 0) || !(o.durationMs > 0) || !(o.holdMs >= 0)) die("bad numeric argument");
  return o;
}

let Redis, Redlock, libVersion;
try {
  Redis = require("ioredis");
  const rl = require("redlock");
  Redlock = rl.default || rl.Redlock || rl;
  libVersion = JSON.parse(fs.readFileSync(path.join(__dirname, "node_modules", "redlock", "package.json"), "utf8")).version;
} catch (e) {
  die(`cannot load redlock/ioredis (${e.message}); run: bash benches/peers/setup.sh`);
}
const LIBRARY = `redlock ${String(libVersion).replace(/^v/, "")}`;

const nowNs = () => process.hrtime.bigint();
const usBetween = (a, b) => Number(b - a) / 1000;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function lockName() {
  return `dlock-bench:redlock:${process.pid}:${crypto.randomBytes(6).toString("hex")}`;
}

// One ioredis client per server (one TCP connection each, ioredis defaults) and one Redlock
// over them with default settings. `url` may list several servers, comma-separated.
async function newWorker(url) {
  const clients = [];
  for (const one of url.split(",")) {
    const client = new Redis(one, { lazyConnect: true });
    client.on("error", (e) => log("redis error:", e.message));
    await client.connect();
    clients.push(client);
  }
  const redlock = new Redlock(clients);
  redlock.on("error", () => {}); // redlock emits "error" for each failed attempt on a held lock
  return { clients, redlock, disconnect: () => clients.forEach((c) => c.disconnect()) };
}

async function pair(o) {
  const name = lockName();
  const w = await newWorker(o.url);
  const samples = [];
  for (let i = 0; i < WARMUP + o.iterations; i++) {
    const t0 = nowNs();
    const lock = await w.redlock.acquire([name], TTL_MS);
    await w.redlock.release(lock);
    const t1 = nowNs();
    if (i >= WARMUP) samples.push(usBetween(t0, t1));
  }
  w.disconnect();
  return { library: LIBRARY, scenario: "pair", samples_us: samples };
}

async function handoff(o) {
  const name = lockName();
  const workers = [];
  for (let i = 0; i < o.workers; i++) workers.push(await newWorker(o.url));

  // Shared bookkeeping (one event loop, so plain variables are race-free between awaits).
  const st = {
    inside: 0,
    violations: 0,
    failures: 0,
    errors: 0,
    seq: 0, // number of acquisitions so far
    lastHolder: -1,
    lastRelNs: 0n,
    handoffs: [],
    maxWaitNs: 0n,
    acquisitions: new Array(o.workers).fill(0),
    waiters: new Set(), // resolvers of workers waiting outside for the next acquisition
  };
  const finished = new Array(o.workers).fill(false);
  const start = nowNs();
  const deadline = start + BigInt(o.durationMs) * 1000000n;

  function waitForSeqAbove(seq) {
    if (st.seq > seq) return Promise.resolve();
    return new Promise((resolve) => {
      const entry = () => {
        if (st.seq > seq || nowNs() >= deadline) {
          st.waiters.delete(entry);
          clearTimeout(timer);
          resolve();
        }
      };
      const msLeft = Number(deadline - nowNs()) / 1e6;
      const timer = setTimeout(entry, Math.max(0, msLeft) + 1);
      st.waiters.add(entry);
    });
  }

  async function run(id) {
    const { redlock } = workers[id];
    while (nowNs() < deadline) {
      const tTry = nowNs();
      let lock = null;
      while (lock === null) {
        try {
          lock = await redlock.acquire([name], TTL_MS);
        } catch (e) {
          if (e && e.name === "ExecutionError") {
            // redlock gave up after its retryCount attempts: count it and retry at once
            st.failures++;
          } else {
            st.errors++;
            log(`worker ${id}: acquire error: ${e && e.message}`);
            await sleep(10);
          }
        }
      }
      const tAcq = nowNs();
      st.inside++;
      if (st.inside > 1) st.violations++;
      const wait = tAcq - tTry;
      if (wait > st.maxWaitNs) st.maxWaitNs = wait;
      if (st.lastHolder !== -1 && st.lastHolder !== id) st.handoffs.push(usBetween(st.lastRelNs, tAcq));
      st.lastHolder = id;
      st.acquisitions[id]++;
      const mySeq = ++st.seq;
      for (const w of [...st.waiters]) w();

      if (o.holdMs > 0) await sleep(o.holdMs);

      st.inside--;
      const tRel = nowNs();
      st.lastRelNs = tRel;
      try {
        await redlock.release(lock);
      } catch (e) {
        log(`worker ${id}: release error: ${e && e.message}`);
      }
      // Forced hand-off: wait outside until another worker has acquired.
      await waitForSeqAbove(mySeq);
    }
    finished[id] = true;
  }

  const runs = workers.map((_, id) => run(id));
  const all = Promise.all(runs).then(() => true);
  const abandonMs = o.durationMs + ABANDON_AFTER_MS;
  const ok = await Promise.race([all, sleep(abandonMs).then(() => false)]);
  const end = nowNs();
  const abandoned = finished.filter((f) => !f).length;
  if (!ok) log(`${abandoned} worker(s) still busy ${ABANDON_AFTER_MS} ms after the deadline: abandoned`);
  for (const w of workers) w.disconnect();
  return {
    library: LIBRARY,
    scenario: "handoff",
    workers: o.workers,
    handoff_us: st.handoffs,
    acquisitions: st.acquisitions,
    max_wait_us: Number(st.maxWaitNs) / 1000,
    failures: st.failures,
    errors: st.errors,
    violations: st.violations,
    abandoned,
    elapsed_s: Number(end - start) / 1e9,
  };
}

async function main() {
  const o = parseArgs(process.argv.slice(2));
  const out = o.scenario === "pair" ? await pair(o) : await handoff(o);
  process.stdout.write(JSON.stringify(out) + "\n", () => process.exit(0));
}

main().catch((e) => {
  log(`failed: ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
