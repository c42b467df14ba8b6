// build.mjs bundles the dashboard into ../internal/webui/dist, which the
// pam binary embeds (internal/webui): app-<hash>.js and app-<hash>.css for
// the first page, the terminal (xterm.js) in a chunk of its own loaded on
// the run page only, a gzip twin of every asset (the server sends it to
// clients that take gzip), and index.html naming the hashed files.
//
//   node build.mjs           one production build
//   node build.mjs --watch   rebuild on every change (development)
import * as esbuild from 'esbuild';
import { gzipSync } from 'node:zlib';
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { basename, dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = join(here, '..', 'internal', 'webui', 'dist');
const assets = join(out, 'assets');
const watch = process.argv.includes('--watch');

/** clean removes the previous build, keeping the committed .keep. */
function clean() {
  mkdirSync(out, { recursive: true });
  for (const name of readdirSync(out)) {
    if (name !== '.keep') rmSync(join(out, name), { recursive: true, force: true });
  }
}

/** finish writes the gzip twins and index.html for a build's metafile. */
function finish(meta) {
  let js = '';
  let css = '';
  let preload = [];
  for (const [file, info] of Object.entries(meta.outputs)) {
    const name = basename(file);
    if (info.entryPoint === 'src/main.jsx' && name.endsWith('.js')) {
      js = name;
      css = info.cssBundle ? basename(info.cssBundle) : '';
      // The chunks the entry imports statically load in parallel with it,
      // not after it has been parsed.
      preload = info.imports.filter((i) => i.kind === 'import-statement').map((i) => basename(i.path));
    }
  }
  if (!js || !css) throw new Error('build: the app entry produced no .js or .css');
  for (const name of readdirSync(assets)) {
    if (name.endsWith('.gz')) continue;
    const raw = readFileSync(join(assets, name));
    writeFileSync(join(assets, name + '.gz'), gzipSync(raw, { level: 9 }));
  }
  const html = readFileSync(join(here, 'src', 'index.html'), 'utf8')
    .replace('{{css}}', `/assets/${css}`)
    .replace('{{js}}', `/assets/${js}`)
    .replace('{{icon}}', `/assets/${iconName}`)
    .replace('{{preload}}', preload.map((p) => `<link rel="modulepreload" href="/assets/${p}">`).join('\n'));
  writeFileSync(join(out, 'index.html'), html);
  const sizes = readdirSync(assets).filter((n) => n.endsWith('.gz'))
    .map((n) => `${n.slice(0, -3)} ${(readFileSync(join(assets, n)).length / 1024).toFixed(1)} KiB gzip`);
  console.log(`dashboard built in ${relative(process.cwd(), out) || '.'}:\n  ` + sizes.join('\n  '));
}

/** The favicon, content-hashed by hand (it is no import of the bundle). */
let iconName = '';
function copyIcon() {
  const svg = readFileSync(join(here, 'src', 'icon.svg'));
  let h = 0;
  for (const b of svg) h = (h * 31 + b) >>> 0;
  iconName = `icon-${h.toString(36).toUpperCase()}.svg`;
  writeFileSync(join(assets, iconName), svg);
}

const options = {
  absWorkingDir: here,
  entryPoints: { app: 'src/main.jsx' },
  bundle: true,
  splitting: true,
  format: 'esm',
  target: ['es2022', 'chrome110', 'firefox115', 'safari16'],
  jsx: 'automatic',
  jsxImportSource: 'preact',
  minify: !watch,
  sourcemap: false,
  legalComments: 'none',
  outdir: assets,
  entryNames: '[name]-[hash]',
  chunkNames: '[name]-[hash]',
  assetNames: '[name]-[hash]',
  metafile: true,
  logLevel: 'warning',
  define: { 'process.env.NODE_ENV': watch ? '"development"' : '"production"' },
  plugins: [{
    name: 'pam-finish',
    setup(build) {
      build.onStart(() => { clean(); mkdirSync(assets, { recursive: true }); copyIcon(); });
      build.onEnd((res) => { if (res.errors.length === 0) finish(res.metafile); });
    },
  }],
};

if (watch) {
  const ctx = await esbuild.context(options);
  await ctx.watch();
  console.log('watching web/src …');
} else {
  await esbuild.build(options);
}
