/**
 * How step text becomes full-text tokens, shared by the index builder and the `find` planner so that
 * both sides cut text the same way.
 *
 * FTS5's `unicode61` tokenizer makes words of letters and digits (case-insensitive, accents folded:
 * `café` finds `cafe`), and a quoted phrase matches those words in order, whatever punctuation or
 * spacing stands between them. Chinese and Japanese put no spaces between words, and Korean attaches
 * particles to them, so unicode61 would take a whole run as one token; each Chinese, Japanese or
 * Korean character is made a token of its own instead, and a phrase of such characters (of any
 * length, even one) matches wherever those characters stand together. Word tokens keep the index about 1x the size of the text it covers
 * and make a phrase lookup read a few short lists; trigrams, which also find parts of words, cost
 * 5x the build time, 4.7x the size and 10x the lookup time (bench/find-query, 1M steps).
 */

/** The `steps` columns of the full-text index `steps_fts`. */
export const FTS_TEXT_COLUMNS = ['message_text', 'reasoning_content', 'observation_text'];

/** The FTS5 `tokenize` argument of `steps_fts`. */
export const FTS_TOKENIZE = 'unicode61 remove_diacritics 2';
/** What `index_meta.tokenizer` (and so `find` and `stats`) reports. */
export const TOKENIZER_NAME = 'unicode61+cjk-chars';

// Han, Hiragana, Katakana and Hangul, and the long-vowel mark ー (script "Common", but a letter in words such as コーヒー).
const CJK_CLASS = '[\\p{Script=Han}\\p{Script=Hiragana}\\p{Script=Katakana}\\p{Script=Hangul}\\u30FC]';
const CJK = new RegExp(CJK_CLASS, 'u');
const EVERY_CJK = new RegExp(CJK_CLASS, 'gu');
/** What unicode61 keeps in tokens (letters, digits, private use); a term with none of these has no tokens. */
const TOKEN_CHARACTER = /[\p{L}\p{N}\p{Co}]/u;

export function hasCjk(text: string): boolean {
  return CJK.test(text);
}

/** The text as the index receives it: each Chinese, Japanese or Korean character set apart by spaces. */
export function ftsText(text: string): string {
  return hasCjk(text) ? text.replace(EVERY_CJK, ' $& ') : text;
}

/**
 * The FTS5 query for a term searched as a phrase, or null when the term has no token characters
 * (only punctuation or spaces), which the index cannot find: such a term is a substring scan.
 */
export function ftsPhrase(term: string): string | null {
  if (!TOKEN_CHARACTER.test(term)) return null;
  return `"${ftsText(term).replaceAll('"', '""')}"`;
}
