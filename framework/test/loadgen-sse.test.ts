/** The incremental SSE parser gives the same events however the byte stream is cut. */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { SseParser } from '../loadgen/sse.js';

const STREAM = ': keep-alive comment\r\n\r\ndata: {"a":1}\n\nevent: message\nid: 7\ndata:{"b":"x\\ny"}\r\n\r\ndata: one\ndata: two\n\ndata: [DONE]\n\n';
const EVENTS = ['{"a":1}', '{"b":"x\\ny"}', 'one\ntwo', '[DONE]'];

function parse(chunks: string[]): string[] {
  const events: string[] = [];
  const parser = new SseParser((data) => events.push(data));
  for (const chunk of chunks) parser.push(chunk);
  return events;
}

test('one chunk', () => {
  assert.equal(parse([STREAM]), EVENTS);
});

test('every two-way split, including inside CRLF and inside "data:"', () => {
  for (let i = 0; i <= STREAM.length; i++) assert.equal(parse([STREAM.slice(0, i), STREAM.slice(i)]), EVENTS, `split at ${i}`);
});

test('one character at a time', () => {
  assert.equal(parse([...STREAM]), EVENTS);
});

test('an event without its closing blank line is not dispatched until it arrives', () => {
  const events: string[] = [];
  const parser = new SseParser((data) => events.push(data));
  parser.push('data: {"partial":true}\n');
  assert.equal(events, []);
  parser.push('\n');
  assert.equal(events, ['{"partial":true}']);
});

test.run();
