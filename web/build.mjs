// Bundles web/src into OUT (default internal/webui/dist): assets/ with
// content-hashed names and an index.html that names them. The output is a
// pure function of the sources and the lockfile's packages (no time, no
// absolute path, no source map), so scripts/web.sh --check can compare a
// fresh build with the committed one byte for byte.
import * as esbuild from "esbuild";
import { mkdirSync, rmSync, writeFileSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(process.argv[2] ?? join(here, "..", "internal", "webui", "dist"));

rmSync(out, { recursive: true, force: true });
mkdirSync(join(out, "assets"), { recursive: true });

const result = await esbuild.build({
  absWorkingDir: here,
  // node_modules is a symlink into a cache outside the checkout; esbuild's
  // content hashes include the inputs' paths, so resolving the link would
  // make the asset names depend on where the checkout lives.
  preserveSymlinks: true,
  entryPoints: ["src/main.tsx", "src/style.css"],
  bundle: true,
  minify: true,
  format: "esm",
  target: ["chrome120", "firefox120", "safari17"],
  jsx: "automatic",
  jsxImportSource: "preact",
  outdir: join(out, "assets"),
  entryNames: "[name]-[hash]",
  assetNames: "[name]-[hash]",
  legalComments: "none",
  charset: "utf8",
  metafile: true,
  logLevel: "warning",
  define: { "process.env.NODE_ENV": '"production"' },
});

let js = "", css = "";
for (const [file, meta] of Object.entries(result.metafile.outputs)) {
  const name = relative(out, resolve(here, file)).split("\\").join("/");
  if (meta.entryPoint === "src/main.tsx") js = name;
  if (meta.entryPoint === "src/style.css") css = name;
}
if (!js || !css) throw new Error("build: the bundle or the stylesheet is missing from esbuild's output");

const html = readFileSync(join(here, "index.html"), "utf8")
  .replace("%CSS%", "/" + css)
  .replace("%JS%", "/" + js);
writeFileSync(join(out, "index.html"), html);
console.log(`built ${relative(process.cwd(), out)}: ${js}, ${css}`);
