/**
 * List prices of the model families agents run on, in US dollars per million tokens: input (not
 * cached), output, writing the prompt cache, reading it. Facts, written here from the providers'
 * public list prices as LiteLLM's model price table (litellm 1.110.2 on PyPI,
 * model_prices_and_context_window_backup.json) carries them; see PRICES_DATE.
 *
 * A model matches an entry when its name is the entry's name, or that name followed by a date
 * (`claude-sonnet-4-5-20250929`, `gpt-5-2025-08-07`) and perhaps a cloud's version suffix
 * (`-v1:0`); a provider prefix (`anthropic/`, `openai/`) is ignored. Any other name is unknown:
 * it gets no cost, never a neighbour's price. Users add or correct prices in their configuration
 * (`[prices."<model>"]`).
 */

export const PRICES_DATE = '2026-11-25';

export interface Price {
  input: number;
  output: number;
  /** Writing the prompt cache (Anthropic models); null where a provider does not charge it apart. */
  cacheWrite: number | null;
  /** Reading the prompt cache. */
  cacheRead: number | null;
}

const price = (input: number, output: number, cacheWrite: number | null, cacheRead: number | null): Price => ({ input, output, cacheWrite, cacheRead });

export const PRICES: Readonly<Record<string, Price>> = {
  // Anthropic Claude
  'claude-opus-5': price(5, 25, 6.25, 0.5),
  'claude-opus-4-8': price(5, 25, 6.25, 0.5),
  'claude-opus-4-7': price(5, 25, 6.25, 0.5),
  'claude-opus-4-6': price(5, 25, 6.25, 0.5),
  'claude-opus-4-5': price(5, 25, 6.25, 0.5),
  'claude-opus-4-1': price(15, 75, 18.75, 1.5),
  'claude-opus-4': price(15, 75, 18.75, 1.5),
  'claude-3-opus': price(15, 75, 18.75, 1.5),
  'claude-sonnet-5': price(2, 10, 2.5, 0.2),
  'claude-sonnet-4-6': price(3, 15, 3.75, 0.3),
  'claude-sonnet-4-5': price(3, 15, 3.75, 0.3),
  'claude-sonnet-4': price(3, 15, 3.75, 0.3),
  'claude-3-7-sonnet': price(3, 15, 3.75, 0.3),
  'claude-3-5-sonnet': price(3, 15, 3.75, 0.3),
  'claude-haiku-4-5': price(1, 5, 1.25, 0.1),
  'claude-3-5-haiku': price(0.8, 4, 1, 0.08),
  // OpenAI GPT and Codex
  'gpt-5.6': price(4, 20, 5, 0.4),
  'gpt-5.5': price(5, 30, null, 0.5),
  'gpt-5.4': price(2.5, 15, null, 0.25),
  'gpt-5.4-mini': price(0.75, 4.5, null, 0.075),
  'gpt-5.4-nano': price(0.2, 1.25, null, 0.02),
  'gpt-5.3-codex': price(1.75, 14, null, 0.175),
  'gpt-5.2': price(1.75, 14, null, 0.175),
  'gpt-5.2-codex': price(1.75, 14, null, 0.175),
  'gpt-5.1': price(1.25, 10, null, 0.125),
  'gpt-5.1-codex': price(1.25, 10, null, 0.125),
  'gpt-5.1-codex-max': price(1.25, 10, null, 0.125),
  'gpt-5.1-codex-mini': price(0.25, 2, null, 0.025),
  'gpt-5': price(1.25, 10, null, 0.125),
  'gpt-5-codex': price(1.25, 10, null, 0.125),
  'gpt-5-mini': price(0.25, 2, null, 0.025),
  'gpt-5-nano': price(0.05, 0.4, null, 0.005),
  'gpt-4.1': price(2, 8, null, 0.5),
  'gpt-4.1-mini': price(0.4, 1.6, null, 0.1),
  'gpt-4.1-nano': price(0.1, 0.4, null, 0.025),
  'gpt-4o': price(2.5, 10, null, 1.25),
  'gpt-4o-mini': price(0.15, 0.6, null, 0.075),
  o3: price(2, 8, null, 0.5),
  'o3-mini': price(1.1, 4.4, null, 0.55),
  'o4-mini': price(1.1, 4.4, null, 0.275),
  // Google Gemini (the price up to 200k tokens of prompt where it is tiered)
  'gemini-3.1-pro-preview': price(2, 12, null, 0.2),
  'gemini-3-flash-preview': price(0.5, 3, null, 0.05),
  'gemini-2.5-pro': price(1.25, 10, null, 0.125),
  'gemini-2.5-flash': price(0.3, 2.5, null, 0.03),
  'gemini-2.5-flash-lite': price(0.1, 0.4, null, 0.01),
};
