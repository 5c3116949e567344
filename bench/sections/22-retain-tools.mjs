import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { CLI, WORK, dataset, fmtMs, interleave, median, notes, settle, timeRow, warm } from "../lib.mjs";
import { describeNodeModules, haveTool, nixEnv, nodeModulesTree, removeReadOnly, runEnv } from "../tools.mjs";

// ---------------------------------------------------------------- 22. retain vs git, restic, nix (info)

const RUNS = 3;
const PIPELINE = 'cp -a "$1" "$2" && sync -f "$2" && cd "$2" && find . -type f | sort | xargs sha256sum > /dev/null';
// For the bench only: restic refuses to run without a repository password.
const RESTIC_ENV = { RESTIC_PASSWORD: "oats-bench-only" };

/**
 * A first retain and a retain of the same, unchanged tree again, through
 * `oats retain` (the CLI, process start included; again with --expect),
 * against what people use instead, each durable in its own way: `git add`
 * + `git commit` with core.fsync=all, `restic backup` into a local
 * repository (its second backup of an unchanged tree trusts its file cache
 * and reads nothing), `nix-store --add-fixed --recursive sha256` into a
 * chroot store, and `cp -a` + `sync -f` + `find | sort | xargs sha256sum`.
 * Warm page cache; every side writes into a fresh place for a first retain.
 * Info rows: the goals for retain are judged elsewhere (rows 3a, 3b).
 */
async function benchRetainTools() {
  console.error("\n[22] retain vs git (core.fsync), restic, nix-store --add-fixed, cp + sync + sha256sum");
  const tree = nodeModulesTree();
  const workloads = [
    { id: "a", label: "8 x 128 MiB", dir: dataset("big"), git: false },
    { id: "b", label: "20k small files", dir: dataset("small"), git: true },
    { id: "c", label: describeNodeModules(tree), dir: tree.dir, git: true },
  ];
  const hasGit = haveTool("git", "git", "22");
  const hasRestic = haveTool("restic", "restic", "22");
  const hasNix = haveTool("nix-store", "nix-bin", "22");
  const base = join(WORK, "tools-retain");
  for (const workload of workloads) {
    warm(workload.dir);
    removeReadOnly(base);
    mkdirSync(base, { recursive: true });
    const place = (name, round) => join(base, `${name}-${round + 1}`);
    let integrity = null;
    const key = `tools-${workload.id}`;
    const oats = {
      name: "oats retain",
      prepare: async (round) => {
        mkdirSync(place("scope", round));
        await settle();
      },
      run: async (round) => {
        const out = await runEnv(
          process.execPath,
          [CLI, "--scope", place("scope", round), "--json", "retain", "--kind", "capture", "--id", key, workload.dir],
          { capture: true },
        );
        const result = JSON.parse(out.stdout).result;
        integrity = `${result.integrity.format}:${result.integrity.value}`;
      },
    };
    const first = [oats];
    const cp = {
      name: "cp+sync+sha256sum",
      prepare: settle,
      run: (round) => runEnv("sh", ["-c", PIPELINE, "sh", workload.dir, place("copy", round)]),
    };
    first.push(cp);
    if (hasGit && workload.git) {
      first.push({
        name: "git add+commit (core.fsync=all)",
        prepare: async (round) => {
          const repo = place("git", round);
          mkdirSync(repo);
          await runEnv("git", ["init", "-q", repo]);
          await settle();
        },
        run: async (round) => {
          const git = [
            "-C",
            place("git", round),
            "-c",
            "core.fsync=all",
            "-c",
            "core.fsyncMethod=fsync",
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@localhost",
            "--work-tree",
            workload.dir,
          ];
          await runEnv("git", [...git, "add", "-A", "."]);
          await runEnv("git", [...git, "commit", "-q", "-m", "bench"]);
        },
      });
    } else if (hasGit)
      notes.push(
        `[22${workload.id}] git left out on ${workload.label}: zlib at 32 MiB/s here makes one run half a minute`,
      );
    if (hasRestic) {
      first.push({
        name: "restic backup",
        prepare: async (round) => {
          await runEnv("restic", ["init", "-q", "--repo", place("restic", round)], { env: RESTIC_ENV });
          await settle();
        },
        run: (round) =>
          runEnv("restic", ["backup", "-q", "--repo", place("restic", round), workload.dir], { env: RESTIC_ENV }),
      });
    }
    if (hasNix)
      first.push({
        name: "nix-store --add-fixed",
        prepare: settle,
        run: (round) =>
          runEnv("nix-store", ["--add-fixed", "--recursive", "sha256", workload.dir], {
            env: nixEnv(place("nix", round)),
          }),
      });
    const times = await interleave(first, RUNS);
    const best = (names) =>
      names
        .filter((name) => times[name])
        .map((name) => [name, median(times[name])])
        .sort((a, b) => a[1] - b[1]);
    const others = best(first.slice(1).map((side) => side.name));
    const listed = others.map(([name, ms]) => `${name} ${fmtMs(ms)}`).join(", ");
    timeRow({
      id: `22${workload.id}`,
      what: `first retain of ${workload.label}: \`oats retain\` vs the fastest of ${listed} (info)`,
      oursMs: median(times[oats.name]),
      baseMs: others[0][1],
      goal: null,
      baseExtra: ` ${others[0][0]}`,
    });

    // Again, unchanged: into the scope, repository and store of the last round.
    const last = RUNS - 1;
    const again = [
      {
        name: "oats retain --expect",
        run: () =>
          runEnv(process.execPath, [
            CLI,
            "--scope",
            place("scope", last),
            "--quiet",
            "retain",
            "--kind",
            "capture",
            "--id",
            key,
            "--expect",
            integrity,
            workload.dir,
          ]),
      },
    ];
    if (hasRestic)
      again.push({
        name: "restic backup again",
        run: () =>
          runEnv("restic", ["backup", "-q", "--repo", place("restic", last), workload.dir], { env: RESTIC_ENV }),
      });
    if (hasNix)
      again.push({
        name: "nix-store --add-fixed again",
        run: () =>
          runEnv("nix-store", ["--add-fixed", "--recursive", "sha256", workload.dir], {
            env: nixEnv(place("nix", last)),
          }),
      });
    if (again.length > 1) {
      const againTimes = await interleave(again, RUNS);
      const sorted = again
        .slice(1)
        .map((side) => [side.name, median(againTimes[side.name])])
        .sort((a, b) => a[1] - b[1]);
      timeRow({
        id: `22${workload.id}2`,
        what:
          `retain of ${workload.label} again, unchanged: \`oats retain --expect\` ` +
          `vs the fastest of ` +
          `${sorted.map(([name, ms]) => `${name} ${fmtMs(ms)}`).join(", ")} (info)`,
        oursMs: median(againTimes[again[0].name]),
        baseMs: sorted[0][1],
        goal: null,
        baseExtra: ` ${sorted[0][0]}`,
      });
    }
    removeReadOnly(base);
    await settle();
  }
}

export const parts = { "retain-tools": benchRetainTools };
