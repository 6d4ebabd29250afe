/**
 * The contract of a format module: detect a file, decode it to Storyline documents, encode
 * Storyline documents back. The list of formats is registry.ts. Format modules never talk to each other; the import and export
 * pipelines talk to them only through this contract (ARCHITECTURE.md, "Storyline is the hub").
 */
import type { Readable } from 'node:stream';
import type { Logger } from '../../lib/log.js';
import type { Storyline } from '../storyline/schema.js';

/** One input file of an import. */
export interface SourceFile {
  /** Absolute path, or `-` for stdin. */
  path: string;
  /**
   * Path relative to the import root (the file name for a single file, `-` for stdin): what the
   * dataset stores, and how decoders name the file in their messages.
   */
  relPath: string;
  /**
   * How the import's messages name the file: as the user gave it, so that many files called
   * input.jsonl can be told apart: the path given for a single file, else relPath.
   */
  name: string;
  /** Opens the bytes from the start. Stdin can be opened once only: the pipeline buffers its head for detection. */
  open(): Readable;
}

/** What detection sees of a file (probe.ts): its name and a skeleton of its first JSON value. */
export interface DetectProbe {
  relPath: string;
  /**
   * The file's first JSON value (the document of a `.json` file, the first line of a JSONL file) with
   * every root key, but only the first element of arrays, the first members of deeper objects, empty
   * containers below a few levels and the first bytes of strings. What was read up to a syntax error
   * or the end of the input when the value is cut; absent when nothing parses.
   */
  value?: unknown;
}

export interface Detection {
  /** 0..1; the pipeline picks the most confident format and logs why at --log-level info. */
  confidence: number;
  reason: string;
  /**
   * The file is one the format's producer writes beside its documents and holds none of them (a
   * Claude Code subagent's `agent-<id>.meta.json`): an import passes over it, and the decoder of the
   * documents it describes reads it there.
   */
  companion?: boolean;
}

export interface DecodeContext {
  log: Logger;
  /** Set for `-o preserve`: decoders attach each source document's exact bytes (see DecodedDocument.raw). */
  keepRaw: boolean;
  signal: AbortSignal;
  /**
   * A non-fatal finding about the input (a dropped noise line, an orphan tool result, a synthesised
   * id), logged at info with its location and counted in the import summary.
   */
  diagnostic(code: string, message: string, line?: number): void;
}

export interface DecodedDocument {
  storyline: Storyline;
  /**
   * Ordinal (from 0) of the source document within the file this Storyline came from. Storylines
   * decoded from one source document (the attempts of an ACTF task, the sessions of a row-per-call
   * file) share it.
   */
  sourceDocument: number;
  /**
   * With `keepRaw`: the exact bytes of the source document, given once, with the first Storyline
   * decoded from it. Concatenating the raws of a file in order reproduces the file byte for byte
   * (JSONL decoders attach blank and skipped lines to a neighbouring document's raw).
   */
  raw?: Buffer;
}

export interface EncodedDocument {
  /** A file name (without directory) for this document when exporting to a directory. */
  name: string;
  /** The target document as a JSON value. */
  value: unknown;
  /**
   * Written to a JSONL stream as these values, one per line, instead of `value`: a group of rows read
   * one per line (chat-messages per-call rows) goes back that way, while a directory gets `value`
   * (all of them, one file) so that an import of the directory finds them together.
   */
  lines?: readonly unknown[];
}

export interface FormatModule {
  /** Its entry in the registry (registry.ts). */
  name: string;
  /** What a document of this format looks like, for the refusal of an input that holds none. */
  expects: string;
  /** File name suffixes this format is usually found in (`.json`, `.jsonl`, ...), for directory walks. */
  extensions: readonly string[];
  detect(probe: DetectProbe): Detection | undefined;
  decode(file: SourceFile, ctx: DecodeContext): AsyncIterable<DecodedDocument>;
  /**
   * Target documents built from Storylines in dataset order; may group several Storylines into one
   * (the attempts of one ACTF task are adjacent). Absent for decode-only formats.
   */
  encode?(docs: AsyncIterable<Storyline>): AsyncIterable<EncodedDocument>;
}
