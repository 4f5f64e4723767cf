/**
 * The Node side of benchmarks/typescript.py: appends through this package's service, timed,
 * in rounds the Python driver paces, so that both languages' appends run on one server,
 * interleaved.
 *
 * Usage: node dist/bench/append.js URL PREFIX EVENTS_JSON_FILE PER_ROUND
 * EVENTS_JSON_FILE holds canonical event JSON objects (the Python driver's, as stored). Each
 * line on stdin runs one round: PER_ROUND appends of the next events, then one line of JSON
 * `{"ns": [...]}` with each append's time in ns. EOF ends it.
 */
import { readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';

import { RedisSessionService, decodeEvent } from '../src/index.js';

async function main(): Promise<void> {
  const [url, prefix, file, perRound] = process.argv.slice(2);
  const stored = JSON.parse(readFileSync(file, 'utf-8')) as Record<string, unknown>[];
  const service = await RedisSessionService.fromUrl(url, { keyPrefix: prefix });
  const session = await service.createSession({ appName: 'bench', userId: 'u', sessionId: 'ts' });
  let next = 0;
  const lines = createInterface({ input: process.stdin });
  for await (const _line of lines) {
    const ns: number[] = [];
    for (let i = 0; i < Number(perRound); i++) {
      const event = decodeEvent({ ...stored[next % stored.length], id: `ts-${next}` });
      next += 1;
      const start = process.hrtime.bigint();
      await service.appendEvent({ session, event });
      ns.push(Number(process.hrtime.bigint() - start));
    }
    console.log(JSON.stringify({ ns }));
  }
  await service.close();
}

main().catch((exc) => {
  console.error(exc);
  process.exit(1);
});
