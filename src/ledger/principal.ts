import { readFileSync, lstatSync, statSync, statfsSync } from "node:fs";
import { hostname, userInfo } from "node:os";
import { OatsError } from "../core/index.js";

/**
 * Who this process is, as `user@host`: the approving operator, the
 * dispatching principal and the principal of every audit entry. It is never
 * taken from a flag, an environment variable, the job or the record, and it
 * refuses (fails closed) when the OS's own answer could have been chosen by
 * an unprivileged user:
 *
 * - **User namespaces.** Inside `unshare --user --map-root-user` any user is
 *   uid 0, so getpwuid says `root`, and with `--uts` it may set any host
 *   name. The process must run in the initial user namespace: `/proc/self`
 *   must be procfs (statfs type PROC_SUPER_MAGIC, so a tmpfs or bind mount
 *   faking /proc is refused), `/proc/self/ns/user` must be procfs's own
 *   magic link (not a file mounted over it) and resolve to the inode of the
 *   initial user namespace (PROC_USER_INIT_INO, a kernel constant), and
 *   `/proc/self/uid_map` and `gid_map` must be the identity over the whole
 *   id range. Limits: see docs/design/captures.md ("The principal").
 * - **setuid.** The user is the account of the effective uid (userInfo asks
 *   getpwuid(geteuid())); a process whose real uid differs is refused, so a
 *   setuid wrapper cannot lend its owner's name to its caller.
 * - **The host** is uname's nodename (os.hostname()). Once the user namespace
 *   is the initial one, changing it, or entering another UTS namespace,
 *   needs CAP_SYS_ADMIN in the initial user namespace: root, who is trusted.
 *   A non-initial UTS namespace (a container started by root) is accepted,
 *   and its host name is the principal's host.
 *
 * Every refusal is `classification-refused` with `details.reason`
 * `user-namespace`, `setuid` or `namespace-unverifiable`.
 */

/** The inode of the initial user namespace (include/linux/proc_ns.h PROC_USER_INIT_INO = 0xEFFFFFFD). */
export const PROC_USER_INIT_INO = 0xeffffffd;
/** statfs f_type of procfs (include/uapi/linux/magic.h). */
export const PROC_SUPER_MAGIC = 0x9fa0;
/** The largest id count a map line can have: the initial namespace maps every id, 0..2^32-2, onto itself. */
const FULL_RANGE = 4294967295;

export interface IdMapLine {
  readonly inside: number;
  readonly outside: number;
  readonly count: number;
}

/**
 * Parse `/proc/<pid>/uid_map` or `gid_map` text: lines of three unsigned
 * decimal numbers separated by blanks. Null when the text is not that shape
 * (the caller refuses: an unreadable map is not the initial one).
 */
export function parseIdMap(text: string): IdMapLine[] | null {
  const lines = text.split("\n").filter((line) => line.trim() !== "");
  if (lines.length === 0 || lines.length > 340) return null;
  const parsed: IdMapLine[] = [];
  for (const line of lines) {
    const fields = line.trim().split(/[ \t]+/);
    if (fields.length !== 3 || !fields.every((field) => /^[0-9]{1,10}$/.test(field))) return null;
    const [inside, outside, count] = fields.map(Number) as [number, number, number];
    if (inside > FULL_RANGE || outside > FULL_RANGE || count > FULL_RANGE) return null;
    parsed.push({ inside, outside, count });
  }
  return parsed;
}

/** The initial namespace's map: one line, every id onto itself. */
export function isInitialIdMap(lines: readonly IdMapLine[] | null): boolean {
  return (
    lines !== null &&
    lines.length === 1 &&
    lines[0]!.inside === 0 &&
    lines[0]!.outside === 0 &&
    lines[0]!.count === FULL_RANGE
  );
}

function principalRefused(
  reason: "user-namespace" | "setuid" | "namespace-unverifiable",
  message: string,
  details: Record<string, unknown> = {},
): OatsError {
  return new OatsError(
    "classification-refused",
    `the principal cannot be trusted: ${message}; nothing was approved, audited or run as it`,
    { reason, ...details },
  );
}

/** Refuse unless this process runs in the initial user namespace, checked through procfs itself. */
export function assertInitialUserNamespace(proc = "/proc"): void {
  let nsInode: number;
  let uidMap: string;
  let gidMap: string;
  try {
    const procType = statfsSync(`${proc}/self`).type;
    if (procType !== PROC_SUPER_MAGIC) {
      throw principalRefused(
        "namespace-unverifiable",
        `${proc}/self is not procfs (filesystem type 0x${procType.toString(16)})`,
        { filesystemType: procType },
      );
    }
    // A file or another namespace's link mounted over ours would not be this directory's own symlink.
    const link = lstatSync(`${proc}/self/ns/user`);
    if (!link.isSymbolicLink() || link.dev !== lstatSync(`${proc}/self/ns`).dev) {
      throw principalRefused(
        "namespace-unverifiable",
        `${proc}/self/ns/user is not procfs's own namespace link (something is mounted over it)`,
      );
    }
    nsInode = statSync(`${proc}/self/ns/user`).ino;
    uidMap = readFileSync(`${proc}/self/uid_map`, "utf8");
    gidMap = readFileSync(`${proc}/self/gid_map`, "utf8");
  } catch (error) {
    if (error instanceof OatsError) throw error;
    throw principalRefused(
      "namespace-unverifiable",
      `cannot read this process's user namespace from ${proc}: ${(error as Error).message}`,
      { errno: (error as NodeJS.ErrnoException).code ?? null },
    );
  }
  if (nsInode !== PROC_USER_INIT_INO || !isInitialIdMap(parseIdMap(uidMap)) || !isInitialIdMap(parseIdMap(gidMap))) {
    throw principalRefused(
      "user-namespace",
      "this process runs in a user namespace (its uid and host name are whatever its creator chose)",
      {
        namespaceInode: nsInode,
        uidMap: uidMap.trim().slice(0, 200),
        gidMap: gidMap.trim().slice(0, 200),
      },
    );
  }
}

/**
 * The principal: `user@host` of this process, as operators write it in
 * classification configs. Throws `classification-refused` when it cannot be
 * trusted (above); callers let that refuse the operation.
 */
export function currentPrincipal(): string {
  assertInitialUserNamespace();
  const uid = process.getuid?.();
  const euid = process.geteuid?.();
  if (uid === undefined || euid === undefined)
    throw principalRefused("namespace-unverifiable", "this platform has no uids");
  if (uid !== euid)
    throw principalRefused("setuid", `real uid ${uid} differs from effective uid ${euid}`, { uid, euid });
  return `${userInfo().username}@${hostname()}`;
}
