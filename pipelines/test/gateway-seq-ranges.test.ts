/**
 * SeqRanges, the event log's memory of the seqs stored per source: the same answers as a set of
 * every seq, in whatever order seqs come, while seqs sent in order cost one range.
 */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { SeqRanges } from '../serve/gateway/seq-ranges.js';

test('it holds exactly what was added, whatever the order, joining neighbours into one range', () => {
  let state = 7;
  const random = (n: number): number => ((state = (state * 1_103_515_245 + 12_345) % 2 ** 31), state % n);
  const ranges = new SeqRanges();
  const reference = new Set<number>();
  for (let i = 0; i < 20_000; i++) {
    const seq = random(30_000);
    ranges.add(seq);
    reference.add(seq);
  }
  for (let seq = -2; seq < 30_002; seq++) assert.is(ranges.has(seq), reference.has(seq), `seq ${seq}`);
  assert.is(ranges.last, Math.max(...reference));
  assert.is(new SeqRanges().last, undefined);
  // Fill every gap: one range is left.
  for (let seq = 0; seq < 30_000; seq++) ranges.add(seq);
  assert.is(ranges.ranges, 1);
  assert.ok(ranges.has(0) && ranges.has(29_999) && !ranges.has(30_000) && !ranges.has(-1));
});

test('seqs in order, and blocks of batches from several writers, cost a range each at most', () => {
  const inOrder = new SeqRanges();
  for (let seq = 1; seq <= 1_000_000; seq++) inOrder.add(seq);
  assert.is(inOrder.ranges, 1);
  // Four writers taking turns at blocks of 256, each block arriving whole but the blocks out of order.
  const blocks = new SeqRanges();
  for (let round = 0; round < 100; round++) for (const writer of [2, 0, 3, 1]) for (let k = 0; k < 256; k++) blocks.add((round * 4 + writer) * 256 + k);
  assert.is(blocks.ranges, 1);
  const edges = new SeqRanges();
  for (const seq of [Number.MAX_SAFE_INTEGER, 0, Number.MAX_SAFE_INTEGER - 1]) edges.add(seq);
  assert.is(edges.ranges, 2);
  assert.ok(edges.has(Number.MAX_SAFE_INTEGER - 1) && !edges.has(1));
});

test('kept in a file and read back, it answers the same; bounds out of order are refused', () => {
  const ranges = new SeqRanges();
  for (const seq of [0, 1, 2, 7, 9, 10, Number.MAX_SAFE_INTEGER]) ranges.add(seq);
  const again = SeqRanges.fromJSON(JSON.parse(JSON.stringify(ranges)));
  for (let seq = -1; seq < 12; seq++) assert.is(again.has(seq), ranges.has(seq), `seq ${seq}`);
  assert.is(again.last, Number.MAX_SAFE_INTEGER);
  assert.is(again.ranges, 4);
  for (const bad of [[1], [3, 2], [0, 1, 2, 3], [-1, 0], [0, 1.5], 'x', [0, 1, 1, 4]]) assert.throws(() => SeqRanges.fromJSON(bad), /seq ranges/, JSON.stringify(bad));
});

test.run();
