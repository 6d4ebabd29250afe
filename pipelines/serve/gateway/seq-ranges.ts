/**
 * The `seq`s stored for one source of a trace, as sorted ranges: what the event log remembers to
 * store a retried record once. Sources number their events mostly in order (1, 2, 3 ... or blocks
 * of a batch), so a few ranges stand for millions of seqs, where a set of keys grew by one string
 * per event for as long as the server ran. Finding a seq is a binary search; adding one at or past
 * the end (the usual case) is constant time.
 */
export class SeqRanges {
  /** `[start0, end0, start1, end1, ...]`: inclusive, ascending, a gap of at least one between ranges. */
  private readonly bounds: number[] = [];

  /** The ranges `toJSON` gave; throws when they are not ascending ranges with gaps between them. */
  static fromJSON(bounds: unknown): SeqRanges {
    const ranges = new SeqRanges();
    if (!Array.isArray(bounds) || bounds.length % 2 !== 0) throw new Error('seq ranges: expected an even-length array');
    bounds.forEach((n, i) => {
      const previous = i === 0 ? -2 : (bounds[i - 1] as number);
      if (!Number.isSafeInteger(n) || (n as number) < previous + (i % 2 === 0 ? 2 : 0)) throw new Error(`seq ranges: bound ${i} (${String(n)}) is out of order`);
      ranges.bounds.push(n as number);
    });
    return ranges;
  }

  /** The ranges as `[start0, end0, start1, end1, ...]`, to keep them in a file. */
  toJSON(): number[] {
    return [...this.bounds];
  }

  /** The index of the first range ending at or after `seq` (the range count when none does). */
  private firstEndingFrom(seq: number): number {
    const b = this.bounds;
    let lo = 0;
    let hi = b.length / 2;
    if (hi > 0 && (b[b.length - 1] as number) < seq) return hi;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((b[2 * mid + 1] as number) < seq) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** The highest seq stored, or undefined when none is. */
  get last(): number | undefined {
    return this.bounds.at(-1);
  }

  has(seq: number): boolean {
    const i = this.firstEndingFrom(seq);
    return i < this.bounds.length / 2 && (this.bounds[2 * i] as number) <= seq;
  }

  add(seq: number): void {
    const b = this.bounds;
    const i = this.firstEndingFrom(seq);
    const count = b.length / 2;
    if (i < count && (b[2 * i] as number) <= seq) return;
    const extendsBefore = i > 0 && b[2 * i - 1] === seq - 1;
    const extendsAfter = i < count && b[2 * i] === seq + 1;
    if (extendsBefore && extendsAfter) {
      b[2 * i - 1] = b[2 * i + 1] as number;
      b.splice(2 * i, 2);
    } else if (extendsBefore) b[2 * i - 1] = seq;
    else if (extendsAfter) b[2 * i] = seq;
    else if (i === count) b.push(seq, seq);
    else b.splice(2 * i, 0, seq, seq);
  }

  /** Ranges held (what the set costs). */
  get ranges(): number {
    return this.bounds.length / 2;
  }
}
