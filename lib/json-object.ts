/** A parsed JSON object, and the guard that tells one from the other JSON values. */
export type JsonObject = Record<string, unknown>;

/** Whether a parsed JSON value is an object: not null, not an array. */
export const isJsonObject = (value: unknown): value is JsonObject => typeof value === 'object' && value !== null && !Array.isArray(value);
