#!/usr/bin/env node
// Runs the almanac binary of this platform, which npm installed as the optional dependency
// codealmanac-<os>-<cpu>. Arguments, standard streams and the exit status pass through, and the
// signals a terminal or a process manager sends are handed on to the binary.
"use strict";

const { spawn } = require("child_process");

const PACKAGES = {
  "linux-x64": "codealmanac-linux-x64",
  "linux-arm64": "codealmanac-linux-arm64",
  "darwin-arm64": "codealmanac-darwin-arm64",
  "darwin-x64": "codealmanac-darwin-x64",
  "win32-x64": "codealmanac-win32-x64",
};
const SOURCE = "build it from source instead: cargo install codealmanac (Rust 1.89 or later)";

function fail(message) {
  process.stderr.write(`almanac: ${message}\n`);
  process.exit(1);
}

const platform = `${process.platform}-${process.arch}`;
const pkg = PACKAGES[platform];
if (!pkg) {
  fail(`there is no prebuilt almanac for ${platform} (there is for ${Object.keys(PACKAGES).join(", ")}); ${SOURCE}`);
}
const exe = process.platform === "win32" ? "almanac.exe" : "almanac";
let binary;
try {
  binary = require.resolve(`${pkg}/bin/${exe}`);
} catch (e) {
  fail(
    `the package ${pkg}, which holds almanac's binary for ${platform}, is not installed. ` +
      "npm leaves it out when optional dependencies are omitted (--omit=optional, --no-optional) " +
      `or when this system's libc is not glibc; reinstall codealmanac without omitting them, or ${SOURCE}`
  );
}

const child = spawn(binary, process.argv.slice(2), { stdio: "inherit", windowsHide: false });
const forward = ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT"].filter((s) => process.platform !== "win32" || s !== "SIGQUIT");
for (const signal of forward) {
  process.on(signal, () => {
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
  });
}
child.on("error", (e) => {
  if (e.code === "ENOENT" && process.platform === "linux") {
    fail(`cannot start ${binary}: ${e.message}. The prebuilt binary needs glibc 2.17 or later (not musl, as on Alpine); ${SOURCE}`);
  }
  fail(`cannot start ${binary}: ${e.message}`);
});
child.on("exit", (code, signal) => {
  if (signal) {
    // Die of the same signal, so a parent sees what the binary saw.
    for (const s of forward) process.removeAllListeners(s);
    process.kill(process.pid, signal);
    return;
  }
  process.exit(code === null ? 1 : code);
});
