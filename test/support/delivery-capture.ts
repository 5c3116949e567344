import { chmodSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { stringify } from "yaml";
import { addJob, approve, currentPrincipal, prepareCapture } from "../../src/index.js";
import { tempDir } from "../helpers.js";

/**
 * A prepared, approved, queued capture at a chosen classification whose
 * child prints two lines and creates a marker file (so a test can tell it
 * never ran). The principal is named sovereign, so confidential work is
 * refused only for its evidence posture. Real retained tree, real approval.
 */
export async function deliveryCapture(level: "public" | "internal" | "confidential", job = "probe") {
  const scope = tempDir("oats-delivery-");
  const home = join(scope, "home");
  const tool = join(home, "tool");
  const marker = join(tempDir("oats-marker-"), "ran");
  mkdirSync(join(tool, "bin"), { recursive: true });
  mkdirSync(join(home, "conf"), { recursive: true });
  writeFileSync(
    join(tool, "bin/run"),
    `#!/bin/sh\necho "hello from the ${level} probe"\necho "to stderr" >&2\n: > "$1"\n`,
  );
  chmodSync(join(tool, "bin/run"), 0o755);
  writeFileSync(
    join(home, "conf", "class.yaml"),
    stringify({
      schemaVersion: 1,
      wings: { room: level },
      repos: {},
      defaults: [],
      fallback: "internal",
      principals: { [currentPrincipal()]: "sovereign" },
    }),
  );
  writeFileSync(
    join(home, "spec.yaml"),
    stringify({
      name: "delivery-probe",
      executable: { tree: "./tool", path: "bin/run", args: [marker] },
      target: { wing: "room" },
      classification: level,
      classificationConfig: "./conf/class.yaml",
      env: { PATH: "/usr/local/bin:/usr/bin:/bin" },
      credentials: [],
      // Tests run as root: only a privileged composition may run there (src/captures/privilege.ts).
      privileged: true,
    }),
  );
  const prepared = await prepareCapture(scope, join(home, "spec.yaml"));
  await approve(scope, prepared.composition.subject, { reason: "delivery test" });
  await addJob(scope, { job, resolution: prepared.id });
  return { scope, job, marker, resolution: prepared.id };
}
