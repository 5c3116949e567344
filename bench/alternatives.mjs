#!/usr/bin/env node
/**
 * Design alternatives for reading many small files, measured by bench/run.mjs
 * (section "alt"); each run is a fresh process, as `oats digest` would be.
 *
 *   node bench/alternatives.mjs MODE DIR [LIMIT]
 *     -> {"ms": <listing+read+hash>, "afterListingMs": <read+hash>, "files": N, "digest": "..."}
 *
 * LIMIT reads only the first LIMIT files of the sorted listing (the slow
 * thread-pool modes are measured on part of the tree to keep the run short).
 * Every mode lists DIR the same way (synchronously, paths sorted), then opens,
 * fstats, reads whole, fstats again and closes every file, and hashes the
 * contents in order. Worker modes start their workers before the listing, so
 * their start-up overlaps it as it would in a real command; what is left of it
 * after the listing is counted in afterListingMs. Modes:
 *
 *   sync        synchronous calls on the main thread (what src/retention does)
 *   async       the same five calls through the libuv thread pool, one file at a time
 *   async16     the same, 16 files in flight, hashed in order
 *   workers1    one worker thread reads ahead in batches of 64 files, main hashes
 *   workers2    two worker threads share the batches, main hashes
 */
import { close, constants, fstat, fstatSync, open, openSync, read, readSync, closeSync, readdirSync } from "node:fs";
import { createHash } from "node:crypto";
import { Worker } from "node:worker_threads";

const FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;
const BATCH = 64;

const WORKER_SOURCE = `
const { parentPort } = require("node:worker_threads");
const fs = require("node:fs");
const FLAGS = ${FLAGS};
parentPort.on("message", ({ batch, paths }) => {
  let size = 0;
  const opened = paths.map((path) => {
    const fd = fs.openSync(path, FLAGS);
    const before = fs.fstatSync(fd);
    size += before.size;
    return { fd, before };
  });
  const buffer = new ArrayBuffer(size);
  const view = Buffer.from(buffer);
  const items = [];
  let at = 0;
  for (const { fd, before } of opened) {
    const got = fs.readSync(fd, view, at, before.size, 0);
    const after = fs.fstatSync(fd);
    fs.closeSync(fd);
    const same = got === before.size && after.mtimeMs === before.mtimeMs && after.ctimeMs === before.ctimeMs;
    if (!same) throw new Error("changed");
    items.push([at, got]);
    at += got;
  }
  parentPort.postMessage({ batch, items, buffer }, [buffer]);
});
parentPort.postMessage("ready");
`;

let limit = Infinity;
let filesRead = 0;
let listedAt = 0;

function list(dir) {
  const files = [];
  const visit = (path) => {
    for (const entry of readdirSync(path, { withFileTypes: true })) {
      const child = `${path}/${entry.name}`;
      if (entry.isDirectory()) visit(child);
      else if (entry.isFile()) files.push(child);
    }
  };
  visit(dir);
  files.sort();
  files.length = Math.min(files.length, limit);
  filesRead = files.length;
  listedAt = performance.now();
  return files;
}

const p = (fn, ...args) =>
  new Promise((resolve, reject) => fn(...args, (error, value) => (error ? reject(error) : resolve(value))));

async function readAsync(path) {
  const fd = await p(open, path, FLAGS);
  const before = await p(fstat, fd);
  const buffer = Buffer.allocUnsafe(before.size);
  const got = await p(read, fd, buffer, 0, before.size, 0);
  const after = await p(fstat, fd);
  await p(close, fd);
  if (got !== before.size || after.mtimeMs !== before.mtimeMs) throw new Error("changed");
  return buffer;
}

const modes = {
  sync(dir, hash) {
    const scratch = Buffer.allocUnsafe(256 << 10);
    for (const path of list(dir)) {
      const fd = openSync(path, FLAGS);
      const before = fstatSync(fd);
      const got = readSync(fd, scratch, 0, before.size, 0);
      const after = fstatSync(fd);
      closeSync(fd);
      if (got !== before.size || after.mtimeMs !== before.mtimeMs) throw new Error("changed");
      hash.update(scratch.subarray(0, got));
    }
  },
  async async(dir, hash) {
    for (const path of list(dir)) hash.update(await readAsync(path));
  },
  async async16(dir, hash) {
    const files = list(dir);
    const pending = [];
    let next = 0;
    while (next < files.length && pending.length < 16) pending.push(readAsync(files[next++]));
    while (pending.length) {
      hash.update(await pending.shift());
      if (next < files.length) pending.push(readAsync(files[next++]));
    }
  },
  workers1: (dir, hash) => withWorkers(1, dir, hash),
  workers2: (dir, hash) => withWorkers(2, dir, hash),
};

async function withWorkers(count, dir, hash) {
  const workers = Array.from({ length: count }, () => new Worker(WORKER_SOURCE, { eval: true }));
  const ready = Promise.all(workers.map((worker) => new Promise((resolve) => worker.once("message", resolve))));
  const files = list(dir);
  await ready;
  const batches = Math.ceil(files.length / BATCH);
  const arrived = new Map();
  const waiting = new Map();
  for (const worker of workers) {
    worker.on("message", (message) => {
      const resolve = waiting.get(message.batch);
      if (resolve) {
        waiting.delete(message.batch);
        resolve(message);
      } else arrived.set(message.batch, message);
    });
  }
  let sent = 0;
  const send = (upTo) => {
    for (; sent < Math.min(batches, upTo); sent++)
      workers[sent % count].postMessage({ batch: sent, paths: files.slice(sent * BATCH, (sent + 1) * BATCH) });
  };
  send(count * 4);
  for (let batch = 0; batch < batches; batch++) {
    let message = arrived.get(batch);
    if (message) arrived.delete(batch);
    else message = await new Promise((resolve) => waiting.set(batch, resolve));
    send(batch + 1 + count * 4);
    const view = Buffer.from(message.buffer);
    for (const [at, length] of message.items) hash.update(view.subarray(at, at + length));
  }
  await Promise.all(workers.map((worker) => worker.terminate()));
}

const [mode, dir, max] = process.argv.slice(2);
if (!modes[mode] || !dir) {
  console.error(`usage: node bench/alternatives.mjs ${Object.keys(modes).join("|")} DIR [LIMIT]`);
  process.exit(2);
}
if (max) limit = Number.parseInt(max, 10);
const started = performance.now();
const hash = createHash("sha256");
await modes[mode](dir, hash);
const digest = hash.digest("hex");
const ended = performance.now();
console.log(JSON.stringify({ ms: ended - started, afterListingMs: ended - listedAt, files: filesRead, digest }));
