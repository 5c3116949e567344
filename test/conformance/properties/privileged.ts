/**
 * Property 6: a capture runs as root only if its approved composition says
 * so; otherwise dispatch as uid 0 is refused before the child starts, and a
 * marker the child would write is absent. The driver says how it enters or
 * simulates uid 0 (Driver.uid0).
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { assertRan, assertRefused, captureName, sh, shQuote, type Property } from "./support.js";

export const privilegedAccount: Property = {
  name: "privileged-account",
  title:
    "6. a capture runs as root only if its approved composition says so; " +
    "otherwise dispatch as uid 0 is refused before the child starts (marker absent)",
  async run(context) {
    context.diagnostic(`uid 0 by: ${context.driver.uid0}`);
    const scope = await context.scope();
    const dir = context.tempDir("oats-conf-priv-");
    const markers = { plain: join(dir, "plain"), privileged: join(dir, "privileged"), control: join(dir, "control") };

    // The control first: an unprivileged capture runs when the dispatcher is not uid 0 (a driver that enters uid 0
    // for real then leaves the scope to root last).
    const control = await scope.queue({
      name: captureName("priv-control"),
      script: sh(`touch ${shQuote(markers.control)}`, "echo ran"),
    });
    const controlled = await scope.dispatch(control).done;
    assertRan(controlled, "an unprivileged capture dispatched normally");
    assert.equal(existsSync(markers.control), true, "the control ran (its marker is present)");
    const runs = await scope.listRuns();

    const plain = await scope.queue({
      name: captureName("priv-plain"),
      script: sh(`touch ${shQuote(markers.plain)}`, "echo ran"),
    });
    const refused = await scope.dispatch(plain, { uid0: true }).done;
    // classification-refused is the gate's code (docs/design/captures.md): refused for this reason, not another.
    assertRefused(refused, "a capture not approved as privileged, dispatched as uid 0", "classification-refused");
    assert.match(refused.message, /root|uid 0|privileged/i, "and it says why: root without a privileged composition");
    assert.equal(existsSync(markers.plain), false, "refused before the child started: the marker is absent");
    assert.deepEqual(await scope.listRuns(), runs, "no run record was written for it");

    const privileged = await scope.queue({
      name: captureName("priv-root"),
      privileged: true,
      script: sh(`touch ${shQuote(markers.privileged)}`, "echo ran as root"),
    });
    const ran = await scope.dispatch(privileged, { uid0: true }).done;
    assertRan(ran, "a capture approved as privileged, dispatched as uid 0");
    assert.equal(ran.result, "OK");
    assert.equal(existsSync(markers.privileged), true, "the privileged capture ran (its marker is present)");
  },
};
