/**
 * A Node ADK-JS worker for the mixed-language test (tests/test_mixed_language.py): one
 * command per process, its request as JSON in argv[2], its result as one JSON line.
 *
 * - `turn`: one user turn through an ADK-JS `Runner` on a scripted model (no network),
 *   reporting the session as it read it first, what the model was shown, and the session
 *   after, every event in the layout's canonical JSON.
 * - `stale`: reads a copy, says `{"ready": true}`, waits for a line on stdin (the other
 *   worker appends meanwhile), appends through the stale copy (refused), reads again and
 *   retries.
 */
import { createInterface } from 'node:readline';

import { BaseLlm, FunctionTool, LlmAgent, Runner, createEvent } from '@google/adk';
import type { BaseLlmConnection, Context, LlmRequest, LlmResponse, Session } from '@google/adk';

import { RedisSessionService, StaleSessionError, encodeEvent } from '../src/index.js';

interface Request {
  command: 'turn' | 'stale';
  url: string;
  cluster: boolean;
  prefix: string;
  app: string;
  user: string;
  session: string;
  message?: string;
  worker?: string;
}

/** Answers from the request alone: "note X" becomes a call of the note tool, its result a
 * text reply naming the worker. Records every text it was shown. */
class ScriptedModel extends BaseLlm {
  shown: string[] = [];

  constructor(readonly worker: string) {
    super({ model: 'scripted' });
  }

  async *generateContentAsync(request: LlmRequest): AsyncGenerator<LlmResponse, void> {
    this.shown = request.contents.flatMap((c) => (c.parts ?? []).map((p) => p.text).filter((t): t is string => !!t));
    const parts = request.contents[request.contents.length - 1]?.parts ?? [];
    const result = parts.find((p) => p.functionResponse);
    const text = parts.map((p) => p.text ?? '').join(' ');
    const note = /note (.+)/.exec(text);
    if (result) {
      yield { content: { role: 'model', parts: [{ text: `noted by ${this.worker}` }] } };
    } else if (note) {
      yield { content: { role: 'model', parts: [{ functionCall: { id: `call-${this.worker}-${Date.now()}`, name: 'note', args: { text: note[1] } } }] } };
    } else {
      yield { content: { role: 'model', parts: [{ text: 'How can I help?' }] } };
    }
  }

  connect(): Promise<BaseLlmConnection> {
    throw new Error('no live connection in a scripted model');
  }
}

/** The note tool, writing every scope as the Python worker's does. */
function noteTool(worker: string): FunctionTool {
  return new FunctionTool({
    name: 'note',
    description: 'Note a text in the conversation state.',
    parameters: { type: 'OBJECT', properties: { text: { type: 'STRING' } }, required: ['text'] } as never,
    execute: (input: unknown, context?: Context) => {
      const { text } = input as { text: string };
      const state = context!.state;
      state.set('notes', [...((state.get('notes') as string[] | undefined) ?? []), text]);
      state.set('last_by', worker);
      state.set('user:turns', ((state.get('user:turns') as number | undefined) ?? 0) + 1);
      state.set('app:served', ((state.get('app:served') as number | undefined) ?? 0) + 1);
      state.set('temp:scratch', text);
      return { noted: text, by: worker };
    },
  });
}

function view(session: Session | undefined) {
  return session && { state: { ...session.state }, events: session.events.map(encodeEvent) };
}

async function main(): Promise<void> {
  const request = JSON.parse(process.argv[2]) as Request;
  const service = await RedisSessionService.fromUrl(request.url, { cluster: request.cluster, keyPrefix: request.prefix });
  const key = { appName: request.app, userId: request.user, sessionId: request.session };
  try {
    if (request.command === 'turn') {
      const worker = request.worker ?? 'node';
      const before = view(await service.getSession(key));
      const model = new ScriptedModel(worker);
      const agent = new LlmAgent({ name: 'assistant', model, instruction: 'Take notes.', tools: [noteTool(worker)] });
      const runner = new Runner({ appName: request.app, agent, sessionService: service });
      const yielded = [];
      for await (const event of runner.runAsync({
        userId: request.user,
        sessionId: request.session,
        newMessage: { role: 'user', parts: [{ text: request.message! }] },
      })) {
        yielded.push(encodeEvent(event));
      }
      const after = view(await service.getSession(key));
      console.log(JSON.stringify({ before, yielded, shown: model.shown, after }));
    } else {
      const copy = (await service.getSession(key))!;
      console.log(JSON.stringify({ ready: true }));
      const lines = createInterface({ input: process.stdin });
      await new Promise<void>((resolve) => lines.once('line', () => resolve()));
      lines.close();
      const event = () =>
        createEvent({
          invocationId: 'node-stale',
          author: 'assistant',
          content: { role: 'model', parts: [{ text: 'late note from node' }] },
          actions: { stateDelta: { last_by: 'node-stale', 'user:late': 'node', 'app:late': 'node', 'temp:t': 1 } },
        });
      let refused = '';
      try {
        await service.appendEvent({ session: copy, event: event() });
      } catch (exc) {
        if (!(exc instanceof StaleSessionError)) throw exc;
        refused = exc.name;
      }
      const fresh = (await service.getSession(key))!;
      await service.appendEvent({ session: fresh, event: event() });
      console.log(JSON.stringify({ refused, after: view(await service.getSession(key)) }));
    }
  } finally {
    await service.close();
  }
}

main().catch((exc) => {
  console.error(exc);
  process.exit(1);
});
