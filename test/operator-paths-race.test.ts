/**
 * Paths an operator hands oats that another user can reach: the file sits in
 * a directory `nobody` owns, and `nobody` keeps swapping its name between
 * the genuine file, a FIFO and a symlink to a file only root may read. Every
 * command must end (a FIFO opened for reading without a writer would block
 * it for ever, and a repair or import blocked there holds its lease, so
 * every `gc --delete` meanwhile is refused busy), must never read through
 * the symlink, and must either do its work with the genuine bytes or refuse.
 * Commands run through the built CLI (dist/; `npm run build` first), each
 * bounded by a timeout: a hang is a failure, not a stuck test.
 */
import assert from "node:assert/strict";
import { type ChildProcess, execFileSync, spawn, spawnSync } from "node:child_process";
import { chmodSync, cpSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test, type TestContext } from "node:test";
import { stringify } from "yaml";
import { currentPrincipal, retainCapabilityArtifact, retainTree } from "../src/index.js";
import { REPO, runOats, tempDir } from "./helpers.js";

const NOBODY = 65534;
/** Far more than any of these commands takes, even on a loaded machine; a hang runs into it. */
const TIMEOUT_MS = 90_000;

/** A file only root can read, whose text must never reach the store or the output. */
function rootSecret(text: string): string {
  const dir = tempDir("oats-secret-");
  chmodSync(dir, 0o700);
  const path = join(dir, "secret");
  writeFileSync(path, text, { mode: 0o600 });
  return path;
}

/** A directory `nobody` owns (0755), holding `keep`, a copy of the genuine file that nobody links back into place. */
function nobodysDirectory(genuine: string): { dir: string; keep: string } {
  const dir = tempDir("oats-swap-");
  const keep = join(dir, ".keep");
  cpSync(genuine, keep);
  chmodSync(dir, 0o755);
  chmodSync(keep, 0o644);
  execFileSync("chown", ["-R", `${NOBODY}:${NOBODY}`, dir]);
  return { dir, keep };
}

/**
 * `nobody` swapping `name` in `dir` between the genuine file (a hard link of
 * `keep`), a fresh FIFO and a symlink to `secret`, a few milliseconds each,
 * until killed. The replacement is made beside `keep` and renamed into place.
 */
function swapper(dir: string, name: string, keep: string, secret: string): ChildProcess {
  const script = `
import os, time
d, name, keep, secret = ${JSON.stringify([dir, name, keep, secret])}
target = os.path.join(d, name)
tmp = os.path.join(os.path.dirname(keep), ".swap")
end = time.time() + 600
while time.time() < end:
    for make in (lambda: os.link(keep, tmp), lambda: os.mkfifo(tmp), lambda: os.symlink(secret, tmp)):
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        make()
        os.rename(tmp, target)
        time.sleep(0.003)
`;
  return spawn("python3", ["-c", script], { uid: NOBODY, gid: NOBODY, stdio: "ignore" });
}

/** `oats --json ...args`, bounded: a run that does not end in TIMEOUT_MS is killed and reported as hung. */
function bounded(args: string[]) {
  const started = Date.now();
  const run = spawnSync(process.execPath, [join(REPO, "dist/cli/bin.js"), "--json", ...args], {
    cwd: REPO,
    encoding: "utf8",
    input: "",
    timeout: TIMEOUT_MS,
    killSignal: "SIGKILL",
  });
  const hung = run.signal === "SIGKILL" || (run.error as NodeJS.ErrnoException | undefined)?.code === "ETIMEDOUT";
  let envelope: any = null;
  try {
    envelope = JSON.parse(run.stdout);
  } catch {
    envelope = null;
  }
  return { hung, status: run.status, envelope, ms: Date.now() - started, output: run.stdout + run.stderr };
}

/** Every file under `dir`, read: none may hold `marker`. */
function assertNowhere(dir: string, marker: string): void {
  const walk = (at: string): void => {
    for (const entry of readdirSync(at, { withFileTypes: true })) {
      const path = join(at, entry.name);
      if (entry.isDirectory()) walk(path);
      else if (entry.isFile()) assert.ok(!readFileSync(path, "latin1").includes(marker), `${path} holds the secret`);
    }
  };
  walk(dir);
}

function needsRoot(t: TestContext): boolean {
  if (process.getuid?.() === 0) return true;
  t.skip("needs root to run the attacker as nobody (uid 65534)");
  return false;
}

/** Run `attempt` `rounds` times while nobody swaps; every run must end, and ends either done or refused. */
function underSwaps(
  swap: { dir: string; name: string; keep: string; secret: string },
  rounds: number,
  attempt: (round: number) => ReturnType<typeof bounded>,
  accept: (outcome: ReturnType<typeof bounded>) => void,
): string[] {
  const child = swapper(swap.dir, swap.name, swap.keep, swap.secret);
  const outcomes: string[] = [];
  try {
    for (let round = 0; round < rounds; round++) {
      const outcome = attempt(round);
      assert.equal(outcome.hung, false, `round ${round}: the command hung (killed after ${outcome.ms} ms)`);
      assert.ok(outcome.envelope !== null, `round ${round}: ${outcome.output}`);
      const error = outcome.envelope.error;
      outcomes.push(
        outcome.envelope.ok ? "ok" : `${error.code}:${error.details?.reason ?? error.details?.errno ?? ""}`,
      );
      accept(outcome);
    }
  } finally {
    child.kill("SIGKILL");
  }
  return outcomes;
}

/** A tree, its package tarball, and a scope where the tree is retained and then damaged. */
async function damagedTree() {
  const source = join(tempDir("oats-swap-src-"), "tool");
  mkdirSync(join(source, "bin"), { recursive: true });
  writeFileSync(join(source, "bin/run"), "#!/bin/sh\necho run\n", { mode: 0o755 });
  for (let index = 0; index < 200; index++) writeFileSync(join(source, `f-${index}.txt`), `file ${index}\n`);
  const pack = tempDir("oats-swap-tgz-");
  cpSync(source, join(pack, "package"), { recursive: true });
  const tarball = join(pack, "tool.tgz");
  execFileSync("tar", ["-czf", tarball, "-C", pack, "package"]);
  const scope = tempDir("oats-swap-scope-");
  const receipt = await retainTree(scope, { kind: "capture", key: "tool", source });
  const damage = () => {
    chmodSync(join(receipt.dir, "f-0.txt"), 0o644);
    writeFileSync(join(receipt.dir, "f-0.txt"), "damaged\n");
  };
  damage();
  return {
    source,
    tarball,
    scope,
    receipt,
    damage,
    ref: `capture:tool@oats.tree-exec.v1:${receipt.execIntegrity.value}`,
  };
}

describe("operator paths another user can swap (FIFOs and symlinks, as nobody)", () => {
  test("Given repair --from a tarball in nobody's directory, When nobody swaps it for a FIFO or a symlink over " +
    "and over, Then every repair ends, repaired or refused, and a gc --delete after it is never busy", {
    timeout: 1_200_000,
  }, async (t) => {
    if (!needsRoot(t)) return;
    const scene = await damagedTree();
    const secret = rootSecret("SECRET-REPAIR\n");
    const { dir, keep } = nobodysDirectory(scene.tarball);
    const from = join(dir, "tool.tgz");
    const outcomes = underSwaps(
      { dir, name: "tool.tgz", keep, secret },
      10,
      () => bounded(["--scope", scene.scope, "repair", scene.ref, "--from", from]),
      (outcome) => {
        if (outcome.envelope.ok) scene.damage();
        else {
          // Refused on what the name held when it was opened: a symlink, or a FIFO (never waited on).
          assert.equal(outcome.envelope.error.code, "invalid-input", outcome.output);
          assert.ok(["symlink", "not-a-file"].includes(outcome.envelope.error.details.reason), outcome.output);
        }
        const gc = bounded(["--scope", scene.scope, "gc", "--delete", "--grace", "0"]);
        assert.equal(gc.hung, false);
        assert.equal(gc.envelope?.ok, true, gc.output);
      },
    );
    assertNowhere(scene.scope, "SECRET-REPAIR");
    console.log(`repair --from a swapped tarball: ${outcomes.join(",")}`);
  });

  test("Given retain of a tarball and import of a bundle in nobody's directory, When nobody swaps each for a FIFO " +
    "or a symlink over and over, Then every command ends, done or refused, and never reads the symlink", {
    timeout: 1_200_000,
  }, async (t) => {
    if (!needsRoot(t)) return;
    const scene = await damagedTree();
    const secret = rootSecret("SECRET-ARCHIVE\n");
    const tarballs = nobodysDirectory(scene.tarball);
    const scope = tempDir("oats-swap-retain-");
    const retained = underSwaps(
      { dir: tarballs.dir, name: "tool.tgz", keep: tarballs.keep, secret },
      8,
      () => bounded(["--scope", scope, "retain", join(tarballs.dir, "tool.tgz"), "--id", "tool", "--kind", "capture"]),
      (outcome) => {
        if (!outcome.envelope.ok) assert.equal(outcome.envelope.error.kind, "invalid", outcome.output);
      },
    );
    const elsewhere = tempDir("oats-swap-export-");
    await retainTree(elsewhere, { kind: "capture", key: "tool", source: scene.source });
    const bundle = join(tempDir("oats-swap-bundle-"), "b.tar");
    assert.equal(runOats(["--scope", elsewhere, "export", scene.ref, "-o", bundle]).status, 0);
    const bundles = nobodysDirectory(bundle);
    const imported = underSwaps(
      { dir: bundles.dir, name: "b.tar", keep: bundles.keep, secret },
      8,
      () => bounded(["--scope", scope, "import", join(bundles.dir, "b.tar")]),
      (outcome) => {
        if (!outcome.envelope.ok) assert.equal(outcome.envelope.error.kind, "invalid", outcome.output);
      },
    );
    assertNowhere(scope, "SECRET-ARCHIVE");
    console.log(`retain: ${retained.join(",")}; import: ${imported.join(",")}`);
  });

  test("Given a capture spec and its classification config in nobody's directory, When nobody swaps each " +
    "for a FIFO or a symlink to a root-only copy with a secret in it, Then every prepare ends, done with the " +
    "genuine bytes or refused, and the secret reaches neither the store nor the output", {
    timeout: 1_200_000,
  }, async (t) => {
    if (!needsRoot(t)) return;
    const home = tempDir("oats-swap-home-");
    const tool = join(home, "tool");
    mkdirSync(join(tool, "bin"), { recursive: true });
    writeFileSync(join(tool, "bin/run"), "#!/bin/sh\necho ran\n", { mode: 0o755 });
    const config = stringify({
      schemaVersion: 1,
      wings: { lobby: "public" },
      repos: {},
      defaults: [],
      fallback: "internal",
      principals: { [currentPrincipal()]: "sovereign" },
    });
    writeFileSync(join(home, "class.yaml"), config);
    const spec = (configPath: string) =>
      stringify({
        name: "swapped",
        executable: { tree: tool, path: "bin/run", args: [] },
        target: { wing: "lobby" },
        classification: "public",
        classificationConfig: configPath,
        env: { PATH: "/usr/bin:/bin" },
        credentials: [],
      });
    const scope = tempDir("oats-swap-capture-");
    const outcomes: string[] = [];
    // The spec swapped; then the config it names swapped (the spec itself stays put).
    for (const swapped of ["spec", "config"] as const) {
      const genuine = join(tempDir("oats-swap-genuine-"), swapped === "spec" ? "spec.yaml" : "class.yaml");
      const configDir = swapped === "config" ? nobodysDirectory(join(home, "class.yaml")) : null;
      const specText = spec(configDir ? join(configDir.dir, "class.yaml") : join(home, "class.yaml"));
      writeFileSync(genuine, swapped === "spec" ? specText : config);
      // A symlink to this would be read as a valid spec or config carrying the secret.
      const secret = rootSecret(`${swapped === "spec" ? specText : config}# SECRET-${swapped}\n`);
      const { dir, keep } = configDir ?? nobodysDirectory(genuine);
      let specPath = join(dir, "spec.yaml");
      if (swapped === "config") {
        specPath = join(home, "spec.yaml");
        writeFileSync(specPath, specText);
      }
      outcomes.push(
        ...underSwaps(
          { dir, name: swapped === "spec" ? "spec.yaml" : "class.yaml", keep, secret },
          8,
          () => bounded(["--scope", scope, "capture", "prepare", specPath]),
          (outcome) => {
            assert.ok(!outcome.output.includes("SECRET"), outcome.output);
            if (!outcome.envelope.ok) assert.equal(outcome.envelope.error.kind, "invalid", outcome.output);
          },
        ),
      );
      assertNowhere(scope, `SECRET-${swapped}`);
    }
    console.log(`capture prepare under swaps: ${outcomes.join(",")}`);
  });

  test("Given a lock file in nobody's directory, When nobody swaps it for a FIFO or a symlink over and over, " +
    "Then every retain that reads it ends, done or refused invalid-lock", {
    timeout: 1_200_000,
  }, async (t) => {
    if (!needsRoot(t)) return;
    const lock = join(REPO, "fixtures/packages/hello/oats-lock.json");
    const secret = rootSecret(`${readFileSync(lock, "utf8")}\n`);
    const { dir, keep } = nobodysDirectory(lock);
    const scope = tempDir("oats-swap-lock-");
    const outcomes = underSwaps(
      { dir, name: "oats-lock.json", keep, secret },
      8,
      () =>
        bounded([
          "--scope",
          scope,
          "retain",
          join(REPO, "fixtures/packages/hello/payload"),
          "--id",
          "demo.hello",
          "--lock",
          join(dir, "oats-lock.json"),
        ]),
      (outcome) => {
        if (!outcome.envelope.ok) assert.equal(outcome.envelope.error.code, "invalid-lock", outcome.output);
      },
    );
    console.log(`retain --lock under swaps: ${outcomes.join(",")}`);
  });

  test("Given repair of a legacy capability --from a copy nobody owns, When nobody swaps its provenance file for a " +
    "FIFO or a symlink over and over, Then every repair ends, repaired or refused", {
    timeout: 1_200_000,
  }, async (t) => {
    if (!needsRoot(t)) return;
    const payload = join(REPO, "fixtures/packages/hello/payload");
    const lock = join(REPO, "fixtures/packages/hello/oats-lock.json");
    const scope = tempDir("oats-swap-legacy-");
    const receipt = await retainCapabilityArtifact(
      scope,
      payload,
      "demo.hello",
      JSON.parse(readFileSync(lock, "utf8")),
    );
    const damage = () => {
      chmodSync(join(receipt.dir, "oats.json"), 0o644);
      writeFileSync(join(receipt.dir, "oats.json"), "{}\n");
    };
    damage();
    // The copy, and beside it (not in it: the tree is hashed) the genuine provenance file nobody links back.
    const parent = tempDir("oats-swap-from-");
    const from = join(parent, "hello");
    cpSync(payload, from, { recursive: true, verbatimSymlinks: true });
    mkdirSync(join(parent, "spare"));
    const keep = join(parent, "spare", "provenance");
    cpSync(join(payload, ".oats-installation.json"), keep);
    execFileSync("chown", ["-R", `${NOBODY}:${NOBODY}`, parent]);
    const secret = rootSecret(readFileSync(keep, "utf8"));
    const outcomes = underSwaps(
      { dir: from, name: ".oats-installation.json", keep, secret },
      10,
      () =>
        bounded([
          "--scope",
          scope,
          "repair",
          `capability:demo.hello@${receipt.integrity.value}`,
          "--from",
          from,
          "--lock",
          lock,
        ]),
      (outcome) => {
        if (outcome.envelope.ok) damage();
        else assert.notEqual(outcome.envelope.error.kind, "internal", outcome.output);
      },
    );
    console.log(`repair with a swapped provenance file: ${outcomes.join(",")}`);
  });
});
