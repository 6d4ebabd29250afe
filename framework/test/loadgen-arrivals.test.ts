/** The open-loop arrival processes: right mean gap, and exponential gaps for Poisson. */
import { test } from 'uvu';
import * as assert from 'uvu/assert';
import { arrivalGaps } from '../loadgen/scheduler.js';

function stats(next: () => number, n: number): { mean: number; cv: number; min: number } {
  const gaps = Array.from({ length: n }, next);
  const mean = gaps.reduce((a, b) => a + b, 0) / n;
  const sd = Math.sqrt(gaps.reduce((a, b) => a + (b - mean) ** 2, 0) / (n - 1));
  return { mean, cv: sd / mean, min: Math.min(...gaps) };
}

test('constant arrivals are evenly spaced', () => {
  const s = stats(arrivalGaps(1, 40, false), 1000);
  assert.is(s.mean, 25);
  assert.is(s.cv, 0);
});

for (const seed of [1, 7, 12345]) {
  test(`Poisson arrivals (seed ${seed}): mean gap 1/rate and coefficient of variation 1`, () => {
    const s = stats(arrivalGaps(seed, 200, true), 20_000);
    // 20,000 exponential samples: the standard error of the mean is 0.7%, of the CV about 1%.
    assert.ok(Math.abs(s.mean - 5) / 5 < 0.03, `mean gap ${s.mean}`);
    assert.ok(Math.abs(s.cv - 1) < 0.05, `coefficient of variation ${s.cv}`);
    assert.ok(s.min >= 0);
  });
}

test('the same seed gives the same schedule; another seed a different one', () => {
  const a = arrivalGaps(3, 10, true);
  const b = arrivalGaps(3, 10, true);
  const c = arrivalGaps(4, 10, true);
  const xs = Array.from({ length: 5 }, a);
  assert.equal(Array.from({ length: 5 }, b), xs);
  assert.not.equal(Array.from({ length: 5 }, c), xs);
});

test.run();
