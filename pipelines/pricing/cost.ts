/**
 * The cost of a step from its tokens and its model's price (prices.ts, with the user's
 * `[prices."<model>"]` on top). A step whose source reports its cost keeps that cost; a step of a
 * model without a price has none, and the model is named among the unpriced ones.
 */
import { PRICES, type Price } from './prices.js';

export interface StepUsage {
  /** All prompt tokens: not cached, written to the cache and read from it. */
  prompt: number | null;
  completion: number | null;
  /** Prompt tokens read from the cache. */
  cached: number | null;
  /** Prompt tokens written to the cache. */
  cacheWrite: number | null;
}

/** A date after the name (`-20250929`, `-2025-08-07`, `@20251001`), then perhaps a cloud's version (`-v1:0`). */
const DATED = /^(.+?)(?:[-@]\d{8}|-\d{4}-\d{2}-\d{2})(?:-v\d+(?::\d+)?)?$/;

export class PriceList {
  private readonly prices: ReadonlyMap<string, Price>;

  /** `overrides`: the configuration's prices, by model name as logs write it, over the table's. */
  constructor(overrides: Readonly<Record<string, Price>> = {}) {
    this.prices = new Map([...Object.entries(PRICES), ...Object.entries(overrides)].map(([name, price]) => [name.toLowerCase(), price]));
  }

  /** The price of a model, by its name or its name less a date; undefined for an unknown model. */
  priceOf(model: string): Price | undefined {
    const name = model.toLowerCase().replace(/^[\w.-]+\//, '');
    return this.prices.get(name) ?? this.prices.get(DATED.exec(name)?.[1] ?? '');
  }

  /** Dollars for a step's tokens; null without a price or without tokens. */
  cost(model: string | null | undefined, usage: StepUsage): number | null {
    if (model === null || model === undefined) return null;
    const price = this.priceOf(model);
    if (!price || (usage.prompt === null && usage.completion === null)) return null;
    const cached = usage.cached ?? 0;
    const written = usage.cacheWrite ?? 0;
    const fresh = Math.max((usage.prompt ?? 0) - cached - written, 0);
    const dollars = fresh * price.input + (usage.completion ?? 0) * price.output + written * (price.cacheWrite ?? price.input) + cached * (price.cacheRead ?? price.input);
    return dollars / 1_000_000;
  }
}
