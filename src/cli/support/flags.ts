import { z } from "zod";
import { usageError } from "./envelope.js";
import { KIND_CHOICES } from "./constants.js";

/**
 * Flag combinations, checked with zod after commander has parsed them. A bad
 * combination is a usage error (exit 2); the grammar of ids and integrities
 * is the library's to check, so those stay typed refusals (exit 4).
 */

const kind = z.enum(KIND_CHOICES).default("capability");
const text = z.string().min(1, "must not be empty");

export const retainFlags = z
  .object({ id: text, kind, lock: text.optional(), expect: text.optional() })
  .superRefine((flags, context) => {
    if (flags.lock !== undefined && flags.kind !== "capability") {
      context.addIssue({
        code: "custom",
        path: ["lock"],
        message: `--lock retains a capability and cannot be used with --kind ${flags.kind}`,
      });
    }
    if (flags.lock !== undefined && flags.expect !== undefined) {
      context.addIssue({
        code: "custom",
        path: ["expect"],
        message: "--lock and --expect cannot be used together: the lock's capability row names the integrity",
      });
    }
  });

export const verifyFlags = z
  .object({ integrity: text.optional(), lock: text.optional(), kind })
  .superRefine((flags, context) => {
    if (flags.integrity === undefined && flags.lock === undefined) {
      context.addIssue({ code: "custom", path: ["integrity"], message: "one of --integrity and --lock is required" });
    }
    if (flags.integrity !== undefined && flags.lock !== undefined) {
      context.addIssue({
        code: "custom",
        path: ["lock"],
        message: "--integrity and --lock cannot be used together: give exactly one",
      });
    }
    if (flags.lock !== undefined && flags.kind !== "capability") {
      context.addIssue({
        code: "custom",
        path: ["lock"],
        message: `--lock verifies a capability and cannot be used with --kind ${flags.kind}`,
      });
    }
  });

export const pathFlags = z.object({ kind });

export function parseFlags<T extends z.ZodType>(schema: T, options: Record<string, unknown>): z.infer<T> {
  const parsed = schema.safeParse(options);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0];
  const flag = issue?.path.length ? `--${String(issue.path[0])}: ` : "";
  const message = issue?.code === "custom" ? issue.message : `${flag}${issue?.message ?? "invalid options"}`;
  throw usageError(message, {
    issues: parsed.error.issues.map((each) => ({ path: each.path.map(String), message: each.message })),
  });
}
