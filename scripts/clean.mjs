// The build starts from an empty dist/, so a module that moved or was removed leaves nothing behind.
import { rmSync } from "node:fs";

rmSync(new URL("../dist", import.meta.url), { recursive: true, force: true });
