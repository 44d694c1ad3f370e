// What the end-to-end tests share: the kiln binary, `kiln serve`, headless Chromium with the flags
// of web/webdriver.json (one list for every browser test), pages that record console errors,
// the WebGPU probe and ok/FAIL checks.
import { chromium } from "playwright-core";
import { spawn } from "node:child_process";
import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
export const WWW = join(ROOT, "www");
export const CHROMIUM = process.env.CHROMIUM ?? (existsSync("/usr/lib/chromium/chromium") ? "/usr/lib/chromium/chromium" : "/usr/bin/chromium");

/** Prints `name: msg` and exits with 2 (a setup problem, not a failed check). */
export function fatal(name, msg) {
  console.error(`${name}: ${msg}`);
  process.exit(2);
}

/** `check(ok, what)` prints ok/FAIL and counts failures in `check.failures`. */
export function checker() {
  const check = (ok, what) => {
    console.log(`${ok ? "ok  " : "FAIL"} ${what}`);
    if (!ok) check.failures++;
    return ok;
  };
  check.failures = 0;
  return check;
}

/** $KILN_BIN, else the newer of target/release/kiln and target/debug/kiln. */
export function kilnBin(name) {
  if (process.env.KILN_BIN) {
    if (!existsSync(process.env.KILN_BIN)) fatal(name, `KILN_BIN=${process.env.KILN_BIN} does not exist`);
    return resolve(process.env.KILN_BIN);
  }
  const found = ["target/release/kiln", "target/debug/kiln"].map((p) => join(ROOT, p)).filter((p) => existsSync(p));
  if (!found.length) fatal(name, "no kiln binary: build it with `cargo build -p kiln --bin kiln` or set KILN_BIN");
  return found.sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs)[0];
}

/** `kiln serve DIR --port 0`; resolves with its URL once it prints it. */
export async function serve(kiln, dir) {
  const child = spawn(kiln, ["serve", dir, "--port", "0"], { stdio: ["ignore", "pipe", "inherit"] });
  const url = await new Promise((ok, fail) => {
    let buf = "";
    const timer = setTimeout(() => fail(new Error(`kiln serve printed no URL in 30 s: ${buf}`)), 30_000);
    child.stdout.on("data", (d) => {
      buf += d;
      const m = buf.match(/at (http:\/\/\S+)/);
      if (m) {
        clearTimeout(timer);
        ok(m[1].replace(/\/?$/, "/"));
      }
    });
    child.on("exit", (c) => fail(new Error(`kiln serve exited with ${c}`)));
  });
  return { url, close: () => child.kill() };
}

/** Headless Chromium with the flags of web/webdriver.json. */
export function launchChromium() {
  const caps = JSON.parse(readFileSync(join(ROOT, "web/webdriver.json"), "utf8"));
  return chromium.launch({ executablePath: CHROMIUM, args: caps["goog:chromeOptions"].args });
}

/** A page in a fresh context (no cache) that records console errors and uncaught exceptions. */
export async function openPage(browser, url, options = {}) {
  const context = await browser.newContext(options);
  const page = await context.newPage();
  const errors = [];
  const warnings = [];
  page.on("console", (m) => (m.type() === "error" ? errors : m.type() === "warning" ? warnings : []).push(m.text()));
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(url);
  await page.waitForFunction(() => document.body.dataset.ready, null, { timeout: 120_000 });
  return { page, errors, warnings, close: () => context.close() };
}

/** Whether the browser has a WebGPU adapter (asked from a page of the site: a secure context). */
export async function webgpuAvailable(browser, base) {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(`${base}style.css`);
  const ok = await page.evaluate(async () => !!(navigator.gpu && (await navigator.gpu.requestAdapter())));
  await context.close();
  return ok;
}
