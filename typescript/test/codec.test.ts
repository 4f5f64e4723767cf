/** The event codec alone (no server): ADK Python's stored JSON to ADK-JS events and back. */
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { createEvent } from '@google/adk';

import { decodeEvent, encodeEvent, toMillis } from '../src/codec.js';

const stored = {
  id: 'e1',
  invocation_id: 'inv',
  author: 'agent',
  timestamp: 1795897262.4808028,
  content: {
    role: 'model',
    parts: [
      { function_call: { id: 'c1', name: 'book', args: { flight_no: 'AA1', seat_map: { row_1: 'A' } } } },
      { inline_data: { mime_type: 'image/png', data: 'AP8=' } },
      { function_response: { id: 'c1', name: 'book', response: { booking_ref: 'X', ok: true } } },
    ],
  },
  actions: {
    state_delta: { 'user:first_name': 'Ravi', nested_key: { inner_key: 1 } },
    artifact_delta: { 'a.pdf': 1 },
    route: 'next_step',
    transfer_to_agent: 'pay',
  },
  custom_metadata: { trace_id: 't' },
  usage_metadata: { prompt_token_count: 3, candidates_token_count: 1 },
  long_running_tool_ids: ['c2', 'c1'],
};

test('a Python event reads as ADK-JS names, the application\'s own keys as they are', () => {
  const event = decodeEvent(structuredClone(stored)) as any;
  assert.equal(event.invocationId, 'inv');
  assert.deepEqual(event.content.parts[0].functionCall.args, { flight_no: 'AA1', seat_map: { row_1: 'A' } });
  assert.equal(event.content.parts[1].inlineData.mimeType, 'image/png');
  assert.deepEqual(event.content.parts[2].functionResponse.response, { booking_ref: 'X', ok: true });
  assert.deepEqual(event.actions.stateDelta, { 'user:first_name': 'Ravi', nested_key: { inner_key: 1 } });
  assert.equal(event.actions.transferToAgent, 'pay');
  assert.equal(event.route, 'next_step');
  assert.deepEqual(event.customMetadata, { trace_id: 't' });
  assert.equal(event.usageMetadata.promptTokenCount, 3);
});

test('and writes back as it was stored, its time exact', () => {
  const back = encodeEvent(decodeEvent(structuredClone(stored)));
  assert.deepEqual(back, { ...stored, long_running_tool_ids: ['c1', 'c2'] });
  assert.equal(back.timestamp, stored.timestamp);
});

test('an ADK-JS event stores its time in seconds and reads back the same millisecond', () => {
  const event = createEvent({ author: 'a', timestamp: 1795897262481 });
  const json = encodeEvent(event);
  assert.equal(json.timestamp, 1795897262.481);
  assert.equal(decodeEvent(JSON.parse(JSON.stringify(json))).timestamp, 1795897262481);
  for (let ms = 1795897262000; ms < 1795897263000; ms++) assert.equal(toMillis(ms / 1000), ms);
  // A time Python wrote, to the microsecond and past it, is written back to the last bit.
  for (let us = 0; us < 2000; us++) {
    const seconds = 1795900005.8235 + us * 1.0000001e-7;
    assert.equal(encodeEvent(decodeEvent({ id: 'e', timestamp: seconds, actions: {} })).timestamp, seconds);
  }
  assert.deepEqual(json.actions, { state_delta: {}, artifact_delta: {} });
});
