// Copies the Lua scripts this package runs, and the libraries their `-- uses:` lines
// name, from the Python package (the one source in the repository), byte for byte, into
// lua/ (not tracked), which the package ships. `npm run build` runs it first; the test
// suites fail when a build is older than the Python package's files.
import { copyFileSync, mkdirSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const source = join(root, '..', 'src', 'redis_agent_sessions', '_redis', 'lua');
const target = join(root, 'lua');
const scripts = ['append_event', 'app_apply', 'app_pending', 'create_session', 'delete_session', 'read_session', 'register_app'];
const files = new Set();
for (const name of scripts) {
  files.add(name);
  const line = readFileSync(join(source, `${name}.lua`), 'utf-8').split('\n').find((l) => l.startsWith('-- uses:'));
  for (const lib of line ? line.slice(8).split(',') : []) files.add(lib.trim());
}
mkdirSync(target, { recursive: true });
for (const old of readdirSync(target)) rmSync(join(target, old));
for (const name of files) copyFileSync(join(source, `${name}.lua`), join(target, `${name}.lua`));
console.log(`copied ${files.size} files to lua/`);
