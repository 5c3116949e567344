import { closeSync } from "node:fs";
import { resolve } from "node:path";
import { OatsError, errnoCode } from "../core/index.js";
import { HeldFile, openNamedPath } from "../retention/index.js";

/**
 * An archive an operator named (a package tarball for `retain`, a bundle for
 * `import`): opened once, never through a symlink at its name and never
 * blocking on a FIFO (openNamedPath), checked to be a regular file on the
 * descriptor, and from then on read only through that descriptor
 * (HeldFile streams), however many times: the directory it sits in may be
 * one another user can write, who could otherwise swap the name for a FIFO
 * (the read would wait for ever) or another file between two reads. The
 * caller closes it (`await archive.close()`).
 */
export function openArchive(input: string, what: "tarball" | "bundle"): HeldFile {
  const path = resolve(input);
  const details = { [what]: what === "tarball" ? input : path };
  let opened;
  try {
    opened = openNamedPath(path);
  } catch (error) {
    const errno = errnoCode(error);
    if (errno === "ELOOP")
      throw new OatsError(
        "invalid-input",
        `${what} ${input} is a symlink; oats never follows a symlink at the name of a file it reads`,
        { ...details, errno, reason: "symlink" },
      );
    if (errno === "ENXIO")
      throw new OatsError("invalid-input", `${what} is not a regular file: ${input}`, {
        ...details,
        reason: "not-a-file",
      });
    throw new OatsError(
      "invalid-input",
      errno === "ENOENT" ? `${what} does not exist: ${input}` : `${what} ${input} cannot be read: ${errno}`,
      { ...details, errno },
    );
  }
  if (!opened.stats.isFile()) {
    closeSync(opened.fd);
    throw new OatsError("invalid-input", `${what} is not a regular file: ${input}`, {
      ...details,
      reason: "not-a-file",
    });
  }
  return new HeldFile(opened.fd, path);
}
