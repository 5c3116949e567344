/**
 * Property 10: the log carries text, not a terminal: ANSI and OSC escapes
 * stripped, carriage returns resolved, stderr captured, and the final line
 * kept even when no newline follows it. The file's bytes are checked here
 * for escapes and carriage returns too.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { assertRan, captureName, node, sh, texts, type Property } from "./support.js";

export const textNotTerminal: Property = {
  name: "text-not-terminal",
  title:
    "10. the log carries text, not a terminal: ANSI escapes stripped, " +
    "carriage returns resolved, stderr captured, a final line without " +
    "newline kept",
  async run(context) {
    const scope = await context.scope();
    const [shell, script] = await Promise.all(
      [
        sh(
          String.raw`printf '\033[1;31mred\033[0m plain\n'`,
          String.raw`printf 'progress 10%%\rprogress 50%%\rprogress 100%%\n'`,
          String.raw`printf '\033]0;window title\007after osc\n'`,
          "echo 'to stderr' >&2",
          String.raw`printf 'crlf line\r\n'`,
          "printf 'final without newline'",
        ),
        node(
          String.raw`process.stdout.write("\x1b[32mgreen\x1b[39m\n");`,
          String.raw`process.stderr.write("err \x1b[2Kcleared\n");`,
          'process.stdout.write("last, no newline");',
        ),
      ].map(async (body, index) => {
        const capture = await scope.queue({ name: captureName(`text-${index}`), script: body });
        const outcome = await scope.dispatch(capture).done;
        assertRan(outcome, `text capture ${index}`);
        return scope.readRun(outcome.runId);
      }),
    );

    assert.deepEqual(
      texts(shell!.lines, "out"),
      ["red plain", "progress 100%", "after osc", "crlf line", "final without newline"],
      "stdout as text: escapes stripped, carriage returns resolved, the final line kept",
    );
    assert.deepEqual(texts(shell!.lines, "err"), ["to stderr"], "stderr captured, as stream err");
    assert.deepEqual(texts(script!.lines, "out"), ["green", "last, no newline"]);
    assert.deepEqual(texts(script!.lines, "err"), ["err cleared"]);
    for (const run of [shell!, script!]) {
      for (const line of run.lines)
        assert.doesNotMatch(
          line.text,
          /[\x00-\x08\x0b-\x1f\x7f]/,
          `no control character is left in ${JSON.stringify(line.text)}`,
        );
      assert.doesNotMatch(
        readFileSync(run.logPath, "latin1"),
        /[\x1b\r\x07]/,
        "the log file holds no escape, carriage return or bell",
      );
    }
  },
};
