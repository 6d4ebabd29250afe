/**
 * A one-line progress display on stderr for long work: records, bytes, rate and ETA.
 * It draws only when stderr is a terminal, so pipes and logs never see it.
 */

export interface ProgressStream {
  isTTY?: boolean;
  columns?: number;
  write(chunk: string): unknown;
}

/** Where long work counts what it has done. */
export interface ProgressSink {
  add(records: number, bytes?: number): void;
}

/** One piece of long work being shown: counted, then done (its line is cleared). */
export interface ProgressTask extends ProgressSink {
  done(): void;
}

/** What an engine is given to show progress: it starts a task when it knows what it is about to do. */
export type ProgressFactory = (task: Pick<ProgressOptions, 'label' | 'unit' | 'totalBytes' | 'totalRecords'>) => ProgressTask;

export interface ProgressOptions {
  label: string;
  /** Total bytes expected, when known; enables the percentage and ETA. */
  totalBytes?: number;
  /** Total records expected, when known (and bytes are not counted); enables the percentage and ETA. */
  totalRecords?: number;
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

function percent(done: number, total: number): string {
  return total > 0 ? `${Math.min(100, Math.floor((done / total) * 100))}%` : '100%';
}

export class Progress implements ProgressTask {
  private records = 0;
  private bytes = 0;
  private readonly started: number;
  private readonly stream: ProgressStream;
  private readonly now: () => number;
  private ticker: NodeJS.Timeout | undefined;
  private drawn = false;
  private lastDraw: number;
  private readonly redrawMs: number;

  constructor(private readonly options: ProgressOptions) {
    this.stream = options.stream ?? process.stderr;
    this.now = options.now ?? Date.now;
    this.started = this.now();
    // The first line appears one redraw period in, so that work shorter than that shows nothing.
    this.lastDraw = this.started;
    this.redrawMs = options.redrawMs ?? 100;
    // A plain timer, not an RxJS interval: this module is on the start-up path of every command.
    if (this.active) this.ticker = setInterval(() => this.draw(), this.redrawMs).unref();
  }

  get active(): boolean {
    return this.stream.isTTY === true;
  }

  /** Counts work done since the last call; redraws when due, also when the work leaves no time for timers. */
  add(records: number, bytes = 0): void {
    this.records += records;
    this.bytes += bytes;
    if (this.active && this.now() - this.lastDraw >= this.redrawMs) this.draw();
  }

  /** The status line as it would be drawn now. */
  line(): string {
    const elapsed = Math.max((this.now() - this.started) / 1000, 1e-3);
    const count = (n: number): string => n.toLocaleString('en-US');
    const unit = this.options.unit ?? 'records';
    const { totalBytes, totalRecords } = this.options;
    if (this.bytes > 0 || totalBytes !== undefined) {
      const rate = this.bytes / elapsed;
      const parts = [`${this.options.label}: ${count(this.records)} ${unit}`];
      parts.push(totalBytes === undefined ? formatBytes(this.bytes) : `${formatBytes(this.bytes)} / ${formatBytes(totalBytes)} (${percent(this.bytes, totalBytes)})`);
      parts.push(`${formatBytes(rate)}/s`);
      if (totalBytes !== undefined && rate > 0) parts.push(`ETA ${formatDuration(Math.max(totalBytes - this.bytes, 0) / rate)}`);
      return parts.join(' · ');
    }
    const rate = this.records / elapsed;
    if (totalRecords === undefined) return [`${this.options.label}: ${count(this.records)} ${unit}`, `${count(Math.round(rate))}/s`].join(' · ');
    const parts = [`${this.options.label}: ${count(this.records)} / ${count(totalRecords)} ${unit} (${percent(this.records, totalRecords)})`, `${count(Math.round(rate))}/s`];
    if (rate > 0) parts.push(`ETA ${formatDuration(Math.max(totalRecords - this.records, 0) / rate)}`);
    return parts.join(' · ');
  }

  /** Stops redrawing and clears the line, leaving the terminal as it was. */
  done(): void {
    clearInterval(this.ticker);
    this.ticker = undefined;
    if (this.drawn) this.stream.write('\r\x1b[2K');
    this.drawn = false;
  }

  private draw(): void {
    this.lastDraw = this.now();
    const width = this.stream.columns ?? 80;
    this.stream.write(`\r\x1b[2K${this.line().slice(0, Math.max(width - 1, 10))}`);
    this.drawn = true;
  }
}
