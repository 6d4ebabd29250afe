/**
 * A one-line progress display on stderr for long work: records, bytes, rate and ETA.
 * It draws only when stderr is a terminal, so pipes and logs never see it.
 */
import { interval, type Subscription } from 'rxjs';

export interface ProgressStream {
  isTTY?: boolean;
  columns?: number;
  write(chunk: string): unknown;
}

export interface ProgressOptions {
  label: string;
  /** Total bytes expected, when known; enables the percentage and ETA. */
  totalBytes?: number;
  /** Noun for the counted things, plural. */
  unit?: string;
  stream?: ProgressStream;
  redrawMs?: number;
  now?: () => number;
}

export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${value} B` : `${value.toFixed(1)} ${units[unit]}`;
}

export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds)) return '?';
  const s = Math.round(seconds);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const rest = s % 60;
  if (h > 0) return `${h}h${String(m).padStart(2, '0')}m`;
  if (m > 0) return `${m}m${String(rest).padStart(2, '0')}s`;
  return `${rest}s`;
}

export class Progress {
  private records = 0;
  private bytes = 0;
  private readonly started: number;
  private readonly stream: ProgressStream;
  private readonly now: () => number;
  private ticker: Subscription | undefined;
  private drawn = false;

  constructor(private readonly options: ProgressOptions) {
    this.stream = options.stream ?? process.stderr;
    this.now = options.now ?? Date.now;
    this.started = this.now();
    if (this.active) this.ticker = interval(options.redrawMs ?? 100).subscribe(() => this.draw());
  }

  get active(): boolean {
    return this.stream.isTTY === true;
  }

  /** Counts work done since the last call. */
  add(records: number, bytes = 0): void {
    this.records += records;
    this.bytes += bytes;
  }

  /** The status line as it would be drawn now. */
  line(): string {
    const elapsed = Math.max((this.now() - this.started) / 1000, 1e-3);
    const parts = [`${this.options.label}: ${this.records.toLocaleString('en-US')} ${this.options.unit ?? 'records'}`];
    if (this.bytes > 0 || this.options.totalBytes !== undefined) {
      const total = this.options.totalBytes;
      parts.push(total === undefined ? formatBytes(this.bytes) : `${formatBytes(this.bytes)} / ${formatBytes(total)}`);
      const rate = this.bytes / elapsed;
      parts.push(`${formatBytes(rate)}/s`);
      if (total !== undefined && rate > 0) parts.push(`ETA ${formatDuration(Math.max(total - this.bytes, 0) / rate)}`);
    } else {
      parts.push(`${Math.round(this.records / elapsed).toLocaleString('en-US')}/s`);
    }
    return parts.join(' · ');
  }

  /** Stops redrawing and clears the line, leaving the terminal as it was. */
  done(): void {
    this.ticker?.unsubscribe();
    this.ticker = undefined;
    if (this.drawn) this.stream.write('\r\x1b[2K');
    this.drawn = false;
  }

  private draw(): void {
    const width = this.stream.columns ?? 80;
    this.stream.write(`\r\x1b[2K${this.line().slice(0, Math.max(width - 1, 10))}`);
    this.drawn = true;
  }
}
