/** The few metric types the node exports, rendered in the Prometheus text format (version 0.0.4). */

type Labels = Record<string, string>;

function labelText(labels: Labels): string {
  const parts = Object.entries(labels).map(([k, v]) => `${k}="${v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`);
  return parts.length ? `{${parts.join(',')}}` : '';
}

export class Counter {
  private readonly values = new Map<string, { labels: Labels; value: number }>();
  constructor(
    readonly name: string,
    readonly help: string,
  ) {}
  inc(labels: Labels = {}, by = 1): void {
    this.entry(labels).value += by;
  }
  /** A fast incrementer for one label set (hot paths must not format labels per call). */
  bind(labels: Labels = {}): (by?: number) => void {
    const entry = this.entry(labels);
    return (by = 1) => void (entry.value += by);
  }
  private entry(labels: Labels): { labels: Labels; value: number } {
    const key = labelText(labels);
    let entry = this.values.get(key);
    if (!entry) this.values.set(key, (entry = { labels, value: 0 }));
    return entry;
  }
  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} counter`];
    for (const { labels, value } of this.values.values()) lines.push(`${this.name}${labelText(labels)} ${value}`);
    return lines.join('\n');
  }
}

export class Histogram {
  private readonly series = new Map<string, { labels: Labels; counts: number[]; sum: number; count: number }>();
  constructor(
    readonly name: string,
    readonly help: string,
    readonly buckets: number[] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
  ) {}
  observe(seconds: number, labels: Labels = {}): void {
    this.bind(labels)(seconds);
  }
  /** A fast observer for one label set; counts are kept per bucket and summed when rendered. */
  bind(labels: Labels = {}): (seconds: number) => void {
    const key = labelText(labels);
    let s = this.series.get(key);
    if (!s) {
      s = { labels, counts: this.buckets.map(() => 0), sum: 0, count: 0 };
      this.series.set(key, s);
    }
    const series = s;
    const buckets = this.buckets;
    return (seconds) => {
      let i = 0;
      while (i < buckets.length && seconds > buckets[i]!) i++;
      if (i < buckets.length) series.counts[i]!++;
      series.sum += seconds;
      series.count++;
    };
  }
  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} histogram`];
    for (const s of this.series.values()) {
      let cumulative = 0;
      this.buckets.forEach((b, i) => {
        cumulative += s.counts[i]!;
        lines.push(`${this.name}_bucket${labelText({ ...s.labels, le: String(b) })} ${cumulative}`);
      });
      lines.push(`${this.name}_bucket${labelText({ ...s.labels, le: '+Inf' })} ${s.count}`);
      lines.push(`${this.name}_sum${labelText(s.labels)} ${s.sum}`);
      lines.push(`${this.name}_count${labelText(s.labels)} ${s.count}`);
    }
    return lines.join('\n');
  }
}

/** A gauge whose samples are computed when rendered. */
export function gauge(name: string, help: string, samples: Array<[Labels, number]>): string {
  return [`# HELP ${name} ${help}`, `# TYPE ${name} gauge`, ...samples.map(([l, v]) => `${name}${labelText(l)} ${v}`)].join('\n');
}

/**
 * The series every node counts (their names are an interface: dashboards and `actorctl inspect
 * metrics` read them). Rendered in this order, after the gauges the observers compute.
 */
export function nodeMetrics() {
  return {
    messages: new Counter('actor_messages_total', 'Messages handled by actors of this node, by outcome'),
    calls: new Counter('actor_calls_total', 'Calls sent by this node, by mode and locality'),
    created: new Counter('actor_actors_created_total', 'Actors started on this node'),
    stopped: new Counter('actor_actors_stopped_total', 'Actors stopped on this node'),
    handling: new Histogram('actor_message_duration_seconds', 'Time an actor spent handling a message'),
    latency: new Histogram('actor_ask_duration_seconds', 'Round trip of asks sent by this node, by locality'),
    badRequests: new Counter('actor_bad_requests_total', 'Requests refused as malformed'),
    refused: new Counter('actor_refused_total', 'Connections and requests refused: another cluster, a failed TLS handshake, a client certificate in membership, the connection limit, a quiet connection closed to make room'),
  };
}
export type NodeMetrics = ReturnType<typeof nodeMetrics>;
