/** A benchmark's positive-integer flag (`--name N`), or its default; anything else exits 2 naming the flag. */
export function positiveIntFlag(name: string, fallback: number): number {
  const at = process.argv.indexOf(`--${name}`);
  if (at < 0) return fallback;
  const value = Number(process.argv[at + 1]);
  if (!Number.isInteger(value) || value <= 0) {
    console.error(`--${name}: expected a positive integer, got '${process.argv[at + 1] ?? ''}'`);
    process.exit(2);
  }
  return value;
}
