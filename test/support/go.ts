/**
 * The start line for child processes that must run at the same moment: the
 * child has loaded everything when it says "ready" on stderr, and it waits
 * for one line on stdin, which the test writes to every child at once.
 */
export function waitForGo(): Promise<void> {
  return new Promise((resolve) => {
    process.stdin.once("data", () => {
      process.stdin.pause();
      resolve();
    });
    process.stderr.write("ready\n");
  });
}
